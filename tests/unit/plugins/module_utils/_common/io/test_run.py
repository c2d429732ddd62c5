"""The run kernel (_common/io/run.py) over a fake API: each list read once and kept current with the run's own
writes, a diff that never shows a Secret's values, items one by one in check and diff mode, a refused Event a
warning, and finish() adding what every module reports."""

from __future__ import annotations

import collections
import copy
import threading
import time

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import (
    EVENT_MESSAGE_LIMIT,
    Run,
    Snapshot,
    bounded_map,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.selectors import (
    label_selector_matches,
)

LABEL = "example.io/owner"


class Kube:
    """Objects in memory, requests counted as Kube counts them; Events refused when `events_refused`."""

    def __init__(self, objects=(), events_refused: bool = False):
        self.objects = {self._key(o): copy.deepcopy(o) for o in objects}
        self.events_refused = events_refused
        self.calls: collections.Counter = collections.Counter()

    @staticmethod
    def _key(obj):
        meta = obj["metadata"]
        return obj["kind"], meta.get("namespace") or "", meta["name"]

    def list(self, api_version, kind, namespace=None, label_selector=None):
        self.calls["list"] += 1
        found = [o for (k, ns, _n), o in self.objects.items() if k == kind and namespace in (None, ns)]
        if label_selector:
            found = [o for o in found if _selected(label_selector, o["metadata"].get("labels") or {})]
        return [
            {key: value for key, value in copy.deepcopy(o).items() if key not in ("apiVersion", "kind")} for o in found
        ]  # as a list's items may come: without apiVersion and kind

    def get(self, api_version, kind, name, namespace=None):
        self.calls["get"] += 1
        return copy.deepcopy(self.objects.get((kind, namespace or "", name)))

    def create(self, obj):
        self.calls["create"] += 1
        if obj["kind"] == "Event" and self.events_refused:
            raise KubeError("cannot create Event e in namespace t: 403 Forbidden: namespace t is being terminated")
        self.objects[self._key(obj)] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def replace(self, obj):
        self.calls["replace"] += 1
        self.objects[self._key(obj)] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def patch_status(self, obj, status):
        self.calls["patch"] += 1
        stored = self.objects[self._key(obj)]
        stored["status"] = {**(stored.get("status") or {}), **status}
        return copy.deepcopy(stored)

    def delete(self, api_version, kind, name, namespace=None, uid=""):
        self.calls["delete"] += 1
        return self.objects.pop((kind, namespace or "", name), None) is not None


def _selected(selector: str, labels: dict) -> bool:
    judged = label_selector_matches(selector, labels)
    if judged is not None:
        return judged
    key, values = selector.split(" in ")  # the one set-based form these tests use
    return labels.get(key) in values.strip("()").split(",")


def config_map(name: str, namespace: str = "t", owner: str | None = None) -> dict:
    labels = {LABEL: owner} if owner else {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
    }


def names(objects) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def test_each_list_is_read_once_and_follows_the_runs_own_writes():
    kube = Kube([config_map("a"), config_map("b")])
    snapshot = Snapshot(kube)
    listed = snapshot.list("v1", "ConfigMap", "t")
    assert names(listed) == ["a", "b"] and listed[0]["kind"] == "ConfigMap"
    listed[0]["data"] = {"changed": "by the caller"}  # a copy: the snapshot keeps what it read
    snapshot.create(config_map("c"))
    snapshot.delete("v1", "ConfigMap", "a", "t")
    assert names(snapshot.list("v1", "ConfigMap", "t")) == ["b", "c"]
    assert names(snapshot.list("v1", "ConfigMap")) == ["b", "c"]  # another list: read once too
    assert "data" not in snapshot.held("v1", "ConfigMap", "t")[0]
    assert (kube.calls["list"], snapshot.reads) == (2, 2)


def test_prefetch_lists_the_kinds_at_once_and_each_only_once():
    class Meeting(Kube):
        """Each list waits for the other: lists made one after the other never meet (the barrier breaks)."""

        barrier = threading.Barrier(2, timeout=5)

        def list(self, api_version, kind, namespace=None, label_selector=None):
            self.barrier.wait()
            return super().list(api_version, kind, namespace, label_selector)

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": "t", "name": "s"}}
    kube = Meeting([config_map("a"), secret])
    snapshot = Snapshot(kube)
    snapshot.prefetch([("v1", "ConfigMap"), ("v1", "Secret")], workers=4)
    assert names(snapshot.held("v1", "ConfigMap")) == ["a"] and snapshot.held("v1", "Secret")[0]["kind"] == "Secret"
    snapshot.prefetch([("v1", "ConfigMap"), ("v1", "Secret")], workers=4)  # both held: nothing read again
    assert (kube.calls["list"], snapshot.reads) == (2, 2)
    plain = Snapshot(Kube([config_map("a")]))
    plain.held("v1", "ConfigMap")
    plain.prefetch([("v1", "ConfigMap"), ("v1", "Secret")], workers=4)  # one left: held() reads it when asked
    assert plain.reads == 1


def test_a_selected_list_keeps_an_object_by_its_labels_and_is_read_again_when_it_cannot_tell():
    kube = Kube([config_map("mine", owner="x"), config_map("other")])
    snapshot = Snapshot(kube)
    assert names(snapshot.list("v1", "ConfigMap", label_selector=LABEL)) == ["mine"]
    assert names(snapshot.list("v1", "ConfigMap", label_selector=f"{LABEL} in (x)")) == ["mine"]
    snapshot.create(config_map("new", owner="y"))
    snapshot.replace(config_map("mine"))  # its label taken off: no longer selected
    assert names(snapshot.list("v1", "ConfigMap", label_selector=LABEL)) == ["new"]
    assert kube.calls["list"] == 2
    assert names(snapshot.list("v1", "ConfigMap", label_selector=f"{LABEL} in (x)")) == []  # read again
    assert kube.calls["list"] == 3


def test_label_selectors_judged_locally_are_the_equality_based_ones():
    labels = {"a": "1", "b": "2"}
    assert label_selector_matches("a", labels) is True
    assert label_selector_matches("a=1,b==2", labels) is True
    assert label_selector_matches("a!=1", labels) is False
    assert label_selector_matches("c!=1,!c", labels) is True
    assert label_selector_matches("!a", labels) is False
    assert label_selector_matches("a in (1)", labels) is None


def test_the_diff_shows_what_changed_and_never_a_secrets_values():
    run = Run(Kube(), "t0", check_mode=True, diff=True)
    before = config_map("a")
    after = {**before, "data": {"k": "v"}}
    run.record("ConfigMap", before, after)
    run.record("ConfigMap", before, before)  # nothing changed: no entry
    secret = {"metadata": {"namespace": "t", "name": "s"}, "data": {"password": "aHVudGVyMg=="}}
    run.record("Secret", None, secret, secret=True)
    status_before = {**before, "status": {"conditions": [{"type": "Ready", "status": "False"}], "state": "x"}}
    run.record_status("ConfigMap", status_before, {"conditions": [{"type": "Ready", "status": "True"}]})
    result = run.finish({"changed": True})
    assert [e["before_header"] for e in result["diff"]] == ["ConfigMap t/a", "Secret t/s", "ConfigMap t/a"]
    assert result["diff"][0]["after"] == {"data": {"k": "v"}}
    assert "aHVudGVyMg==" not in repr(result) and result["diff"][1]["after"]["data"] == {
        "password": "<redacted, 7 bytes>"
    }
    assert result["diff"][2]["after"] == {"status": {"conditions": {"Ready": {"status": "True"}}}}
    assert result["api_calls"] == {}


def test_without_diff_nothing_is_recorded():
    run = Run(Kube(), "t0", check_mode=False)
    run.record("ConfigMap", None, config_map("a"))
    assert "diff" not in run.finish({})


def test_each_runs_items_at_once_but_one_by_one_in_check_and_diff_mode():
    def seen(run: Run) -> set:
        threads = set()
        lock = threading.Lock()
        barrier = threading.Barrier(2, timeout=5)

        def work(item):
            with lock:
                threads.add(threading.current_thread().name)
            if threading.current_thread() is not threading.main_thread():
                barrier.wait()  # two at once, or this times out
            return item * 2

        assert run.each(work, [1, 2]) == [2, 4]
        return threads

    assert seen(Run(Kube(), "t0", check_mode=False, workers=2)) != {threading.main_thread().name}
    assert seen(Run(Kube(), "t0", check_mode=True, workers=2)) == {threading.main_thread().name}
    assert seen(Run(Kube(), "t0", check_mode=False, diff=True, workers=2)) == {threading.main_thread().name}


def test_a_refused_event_is_a_warning_of_the_run_said_once():
    kube = Kube(events_refused=True)
    run = Run(kube, "t0", check_mode=False)
    obj = {**config_map("a"), "metadata": {**config_map("a")["metadata"], "uid": "u"}}
    run.event(obj, "Normal", "Example", "x" * 5000)
    run.event(obj, "Normal", "Example", "x" * 5000)
    result = run.finish({"warnings": ["earlier"]})
    assert result["warnings"][0] == "earlier" and len(result["warnings"]) == 2
    assert result["warnings"][1].startswith("Event Example on ConfigMap t/a not recorded: cannot create Event")
    assert result["api_calls"] == {"create": 2}


def test_an_events_message_is_cut_to_the_limit():
    kube = Kube()
    run = Run(kube, "t0", check_mode=False)
    run.event({**config_map("a"), "metadata": {"namespace": "t", "name": "a", "uid": "u"}}, "Normal", "R", "é" * 2000)
    (event,) = [o for (kind, _ns, _n), o in kube.objects.items() if kind == "Event"]
    assert len(event["message"].encode()) <= EVENT_MESSAGE_LIMIT


def test_bounded_map_overlaps_at_most_its_workers_and_raises_the_first_error():
    inside, most = [0], [0]
    lock = threading.Lock()

    def slow(_item):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1

    bounded_map(slow, list(range(8)), 4)
    assert most[0] == 4
    assert bounded_map(lambda n: n + 1, [1, 2, 3], 1) == [2, 3, 4]
    with pytest.raises(ZeroDivisionError):
        bounded_map(lambda n: 1 / n, [1, 0, 2], 4)
