"""The sync step's plan holds a claim's reboot requests back from its host when they are over the limits (issue 22:
~250 KiB of them made the host write, and with it the whole batch's run, fail)."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.bound import _plan_sync
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import limits
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.sync import REBOOT_KEYS_ANNOTATION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metadata import CopyRules

KEY = "reboot.metal3.io/"


def claim(annotations: dict) -> dict:
    return {"metadata": {"namespace": "t", "name": "c", "annotations": annotations}, "spec": {"online": True}}


def host(annotations: dict) -> dict:
    return {
        "metadata": {"namespace": "i", "name": "h", "uid": "u", "annotations": annotations},
        "spec": {"online": False},
        "status": {"provisioning": {"state": "provisioned"}},
    }


def test_requests_within_the_limits_reach_the_host():
    plan = _plan_sync(claim({f"{KEY}maint": ""}), host({}), True, CopyRules())
    assert plan.host_annotations == {f"{KEY}maint": "", REBOOT_KEYS_ANNOTATION: f"{KEY}maint"}
    assert plan.failures == []


def test_requests_over_the_limits_change_nothing_on_the_host_but_power_applies():
    requests = {f"{KEY}{index:04d}-{'x' * 58}": "" for index in range(2000)}  # ~160 KiB
    requests["reboot.metal3.io"] = ""
    on_host = {f"{KEY}0001-{'x' * 58}": "", f"{KEY}gone": ""}
    held = host({**on_host, REBOOT_KEYS_ANNOTATION: ",".join(sorted(on_host)), "infra": "i"})
    plan = _plan_sync(claim({**requests, "tenant": "t"}), held, True, CopyRules())
    # The one the claim dropped leaves the host (removing a keyed request always reaches it); nothing else changes.
    assert plan.host_annotations == {
        f"{KEY}0001-{'x' * 58}": "",
        REBOOT_KEYS_ANNOTATION: f"{KEY}0001-{'x' * 58}",
        "infra": "i",
    }
    assert plan.claim_annotations is None  # the one-shot request stays on the claim
    assert plan.host_spec["online"] is True
    ((reason, message),) = plan.failures
    assert reason == limits.REBOOT_REQUESTS_TOO_LARGE
    assert message.startswith("metadata.annotations: 2001 reboot.metal3.io requests of ")
