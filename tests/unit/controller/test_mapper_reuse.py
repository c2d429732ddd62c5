"""Event -> keys for node reuse: a held host wakes the waiting claims when it is released and when its hold ends; a
host marked in use (to be cleaned) only when its provisioner takes the mark off."""

from __future__ import annotations

import copy

from metalclaim.controller import mapper
from metalclaim.controller.mapper import CLAIM

HOLD = "metalclaim.io/reuse-hold"
IN_USE = "provisioner.metalclaim.io/in-use"
WAITING = [{"metadata": {"namespace": "tenant-a", "name": "c2", "uid": "u2", "generation": 1}, "spec": {}}]
FREE = {
    "metadata": {"namespace": "infra", "name": "h1", "uid": "h", "generation": 3, "annotations": {}},
    "spec": {"online": False},
    "status": {"provisioning": {"state": "available"}, "poweredOn": False},
}


def annotated(name: str) -> dict:
    host = copy.deepcopy(FREE)
    host["metadata"]["annotations"] = {name: "{}"}
    return host


def woken(old, new) -> bool:
    return (CLAIM, "tenant-a", "c2") in mapper.host_changed(old, new, unbound_claims=WAITING).wake


def test_a_host_released_into_a_hold_wakes_the_waiting_claims():
    bound = copy.deepcopy(FREE)
    bound["spec"]["consumerRef"] = {"kind": "HostClaim", "namespace": "tenant-a", "name": "c1"}
    assert woken(bound, annotated(HOLD))  # a claim with the key may be waiting for it


def test_the_end_of_a_hold_wakes_the_waiting_claims():
    assert woken(annotated(HOLD), FREE)
    assert not woken(FREE, annotated(HOLD))


def test_a_host_in_use_is_free_only_once_its_provisioner_cleaned_it():
    assert not mapper.is_free(annotated(IN_USE))
    assert not woken(annotated(HOLD), annotated(IN_USE))  # the hold ended uncleaned: cleaning first
    assert woken(annotated(IN_USE), FREE)
