"""What the controller does with each key, from the outcomes a step returned (the collection computes them)."""

from __future__ import annotations

from metalclaim.controller import outcomes
from metalclaim.controller.groups import GROUPS
from metalclaim.controller.mapper import CLAIM, HOST, TENANT
from metalclaim.controller.outcomes import DONE, REQUEUE, RETRY, WAIT, Outcome

C1, C2, C3, C4, C5 = ((CLAIM, "t", f"c{i}") for i in range(1, 6))


def entry(name: str, result: str, after: float | None = None, reason: str = "", namespace: str = "t") -> dict:
    return {"namespace": namespace, "name": name, "result": result, "after": after, "reason": reason}


def test_each_key_gets_what_its_step_said_and_an_unreported_key_is_done():
    result = {
        "outcomes": [
            entry("c1", "wait", reason="release waiting for the host"),
            entry("c2", "retry", reason="conflict"),
            entry("c3", "error", reason="error in sync: cannot get Secret s: 403 Forbidden"),
            entry("c4", "done"),
            entry("x", "error", namespace="other"),  # not in this batch
        ]
    }
    found = outcomes.read(CLAIM, [C1, C2, C3, C4, C5], result)
    assert found == {
        C1: Outcome(WAIT, reason="release waiting for the host"),
        C2: Outcome(RETRY, reason="conflict"),
        C3: Outcome(RETRY, reason="error in sync: cannot get Secret s: 403 Forbidden"),
        C4: Outcome(DONE),
        C5: Outcome(DONE),
    }


def test_an_after_is_a_requeue_whatever_the_result():
    h1, h2 = (HOST, "i", "h1"), (HOST, "i", "h2")
    result = {"outcomes": [entry("h1", "done", 2.5, "provisioning", "i"), entry("h2", "done", None, "", "i")]}
    found = outcomes.read(HOST, [h1, h2], result)
    assert found == {h1: Outcome(REQUEUE, delay=2.5, reason="provisioning"), h2: Outcome(DONE)}
    blue = (TENANT, "", "blue")
    found = outcomes.read(TENANT, [blue], {"outcomes": [entry("blue", "wait", 8.0, "HookRefused", namespace="")]})
    assert found == {blue: Outcome(REQUEUE, delay=8.0, reason="HookRefused")}


def test_a_result_without_outcomes_backs_every_key_off_and_says_so():
    for result in (None, {"changed": False}):
        found = outcomes.read(CLAIM, [C1, C2], result)
        assert found == {key: Outcome(RETRY, reason="the run returned no outcomes") for key in (C1, C2)}


def test_a_failed_run_backs_every_key_off():
    assert {o.result for o in outcomes.failed_run([C1, C2], "failed").values()} == {RETRY}


def test_each_group_reads_the_result_of_its_own_task():
    results = {"metalclaim.hostclaim.bmh_redfish": {"outcomes": []}, "metalclaim.hostclaim.hostclaim_reconcile": {}}
    assert GROUPS[HOST].result_of(results) == {"outcomes": []}
    assert GROUPS[CLAIM].result_of(results) == {}
    assert GROUPS[TENANT].result_of(results) is None
