"""Firmware (BIOS) settings on the claim side, on the real API server: the tenant asks, the policy allows or not.

No BIOS here (the fake fleet has none): the tenant's refusal, what the claim side writes to the host's
HostFirmwareSettings and when, what it reports back, and what each identity may do with a HostFirmwareSettings.
The provisioner's apply / read back / reset is tests/e2e/test_vm_firmware.py's (sushy-tools' libvirt driver).
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import METAL3, TENANT_A, condition, step

pytestmark = pytest.mark.integration

HFS = "HostFirmwareSettings"
ALLOWED = [
    {"name": "ProcVirtualization", "values": ["Enabled", "Disabled"]},
    {"name": "ProcHyperthreading", "values": ["Enabled"]},
]


def policy(rack, allowed=ALLOWED, name="firmware-policy"):
    rack.api("admin", "HostDeployPolicy").create(
        body={
            "apiVersion": METAL3,
            "kind": "HostDeployPolicy",
            "metadata": {"name": name, "namespace": rack.namespace},
            "spec": {"hostclaimNamespaces": {}, "firmware": {"allowedSettings": allowed}},
        }
    )


def status_code(call) -> int:
    try:
        call()
    except ApiException as error:
        return error.status
    return 200


def test_a_setting_no_policy_allows_is_refused_naming_only_what_the_tenant_asked(devenv, rack, tmp_path):
    policy(rack)
    rack.host("h1")
    rack.claim("smt-off", firmware={"settings": {"ProcHyperthreading": "Disabled"}})
    result = step("hostclaim_bind", devenv, tmp_path, rack)
    assert result["bound"] == 0
    # What the tenant reads, with its own identity.
    claim = rack.api("tenant-a", "HostClaim").get(name="smt-off", namespace=TENANT_A).to_dict()
    association = condition(claim, "Association")
    assert (association["status"], association["reason"]) == ("False", "FirmwareSettingNotAllowed")
    assert "ProcHyperthreading='Disabled'" in association["message"]
    events = rack.api("tenant-a", "Event", "v1").get(namespace=TENANT_A).items
    shown = [
        e.message for e in events if e.involvedObject.name == "smt-off" and e.reason == "FirmwareSettingNotAllowed"
    ]
    assert shown == [association["message"]]
    # Nothing of the infrastructure: not its namespace, host, policy, nor what it does allow.
    for hidden in (rack.namespace, "h1", "firmware-policy", "'Enabled'", "ProcVirtualization"):
        assert hidden not in association["message"], hidden
    assert "consumerRef" not in rack.read_host("h1")["spec"]

    # Asking what is allowed binds (the tenant changes its claim; the next run binds it).
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": {"firmware": {"settings": {"ProcHyperthreading": "Enabled"}}}},
        name="smt-off",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    assert step("hostclaim_bind", devenv, tmp_path, rack)["bound"] == 1


def test_a_tenant_cannot_touch_hostfirmwaresettings_nor_write_a_malformed_setting(devenv, clients, rack):
    rack.host("h1")
    hfs = rack.api("tenant-a", HFS)
    body = {"apiVersion": METAL3, "kind": HFS, "metadata": {"name": "h1", "namespace": rack.namespace}}
    assert (
        status_code(lambda: hfs.create(body={**body, "spec": {"settings": {"ProcVirtualization": "Enabled"}}})) == 403
    )
    assert status_code(lambda: hfs.get(name="h1", namespace=rack.namespace)) == 403
    own = {**body, "metadata": {"name": "h1", "namespace": TENANT_A}}
    assert status_code(lambda: hfs.create(body=own)) == 403  # not even in its own namespace
    with pytest.raises(ApiException) as refused:
        rack.claim("bad", firmware={"settings": {"Proc Virtualization; rm": "Enabled"}})
    assert refused.value.status == 422 and "spec.firmware.settings" in refused.value.body


def test_settings_reach_the_hosts_hfs_before_its_image_are_reported_and_emptied_at_release(
    devenv, clients, rack, tmp_path
):
    policy(rack)
    rack.host("h1")
    settings = {"ProcVirtualization": "Enabled"}
    image = {"url": "http://127.0.0.1:9/live.iso", "format": "live-iso"}
    rack.claim("virt", firmware={"settings": settings}, image=image, online=True)
    step("hostclaim_bind", devenv, tmp_path, rack)
    step("hostclaim_sync", devenv, tmp_path, rack)
    hfs_api = rack.api("admin", HFS)
    hfs = hfs_api.get(name="h1", namespace=rack.namespace).to_dict()
    host = rack.read_host("h1")
    assert hfs["spec"]["settings"] == settings
    assert hfs["metadata"]["ownerReferences"][0]["uid"] == host["metadata"]["uid"]
    assert host["spec"]["image"]["url"] == image["url"] and host["spec"]["online"] is True
    # Written before the host's image and online (resourceVersions are the store's revisions, in write order).
    assert int(hfs["metadata"]["resourceVersion"]) < int(host["metadata"]["resourceVersion"])

    # The provisioner reads the BIOS back into the status (its identity may; it may not change the spec).
    as_provisioner = rack.api("provisioner", HFS)
    read = {"ProcVirtualization": "Enabled", "SerialNumber": "QPX12345", "ProcHyperthreading": "Enabled"}
    as_provisioner.status.patch(
        body={"status": {"settings": read}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    spec_patch = {"spec": {"settings": {"ProcVirtualization": "Disabled"}}}
    assert (
        status_code(
            lambda: as_provisioner.patch(
                body=spec_patch, name="h1", namespace=rack.namespace, content_type="application/merge-patch+json"
            )
        )
        == 403
    )
    step("hostclaim_sync", devenv, tmp_path, rack)
    claim = rack.api("tenant-a", "HostClaim").get(name="virt", namespace=TENANT_A).to_dict()
    assert claim["status"]["firmware"] == {"settings": settings}  # the names asked only: no serial number
    assert "QPX12345" not in json.dumps(claim)

    rack.api("tenant-a", "HostClaim").delete(name="virt", namespace=TENANT_A)
    step("hostclaim_release", devenv, tmp_path, rack)
    assert hfs_api.get(name="h1", namespace=rack.namespace).to_dict()["spec"]["settings"] == {}
    assert "image" not in rack.read_host("h1")["spec"]


def test_a_claim_without_settings_makes_no_hostfirmwaresettings(devenv, rack, tmp_path):
    rack.policy()
    rack.host("h1")
    rack.claim("plain", image={"url": "http://127.0.0.1:9/live.iso", "format": "live-iso"}, online=True)
    step("hostclaim_bind", devenv, tmp_path, rack)
    step("hostclaim_sync", devenv, tmp_path, rack)
    claim = rack.read_claim("plain")
    assert "firmware" not in claim["status"]
    assert status_code(lambda: rack.api("admin", HFS).get(name="h1", namespace=rack.namespace)) == 404
