"""Pure plans of the sync step: image rules, reboot annotations, hardware summary, Provisioned."""

from __future__ import annotations

import re

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import sync
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metadata import CopyRules
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import PROVISIONED_STATES, STATES

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


def test_one_shot_reboot_moves_to_a_provisioned_host():
    for state in PROVISIONED_STATES:
        host_annotations, claim_annotations, waiting = sync.reboot_plan(
            {"reboot.metal3.io": "", "team": "x"}, {"infra": "y"}, state
        )
        assert host_annotations == {"infra": "y", "reboot.metal3.io": ""}
        assert (claim_annotations, waiting) == ({"team": "x"}, [])


@pytest.mark.parametrize("state", [s for s in STATES if s not in PROVISIONED_STATES])
def test_reboot_requests_wait_on_the_claim_unless_the_host_is_provisioned(state):
    claim_annotations = {"reboot.metal3.io": "", "reboot.metal3.io/maint": "", "team": "x"}
    host_annotations, after, waiting = sync.reboot_plan(claim_annotations, {"infra": "y"}, state)
    assert host_annotations == {"infra": "y"}  # no power action on the host
    assert after == claim_annotations  # the requests stay, visible, until they can apply or are removed
    assert waiting == ["reboot.metal3.io", "reboot.metal3.io/maint"]


def test_keyed_reboots_are_mirrored_and_only_ours_removed():
    host_annotations, _claim, _waiting = sync.reboot_plan(
        {"reboot.metal3.io/maint": '{"mode":"hard"}'}, {}, "provisioned"
    )
    assert host_annotations == {
        "reboot.metal3.io/maint": '{"mode":"hard"}',
        sync.REBOOT_KEYS_ANNOTATION: "reboot.metal3.io/maint",
    }
    # The infra team's own hold stays when the claim drops its key.
    host_annotations["reboot.metal3.io/infra-hold"] = ""
    after, _claim, _waiting = sync.reboot_plan({}, host_annotations, "provisioned")
    assert after == {"reboot.metal3.io/infra-hold": ""}


def test_a_held_key_stays_mirrored_and_its_removal_reaches_the_host_in_any_state():
    held, _claim, _waiting = sync.reboot_plan({"reboot.metal3.io/maint": ""}, {}, "provisioned")
    # The host went on to deprovisioning: the hold the tenant still sets stays, without a complaint.
    still, _claim, waiting = sync.reboot_plan({"reboot.metal3.io/maint": ""}, held, "deprovisioning")
    assert (still, waiting) == (held, [])
    gone, _claim, _waiting = sync.reboot_plan({}, held, "deprovisioning")
    assert gone == {}


def test_no_annotations_stay_no_annotations():
    assert sync.reboot_plan({}, {}, "available") == ({}, {}, [])


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


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("available", "available"),
        ("provisioned", "provisioned"),
        ("externally provisioned", "externallyProvisioned"),
        ("powering off before delete", "poweringOffBeforeDelete"),
        ("match profile", "matchProfile"),
        ("", "unknown"),
    ],
)
def test_state_reasons_are_lower_camel_case(state, reason):
    assert sync.state_reason(state) == reason


def test_every_state_gives_a_valid_condition_reason():
    pattern = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # the CRD's (and apimachinery's)
    for state in STATES:
        assert pattern.match(sync.state_reason(state)), state


def test_provisioned_reason_is_the_host_state():
    assert sync.provisioned_condition(host("available")) == ("Provisioned", "False", "available", "")
    assert sync.provisioned_condition(host("provisioned")) == ("Provisioned", "True", "provisioned", "")
    assert sync.provisioned_condition({"status": {}}) == ("Provisioned", "False", "unknown", "")


def test_a_provisioning_error_reaches_the_claim_with_its_message_and_no_addresses():
    failed = host(
        "provisioning",
        errorType="provisioning error",
        errorMessage="the image writer failed: sha256 checksum mismatch: the image has ab, expected cd",
    )
    assert sync.provisioned_condition(failed) == (
        "Provisioned",
        "False",
        "provisioningError",
        "the host is in provisioning error: the image writer failed: sha256 checksum mismatch: the image has ab, "
        "expected cd",
    )
    bmc = host(
        "provisioning",
        errorType="provisioning error",
        errorMessage="POST http://10.1.2.3:8000/redfish/v1 failed; retried 192.168.0.4:623 and [fd00::5]:443",
    )
    assert sync.provisioned_condition(bmc)[3] == (
        "the host is in provisioning error: POST <url> failed; retried <address> and <address>"
    )


def test_an_infrastructure_error_reaches_the_claim_by_its_type_only():
    failed = host("available", errorType="registration error", errorMessage="BMC https://10.0.0.9 said 401")
    assert sync.provisioned_condition(failed) == (
        "Provisioned",
        "False",
        "registrationError",
        "the host is in registration error",
    )
    # A provisioned host's (power management) error leaves Provisioned True.
    assert sync.provisioned_condition(host("provisioned", errorType="power management error"))[1] == "True"


def bound_host(state="available", annotations=None, image=None) -> dict:
    body = host(state, image)
    body["metadata"] = {"name": "bm-01", "namespace": "infrahost", "uid": "h-uid", "annotations": annotations}
    return body


def bound_claim(image=None, annotations=None, **spec) -> dict:
    body = claim(image, **spec)
    body["metadata"] = {"name": "c", "namespace": "cluster-ns", "uid": "c-uid", "annotations": annotations}
    return body


def test_a_host_without_annotations_is_left_without_them():
    # No annotations on either side: nothing to write (not an empty map compared with none every run).
    plan = sync.plan_sync(bound_claim(online=True), bound_host(), True, CopyRules())
    assert (plan.host_annotations, plan.claim_labels, plan.claim_annotations) == (None, None, None)
    assert plan.host_spec == {"online": True}
    assert plan.failures == []


def test_a_reboot_on_an_available_host_is_reported_not_applied():
    plan = sync.plan_sync(bound_claim(annotations={"reboot.metal3.io": ""}), bound_host(), True, CopyRules())
    assert plan.host_annotations is None
    assert plan.claim_annotations is None
    ((reason, message),) = plan.failures
    assert reason == sync.REBOOT_NOT_APPLICABLE
    assert message.startswith("reboot.metal3.io: a reboot applies only to a provisioned host (this one is available)")


def test_revoked_authorization_keeps_the_host_but_refuses_a_new_image():
    new = dict(IMAGE, url="http://127.0.0.1/b.qcow2")
    plan = sync.plan_sync(bound_claim(new, online=True), bound_host("provisioned", image=IMAGE), False, CopyRules())
    assert plan.host_spec == {"online": True, "image": IMAGE}  # power follows, the image does not change
    assert [reason for reason, _message in plan.failures] == [sync.AUTHORIZATION_REVOKED]
    assert "admits namespace 'cluster-ns' any more" in plan.failures[0][1]
    # Not even a first image: that would provision the host anew.
    plan = sync.plan_sync(bound_claim(IMAGE), bound_host("available"), False, CopyRules())
    assert "image" not in plan.host_spec
    # Authorized, the same claim gets its image.
    plan = sync.plan_sync(bound_claim(IMAGE), bound_host("available"), True, CopyRules())
    assert plan.host_spec["image"] == IMAGE


BMC_NAME = "bmc-7.mgmt.example.com"


def _provisioner_messages() -> list[str]:
    """Provisioning-error messages as the provisioner builds them on its error paths, naming this BMC."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import redfish as rf
    from sushy import exceptions as sushy_exc

    where = f"{BMC_NAME}:8443"
    connection = sushy_exc.ConnectionError(url=f"https://{where}/redfish/v1", error="Connection refused")
    timeout = sushy_exc.ConnectionError(url=f"https://{where}/redfish/v1", error="Read timed out")
    mapped = [
        rf.classify_error(connection, "inserting the cd", where),
        rf.classify_error(timeout, "setting power", where, timeout=10),
    ]
    return [
        *(str(m) for m in mapped),
        f"inserting the cd: the BMC failed (HTTP 500): could not fetch from {BMC_NAME.upper()}",
        f"the BMC of {BMC_NAME} has no virtual media device for cd",
        "inserting the config: cannot reach https://10.0.0.2:8081/media/<redacted>/config-drive.iso",
        f"reading the power state of redfish+https://{where}/redfish/v1/Systems/1: the BMC reports none",
    ]


@pytest.mark.parametrize("message", _provisioner_messages())
def test_nothing_of_the_bmcs_address_reaches_a_tenant_visible_message(message):
    failed = host("provisioning", errorType="provisioning error", errorMessage=message)
    failed["spec"]["bmc"] = {"address": f"redfish+https://{BMC_NAME}:8443/redfish/v1/Systems/1"}
    shown = sync.provisioned_condition(failed)[3]
    assert BMC_NAME not in shown.lower() and "8443" not in shown and "10.0.0.2" not in shown, shown
    assert shown.startswith("the host is in provisioning error: ")


def test_an_image_naming_an_oci_auth_secret_is_refused_not_copied_to_the_host():
    image = {**IMAGE, "ociAuthSecretName": "registry-creds"}
    applied, problem = sync.image_plan(claim(image), host())
    assert applied is None and "ociAuthSecretName is not supported" in problem
    held, problem = sync.image_plan(claim(image), host(image=IMAGE))
    assert held == IMAGE and "ociAuthSecretName" not in held
