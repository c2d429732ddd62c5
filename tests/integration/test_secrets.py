"""hostclaim_secrets on the real API server: the guide's secret flow, and exfiltration attempts."""

from __future__ import annotations

import base64

import pytest
from kubernetes.client.exceptions import ApiException

from tests.claimlayer import TENANT_A, Rack, condition, step

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
        rack.api("tenant-a", "HostClaim").patch(
            body={"spec": {"userData": {"name": target_name, "namespace": namespace}}},
            name="sec-claim",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
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
