"""Firmware (BIOS) settings in the provisioner: set before the deploy/live ISO boots, put back before cleaning."""

from __future__ import annotations

import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import firmware as fw
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import machine as m

T0 = "2026-11-23T10:00:00Z"
T1 = "2026-11-23T10:00:30Z"
LIVE = {"url": "http://127.0.0.1:3/live.iso", "format": "live-iso"}
GOOD = {"goodCredentials": {"credentialsVersion": "7"}}
BIOS = {"ProcVirtualization": "Disabled", "ProcHyperthreading": "Enabled", "QuietBoot": "true"}


def host(state, baseline=None, image=LIVE):
    annotations = {fw.BASELINE_ANNOTATION: json.dumps(baseline)} if baseline is not None else {}
    return {
        "metadata": {"name": "bm-01", "namespace": "infrahost", "annotations": annotations, "generation": 1},
        "spec": {"online": True, "image": image, "bmc": {"address": "redfish+http://127.0.0.1:8000/redfish/v1/S/1"}},
        "status": {"provisioning": {"state": state}, "operationalStatus": "OK", **GOOD},
    }


def hfs(settings=None, status=None):
    return {"metadata": {"name": "bm-01", "generation": 2}, "spec": {"settings": settings or {}}, "status": status}


def seen(settings=None, current=BIOS, pending=None, status=None, allowed=None):
    """What the edge reads; by default the host's policies allow what is asked (the claim layer's writes)."""
    allowed = {name: {fw.as_text(value)} for name, value in (settings or {}).items()} if allowed is None else allowed
    found = {"hfs": hfs(settings, status), "current": dict(current) if current is not None else None}
    return {**found, "pending": pending, "allowed": allowed}


def test_nothing_asked_nothing_recorded_reads_no_bios():
    assert not fw.needs_bios(host(m.PROVISIONING), hfs())
    assert not fw.needs_bios(host(m.PROVISIONING), None)
    assert fw.needs_bios(host(m.PROVISIONING), hfs({"ProcVirtualization": "Enabled"}))
    assert fw.needs_bios(host(m.DEPROVISIONING, baseline={"ProcVirtualization": "Disabled"}), None)
    # A setting no policy allows is refused before any BIOS read, unless an earlier consumer's change is to undo.
    assert not fw.needs_bios(host(m.PROVISIONING), hfs({"SecureBoot": "Disabled"}), {})
    assert fw.needs_bios(host(m.PROVISIONING), hfs({"SecureBoot": "Disabled"}), {"SecureBoot": {"Disabled"}})
    assert fw.needs_bios(host(m.PROVISIONING, baseline={"QuietBoot": "true"}), hfs({"SecureBoot": "Disabled"}), {})
    plan = fw.provisioning(host(m.PROVISIONING), {"hfs": None, "current": None}, T0)
    assert plan.actions == [] and not plan.problem and plan.status is None


def test_the_defaults_are_recorded_in_a_write_of_their_own_before_any_change():
    plan = fw.provisioning(host(m.PROVISIONING), seen({"ProcVirtualization": "Enabled"}), T0)
    assert plan.hold and plan.actions == []
    assert json.loads(plan.annotations[fw.BASELINE_ANNOTATION]) == {"ProcVirtualization": "Disabled"}


def test_then_the_difference_is_set_and_read_back_into_the_status():
    h = host(m.PROVISIONING, baseline={"ProcVirtualization": "Disabled"})
    plan = fw.provisioning(h, seen({"ProcVirtualization": "Enabled", "ProcHyperthreading": "Enabled"}), T0)
    assert plan.actions == [("bios", {"ProcVirtualization": "Enabled"})] and not plan.hold
    changed = {c["type"]: c for c in plan.status["conditions"]}
    assert changed["Valid"]["status"] == "True" and changed["ChangeDetected"]["status"] == "True"
    assert "ProcVirtualization" in changed["ChangeDetected"]["message"]
    # Set, not yet applied (a real BMC applies it at the next boot): not set twice.
    pending = fw.provisioning(h, seen({"ProcVirtualization": "Enabled"}, pending={"ProcVirtualization": "Enabled"}), T1)
    assert pending.actions == []
    # Read back: nothing to do, the status says so, and a second read writes nothing.
    applied = {**BIOS, "ProcVirtualization": "Enabled"}
    done = fw.provisioning(h, seen({"ProcVirtualization": "Enabled"}, current=applied), T1)
    assert done.actions == [] and done.status["settings"] == applied
    assert {c["type"]: c["status"] for c in done.status["conditions"]} == {"Valid": "True", "ChangeDetected": "False"}
    again = fw.provisioning(h, seen({"ProcVirtualization": "Enabled"}, current=applied, status=done.status), T1)
    assert again.status is None


def test_an_attribute_the_bmc_does_not_have_is_an_error_naming_it():
    plan = fw.provisioning(host(m.PROVISIONING), seen({"SriovGlobalEnable": "Enabled"}), T0)
    assert plan.problem == "firmware setting SriovGlobalEnable: the BMC has no such BIOS attribute"
    assert plan.actions == [] and fw.BASELINE_ANNOTATION not in plan.annotations
    valid = next(c for c in plan.status["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False" and valid["reason"] == "ConfigurationError"
    unsupported = fw.provisioning(
        host(m.PROVISIONING),
        {
            "hfs": hfs({"ProcVirtualization": "Enabled"}),
            "current": None,
            "unsupported": "the BMC exposes no BIOS",
            "allowed": {"ProcVirtualization": {"Enabled"}},
        },
        T0,
    )
    assert unsupported.problem == "firmware settings ProcVirtualization: the BMC exposes no BIOS"


def test_a_setting_asked_no_more_goes_back_to_its_default_at_the_next_provisioning():
    h = host(m.PROVISIONING, baseline={"ProcVirtualization": "Disabled"})
    plan = fw.provisioning(h, seen({}, current={**BIOS, "ProcVirtualization": "Enabled"}), T0)
    assert plan.actions == [("bios", {"ProcVirtualization": "Disabled"})]


def test_deprovisioning_puts_the_defaults_back_then_forgets_them_once_read_back():
    h = host(m.DEPROVISIONING, baseline={"ProcVirtualization": "Disabled"})
    restore = fw.deprovisioning(h, seen({}, current={**BIOS, "ProcVirtualization": "Enabled"}), T0)
    assert restore.actions == [("bios", {"ProcVirtualization": "Disabled"})]
    assert fw.BASELINE_ANNOTATION not in restore.annotations  # not before it is read back
    done = fw.deprovisioning(h, seen({}), T1)
    assert done.actions == [] and done.annotations == {fw.BASELINE_ANNOTATION: None}
    # Nothing recorded: nothing to do, whatever the HostFirmwareSettings still asks.
    assert fw.deprovisioning(host(m.DEPROVISIONING), seen({"ProcVirtualization": "Enabled"}), T1).actions == []


def test_values_compare_as_text():
    assert fw.wanted(hfs({"NumCores": 10, "QuietBoot": True})) == {"NumCores": "10", "QuietBoot": "true"}
    assert fw.baseline(host(m.PROVISIONING, baseline={"NumCores": 8})) == {"NumCores": "8"}
    broken = host(m.PROVISIONING)
    broken["metadata"]["annotations"][fw.BASELINE_ANNOTATION] = "{not json"
    assert fw.baseline(broken) == {}


# -- the hooks in machine.py ---------------------------------------------------------------


def observed(firmware_seen, power="Off"):
    return {
        m.POWER: power,
        m.BOOT: {"target": "None"},
        m.MEDIA: {m.CD: {"inserted": False}},
        fw.FIRMWARE: firmware_seen,
    }


def ctx(now=T0):
    return m.Context(now=now, credentials_version="7", new_token="A" * 43)


def test_the_bios_is_set_first_in_the_step_that_boots_the_live_iso():
    h = host(m.PROVISIONING, baseline={"ProcVirtualization": "Disabled"})
    step = m.decide(h, observed(seen({"ProcVirtualization": "Enabled"})), ctx())
    assert step.actions[0] == ("bios", {"ProcVirtualization": "Enabled"})
    assert step.actions[1:] == [("insert", m.CD, LIVE["url"]), ("boot_once", "Cd", "UEFI"), ("power", "On")]
    assert step.firmware_status["conditions"]


def test_recording_the_defaults_holds_the_boot():
    step = m.decide(host(m.PROVISIONING), observed(seen({"ProcVirtualization": "Enabled"})), ctx())
    assert step.actions == [] and step.requeue_after == 0 and fw.BASELINE_ANNOTATION in step.annotations


def test_a_missing_attribute_fails_the_provisioning():
    step = m.decide(host(m.PROVISIONING), observed(seen({"Nope": "1"})), ctx())
    assert step.status["errorType"] == m.PROVISIONING_ERROR and "Nope" in step.status["errorMessage"]
    assert step.firmware_status is not None and step.actions == []


def test_deprovisioning_restores_before_the_host_is_given_back():
    h = host(m.DEPROVISIONING, baseline={"ProcVirtualization": "Disabled"}, image=None)
    h["spec"]["automatedCleaningMode"] = "disabled"
    step = m.decide(h, observed(seen({}, current={**BIOS, "ProcVirtualization": "Enabled"})), ctx())
    assert step.actions[0] == ("bios", {"ProcVirtualization": "Disabled"}) and step.state == m.DEPROVISIONING
    done = m.decide(h, observed(seen({})), ctx(T1))
    assert done.state == m.AVAILABLE and done.annotations[fw.BASELINE_ANNOTATION] is None


def test_a_setting_no_policy_allows_for_the_hosts_consumer_is_refused_before_any_bios_read():
    """Issue 40: the claim side's token wrote HttpBootUri and SecureBoot into a free host's HostFirmwareSettings (no
    policy allows either) and the provisioner went to set them."""
    written = {"HttpBootUri": "http://10.9.9.9/evil.efi", "SecureBoot": "Disabled"}
    for allowed in ({}, {"SecureBoot": {"Enabled"}}, {"HttpBootUri": {"http://10.9.9.9/evil.efi"}}):
        plan = fw.provisioning(host(m.PROVISIONING), seen(written, current=None, allowed=allowed), T0)
        assert plan.actions == [] and not plan.annotations, allowed
        assert "no HostDeployPolicy of this namespace allows it for the host's consumer" in plan.problem
        valid = next(c for c in plan.status["conditions"] if c["type"] == fw.VALID)
        assert (valid["status"], valid["reason"]) == ("False", fw.CONFIGURATION_ERROR)
    # Not read at all (the edge found nothing asked): nothing is taken as allowed either.
    unread = {"hfs": hfs({"SecureBoot": "Disabled"}), "current": dict(BIOS), "pending": None}
    assert fw.provisioning(host(m.PROVISIONING), unread, T0).problem
    step = m.decide(host(m.PROVISIONING), observed(seen(written, allowed={})), ctx())
    assert step.status["errorType"] == m.PROVISIONING_ERROR and "HttpBootUri" in step.status["errorMessage"]
    assert not [a for a in step.actions if a[0] in ("bios", "power", "insert")]


def test_an_allowed_setting_the_consumer_did_not_ask_for_is_refused_before_any_bios_read():
    """Issue 40: a setting a policy allows, left in the HostFirmwareSettings by someone else (or written there by
    the claim side's token), was applied to a claim that asked for nothing. Only what the consumer HostClaim asks
    for is applied: asked and allowed goes on, allowed but unasked is refused, naming why."""
    written = {"ProcVirtualization": "Enabled"}
    allowed = {"ProcVirtualization": {"Enabled", "Disabled"}}
    for claimed in ({}, {"ProcVirtualization": "Disabled"}):
        observed_fw = {**seen(written, current=None, allowed=allowed), "claimed": claimed}
        plan = fw.provisioning(host(m.PROVISIONING), observed_fw, T0)
        assert plan.actions == [] and "does not ask for it" in plan.problem, claimed
        assert not fw.needs_bios(host(m.PROVISIONING), hfs(written), allowed, claimed)
    asked = {**seen(written, allowed=allowed), "claimed": dict(written)}
    assert not fw.provisioning(host(m.PROVISIONING), asked, T0).problem  # applied: the baseline first
    assert fw.needs_bios(host(m.PROVISIONING), hfs(written), allowed, dict(written))
    refused = {**seen(written, current=None, allowed={}), "claimed": dict(written)}  # asked, not allowed: the policy
    assert "no HostDeployPolicy" in fw.provisioning(host(m.PROVISIONING), refused, T0).problem
