"""A claim's own failure as its condition: what it shows, and the minimal status written when the API server refuses
the whole one (issue 22)."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import failures
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import desired_status

CLAIM = {
    "metadata": {"namespace": "t", "name": "c", "generation": 3},
    "status": {
        "conditions": [{"type": "Ready", "status": "False", "reason": "IssuesReported", "lastTransitionTime": "t0"}],
        "hardware": {"nics": []},
        "lastUpdated": "t0",
    },
}


def test_what_a_tenant_is_shown_of_an_error():
    detail = (
        "cannot replace BareMetalHost h1 in namespace rack: 422 Unprocessable Entity: spec.bmc.address: "
        'Invalid value:\n "redfish://10.0.0.7:8000/redfish/v1/Systems/1"'
    )
    shown = failures.shown(detail)
    assert "10.0.0.7" not in shown and "redfish://" not in shown and "\n" not in shown
    assert shown.startswith("cannot replace BareMetalHost h1 in namespace rack: 422 Unprocessable Entity")
    assert len(failures.shown("x" * 50_000).encode()) == failures.SHOWN_LIMIT
    assert failures.error_message("cannot get Secret s in namespace t: 403 Forbidden") == (
        "a request for this claim failed: cannot get Secret s in namespace t: 403 Forbidden; "
        "the next reconcile tries again"
    )
    internal = failures.error_message("KeyError: 'spec'", internal=True)
    assert internal.startswith("the claim layer failed on this claim (KeyError: 'spec')")


def test_a_minimal_status_keeps_the_binding_and_says_why_ready_is_false():
    desired = desired_status(
        CLAIM,
        {"hardwareData": {"namespace": "i", "name": "h"}, "hostUID": "u", "hardware": {"big": "x" * 10}},
        [
            ("Association", "True", "BareMetalHostAssociated", ""),
            ("Provisioned", "False", "weird state", "m" * 5000),  # a reason the API server would refuse
        ],
        "t1",
    )
    minimal = failures.minimal_status(CLAIM, desired, failures.refused_message("422 Unprocessable Entity"), "t1")
    assert minimal["hardwareData"] == {"namespace": "i", "name": "h"} and minimal["hostUID"] == "u"
    assert minimal["hardware"] == {"nics": []}  # left as it was: only the binding, power and conditions change
    assert minimal["observedGeneration"] == 3
    by_type = {c["type"]: c for c in minimal["conditions"]}
    assert by_type["Provisioned"]["reason"] == "Unknown"
    assert len(by_type["Provisioned"]["message"].encode()) <= failures.MINIMAL_MESSAGE_LIMIT
    ready = by_type["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", failures.STATUS_REFUSED)
    assert ready["lastTransitionTime"] == "t0"  # False before, False now
    assert ready["message"].startswith("the API server refused this claim's status (422 Unprocessable Entity)")
    assert all(cond.valid_reason(c["reason"]) for c in minimal["conditions"])
