"""playbooks/register_hosts.yml and playbooks/policy.yml as an infrastructure team, on the real API server."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.runner import run
from metalclaim_dev.support import REPO_ROOT, run_playbook, run_tasks

pytestmark = pytest.mark.integration

REGISTER = REPO_ROOT / "playbooks" / "register_hosts.yml"
POLICY = REPO_ROOT / "playbooks" / "policy.yml"
INFRA = "infrahost"
TENANT_A = "cluster-ns"
METAL3 = "metal3.io/v1alpha1"
# Unique, so that finding it anywhere in Ansible's output can only mean a leak.
PASSWORD = f"bmc-pw-{uuid.uuid4().hex}"


def api(clients, kind: str, api_version: str = METAL3, identity: str = "admin"):
    return clients[identity].resources.get(api_version=api_version, kind=kind)


def get(clients, kind: str, name: str, api_version: str = METAL3) -> dict | None:
    try:
        return api(clients, kind, api_version).get(name=name, namespace=INFRA).to_dict()
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def delete(clients, kind: str, name: str, api_version: str = METAL3) -> None:
    try:
        api(clients, kind, api_version).delete(name=name, namespace=INFRA)
    except ApiException as error:
        if error.status != 404:
            raise


def managers(obj: dict) -> list[tuple[str, str]]:
    return [(m["manager"], m["operation"]) for m in obj["metadata"]["managedFields"]]


@pytest.fixture
def host_names(clients):
    """Two fresh host names (the hosts bm-NN stay untouched); their hosts and Secrets are removed afterwards."""
    prefix = f"rack7-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-01", f"{prefix}-02"]
    yield names
    for name in names:
        delete(clients, "BareMetalHost", name)
        delete(clients, "Secret", f"{name}-bmc-secret", "v1")


@pytest.fixture
def policy_names(clients):
    names = [f"tenants-{uuid.uuid4().hex[:6]}", f"teams-{uuid.uuid4().hex[:6]}"]
    yield names
    for name in names:
        delete(clients, "HostDeployPolicy", name)


def inventory(names: list[str]) -> dict:
    """The brief's inventory: one host with every field, one with only the required ones."""
    first, second = names
    return {
        "hosts_namespace": INFRA,
        "hosts_list": [
            {
                "name": first,
                "bmc": {
                    "address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/7a01",
                    "username": "admin",
                    "password": PASSWORD,
                    "disableCertificateVerification": False,
                },
                "bootMACAddress": "52:54:00:07:00:01",
                "bootMode": "UEFI",
                "labels": {"infra-kind": "medium"},
                "online": False,
            },
            {
                "name": second,
                "bmc": {
                    "address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/7a02",
                    "username": "admin",
                    "password": PASSWORD,
                },
                "labels": {"infra-kind": "large"},
            },
        ],
    }


def assert_no_password(private_data_dir: Path, stdout: str) -> None:
    """Neither the runner's stdout nor any event it recorded (full task results) holds the password."""
    encoded = base64.b64encode(PASSWORD.encode()).decode()
    assert PASSWORD not in stdout and encoded not in stdout
    # artifacts/ holds every callback event; env/extravars (our own input) is the only place it may be.
    assert PASSWORD in (private_data_dir / "env" / "extravars").read_text()  # the search below can find it
    events = list((private_data_dir / "artifacts").rglob("job_events/*.json"))
    assert events
    for path in [*events, *(private_data_dir / "artifacts").rglob("stdout")]:
        text = path.read_text(errors="replace")
        assert PASSWORD not in text and encoded not in text, path


def test_register_hosts_creates_hosts_and_secrets_idempotently(devenv, clients, host_names, tmp_path):
    kubeconfig = devenv.kubeconfig("infra")
    first = run(tmp_path / "first", kubeconfig, playbook=str(REGISTER), extravars=inventory(host_names))
    assert first.status == "successful", first.stdout
    assert_no_password(tmp_path / "first", first.stdout)

    full, minimal = host_names
    host = get(clients, "BareMetalHost", full)
    assert host["metadata"]["labels"] == {"infra-kind": "medium"}
    assert host["spec"]["bmc"] == {
        "address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/7a01",
        "credentialsName": f"{full}-bmc-secret",
        "disableCertificateVerification": False,
    }
    assert host["spec"]["bootMACAddress"] == "52:54:00:07:00:01"
    assert host["spec"]["bootMode"] == "UEFI"
    assert host["spec"]["online"] is False
    assert managers(host) == [("metalclaim-hosts", "Apply")]  # server-side apply, not create/patch
    other = get(clients, "BareMetalHost", minimal)
    assert other["metadata"]["labels"] == {"infra-kind": "large"}
    assert other["spec"]["bmc"]["credentialsName"] == f"{minimal}-bmc-secret"
    assert "bootMACAddress" not in other["spec"] and "disableCertificateVerification" not in other["spec"]["bmc"]

    for name in host_names:
        secret = get(clients, "Secret", f"{name}-bmc-secret", "v1")
        assert secret["type"] == "Opaque"
        assert {key: base64.b64decode(value).decode() for key, value in secret["data"].items()} == {
            "username": "admin",
            "password": PASSWORD,
        }
        assert managers(secret) == [("metalclaim-hosts", "Apply")]

    second = run(tmp_path / "second", kubeconfig, playbook=str(REGISTER), extravars=inventory(host_names))
    assert second.status == "successful", second.stdout
    assert [t["task"] for t in second.tasks if t.get("changed")] == []
    assert_no_password(tmp_path / "second", second.stdout)


def test_state_absent_removes_host_and_secret(devenv, clients, host_names, tmp_path):
    kubeconfig = devenv.kubeconfig("infra")
    hosts = inventory(host_names)
    results = run_playbook(tmp_path / "register", REGISTER, kubeconfig, hosts)
    assert not any(r["failed"] for r in results)
    removed, kept = host_names
    hosts["hosts_list"][0] = {"name": removed, "state": "absent"}  # no bmc needed to remove a host
    results = run_playbook(tmp_path / "remove", REGISTER, kubeconfig, hosts)
    assert not any(r["failed"] for r in results), results
    assert get(clients, "BareMetalHost", removed) is None
    assert get(clients, "Secret", f"{removed}-bmc-secret", "v1") is None
    assert get(clients, "BareMetalHost", kept) is not None
    assert get(clients, "Secret", f"{kept}-bmc-secret", "v1") is not None


def claim_layer_writes(devenv, clients, name: str, **spec) -> None:
    """Write a host as the claim layer does: its own Kube client, as the controller, by replace (PUT)."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube

    kube = Kube({"kubeconfig": devenv.kubeconfig("controller")})
    host = kube.get(METAL3, "BareMetalHost", name, INFRA)
    host["spec"].update(spec)
    kube.replace(host)


def test_a_bound_host_is_not_removed_and_online_stays_the_claim_layers(devenv, clients, host_names, tmp_path):
    kubeconfig = devenv.kubeconfig("infra")
    hosts = inventory(host_names)
    full, minimal = host_names
    assert not any(r["failed"] for r in run_playbook(tmp_path / "register", REGISTER, kubeconfig, hosts))
    consumer = {"apiVersion": METAL3, "kind": "HostClaim", "namespace": TENANT_A, "name": "web", "uid": "u-1"}
    claim_layer_writes(devenv, clients, minimal, consumerRef=consumer, online=True)

    # The inventory does not set `online` for this host: re-applying it leaves the claim layer's value alone.
    again = run_playbook(tmp_path / "again", REGISTER, kubeconfig, hosts)
    assert not any(r["failed"] for r in again), again
    assert get(clients, "BareMetalHost", minimal)["spec"]["online"] is True

    hosts["hosts_list"] = [{"name": full, "state": "absent"}, {"name": minimal, "state": "absent"}]
    refused = run_playbook(tmp_path / "remove", REGISTER, kubeconfig, hosts)
    assert refused[-1]["failed"] is True
    assert refused[-1]["msg"] == (
        f"BareMetalHost {INFRA}/{minimal} is bound to HostClaim {TENANT_A}/web; delete the claim first "
        "(the claim layer gives the host back, cleaned), then remove the host."
    )
    # Nothing was removed, not even the free host of the same run.
    assert get(clients, "BareMetalHost", minimal)["spec"]["consumerRef"]["name"] == "web"
    assert get(clients, "BareMetalHost", full) is not None
    assert get(clients, "Secret", f"{minimal}-bmc-secret", "v1") is not None

    claim_layer_writes(devenv, clients, minimal, consumerRef=None)  # released
    removed = run_playbook(tmp_path / "released", REGISTER, kubeconfig, hosts)
    assert not any(r["failed"] for r in removed), removed
    assert all(get(clients, "BareMetalHost", name) is None for name in host_names)


def test_missing_bmc_address_fails_naming_the_field(devenv, clients, host_names, tmp_path):
    hosts = inventory(host_names)
    del hosts["hosts_list"][1]["bmc"]["address"]
    result = run(tmp_path, devenv.kubeconfig("infra"), playbook=str(REGISTER), extravars=hosts)
    assert result.status == "failed"
    failed = result.tasks[-1]
    assert failed["failed"] is True
    assert "missing required arguments: address found in hosts_list -> bmc" in failed["msg"]
    assert_no_password(tmp_path, result.stdout)
    # Validation comes first: nothing was written, not even the valid host.
    assert all(get(clients, "BareMetalHost", name) is None for name in host_names)
    assert all(get(clients, "Secret", f"{name}-bmc-secret", "v1") is None for name in host_names)


def test_tenants_cannot_register_hosts(devenv, clients, host_names, tmp_path):
    result = run(tmp_path, devenv.kubeconfig("tenant-a"), playbook=str(REGISTER), extravars=inventory(host_names))
    assert result.status == "failed"
    failed = result.tasks[-1]
    assert failed["failed"] is True
    assert "forbidden" in failed["msg"].lower() and "403" in failed["msg"]
    assert_no_password(tmp_path, result.stdout)
    assert all(get(clients, "BareMetalHost", name) is None for name in host_names)


def test_policy_playbook_creates_a_policy_that_admits_the_tenant(devenv, clients, policy_names, tmp_path):
    name = policy_names[0]
    rule = {
        "names": [TENANT_A],
        "nameMatches": "cluster-.*",
        "hasLabels": [{"name": "metalclaim.io/role", "value": "tenant"}],
    }
    policies = {
        "policy_list": [
            {
                "name": name,
                "namespace": INFRA,
                "hostclaimNamespaces": rule,
                "metadataCopy": {"labels": ["infra-kind"], "annotations": []},
            }
        ]
    }
    kubeconfig = devenv.kubeconfig("infra")
    results = run_playbook(tmp_path / "first", POLICY, kubeconfig, policies)
    assert not any(r["failed"] for r in results), results
    policy = get(clients, "HostDeployPolicy", name)
    assert policy["spec"] == {
        "hostclaimNamespaces": rule,
        "metadataCopy": {"labels": ["infra-kind"], "annotations": []},
    }
    second = run_playbook(tmp_path / "second", POLICY, kubeconfig, policies)
    assert [r["task"] for r in second if r.get("changed")] == []

    check = {"namespace": TENANT_A, "infra_namespaces": [INFRA]}
    a, b = run_tasks(
        tmp_path / "check",
        [
            {"metalclaim.hostclaim.hostdeploypolicy_check": check},
            {"metalclaim.hostclaim.hostdeploypolicy_check": {**check, "namespace": "tenant-b"}},
        ],
        devenv.kubeconfig("controller"),
    )
    decision = {d["policy"]: d for d in a["decisions"]}[f"{INFRA}/{name}"]
    assert (decision["admitted"], decision["reason"]) == (True, "Admitted")
    assert INFRA in a["authorized_namespaces"]
    assert {d["policy"]: d["reason"] for d in b["decisions"]}[f"{INFRA}/{name}"] == "NameNotListed"

    policies["policy_list"][0] = {"name": name, "namespace": INFRA, "state": "absent"}
    results = run_playbook(tmp_path / "remove", POLICY, kubeconfig, policies)
    assert not any(r["failed"] for r in results), results
    assert get(clients, "HostDeployPolicy", name) is None


def test_invalid_name_matches_fails_before_anything_is_written(devenv, clients, policy_names, tmp_path):
    valid, invalid = policy_names
    policies = {
        "policy_list": [
            {"name": valid, "namespace": INFRA, "hostclaimNamespaces": {"nameMatches": "team-.*"}},
            {"name": invalid, "namespace": INFRA, "hostclaimNamespaces": {"nameMatches": "team-(("}},
        ]
    }
    results = run_playbook(tmp_path, POLICY, devenv.kubeconfig("infra"), policies)
    failed = results[-1]
    assert failed["failed"] is True
    bad = [item for item in failed["results"] if item.get("failed")]
    assert len(bad) == 1
    # The policy, the field and Python's reason (re.error's wording, with its position).
    assert bad[0]["msg"].startswith(
        f'HostDeployPolicy {INFRA}/{invalid}: hostclaimNamespaces.nameMatches "team-((" is not a valid regular '
        "expression: missing ), unterminated subpattern"
    )
    assert get(clients, "HostDeployPolicy", valid) is None
    assert get(clients, "HostDeployPolicy", invalid) is None


def test_invalid_metadata_copy_pattern_fails_before_anything_is_written(devenv, clients, policy_names, tmp_path):
    valid, invalid = policy_names
    copy = {"labels": ["infra-kind", "rack-(["], "annotations": ["ok"]}
    policies = {
        "policy_list": [
            {"name": valid, "namespace": INFRA, "hostclaimNamespaces": {}, "metadataCopy": {"labels": [".*"]}},
            {"name": invalid, "namespace": INFRA, "hostclaimNamespaces": {}, "metadataCopy": copy},
        ]
    }
    results = run_playbook(tmp_path, POLICY, devenv.kubeconfig("infra"), policies)
    failed = results[-1]
    assert failed["failed"] is True
    bad = [item for item in failed["results"] if item.get("failed")]
    assert [item["msg"] for item in bad] == [
        f'HostDeployPolicy {INFRA}/{invalid}: metadataCopy.labels[1] "rack-([" is not a valid regular expression: '
        "unterminated character set at position 6"
    ]
    assert get(clients, "HostDeployPolicy", valid) is None
    assert get(clients, "HostDeployPolicy", invalid) is None


def test_the_deprecated_role_names_still_work_with_the_old_variables(
    devenv, clients, host_names, policy_names, tmp_path
):
    """Issue 25: a playbook of the old names (roles hostclaim_hosts, hostclaim_policy, hostclaim_reconcile and their
    variables) does what it did, warns once per role, and leaves what the new roles and names would write."""
    import json

    full, minimal = host_names
    policy = policy_names[0]
    old_hosts = {
        "hostclaim_hosts_namespace": INFRA,
        "hostclaim_hosts": [{**entry, "bmc": dict(entry["bmc"])} for entry in inventory(host_names)["hosts_list"]],
    }
    rule = {"names": [TENANT_A]}
    controller = devenv.kubeconfig("controller")
    play = {"hosts": "localhost", "gather_facts": False}
    playbook = [
        # The hosts' variables as an inventory of the old names gives them (-e @hosts.yml), the others as role vars.
        {**play, "name": "hosts", "roles": ["metalclaim.hostclaim.hostclaim_hosts"]},
        {
            **play,
            "name": "policy",
            "roles": [
                {
                    "role": "metalclaim.hostclaim.hostclaim_policy",
                    "vars": {"hostclaim_policies": [{"name": policy, "namespace": INFRA, "hostclaimNamespaces": rule}]},
                }
            ],
        },
        {
            **play,
            "name": "claims",
            "environment": {"K8S_AUTH_KUBECONFIG": controller},
            "roles": [
                {
                    "role": "metalclaim.hostclaim.hostclaim_reconcile",
                    "vars": {"hostclaim_reconcile_claims": [{"namespace": TENANT_A, "name": f"absent-{policy}"}]},
                }
            ],
            "post_tasks": [
                {
                    "name": "The result under its old name",
                    "ansible.builtin.assert": {"that": ["hostclaim_reconcile_result.outcomes is defined"]},
                }
            ],
        },
    ]
    project = tmp_path / "old" / "project"
    project.mkdir(parents=True)
    (project / "old.yml").write_text(json.dumps(playbook))
    result = run(tmp_path / "old", devenv.kubeconfig("infra"), playbook="old.yml", extravars=old_hosts)
    assert result.status == "successful", result.stdout
    assert_no_password(tmp_path / "old", result.stdout)
    warnings = [t["msg"] for t in result.tasks if t["task"] == "Warn that this role is deprecated"]
    assert len(warnings) == 3
    assert "metalclaim.hostclaim.hostclaim_hosts is renamed metalclaim.hostclaim.hosts" in warnings[0]
    assert "metalclaim.hostclaim.hostclaim_policy is renamed metalclaim.hostclaim.policy" in warnings[1]
    assert "metalclaim.hostclaim.hostclaim_reconcile is renamed metalclaim.hostclaim.claims" in warnings[2]

    # What the old names wrote is what the new ones write: applying the new names changes nothing.
    assert get(clients, "BareMetalHost", full)["spec"]["bootMACAddress"] == "52:54:00:07:00:01"
    assert get(clients, "Secret", f"{minimal}-bmc-secret", "v1") is not None
    assert get(clients, "HostDeployPolicy", policy)["spec"] == {"hostclaimNamespaces": rule}
    again = run(tmp_path / "new", devenv.kubeconfig("infra"), playbook=str(REGISTER), extravars=inventory(host_names))
    assert again.status == "successful", again.stdout
    assert [t["task"] for t in again.tasks if t.get("changed")] == []
    new_policy = {"policy_list": [{"name": policy, "namespace": INFRA, "hostclaimNamespaces": rule}]}
    assert [
        r["task"]
        for r in run_playbook(tmp_path / "policy", POLICY, devenv.kubeconfig("infra"), new_policy)
        if r.get("changed")
    ] == []
