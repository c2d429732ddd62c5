"""bmh_redfish's --diff: what the provisioner writes of a host, before and after."""

from __future__ import annotations

import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import host_diff
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import machine as m

TOKEN = "h128PKc4zqNoP_2WL5CB6OJ-3p569jNRQfcPOl2Sti0"


def _host(**status):
    return {
        "metadata": {"name": "bm-01", "namespace": "rack", "annotations": {"a": "1"}, "resourceVersion": "9"},
        "spec": {"bmc": {"credentialsName": "bm-01-bmc"}},
        "status": {"provisioning": {"state": m.AVAILABLE}, "lastUpdated": "t0", **status},
    }


def test_a_view_holds_what_the_provisioner_writes_and_no_media_token():
    operation = json.dumps({"kind": "deploy", "token": TOKEN, "started": "t0"})
    view = host_diff.host_view(_host(poweredOn=False), annotations={m.OPERATION_ANNOTATION: operation})
    assert set(view) == {"metadata", "status"} and set(view["metadata"]) == {"annotations", "finalizers"}
    assert "lastUpdated" not in view["status"]
    assert TOKEN not in json.dumps(view)
    assert json.loads(view["metadata"]["annotations"][m.OPERATION_ANNOTATION])["token"] == "h128PK..."


def test_a_status_patch_is_applied_as_a_merge_patch():
    view = host_diff.host_view(_host(errorMessage="boom", errorType="x"))
    after = host_diff.patched(
        view, {"provisioning": {"state": m.PROVISIONING}, "errorMessage": None, "lastUpdated": "t1"}
    )
    assert after["status"] == {"provisioning": {"state": m.PROVISIONING}, "errorType": "x"}
    assert view["status"]["errorMessage"] == "boom"  # the view itself is left as it was


def test_a_run_diff_keeps_the_first_before_and_the_last_after_and_drops_what_came_back():
    run = host_diff.RunDiff()
    first, second, third = ({"status": {"state": s}} for s in ("a", "b", "c"))
    run.record(host_diff.HOST, "rack", "h1", first, second)
    run.record(host_diff.HOST, "rack", "h1", second, third)
    run.record(host_diff.HOST, "rack", "h0", first, second)
    run.record(host_diff.HOST, "rack", "h0", second, first)  # and back again
    run.record(host_diff.HARDWARE_DATA, "rack", "h1", {}, {"spec": {"hardware": {}}})
    assert run.entries() == [
        {
            "before_header": "BareMetalHost rack/h1",
            "after_header": "BareMetalHost rack/h1",
            "before": {"status": {"state": "a"}},
            "after": {"status": {"state": "c"}},
        },
        {
            "before_header": "HardwareData rack/h1",
            "after_header": "HardwareData rack/h1",
            "before": {},
            "after": {"spec": {"hardware": {}}},
        },
    ]
