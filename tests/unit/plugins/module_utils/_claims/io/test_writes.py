"""The StatusBook never writes a decision made before another run bound or released the claim."""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.writes import StatusBook

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
