"""Events: one per (object, type, reason, message); a repeat raises count and lastTimestamp. Pure parts."""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.events import record
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import AlreadyExistsError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.events import (
    REPORTING_COMPONENT,
    event_name,
    new_event,
    repeated,
)

T0 = "2026-11-23T10:00:00Z"
T1 = "2026-11-23T10:05:00Z"


def host(name="bm-01", uid="0b5c-11", namespace="infrahost"):
    return {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "42"},
    }


def test_the_name_is_the_objects_name_and_a_digest_of_what_is_said():
    name = event_name(host(), "Normal", "Registered", "BMC registered; inspecting")
    prefix, digest = name.rsplit(".", 1)
    assert prefix == "bm-01"
    assert len(digest) == 16 and all(c in "0123456789abcdef" for c in digest)
    # The same occurrence again: the same name, so the same Event.
    assert event_name(host(), "Normal", "Registered", "BMC registered; inspecting") == name


def test_anything_said_differently_is_another_event():
    base = ("Normal", "Registered", "BMC registered; inspecting")
    name = event_name(host(), *base)
    others = {
        event_name(host(), "Warning", base[1], base[2]),
        event_name(host(), base[0], "Deprovisioned", base[2]),
        event_name(host(), base[0], base[1], "BMC registered; inspection disabled"),
        event_name(host(uid="0b5c-12"), *base),  # a new object of the same name
    }
    assert name not in others and len(others) == 4


def test_fields_cannot_run_into_each_other():
    # "a" + "bc" and "ab" + "c" are different occurrences.
    assert event_name(host(), "Normal", "a", "bc") != event_name(host(), "Normal", "ab", "c")


def test_a_long_object_name_still_makes_a_valid_event_name():
    name = event_name(host(name="h" * 253), "Normal", "Registered", "x")
    assert len(name) <= 253
    assert name.startswith("h" * 200) and name.count(".") == 1


def test_an_object_without_a_uid_is_named_too():
    no_uid = host()
    del no_uid["metadata"]["uid"]
    assert event_name(no_uid, "Normal", "R", "m").startswith("bm-01.")


def test_a_first_occurrence_is_a_core_v1_event_about_the_object():
    event = new_event(host(), "Warning", "Error", "the BMC did not answer", T0)
    assert event["apiVersion"] == "v1" and event["kind"] == "Event"
    assert event["metadata"] == {
        "name": event_name(host(), "Warning", "Error", "the BMC did not answer"),
        "namespace": "infrahost",
    }
    assert event["involvedObject"] == {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "name": "bm-01",
        "namespace": "infrahost",
        "uid": "0b5c-11",
        "resourceVersion": "42",
    }
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "Error", "the BMC did not answer")
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"] == T0
    assert event["source"] == {"component": REPORTING_COMPONENT}
    assert event["reportingComponent"] == event["reportingInstance"] == REPORTING_COMPONENT


def test_a_repeat_counts_and_moves_the_last_timestamp_only():
    first = new_event(host(), "Normal", "Registered", "BMC registered", T0)
    first["metadata"]["resourceVersion"] = "7"  # as the API server returned it
    before = copy.deepcopy(first)
    second = repeated(first, T1)
    assert first == before  # the Event read is not changed in place
    assert second["count"] == 2
    assert second["lastTimestamp"] == T1 and second["firstTimestamp"] == T0
    assert second["metadata"] == first["metadata"]  # same name, and its resourceVersion guards the update
    assert {k: v for k, v in second.items() if k not in ("count", "lastTimestamp")} == {
        k: v for k, v in first.items() if k not in ("count", "lastTimestamp")
    }
    assert repeated(second, T1)["count"] == 3


def test_a_repeat_of_an_event_without_a_count_is_its_second():
    # Events written by other tools may leave count unset (series instead): that was one occurrence.
    other = new_event(host(), "Normal", "R", "m", T0)
    del other["count"]
    assert repeated(other, T1)["count"] == 2


class _Events:
    """Just enough of Kube for record(): Events by name, requests logged."""

    def __init__(self):
        self.events: dict = {}
        self.log: list[str] = []

    def create(self, obj):
        self.log.append("create")
        if obj["metadata"]["name"] in self.events:
            raise AlreadyExistsError("exists")
        self.events[obj["metadata"]["name"]] = copy.deepcopy(obj)
        return obj

    def get(self, api_version, kind, name, namespace=None):
        self.log.append("get")
        return copy.deepcopy(self.events.get(name))

    def replace(self, obj):
        self.log.append("replace")
        self.events[obj["metadata"]["name"]] = copy.deepcopy(obj)
        return obj


def test_record_twice_is_one_event_counted_twice_and_check_mode_writes_nothing():
    kube = _Events()
    record(kube, host(), "Normal", "Registered", "BMC registered", T0, check_mode=True)
    assert kube.log == []
    record(kube, host(), "Normal", "Registered", "BMC registered", T0, check_mode=False)
    assert kube.log == ["create"]  # a first occurrence costs one request, no list
    record(kube, host(), "Normal", "Registered", "BMC registered", T1, check_mode=False)
    assert kube.log == ["create", "create", "get", "replace"]
    assert len(kube.events) == 1
    event = next(iter(kube.events.values()))
    assert (event["count"], event["firstTimestamp"], event["lastTimestamp"]) == (2, T0, T1)
