"""Each remote claim's outcome: the hardware cluster is polled as the module says."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure.outcomes import remote_outcomes


def test_remote_outcomes_poll_the_hardware_cluster_as_the_module_says():
    claims = [
        {"namespace": "t", "name": "steady", "state": "mirrored", "requeue_after": 30.0},
        {"namespace": "t", "name": "down", "state": "unreachable", "requeue_after": 5.0},
        {"namespace": "t", "name": "refused", "state": "refused", "reason": "KubeconfigRefused"},
        {"namespace": "t", "name": "conflict", "state": "conflict"},
        {"namespace": "t", "name": "failed", "state": "error", "message": "cannot update: 422"},
        {"namespace": "t", "name": "released", "state": "released"},
    ]
    assert {o["name"]: (o["result"], o["after"], o["reason"]) for o in remote_outcomes(claims)} == {
        "steady": ("done", 30.0, "mirrored"),
        "down": ("done", 5.0, "unreachable"),
        "refused": ("wait", None, "KubeconfigRefused"),
        "conflict": ("retry", None, "conflict"),
        "failed": ("error", None, "error: cannot update: 422"),
        "released": ("done", None, "released"),
    }
