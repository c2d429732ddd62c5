"""The run kernel keeps one claim's failure with that claim (issue 22): step_each goes on with the others, the
failed claim's condition says why, the run reports its key alone, and an Event the API server refuses is a
warning, not a failure."""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun, step_each
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import ConflictError, KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import EVENT_MESSAGE_LIMIT

TERMINATING = "cannot create Event x in namespace t: 403 Forbidden: namespace t is being terminated"


def claim(name: str) -> dict:
    return {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaim",
        "metadata": {"namespace": "t", "name": name, "uid": f"uid-{name}", "generation": 1, "resourceVersion": "1"},
        "status": {},
    }


class Kube:
    """Takes status patches; refuses Events when `events_refused`."""

    def __init__(self, events_refused: bool = False):
        self.events_refused = events_refused
        self.patches: dict[str, dict] = {}
        self.events: list[dict] = []

    def patch_status(self, obj, status):
        self.patches[obj["metadata"]["name"]] = status
        return {**copy.deepcopy(obj), "status": {**(obj.get("status") or {}), **status}}

    def create(self, obj):
        if obj["kind"] == "Event" and self.events_refused:
            raise KubeError(TERMINATING)
        self.events.append(obj)
        return obj


def test_one_claims_error_does_not_stop_the_others():
    def step(claim: dict, _needed) -> dict:
        name = claim["metadata"]["name"]
        if name == "bad":
            raise KubeError("cannot replace BareMetalHost h in namespace i: 422 Unprocessable Entity: Too long")
        if name == "broken":
            raise KeyError("spec")
        return {"namespace": "t", "name": name, "changed": True}

    outcome = step_each([(claim(n), None) for n in ("a", "bad", "broken", "b")], step)
    states = {r["name"]: r.get("state") for r in outcome["claims"]}
    assert states == {"a": None, "bad": "error", "broken": "error", "b": None}
    assert outcome["changed"] is True
    assert "422 Unprocessable Entity" in outcome["claims"][1]["message"]
    assert outcome["claims"][2]["message"] == "KeyError: 'spec'"


def test_a_conflict_is_tried_once_more_and_an_error_then_is_the_claims():
    calls = []

    def step(claim: dict, needed) -> dict:
        calls.append(needed)
        if needed == "first":
            raise ConflictError("changed")
        raise KubeError("cannot get Secret s in namespace t: 403 Forbidden")

    outcome = step_each([(claim("c"), "first")], step, refresh=lambda c, _n: (c, "fresh"))
    assert calls == ["first", "fresh"]
    assert outcome["claims"][0]["state"] == "error"


def test_a_failed_claim_gets_its_condition_and_the_run_reports_its_key_alone():
    kube = Kube()
    run = ClaimRun(kube, None, "t0", check_mode=False)
    good, bad = claim("good"), claim("bad")

    def step(claim: dict, _needed) -> dict:
        if claim["metadata"]["name"] == "bad":
            raise KubeError("cannot get Secret " + "s" * 40_000 + " in namespace t: 403 Forbidden")
        run.book.note(claim, [("Synchronization", "True", "ConfigurationSynced", "")])
        return {"namespace": "t", "name": "good", "changed": False}

    outcome = step_each(
        [(good, None), (bad, None)], step, on_error=lambda c, e: run.failed(c, e, "sync"), each=run.each
    )
    assert [r.get("state") for r in outcome["claims"]] == [None, "error"]
    result = run.finish({"changed": False})
    assert [(e["name"], e["step"]) for e in result["errors"]] == [("bad", "sync")]
    conditions = {c["type"]: c for c in kube.patches["bad"]["conditions"]}
    sync = conditions["Synchronization"]
    assert (sync["status"], sync["reason"]) == ("False", "ReconcileError")
    assert sync["message"].startswith("a request for this claim failed: cannot get Secret sss")
    assert len(sync["message"].encode()) < 2048  # a Secret name the tenant made long is cut short
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "IssuesReported")
    assert {c["type"]: c["status"] for c in kube.patches["good"]["conditions"]}["Ready"] == "True"
    (warning,) = kube.events
    assert (warning["type"], warning["reason"]) == ("Warning", "ReconcileError")
    assert len(warning["message"].encode()) <= EVENT_MESSAGE_LIMIT


def test_an_event_the_api_server_refuses_is_a_warning_of_the_run():
    run = ClaimRun(Kube(events_refused=True), None, "t0", check_mode=False)
    run.event(claim("leaving"), "Normal", "Released", "BareMetalHost i/h released")
    result = run.finish({"changed": True, "warnings": ["earlier"]})
    assert result["errors"] == []
    assert result["warnings"] == ["earlier", f"Event Released on HostClaim t/leaving not recorded: {TERMINATING}"]
