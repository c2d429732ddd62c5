"""The StatusBook never writes a decision made before another run bound or released the claim, and one claim's
failed status write is that claim's alone."""

from __future__ import annotations

import copy
import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.writes import StatusBook, with_finalizer
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import ConflictError, KubeError

CLAIM = {
    "apiVersion": "metal3.io/v1alpha1",
    "kind": "HostClaim",
    "metadata": {"namespace": "t", "name": "c", "generation": 1, "resourceVersion": "1"},
    "status": {},
}
NO_HOST = [("Association", "False", "NoBareMetalHost", "no free BareMetalHost")]


class RecordingKube:
    def __init__(self):
        self.patches = []

    def patch_status(self, obj, status):
        self.patches.append(status)
        return {**obj, "status": {**obj.get("status", {}), **status}}


def test_a_decision_on_an_unbound_claim_is_not_written_over_another_runs_binding():
    kube = RecordingKube()
    book = StatusBook(kube, "t0", check_mode=False)
    result = {"namespace": "t", "name": "c", "action": "refuse", "host": None}
    book.note(CLAIM, NO_HOST, result=result)  # decided from a host list older than the other run's binding
    bound_elsewhere = copy.deepcopy(CLAIM)
    bound_elsewhere["metadata"]["resourceVersion"] = "2"
    bound_elsewhere["status"] = {"hardwareData": {"namespace": "i", "name": "h"}}
    book.wrote(bound_elsewhere)  # re-read later in the run (say, by the sync step)
    assert book.flush() == {("t", "c"): "conflict"}
    assert kube.patches == []
    assert result["action"] == "conflict" and result["state"] == "conflict"


def test_the_same_decision_is_written_when_nobody_bound_the_claim_meanwhile():
    kube = RecordingKube()
    book = StatusBook(kube, "t0", check_mode=False)
    book.note(CLAIM, NO_HOST)
    book.wrote({**CLAIM, "metadata": {**CLAIM["metadata"], "resourceVersion": "2"}})  # e.g. our finalizer write
    assert book.flush() == {("t", "c"): True}
    (patch,) = kube.patches
    assert patch["conditions"][0]["type"] in ("Association", "Ready")


class ApiAnswer(Exception):
    """What the kubernetes client raises (an ApiException): the HTTP status and the body."""

    def __init__(self, status: int, message: str):
        super().__init__(status)
        self.status, self.body = status, json.dumps({"message": message})


def api_error(status: int, reason: str, message: str) -> KubeError:
    error = KubeError(f"cannot update the status of HostClaim c in namespace t: {status} {reason}")
    error.__cause__ = ApiAnswer(status, message)
    return error


class RefusingKube(RecordingKube):
    """Refuses the status writes of the claims named in `refuse` ({name: [error, ...]}, one per write)."""

    def __init__(self, refuse: dict):
        super().__init__()
        self.refuse = refuse

    def patch_status(self, obj, status):
        errors = self.refuse.get(obj["metadata"]["name"])
        if errors:
            raise errors.pop(0)
        return super().patch_status(obj, status)


def claim(name: str) -> dict:
    return {**copy.deepcopy(CLAIM), "metadata": {**CLAIM["metadata"], "name": name}}


def test_a_refused_status_is_written_again_minimal_and_fails_that_claim_alone():
    """Issue 22: one claim's status the API server refused (422) failed the whole run. Now it gets a minimal status
    whose Ready says why, is reported as an error, and the others are written."""
    refusal = api_error(422, "Unprocessable Entity", 'HostClaim.metal3.io "bad" is invalid: status.hardware: Too long')
    kube = RefusingKube({"bad": [refusal]})
    book = StatusBook(kube, "t0", check_mode=False)
    for name in ("bad", "good-1", "good-2"):
        book.note(claim(name), NO_HOST, updates={"hardware": {"x": name}})
    assert book.flush() == {("t", "bad"): "minimal", ("t", "good-1"): True, ("t", "good-2"): True}
    assert book.writes == 3
    minimal = kube.patches[0]
    assert "hardware" not in minimal  # the minimal status leaves out what it may not take
    ready = next(c for c in minimal["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "StatusRefused")
    assert "status.hardware: Too long" in ready["message"]
    (error,) = book.errors
    assert (error["namespace"], error["name"], error["step"]) == ("t", "bad", "status")
    assert "422 Unprocessable Entity" in error["message"]


def test_a_status_write_failing_otherwise_is_not_retried_and_gives_a_new_binding_back():
    kube = RefusingKube({"bad": [api_error(403, "Forbidden", "hostclaims.metal3.io/status is forbidden")]})
    book = StatusBook(kube, "t0", check_mode=False)
    given_back, committed = [], []
    result = {"namespace": "t", "name": "bad", "action": "bind", "host": "i/h"}
    bound = [("Association", "True", "BareMetalHostAssociated", "")]
    book.note(claim("bad"), bound, updates={"hardwareData": {"namespace": "i", "name": "h"}}, result=result)
    book.committing(claim("bad"), give_back=lambda: given_back.append("h"), on_commit=lambda: committed.append("h"))
    book.note(claim("good"), NO_HOST)
    assert book.flush() == {("t", "bad"): "error", ("t", "good"): True}
    assert (given_back, committed) == (["h"], [])  # no commit: the host goes back
    assert (result["action"], result["host"], result["state"]) == ("error", None, "error")
    assert [e["name"] for e in book.errors] == ["bad"]
    # A failure noted later in the run does not write it again: its updates name a host given back.
    book.failed(claim("bad"), "sync", ("Synchronization", "False", "ReconcileError", "m"), "detail")
    assert book.flush() == {}


def test_a_steps_failure_is_written_on_the_claim_over_what_the_step_noted():
    kube = RecordingKube()
    book = StatusBook(kube, "t0", check_mode=False)
    synced = [("Synchronization", "True", "ConfigurationSynced", "")]
    book.note(claim("c"), synced)
    failure = ("Synchronization", "False", "ReconcileError", "a request for this claim failed: 403")
    book.failed(claim("c"), "sync", failure, "cannot get Secret s in namespace t: 403 Forbidden")
    assert book.flush() == {("t", "c"): True}
    conditions = {c["type"]: c for c in kube.patches[0]["conditions"]}
    assert conditions["Synchronization"]["reason"] == "ReconcileError"
    assert conditions["Ready"]["message"] == "* Synchronization: a request for this claim failed: 403"
    assert book.errors == [
        {"namespace": "t", "name": "c", "step": "sync", "message": "cannot get Secret s in namespace t: 403 Forbidden"}
    ]


class StrippedMeanwhileKube(RecordingKube):
    """The binder's status write conflicts because the tenant removed the claim's finalizer after the binder
    took a host (same generation, no host in its status): before the status names a host, admission allows that."""

    def __init__(self, locked: dict):
        super().__init__()
        self.fresh = copy.deepcopy(locked)
        self.fresh["metadata"]["finalizers"] = []
        self.fresh["metadata"]["resourceVersion"] = "3"

    def patch_status(self, obj, status):
        if obj["metadata"]["resourceVersion"] != self.fresh["metadata"]["resourceVersion"]:
            raise ConflictError("the object has been modified")
        return super().patch_status(obj, status)

    def get(self, api_version, kind, name, namespace):
        return copy.deepcopy(self.fresh)


def test_a_binding_is_not_committed_on_a_claim_whose_finalizer_went_meanwhile():
    """Issue 22: a tenant stripping the finalizer between the lock and the status write got the binding committed
    over the newer version, and the claim could then vanish on delete with its host never released."""
    locked = claim("c")
    locked["metadata"].update(finalizers=["metal3.io/hostclaim"], resourceVersion="2")
    kube = StrippedMeanwhileKube(locked)
    book, result, given_back, committed = committing(kube, locked, "h")
    assert book.flush() == {("t", "c"): "conflict"}
    assert kube.patches == []  # no status names the host
    assert (given_back, committed) == (["h"], [])
    assert (result["action"], result["host"]) == ("conflict", None)


def committing(kube, locked: dict, host: str, replacing: tuple | None = None) -> tuple:
    """A StatusBook over `kube` holding a binding of `locked` to host i/`host` that this run made and has not
    committed (`replacing` the stale host its status names): (the book, the bind result, the hosts given back, the
    hosts committed)."""
    book = StatusBook(kube, "t0", check_mode=False)
    given_back, committed = [], []
    result = {"namespace": "t", "name": "c", "action": "bind", "host": f"i/{host}"}
    bound = [("Association", "True", "BareMetalHostAssociated", "")]
    book.note(locked, bound, updates={"hardwareData": {"namespace": "i", "name": host}}, result=result)
    give_back, on_commit = lambda: given_back.append(host), lambda: committed.append(host)
    book.committing(locked, give_back=give_back, on_commit=on_commit, replacing=replacing)
    return book, result, given_back, committed


class BoundMeanwhileKube(RecordingKube):
    """Another binder committed the claim to its host: every read answers that version."""

    def __init__(self, fresh: dict):
        super().__init__()
        self.fresh = fresh

    def get(self, api_version, kind, name, namespace):
        return copy.deepcopy(self.fresh)


def test_a_binding_is_never_written_over_a_newer_version_another_binder_committed_to_its_host():
    """CI at 8e5005f: four concurrent runs left a claim on two hosts. Run B took host h2 for the claim; run A took
    h1 and committed it; B re-listed the claims (after a collision) and its sync step noted that newer version,
    whose resourceVersion B's status write then matched: B wrote h2 over A's h1 and both hosts named the claim."""
    locked = claim("c")
    locked["metadata"].update(finalizers=[binding.FINALIZER], resourceVersion="2")
    committed_elsewhere = copy.deepcopy(locked)
    committed_elsewhere["metadata"]["resourceVersion"] = "3"
    committed_elsewhere["status"] = {"hardwareData": {"namespace": "i", "name": "h1"}}
    kube = BoundMeanwhileKube(committed_elsewhere)
    book, result, given_back, committed = committing(kube, locked, "h2")
    assert book.committing_to(locked) == ("i", "h2")
    book.note(committed_elsewhere, [("Synchronization", "True", "ConfigurationSynced", "")])  # the sync step
    assert book.flush(only=("t", "c")) == {("t", "c"): "conflict"}
    assert kube.patches == []  # A's h1 stays the claim's host
    assert (given_back, committed) == (["h2"], [])
    assert (result["action"], result["host"]) == ("conflict", None)


class LockedMeanwhile:
    """Another binder wrote our finalizer first (our write conflicts), then maybe committed a binding."""

    def __init__(self, fresh: dict):
        self.fresh = fresh

    def replace(self, obj):
        raise ConflictError("the object has been modified")

    def get(self, api_version, kind, name, namespace):
        return copy.deepcopy(self.fresh)


def _locked(status: dict) -> dict:
    fresh = copy.deepcopy(CLAIM)
    fresh["metadata"].update(resourceVersion="3", finalizers=[binding.FINALIZER])
    fresh["status"] = status
    return fresh


def test_a_finalizer_written_by_another_binder_is_taken_as_ours_while_the_claim_is_unbound():
    claim, wrote = with_finalizer(LockedMeanwhile(_locked({})), CLAIM, check_mode=False)
    assert not wrote and claim["metadata"]["resourceVersion"] == "3"  # the version the status write is guarded by


def test_a_claim_another_binder_bound_meanwhile_is_a_conflict_never_a_version_to_bind_it_again_on():
    # Under load (the 1000-claim race in CI): run A wrote the finalizer and committed host h1 before run B's
    # finalizer write was answered. Had B gone on with that version, its status write naming h2 would not conflict:
    # the claim would hold two hosts.
    bound = _locked({"hardwareData": {"namespace": "i", "name": "h1"}})
    with pytest.raises(ConflictError):
        with_finalizer(LockedMeanwhile(bound), CLAIM, check_mode=False)


class HostsKube(RecordingKube):
    """Answers a host's GET from `hosts` ({name: host}; absent: 404)."""

    def __init__(self, hosts: dict):
        super().__init__()
        self.hosts = hosts
        self.gets = []

    def get(self, api_version, kind, name, namespace):
        self.gets.append((kind, namespace, name))
        return copy.deepcopy(self.hosts.get(name))


def _named_stale(host: str) -> dict:
    stale = claim("c")
    stale["metadata"].update(finalizers=[binding.FINALIZER], resourceVersion="2", uid="u1")
    stale["status"] = {"hardwareData": {"namespace": "i", "name": host}}
    return stale


def test_a_binding_replacing_a_vanished_host_is_committed():
    """Issue 40: the claim's status still named its deleted host, and the binder took the claim's write for another
    binder's commit: every run took the free host, gave it back, and the claim kept naming a host that was gone."""
    stale = _named_stale("gone")
    kube = HostsKube({})
    book, result, given_back, committed = committing(kube, stale, "h2", replacing=("i", "gone"))
    assert book.flush() == {("t", "c"): True}
    (patch,) = kube.patches
    assert patch["hardwareData"] == {"namespace": "i", "name": "h2"}
    assert (given_back, committed) == ([], ["h2"]) and kube.gets == [("BareMetalHost", "i", "gone")]
    assert (result["action"], result["host"]) == ("bind", "i/h2")


def test_a_stale_host_that_names_the_claim_again_is_another_binders_commit():
    """The run's host list may be older than its claim list: the stale host named in the status is asked again, and
    one naming the claim now was another binder's, whose commit stands."""
    stale = _named_stale("h1")
    ref = {"kind": binding.CLAIM_KIND, "namespace": "t", "name": "c", "uid": "u1"}
    kube = HostsKube({"h1": {"metadata": {"namespace": "i", "name": "h1"}, "spec": {"consumerRef": ref}}})
    book, result, given_back, committed = committing(kube, stale, "h2", replacing=("i", "h1"))
    assert book.flush() == {("t", "c"): "conflict"}
    assert kube.patches == []
    assert (given_back, committed) == (["h2"], [])
    assert (result["action"], result["host"]) == ("conflict", None)
