"""config/samples/ against the real API server, so the samples (and the guides that show them) never rot.

Each sample is created as the identity the guides give it (the infra team's policy, the tenant's Secret and
claim) exactly as written, with `kubectl apply --validate=strict --dry-run=server`: schema, strict field
validation, the admission policies and that identity's RBAC all judge it, and nothing is left in the shared
namespaces. Then the same objects, moved into a
fresh rack namespace, are created for real and bound by the claim layer: the sample claim gets a host of the
sample's selector and its user data is copied beside it.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A, condition, step
from metalclaim_dev.support import REPO_ROOT

pytestmark = pytest.mark.integration
SAMPLES = REPO_ROOT / "config" / "samples"
# Who applies each kind, as docs/infra-guide.md and docs/tenant-guide.md say.
IDENTITY = {"HostDeployPolicy": "infra", "Secret": "tenant-a", "HostClaim": "tenant-a", "HostClaimSet": "tenant-a"}


def _samples() -> dict[str, dict]:
    listed = yaml.safe_load((SAMPLES / "kustomization.yaml").read_text())["resources"]
    files = sorted(p.name for p in SAMPLES.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == files, "every sample is in config/samples/kustomization.yaml"
    return {name: yaml.safe_load((SAMPLES / name).read_text()) for name in listed}


def _apply(devenv, obj: dict, dry_run: bool, identity: str | None = None) -> dict:
    """`kubectl apply` as the guides say (strict field validation), as the kind's identity."""
    argv = [devenv.state["binaries"]["kubectl"], "--kubeconfig", devenv.kubeconfig(identity or IDENTITY[obj["kind"]])]
    argv += ["apply", "--validate=strict", "-o", "json", "-f", "-"]
    if dry_run:
        argv.append("--dry-run=server")
    result = subprocess.run(argv, input=json.dumps(obj), capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{obj['kind']} {obj['metadata']['name']}: {result.stderr}"
    return json.loads(result.stdout)


def test_every_sample_is_accepted_as_written_by_its_identity(devenv, rack):
    samples = _samples()
    assert {s["kind"] for s in samples.values()} == set(IDENTITY)
    for name, obj in samples.items():
        created = _apply(devenv, obj, dry_run=True)
        assert created["metadata"]["name"] == obj["metadata"]["name"], name
    # And the identities matter: a tenant may not write the infra team's policy.
    policy = next(s for s in samples.values() if s["kind"] == "HostDeployPolicy")
    with pytest.raises(ApiException) as refused:
        rack.api("tenant-a", "HostDeployPolicy").create(body=policy, namespace=policy["metadata"]["namespace"])
    assert refused.value.status == 403
    # And strict validation bites: a misspelt field is refused, not dropped.
    claim = copy.deepcopy(next(s for s in samples.values() if s["kind"] == "HostClaim"))
    claim["spec"]["hostSelecter"] = claim["spec"].pop("hostSelector")
    with pytest.raises(AssertionError, match="hostSelecter"):
        _apply(devenv, claim, dry_run=True)


def test_the_samples_bind_a_host_and_copy_the_user_data(devenv, rack, tmp_path: Path):
    samples = {name: copy.deepcopy(s) for name, s in _samples().items()}
    policy, secret = samples["hostdeploypolicy.yaml"], samples["userdata_secret.yaml"]
    claim = samples["hostclaim.yaml"]
    assert policy["spec"]["hostclaimNamespaces"]["names"] == [claim["metadata"]["namespace"]] == [TENANT_A]
    # The rack stands in for the sample's infrahost (the devenv's fleet there is not taken from `available`).
    policy["metadata"]["namespace"] = rack.namespace
    suffix = rack.namespace  # the tenant namespace is shared between tests: names of this rack
    secret["metadata"]["name"] = f"{secret['metadata']['name']}-{suffix}"
    claim["metadata"]["name"] = f"{claim['metadata']['name']}-{suffix}"
    claim["spec"]["userData"]["name"] = secret["metadata"]["name"]
    claim["spec"]["hostSelector"]["inNamespace"] = rack.namespace  # not another test's medium hosts
    labels = claim["spec"]["hostSelector"]["matchLabels"]
    rack.host("wrong", labels={"infra-kind": "large"})
    rack.host("right", labels=labels)
    _apply(devenv, policy, dry_run=False, identity="admin")  # the infra identity's rights are in infrahost
    _apply(devenv, secret, dry_run=False)
    _apply(devenv, claim, dry_run=False)
    rack.claims.append((TENANT_A, claim["metadata"]["name"]))
    try:
        step("hostclaim_bind", devenv, tmp_path, rack)
        step("hostclaim_secrets", devenv, tmp_path, rack)
        bound = rack.read_claim(claim["metadata"]["name"])
        assert condition(bound, "Association")["status"] == "True", bound["status"]
        assert bound["status"]["hardwareData"] == {"name": "right", "namespace": rack.namespace}
        assert condition(bound, "Synchronization")["reason"] == "ConfigurationSynced", bound["status"]
        host = rack.read_host("right")
        assert host["spec"]["userData"]["name"] == "right-userdata"
    finally:
        rack.api("tenant-a", "Secret", "v1").delete(name=secret["metadata"]["name"], namespace=TENANT_A)
