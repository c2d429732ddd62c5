"""Each claim's outcome from a claim-layer run's result: hostclaim_reconcile's, or one step module's."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.outcomes import claim_outcomes


def results(outcomes: list[dict]) -> dict:
    return {o["name"]: (o["result"], o["reason"]) for o in outcomes}


def test_claim_outcomes_from_a_reconcile_result():
    result = {
        "release": {
            "claims": [{"namespace": "t", "name": "c1", "state": "waiting"}],
            "orphans": [{"host": "i/h9", "state": "waiting"}],  # hosts, not claims
        },
        "bind": {
            "claims": [
                {"namespace": "t", "name": "c2", "action": "conflict", "host": None},
                {"namespace": "t", "name": "c3", "action": "refuse", "host": None, "reason": "NoBareMetalHost"},
                {"namespace": "t", "name": "c4", "action": "bind", "host": "i/h"},
                {"namespace": "t", "name": "c5", "action": "skip", "host": None, "reason": "BindingElsewhere"},
            ]
        },
        "bound": {"claims": [{"namespace": "t", "name": "c4", "changed": True}]},
    }
    assert results(claim_outcomes(result)) == {
        "c1": ("wait", "release waiting for the host"),
        "c2": ("retry", "conflict"),
        "c3": ("wait", "NoBareMetalHost"),
        "c4": ("done", ""),
        "c5": ("wait", "BindingElsewhere"),
    }


def test_a_claim_that_failed_alone_is_an_error_of_its_own():
    """Issue 22: a claim whose request the API server refused is the run's only failed claim, not the batch."""
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
    assert results(claim_outcomes(result)) == {
        "c1": ("error", "error"),
        "c2": ("done", ""),
        "c3": ("error", "error in sync: cannot get Secret s: 403 Forbidden"),
    }


def test_one_step_modules_result_is_read_the_same_way():
    bind = {"claims": [{"namespace": "t", "name": "c1", "action": "conflict", "host": None}], "bound": 0}
    assert results(claim_outcomes(bind)) == {"c1": ("retry", "conflict")}
