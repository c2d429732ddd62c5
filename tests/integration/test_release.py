"""hostclaim_release on the real API server: a deleted claim gives its host back cleaned, then goes."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A, TENANT_B, condition, step

pytestmark = pytest.mark.integration


def test_delete_releases_a_cleaned_host_that_another_tenant_then_gets(devenv, clients, rack, tmp_path):
    rack.policy()
    rack.host("h1")
    ref = rack.tenant_secret("first-userdata", userData="#cloud-config")
    rack.claim("first", userData=ref)
    step("hostclaim_bind", devenv, tmp_path, rack)
    step("hostclaim_secrets", devenv, tmp_path, rack)  # the copy h1-userdata, recorded on the host
    assert "metalclaim.io/copies" in rack.read_host("h1")["metadata"]["annotations"]
    # The host gets provisioned with the tenant's image, as the sync step and provisioner would.
    hosts = rack.api("admin", "BareMetalHost")
    hosts.patch(
        body={
            "metadata": {"annotations": {"reboot.metal3.io/maintenance": "", "infra.example/keep": "yes"}},
            "spec": {
                "online": True,
                "automatedCleaningMode": "disabled",
                "image": {"url": "http://127.0.0.1/img.qcow2", "checksum": "abc", "format": "qcow2"},
            },
        },
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    # A Secret of a copy's name made by hand (not ours, not recorded: never touched).
    rack.api("admin", "Secret", "v1").create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "h1-networkdata", "namespace": rack.namespace},
            "stringData": {"networkData": "infra's own"},
        }
    )
    rack.set_state("h1", "provisioned")

    rack.api("tenant-a", "HostClaim").delete(name="first", namespace=TENANT_A)
    assert rack.read_claim("first")["metadata"]["deletionTimestamp"]  # held by the finalizer

    waiting = step("hostclaim_release", devenv, tmp_path, rack)
    # pending also counts orphans elsewhere in the shared devenv (earlier tests' racks): only ours matter.
    ours = [o for o in waiting["orphans"] if o["host"].startswith(f"{rack.namespace}/")]
    assert (waiting["claims"][0]["state"], ours) == ("waiting", [])
    assert waiting["pending"] >= 1
    assert waiting["claims"][0]["message"].endswith("to be deprovisioned (now provisioned)")
    host = rack.read_host("h1")
    assert host["spec"]["consumerRef"]["name"] == "first"  # not given away dirty
    assert (host["spec"]["online"], host["spec"]["automatedCleaningMode"]) == (False, "metadata")
    assert not {"image", "userData"} & set(host["spec"])
    assert host["metadata"]["annotations"] == {"infra.example/keep": "yes"}
    with pytest.raises(ApiException) as gone:
        rack.api("admin", "Secret", "v1").get(name="h1-userdata", namespace=rack.namespace)
    assert gone.value.status == 404
    rack.api("admin", "Secret", "v1").get(name="h1-networkdata", namespace=rack.namespace)  # still there

    # Nobody can take the host while it is being cleaned.
    rack.claim("second", namespace=TENANT_B, identity="tenant-b")
    assert step("hostclaim_bind", devenv, tmp_path, rack)["bound"] == 0

    rack.set_state("h1", "available")  # the provisioner finished deprovisioning
    released = step("hostclaim_release", devenv, tmp_path, rack)
    assert released["claims"][0]["state"] == "released"
    assert "consumerRef" not in rack.read_host("h1")["spec"]
    with pytest.raises(ApiException) as deleted:
        rack.read_claim("first")
    assert deleted.value.status == 404
    rack.api("tenant-a", "Secret", "v1").delete(name=ref["name"], namespace=TENANT_A)

    assert step("hostclaim_bind", devenv, tmp_path, rack)["bound"] == 1
    second = rack.read_claim("second", TENANT_B)
    assert second["status"]["hardwareData"]["name"] == "h1"
    assert condition(second, "Association")["status"] == "True"


def test_claims_without_a_host_go_at_once(devenv, rack, tmp_path):
    rack.policy()
    rack.host("h1")
    rack.claim("orphaned")
    rack.claim("never-bound", hostSelector={"matchLabels": {"infra-kind": "no-such-kind"}})
    step("hostclaim_bind", devenv, tmp_path, rack)
    assert rack.read_claim("never-bound")["metadata"].get("finalizers") is None  # nothing to release
    rack.api("admin", "BareMetalHost").delete(name="h1", namespace=rack.namespace)  # its host vanishes
    rack.api("tenant-a", "HostClaim").delete(name="orphaned", namespace=TENANT_A)
    result = step("hostclaim_release", devenv, tmp_path, rack)
    assert [(c["name"], c["state"], c["host"]) for c in result["claims"]] == [("orphaned", "released", None)]
    with pytest.raises(ApiException) as deleted:
        rack.read_claim("orphaned")
    assert deleted.value.status == 404


def test_claim_deleted_mid_provisioning_is_stripped_first_and_held_until_available(devenv, rack, tmp_path):
    """The attack: delete a claim while its host provisions, and have another tenant grab the host meanwhile."""
    rack.policy()
    rack.host("h1")
    rack.api("tenant-a", "Secret", "v1").create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mid-userdata", "namespace": TENANT_A},
            "stringData": {"userData": "#cloud-config\nhostname: tenant-a\n"},
        }
    )
    image = {"url": "http://127.0.0.1/img.qcow2", "checksum": "abc", "format": "qcow2"}
    rack.claim("mid", online=True, image=image, userData={"name": "mid-userdata"})
    try:
        for module in ("hostclaim_bind", "hostclaim_secrets", "hostclaim_sync"):
            step(module, devenv, tmp_path, rack)
        host = rack.read_host("h1")
        assert (host["spec"]["image"]["url"], host["spec"]["userData"]["name"]) == (image["url"], "h1-userdata")
        rack.set_state("h1", "provisioning")  # the provisioner is writing the tenant's image

        rack.api("tenant-a", "HostClaim").delete(name="mid", namespace=TENANT_A)
        rack.claim("grabber", namespace=TENANT_B, identity="tenant-b")

        def reconcile() -> None:
            for module in ("hostclaim_release", "hostclaim_bind", "hostclaim_secrets", "hostclaim_sync"):
                step(module, devenv, tmp_path, rack)

        # provisioning -> deprovisioning -> available, as the provisioner would report it.
        for state in ("provisioning", "deprovisioning"):
            rack.set_state("h1", state)
            reconcile()
            host = rack.read_host("h1")
            # Stripped of everything the tenant gave it, first; still held by the deleted claim.
            assert not {"image", "userData", "metaData", "networkData"} & set(host["spec"]), state
            assert (host["spec"]["online"], host["spec"]["automatedCleaningMode"]) == (False, "metadata")
            assert host["spec"]["consumerRef"]["name"] == "mid", state
            with pytest.raises(ApiException) as gone:
                rack.api("admin", "Secret", "v1").get(name="h1-userdata", namespace=rack.namespace)
            assert gone.value.status == 404
            assert rack.read_claim("mid")["metadata"]["deletionTimestamp"]
            association = condition(rack.read_claim("grabber", TENANT_B), "Association")
            assert (association["status"], association["reason"]) == ("False", "NoBareMetalHost"), state

        rack.set_state("h1", "available")  # deprovisioned and cleaned
        reconcile()
        with pytest.raises(ApiException) as deleted:
            rack.read_claim("mid")
        assert deleted.value.status == 404
        host = rack.read_host("h1")
        assert host["spec"]["consumerRef"]["name"] == "grabber"
        assert not {"image", "userData"} & set(host["spec"])  # nothing of tenant-a's left for tenant-b
        assert condition(rack.read_claim("grabber", TENANT_B), "Association")["status"] == "True"
    finally:
        rack.api("tenant-a", "Secret", "v1").delete(name="mid-userdata", namespace=TENANT_A)
