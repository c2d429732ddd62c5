"""Pure plans of the sync step: image rules, reboot annotations, hardware summary, Provisioned."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _claim_sync as sync

IMAGE = {"url": "http://127.0.0.1/a.qcow2", "checksum": "c", "format": "qcow2"}


def host(state="available", image=None, **status) -> dict:
    return {"spec": {"image": image} if image else {}, "status": {"provisioning": {"state": state}, **status}}


def claim(image=None, **spec) -> dict:
    return {"spec": {"image": image, **spec} if image else spec}


def test_image_is_set_on_a_host_without_one_and_removed_with_the_claims():
    assert sync.image_plan(claim(IMAGE), host()) == (IMAGE, "")
    assert sync.image_plan(claim(), host("provisioned", IMAGE)) == (None, "")


def test_a_new_url_is_not_applied_to_a_provisioned_host():
    new = dict(IMAGE, url="http://127.0.0.1/b.qcow2")
    image, problem = sync.image_plan(claim(new), host("provisioned", IMAGE))
    assert image == IMAGE
    assert problem.startswith("spec.image.url changed while the host is provisioned: remove spec.image")
    # Before provisioning starts, the claim may still change its mind.
    assert sync.image_plan(claim(new), host("available", IMAGE)) == (new, "")


def test_online_and_its_alias():
    assert sync.desired_online(claim(online=True)) is True
    assert sync.desired_online(claim(poweredOn=True)) is True
    assert sync.desired_online(claim()) is False


def test_one_shot_reboot_moves_to_the_host():
    host_annotations, claim_annotations = sync.reboot_plan({"reboot.metal3.io": "", "team": "x"}, {"infra": "y"})
    assert host_annotations == {"infra": "y", "reboot.metal3.io": ""}
    assert claim_annotations == {"team": "x"}


def test_keyed_reboots_are_mirrored_and_only_ours_removed():
    host_annotations, _claim = sync.reboot_plan({"reboot.metal3.io/maint": '{"mode":"hard"}'}, {})
    assert host_annotations == {
        "reboot.metal3.io/maint": '{"mode":"hard"}',
        sync.REBOOT_KEYS_ANNOTATION: "reboot.metal3.io/maint",
    }
    # The infra team's own hold stays when the claim drops its key.
    host_annotations["reboot.metal3.io/infra-hold"] = ""
    after, _claim = sync.reboot_plan({}, host_annotations)
    assert after == {"reboot.metal3.io/infra-hold": ""}


def test_hardware_summary_keeps_only_tenant_facts():
    hardware = {
        "systemVendor": {"manufacturer": "ACME", "serialNumber": "SN-1"},
        "nics": [{"name": "eno1", "mac": "52:54:00:00:00:01", "ip": "192.0.2.10", "pxe": True}],
        "cpu": {"arch": "x86_64", "count": 8, "model": "Xeon", "flags": ["vmx"]},
        "ramMebibytes": 16384,
        "storage": [{"name": "/dev/sda", "sizeBytes": 480000000000, "serialNumber": "D-1"}],
    }
    summary = sync.hardware_summary({"status": {"hardware": hardware}})
    assert summary == {
        "nics": [{"name": "eno1", "mac": "52:54:00:00:00:01", "ip": "192.0.2.10"}],
        "cpu": {"arch": "x86_64", "count": 8, "model": "Xeon"},
        "ramMebibytes": 16384,
        "storage": [{"name": "/dev/sda", "sizeBytes": 480000000000}],
    }
    assert sync.hardware_summary({"status": {}}) is None


def test_provisioned_reason_is_the_host_state():
    assert sync.provisioned_condition(host("available")) == ("Provisioned", "False", "available", "")
    assert sync.provisioned_condition(host("provisioned")) == ("Provisioned", "True", "provisioned", "")
    assert sync.provisioned_condition({"status": {}}) == ("Provisioned", "False", "unknown", "")
