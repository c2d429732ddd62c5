"""The outcome shape every step returns, and which of two outcomes for one object stands."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import (
    DONE,
    ERROR,
    REASON_LIMIT,
    RETRY,
    WAIT,
    Outcomes,
    outcome,
)


def test_an_outcome_has_one_shape():
    assert outcome("t", "c", WAIT, reason="NoBareMetalHost") == {
        "namespace": "t",
        "name": "c",
        "result": "wait",
        "after": None,
        "reason": "NoBareMetalHost",
    }
    assert outcome("i", "h", DONE, after=-3)["after"] == 0.0  # overdue: at once
    assert len(outcome("t", "c", ERROR, reason="x" * 5000)["reason"]) == REASON_LIMIT
    with pytest.raises(ValueError, match="requeue"):
        outcome("t", "c", "requeue")


def test_the_most_urgent_outcome_of_an_object_stands_then_the_soonest():
    found = Outcomes()
    found.note("t", "a", DONE)
    found.note("t", "a", ERROR, reason="error in sync: 403")
    found.note("t", "a", RETRY, reason="conflict")  # less urgent than the error already noted
    found.note("t", "b", DONE, after=30)
    found.note("t", "b", DONE, after=2, reason="provisioning")
    found.note("t", "b", DONE)  # no after: never sooner
    found.note("s", "c", WAIT)
    assert [(o["namespace"], o["name"], o["result"], o["after"], o["reason"]) for o in found.listed()] == [
        ("s", "c", WAIT, None, ""),
        ("t", "a", ERROR, None, "error in sync: 403"),
        ("t", "b", DONE, 2.0, "provisioning"),
    ]
