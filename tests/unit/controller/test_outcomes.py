"""Per-key outcomes from module results."""

from __future__ import annotations

from metalclaim.controller import outcomes
from metalclaim.controller.outcomes import DONE, REQUEUE, RETRY, WAIT

C1, C2, C3, C4 = (("claim", "t", f"c{i}") for i in range(1, 5))


def test_claim_outcomes_from_a_reconcile_result():
    result = {
        "release": {"claims": [{"namespace": "t", "name": "c1", "state": "waiting"}]},
        "bind": {
            "claims": [
                {"namespace": "t", "name": "c2", "action": "conflict", "host": None},
                {"namespace": "t", "name": "c3", "action": "refuse", "host": None, "reason": "NoBareMetalHost"},
                {"namespace": "other", "name": "x", "action": "bind", "host": "i/h"},  # not in this batch
            ]
        },
        "bound": {"claims": []},
    }
    found = outcomes.claim_outcomes([C1, C2, C3, C4], result)
    assert {k: v.result for k, v in found.items()} == {C1: WAIT, C2: RETRY, C3: WAIT, C4: DONE}
    assert found[C3].reason == "NoBareMetalHost"


def test_a_claim_that_failed_alone_is_retried_alone():
    """Issue 22: a claim whose request the API server refused is the run's only failed key, not the batch."""
    result = {
        "release": {"claims": [{"namespace": "t", "name": "c1", "state": "error", "message": "403"}]},
        "bind": {"claims": [{"namespace": "t", "name": "c2", "action": "bind", "host": "i/h"}]},
        "bound": {
            "claims": [
                {"namespace": "t", "name": "c2", "changed": True},
                {"namespace": "t", "name": "c3", "state": "error", "message": "cannot get Secret s: 403 Forbidden"},
            ]
        },
        "errors": [{"namespace": "t", "name": "c3", "step": "sync", "message": "cannot get Secret s: 403 Forbidden"}],
    }
    found = outcomes.claim_outcomes([C1, C2, C3, C4], result)
    assert {k: v.result for k, v in found.items()} == {C1: RETRY, C2: DONE, C3: RETRY, C4: DONE}
    assert found[C3].reason == "error in sync: cannot get Secret s: 403 Forbidden"
    assert found[C1].reason == "error in release"


def test_host_outcomes_requeue_when_the_host_says():
    h1, h2 = ("host", "i", "h1"), ("host", "i", "h2")
    result = {
        "hosts": [
            {"namespace": "i", "name": "h1", "state": "provisioning", "requeue_after": 2.5},
            {"namespace": "i", "name": "h2", "state": "available", "requeue_after": None},
        ]
    }
    found = outcomes.host_outcomes([h1, h2], result)
    assert (found[h1].result, found[h1].delay) == (REQUEUE, 2.5)
    assert found[h2].result == DONE


def test_a_failed_run_backs_every_key_off():
    assert {o.result for o in outcomes.failed_run([C1, C2], "failed").values()} == {RETRY}


def test_tenant_outcomes_requeue_the_tenants_waiting_on_a_stage():
    blue, green = ("tenant", "", "blue"), ("tenant", "", "green")
    result = {"tenants": [{"name": "blue", "requeue": True, "reason": "ReleasingClaims"}, {"name": "green"}]}
    found = outcomes.tenant_outcomes([blue, green], result)
    assert found[blue] == outcomes.Outcome(REQUEUE, delay=outcomes.TENANT_REQUEUE_SECONDS, reason="ReleasingClaims")
    assert found[green].result == DONE


def test_tenant_outcomes_come_back_when_a_hook_is_due():
    blue, green = ("tenant", "", "blue"), ("tenant", "", "green")
    result = {
        "tenants": [
            {"name": "blue", "requeue": True, "reason": "HookRefused", "requeue_after": 8.0},
            {"name": "green", "requeue": True, "requeue_after": -1.0},  # overdue: at once
        ]
    }
    found = outcomes.tenant_outcomes([blue, green], result)
    assert found[blue] == outcomes.Outcome(REQUEUE, delay=8.0, reason="HookRefused")
    assert found[green] == outcomes.Outcome(REQUEUE, delay=0.0, reason="requeue")


def test_remote_outcomes_poll_the_hardware_cluster_as_the_module_says():
    keys = {name: ("remote", "t", name) for name in ("steady", "down", "refused", "conflict", "released", "absent")}
    result = {
        "claims": [
            {"namespace": "t", "name": "steady", "state": "mirrored", "requeue_after": 30.0},
            {"namespace": "t", "name": "down", "state": "unreachable", "requeue_after": 5.0},
            {"namespace": "t", "name": "refused", "state": "refused", "reason": "KubeconfigRefused"},
            {"namespace": "t", "name": "conflict", "state": "conflict"},
            {"namespace": "t", "name": "released", "state": "released"},
            {"namespace": "t", "name": "other", "state": "mirrored", "requeue_after": 2.0},  # not in this batch
        ]
    }
    found = outcomes.remote_outcomes(list(keys.values()), result)
    assert set(found) == set(keys.values())
    assert (found[keys["steady"]].result, found[keys["steady"]].delay) == (REQUEUE, 30.0)
    assert (found[keys["down"]].result, found[keys["down"]].delay) == (REQUEUE, 5.0)
    assert found[keys["refused"]] == outcomes.Outcome(WAIT, reason="KubeconfigRefused")
    assert found[keys["conflict"]].result == RETRY
    assert found[keys["released"]].result == DONE and found[keys["absent"]].result == DONE
