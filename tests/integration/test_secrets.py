"""hostclaim_secrets on the real API server: the guide's secret flow, and exfiltration attempts."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.reconcile import reconcile_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import now
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A, Rack, condition, step
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration


def tenant_secret(rack: Rack, name: str, data: dict, namespace: str = TENANT_A, identity: str = "tenant-a") -> None:
    secrets = rack.api(identity, "Secret", "v1")
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    }
    try:
        secrets.create(body=body)
    except ApiException as error:
        if error.status != 409:
            raise
        secrets.replace(body=body, name=name, namespace=namespace)
    if (identity, namespace, name) not in rack.secrets:
        rack.secrets.append((identity, namespace, name))


def read_copy(rack: Rack, name: str) -> dict | None:
    try:
        return rack.api("admin", "Secret", "v1").get(name=name, namespace=rack.namespace).to_dict()
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def decoded(secret: dict, key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


@pytest.fixture
def bound(devenv, rack, tmp_path):
    """The guide's claim bound to host h1, with its userData Secret."""
    rack.secrets = []
    rack.policy()
    rack.host("h1")
    tenant_secret(rack, "sec-userdata", {"userData": "#cloud-config\nhostname: one\n"})
    rack.claim("sec-claim", userData={"name": "sec-userdata", "namespace": TENANT_A})
    step("hostclaim_bind", devenv, tmp_path, rack)
    yield rack
    for identity, namespace, name in rack.secrets:
        rack.api(identity, "Secret", "v1").delete(name=name, namespace=namespace)


def test_the_guides_secret_flow(devenv, bound, tmp_path):
    rack = bound
    step("hostclaim_secrets", devenv, tmp_path, rack)
    copy = read_copy(rack, "h1-userdata")
    assert decoded(copy, "userData") == "#cloud-config\nhostname: one\n"
    host = rack.read_host("h1")
    assert copy["metadata"]["ownerReferences"][0]["uid"] == host["metadata"]["uid"]
    assert host["spec"]["userData"] == {"name": "h1-userdata", "namespace": rack.namespace}
    assert condition(rack.read_claim("sec-claim"), "Synchronization")["reason"] == "ConfigurationSynced"
    # The tenant's own Secret is never owned by anything.
    source = rack.api("tenant-a", "Secret", "v1").get(name="sec-userdata", namespace=TENANT_A).to_dict()
    assert not source["metadata"].get("ownerReferences")

    # kubectl create secret ... --from-file=metaData=...; kubectl patch hostclaim ... metaData
    tenant_secret(rack, "sec-metadata", {"metaData": "instance-id: one\n"})
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": {"metaData": {"name": "sec-metadata", "namespace": TENANT_A}}},
        name="sec-claim",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    step("hostclaim_secrets", devenv, tmp_path, rack)
    assert decoded(read_copy(rack, "h1-metadata"), "metaData") == "instance-id: one\n"

    # The tenant edits its Secret (through the `value` key this time): the copy follows.
    tenant_secret(rack, "sec-userdata", {"value": "#cloud-config\nhostname: two\n"})
    result = step("hostclaim_secrets", devenv, tmp_path, rack)
    assert result["changed"] is True
    assert decoded(read_copy(rack, "h1-userdata"), "userData") == "#cloud-config\nhostname: two\n"
    assert step("hostclaim_secrets", devenv, tmp_path, rack)["changed"] is False

    # Dropping the reference deletes the copy and the host's ref.
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": {"metaData": None}},
        name="sec-claim",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    step("hostclaim_secrets", devenv, tmp_path, rack)
    assert read_copy(rack, "h1-metadata") is None
    assert "metaData" not in rack.read_host("h1")["spec"]


@contextlib.contextmanager
def admission_warns_only(rack, write):
    """The HostClaim admission policy set to warn instead of deny (as if it were not installed) until
    write() goes through; then denying again, shown by a dry-run create of a claim it must refuse."""
    bindings = rack.api("admin", "ValidatingAdmissionPolicyBinding", "admissionregistration.k8s.io/v1")
    claims = rack.api("tenant-a", "HostClaim")

    def actions(values: list[str]) -> None:
        bindings.patch(
            body={"spec": {"validationActions": values}},
            name="metalclaim-hostclaim",
            content_type="application/merge-patch+json",
        )

    def accepted(call) -> bool:
        try:
            call()
            return True
        except ApiException as error:
            assert error.status == 403, error
            return False

    def refused_probe() -> None:
        claims.create(
            body={
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "HostClaim",
                "metadata": {"name": "admission-probe", "namespace": TENANT_A},
                "spec": {"online": False, "userData": {"name": "any", "namespace": "infra"}},
            },
            query_params=[("dryRun", "All")],
        )

    actions(["Warn"])
    try:
        eventually(lambda: accepted(write), timeout=15, message="the write accepted once the policy only warns")
        yield
    finally:
        actions(["Deny"])
        eventually(lambda: not accepted(refused_probe), timeout=15, message="the policy denying again")


@pytest.mark.parametrize(
    ("target_namespace", "target_name"),
    [("infra", "h1-bmc-secret"), ("tenant-b", "theirs")],
    ids=["infra-bmc-credentials", "other-tenant"],
)
def test_cross_namespace_references_are_refused_unread(devenv, clients, bound, tmp_path, target_namespace, target_name):
    rack = bound
    namespace = rack.namespace if target_namespace == "infra" else "tenant-b"
    secret_value = "S3CRET-" + target_namespace
    admin_secrets = rack.api("admin", "Secret", "v1")
    admin_secrets.create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": target_name, "namespace": namespace},
            "stringData": {"username": "admin", "password": secret_value, "userData": secret_value},
        }
    )
    try:
        step("hostclaim_secrets", devenv, tmp_path, rack)  # a good copy first
        attack = {"spec": {"userData": {"name": target_name, "namespace": namespace}}}
        claims = rack.api("tenant-a", "HostClaim")
        # Refused at admission (config/admission)...
        with pytest.raises(ApiException) as refused:
            claims.patch(body=attack, name="sec-claim", namespace=TENANT_A, content_type="application/merge-patch+json")
        assert refused.value.status == 403 and "spec.userData.namespace" in refused.value.body
        # ...and by the claim layer itself, where the admission policies are not installed.
        with admission_warns_only(
            rack,
            lambda: claims.patch(
                body=attack, name="sec-claim", namespace=TENANT_A, content_type="application/merge-patch+json"
            ),
        ):
            pass
        result = step("hostclaim_secrets", devenv, tmp_path, rack)
        claim = rack.read_claim("sec-claim")
        sync = condition(claim, "Synchronization")
        assert (sync["status"], sync["reason"]) == ("False", "CrossNamespaceReference")
        assert sync["message"] == (
            f"spec.userData.namespace {namespace!r}: only Secrets in the claim's namespace 'cluster-ns' may be used"
        )
        assert condition(claim, "Ready")["status"] == "False"
        # Nothing of the target reached anything the tenant or the host's copy can see.
        copy = read_copy(rack, "h1-userdata")
        assert decoded(copy, "userData") == "#cloud-config\nhostname: one\n"  # the last good copy stays
        assert secret_value not in repr(claim) and secret_value not in repr(result)
        events = rack.api("tenant-a", "Event", "v1").get(namespace=TENANT_A).to_dict()["items"]
        assert secret_value not in repr(events)
    finally:
        admin_secrets.delete(name=target_name, namespace=namespace)


def test_missing_secret_or_key_is_reported(devenv, bound, tmp_path):
    rack = bound
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": {"networkData": {"name": "nope"}}},
        name="sec-claim",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    step("hostclaim_secrets", devenv, tmp_path, rack)
    sync = condition(rack.read_claim("sec-claim"), "Synchronization")
    assert (sync["reason"], sync["message"]) == (
        "NetworkDataSecretSyncFailure",
        "spec.networkData: Secret cluster-ns/nope not found",
    )
    tenant_secret(rack, "nope", {"wrong-key": "x"})
    step("hostclaim_secrets", devenv, tmp_path, rack)
    sync = condition(rack.read_claim("sec-claim"), "Synchronization")
    assert sync["message"] == "spec.networkData: Secret cluster-ns/nope has no networkData or value key"


def attack_secret(rack: Rack, case: str) -> tuple[str, str, str]:
    """The tenant's unacceptable Secret for `case`: (its name, the expected message, a marker of its content)."""
    marker = f"LEAK-{case}-MARKER"
    secrets = rack.api("tenant-a", "Secret", "v1")
    name = f"bad-{case}"
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": TENANT_A}}
    where = f"spec.userData: Secret {TENANT_A}/{name}"
    if case == "oversized":
        body["stringData"] = {"userData": "#cloud-config\n# " + marker + "x" * (512 * 1024)}
        size = len(body["stringData"]["userData"])
        message = f"{where}: key userData holds {size} bytes, more than the {512 * 1024} allowed for userData"
    elif case == "token":
        # A tenant pointing userData at a service-account token: the token controller fills it in.
        body["type"] = "kubernetes.io/service-account-token"
        body["metadata"]["annotations"] = {"kubernetes.io/service-account.name": "default"}
        body["stringData"] = {"userData": marker}
        message = (
            f"{where} is of type kubernetes.io/service-account-token; only Opaque Secrets are copied beside a host"
        )
    elif case == "no-key":
        body["stringData"] = {"cloud-init": marker}
        message = f"{where} has no userData or value key"
    else:  # empty
        body["stringData"] = {"userData": ""}
        message = f"{where}: key userData is empty"
    secrets.create(body=body)
    rack.secrets.append(("tenant-a", TENANT_A, name))
    return name, message, marker


@pytest.mark.parametrize("case", ["oversized", "token", "no-key", "empty"])
def test_unacceptable_tenant_secrets_are_refused_and_the_last_good_copy_kept(devenv, bound, tmp_path, case):
    rack = bound
    step("hostclaim_secrets", devenv, tmp_path, rack)  # a good copy first
    good = read_copy(rack, "h1-userdata")
    name, message, marker = attack_secret(rack, case)
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": {"userData": {"name": name, "namespace": TENANT_A}}},
        name="sec-claim",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    result = step("hostclaim_secrets", devenv, tmp_path, rack)
    assert result["claims"][0]["synchronized"] is False
    claim = rack.api("tenant-a", "HostClaim").get(name="sec-claim", namespace=TENANT_A).to_dict()
    sync = condition(claim, "Synchronization")
    assert (sync["status"], sync["reason"], sync["message"]) == ("False", "UserDataSecretSyncFailure", message)
    # The last good copy stays, and the host still uses it.
    kept = read_copy(rack, "h1-userdata")
    assert (kept["data"], kept["metadata"]["resourceVersion"]) == (good["data"], good["metadata"]["resourceVersion"])
    assert rack.read_host("h1")["spec"]["userData"] == {"name": "h1-userdata", "namespace": rack.namespace}
    # Nothing of the Secret reached the infra namespace, the claim, the Events or the result.
    infra_secrets = rack.api("admin", "Secret", "v1").get(namespace=rack.namespace).to_dict()["items"]
    events = rack.api("tenant-a", "Event", "v1").get(namespace=TENANT_A).to_dict()["items"]
    source = rack.api("tenant-a", "Secret", "v1").get(name=name, namespace=TENANT_A).to_dict()
    leaks = [marker, *(v for v in (source.get("data") or {}).values() if v)]
    for text in (repr(infra_secrets), repr(claim), repr(events), repr(result)):
        assert not any(leak in text for leak in leaks)
    assert step("hostclaim_secrets", devenv, tmp_path, rack)["changed"] is False


# -- no read beside the host; names taken; the claim side's guard --------------------------------------------------
def in_process_reconcile(devenv, rack, kube: Kube) -> dict:
    """One hostclaim_reconcile run over the rack's claims through `kube` (which counts each request)."""
    run = ClaimRun(kube, rack.claim_args(), now(), check_mode=False)
    return run.finish(reconcile_claims(run))


def set_claim(rack: Rack, name: str, spec: dict) -> None:
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": spec}, name=name, namespace=TENANT_A, content_type="application/merge-patch+json"
    )


def hand_made(rack: Rack, name: str) -> dict:
    """The infra team's own Secret of a copy's name (unlabelled), as stored."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": rack.namespace},
        "stringData": {"userData": "#infra's own"},
    }
    return rack.api("admin", "Secret", "v1").create(body=body).to_dict()


def test_a_full_reconcile_reads_no_secret_outside_the_claims_namespace(devenv, bound):
    """Bind, copy, change, drop and release: Secrets beside the host are only created, replaced and deleted."""
    rack = bound
    kube = Kube({"kubeconfig": devenv.kubeconfig("controller")})
    tenant_secret(rack, "sec-networkdata", {"networkData": "{}"})
    set_claim(rack, "sec-claim", {"networkData": {"name": "sec-networkdata"}})
    in_process_reconcile(devenv, rack, kube)  # copies created
    assert read_copy(rack, "h1-userdata") and read_copy(rack, "h1-networkdata")
    tenant_secret(rack, "sec-userdata", {"userData": "#cloud-config\nhostname: two\n"})
    in_process_reconcile(devenv, rack, kube)  # a copy replaced
    assert decoded(read_copy(rack, "h1-userdata"), "userData") == "#cloud-config\nhostname: two\n"
    set_claim(rack, "sec-claim", {"networkData": None})
    in_process_reconcile(devenv, rack, kube)  # a copy deleted
    assert read_copy(rack, "h1-networkdata") is None
    rack.set_state("h1", "provisioned")
    rack.api("tenant-a", "HostClaim").delete(name="sec-claim", namespace=TENANT_A)
    assert in_process_reconcile(devenv, rack, kube)["release"]["claims"][0]["state"] == "waiting"
    assert read_copy(rack, "h1-userdata") is None
    rack.set_state("h1", "available")
    assert in_process_reconcile(devenv, rack, kube)["release"]["claims"][0]["state"] == "released"

    secret_requests = {key: n for key, n in kube.requests.items() if key[1] == "Secret"}
    outside = {key: n for key, n in secret_requests.items() if key[2] != TENANT_A}
    # (Outside: this rack, and other tests' racks whose orphaned hosts the run released.)
    assert {verb for verb, _kind, _namespace in outside} <= {"create", "replace", "delete"}, outside
    # It did write there: created two copies, replaced one, deleted both (the test could fail).
    assert (outside[("create", "Secret", rack.namespace)], outside[("replace", "Secret", rack.namespace)]) == (2, 1)
    assert outside[("delete", "Secret", rack.namespace)] == 2
    assert {verb for verb, _kind, namespace in secret_requests if namespace == TENANT_A} == {"get"}
    print(f"\nSecret requests of bind -> copy -> change -> drop -> release: {dict(sorted(secret_requests.items()))}")


def test_a_secret_of_a_copys_name_made_later_is_neither_overwritten_nor_deleted(devenv, bound):
    """The copy was made and recorded, then the infra team put its own Secret under the copy's name."""
    rack = bound
    kube = Kube({"kubeconfig": devenv.kubeconfig("controller")})
    in_process_reconcile(devenv, rack, kube)
    ours = read_copy(rack, "h1-userdata")
    assert ours["metadata"]["labels"]["metalclaim.io/copy-of-claim"]
    rack.api("admin", "Secret", "v1").delete(name="h1-userdata", namespace=rack.namespace)
    theirs = hand_made(rack, "h1-userdata")

    # The tenant's data changes: the PUT over it is refused by the API server, the claim says why.
    tenant_secret(rack, "sec-userdata", {"userData": "#cloud-config\nhostname: two\n"})
    result = in_process_reconcile(devenv, rack, kube)
    sync = condition(rack.read_claim("sec-claim"), "Synchronization")
    assert (sync["status"], sync["reason"]) == ("False", "CopyNameTaken")
    assert sync["message"] == (
        "spec.userData: the Secret h1-userdata beside BareMetalHost h1 was not made by metalclaim and is left alone; "
        "ask the infrastructure team to remove or rename it"
    )
    assert rack.namespace not in sync["message"]
    assert read_copy(rack, "h1-userdata")["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    host = rack.read_host("h1")
    assert "userData" not in host["spec"]  # the provisioner is never pointed at their Secret
    assert "metalclaim.io/copies" not in (host["metadata"].get("annotations") or {})
    assert result["bound"]["claims"][0]["synchronized"] is False

    # Recorded again (as if a run had stopped before forgetting it), then the reference dropped: the
    # delete carries the recorded uid, the server refuses it, their Secret stays.
    record = {"userData": {"uid": ours["metadata"]["uid"], "digest": "0"}}
    rack.api("admin", "BareMetalHost").patch(
        body={"metadata": {"annotations": {"metalclaim.io/copies": json.dumps(record)}}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    set_claim(rack, "sec-claim", {"userData": None})
    in_process_reconcile(devenv, rack, kube)
    assert read_copy(rack, "h1-userdata")["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert "metalclaim.io/copies" not in (rack.read_host("h1")["metadata"].get("annotations") or {})
    assert condition(rack.read_claim("sec-claim"), "Synchronization")["status"] == "True"
    rack.api("admin", "Secret", "v1").delete(name="h1-userdata", namespace=rack.namespace)


def test_a_copy_deleted_by_hand_comes_back_when_its_record_is_removed(devenv, bound):
    """The trade-off of never reading beside the host, and how the infra team forces a re-copy."""
    rack = bound
    kube = Kube({"kubeconfig": devenv.kubeconfig("controller")})
    in_process_reconcile(devenv, rack, kube)
    rack.api("admin", "Secret", "v1").delete(name="h1-userdata", namespace=rack.namespace)
    in_process_reconcile(devenv, rack, kube)
    assert read_copy(rack, "h1-userdata") is None  # not noticed: nothing beside the host is read
    rack.api("admin", "BareMetalHost").patch(
        body={"metadata": {"annotations": {"metalclaim.io/copies": None}}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    in_process_reconcile(devenv, rack, kube)
    assert decoded(read_copy(rack, "h1-userdata"), "userData") == "#cloud-config\nhostname: one\n"
    # A crash between the copy's write and the host's: no record, the copy there. Taken over by a PUT.
    rack.api("admin", "BareMetalHost").patch(
        body={"metadata": {"annotations": {"metalclaim.io/copies": None}}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    before = dict(kube.requests)
    in_process_reconcile(devenv, rack, kube)
    sent = {key: n - before.get(key, 0) for key, n in kube.requests.items() if n != before.get(key, 0)}
    assert (sent[("create", "Secret", rack.namespace)], sent[("replace", "Secret", rack.namespace)]) == (1, 1)
    assert "metalclaim.io/copies" in rack.read_host("h1")["metadata"]["annotations"]
    assert condition(rack.read_claim("sec-claim"), "Synchronization")["status"] == "True"


def test_the_claim_side_writes_only_labelled_copies_even_with_its_own_token(devenv, clients, rack):
    """An attacker holding the claim side's credentials (the devenv's `controller`) in an infra namespace."""
    secrets = clients["controller"].resources.get(api_version="v1", kind="Secret")
    bmc = rack.api("admin", "Secret", "v1").create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "h9-bmc-secret", "namespace": rack.namespace},
            "stringData": {"username": "admin", "password": "the-bmc-password"},
        }
    )
    guard = "ValidatingAdmissionPolicy 'metalclaim-claim-side-secrets'"

    def refused(call) -> str:
        with pytest.raises(ApiException) as error:
            call()
        assert error.value.status == 403, error.value.body
        return json.loads(error.value.body)["message"]

    planted = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "planted", "namespace": rack.namespace}}
    assert guard in refused(lambda: secrets.create(body={**planted, "stringData": {"userData": "x"}}))
    overwrite = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "h9-bmc-secret", "namespace": rack.namespace},
        "stringData": {"username": "admin", "password": "mine"},
    }
    message = refused(lambda: secrets.replace(body=overwrite, name="h9-bmc-secret", namespace=rack.namespace))
    assert guard in message and f"Secret {rack.namespace}/h9-bmc-secret" in message
    # Labelled as a copy on the way: refused too (and by the copy-on-create policy for everyone).
    labelled = {**overwrite, "metadata": {**overwrite["metadata"], "labels": {"metalclaim.io/copy-of-claim": "x"}}}
    assert "denied request" in refused(
        lambda: secrets.replace(body=labelled, name="h9-bmc-secret", namespace=rack.namespace)
    )
    admin_secrets = rack.api("admin", "Secret", "v1")
    assert "'metalclaim-secret-copy-on-create'" in refused(
        lambda: admin_secrets.replace(body=labelled, name="h9-bmc-secret", namespace=rack.namespace)
    )
    assert guard in refused(lambda: secrets.delete(name="h9-bmc-secret", namespace=rack.namespace))
    kept = admin_secrets.get(name="h9-bmc-secret", namespace=rack.namespace).to_dict()
    assert kept["metadata"]["resourceVersion"] == bmc.metadata.resourceVersion
    # A copy is what it may write: created labelled, replaced, deleted.
    copy = {**planted, "metadata": {**planted["metadata"], "labels": {"metalclaim.io/copy-of-claim": "u"}}}
    secrets.create(body={**copy, "stringData": {"userData": "a"}})
    secrets.replace(body={**copy, "stringData": {"userData": "b"}}, name="planted", namespace=rack.namespace)
    unlabelled = {**copy, "metadata": {**copy["metadata"], "labels": {}}}
    assert "removes the label" in refused(
        lambda: secrets.replace(body=unlabelled, name="planted", namespace=rack.namespace)
    )
    secrets.delete(name="planted", namespace=rack.namespace)
