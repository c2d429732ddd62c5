"""Reflector on the real API server: list then watch, ordered events, 410 re-list, metadata-only Secrets, stop."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from metalclaim.controller.reflector import LAST_APPLIED, Reflector, Store

pytestmark = pytest.mark.integration


class Recorder:
    """on_change / on_restart sink that tests can wait on."""

    def __init__(self):
        self.changes: list[tuple] = []
        self.restarts: list[str] = []
        self.logs: list[tuple[str, dict]] = []
        self.cond = threading.Condition()

    def on_change(self, old, new, initial):
        with self.cond:
            self.changes.append((_brief(old), _brief(new), initial))
            self.cond.notify_all()

    def on_restart(self, reason):
        with self.cond:
            self.restarts.append(reason)
            self.cond.notify_all()

    def log(self, event, **fields):
        self.logs.append((event, fields))

    def wait(self, predicate, timeout: float = 1.0):
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self), timeout), (self.changes, self.restarts)


def _brief(o):
    if o is None:
        return None
    return (o["metadata"]["name"], o.get("data", {}).get("v") if isinstance(o.get("data"), dict) else None)


@pytest.fixture(scope="module")
def api(devenv):
    return kube_config.new_client_from_config(config_file=devenv.kubeconfig("admin"))


@pytest.fixture
def namespace(api):
    core = kube_client.CoreV1Api(api)
    name = f"reflector-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    # kube-controller-manager adds kube-root-ca.crt shortly after: let it land before the test watches.
    deadline = time.monotonic() + 10
    while not core.list_namespaced_config_map(name, field_selector="metadata.name=kube-root-ca.crt").items:
        assert time.monotonic() < deadline, "no kube-root-ca.crt"
        time.sleep(0.1)
    yield name
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)


@pytest.fixture
def run_reflector(api):
    started: list[tuple[Reflector, threading.Event]] = []

    def start(recorder: Recorder, **kwargs) -> Reflector:
        stop = threading.Event()
        kwargs.setdefault("store", Store())
        reflector = Reflector(
            api,
            stop=stop,
            on_change=recorder.on_change,
            on_restart=recorder.on_restart,
            log=recorder.log,
            **kwargs,
        )
        reflector.start()
        started.append((reflector, stop))
        assert reflector.synced.wait(5), recorder.logs
        return reflector

    yield start
    for reflector, stop in started:
        began = time.monotonic()
        stop.set()
        reflector.join(3)
        assert not reflector.is_alive()
        assert time.monotonic() - began < 1.5, "stop did not end the reflector promptly"


def configmap(core, namespace: str, name: str, value: str):
    body = {"metadata": {"name": name, "namespace": namespace}, "data": {"v": value}}
    try:
        return core.create_namespaced_config_map(namespace, body)
    except ApiException as error:
        if error.status != 409:
            raise
        return core.replace_namespaced_config_map(name, namespace, body)


def test_list_then_watch_delivers_changes_in_order(api, namespace, run_reflector):
    core = kube_client.CoreV1Api(api)
    for name in ("a", "b", "c"):
        configmap(core, namespace, name, "0")
    rec = Recorder()
    store = Store()
    store.add_index("value", lambda o: [o.get("data", {}).get("v")])
    reflector = run_reflector(rec, api_version="v1", kind="ConfigMap", namespace=namespace, store=store)
    assert reflector.plural == "configmaps" and reflector.namespaced  # discovered
    names = {o["metadata"]["name"] for o in store.list()}
    assert {"a", "b", "c"} <= names  # plus kube-root-ca.crt
    assert all(initial for *_change, initial in rec.changes) and len(rec.changes) == len(names)
    assert store.get((namespace, "a"))["kind"] == "ConfigMap"

    rec.changes.clear()
    configmap(core, namespace, "x", "1")
    rec.wait(lambda r: len(r.changes) >= 1)
    configmap(core, namespace, "x", "2")
    rec.wait(lambda r: len(r.changes) >= 2)
    core.delete_namespaced_config_map("x", namespace)
    rec.wait(lambda r: len(r.changes) >= 3)
    assert rec.changes == [(None, ("x", "1"), False), (("x", "1"), ("x", "2"), False), (("x", "2"), None, False)]
    assert store.get((namespace, "x")) is None
    assert [o["metadata"]["name"] for o in store.by_index("value", "0")] == ["a", "b", "c"]
    assert rec.restarts == []


def test_gone_relists_and_changes_meanwhile_arrive_exactly_once(api, namespace, run_reflector):
    core = kube_client.CoreV1Api(api)
    for name in ("a", "b", "c"):
        configmap(core, namespace, name, "0")
    rec = Recorder()
    made = threading.Event()

    def on_restart(reason):
        rec.on_restart(reason)
        if reason == "gone" and not made.is_set():
            # Runs in the reflector thread between the 410 and the re-list: no watch sees these.
            configmap(core, namespace, "new", "1")
            configmap(core, namespace, "a", "1")
            core.delete_namespaced_config_map("b", namespace)
            made.set()

    reflector = Reflector(
        api,
        api_version="v1",
        kind="ConfigMap",
        plural="configmaps",
        namespaced=True,
        namespace=namespace,
        store=(store := Store()),
        stop=(stop := threading.Event()),
        on_change=rec.on_change,
        on_restart=on_restart,
        log=rec.log,
    )
    reflector.start()
    try:
        assert reflector.synced.wait(5)
        initial = len(rec.changes)
        reflector.restart_watch("1")  # long compacted: the next watch gets ERROR 410 "too old resource version"
        rec.wait(lambda r: len(r.changes) >= initial + 3, timeout=5)
        assert "gone" in rec.restarts and reflector.lists == 2
        relisted = sorted(rec.changes[initial:], key=str)
        assert relisted == sorted(
            [(None, ("new", "1"), True), (("a", "0"), ("a", "1"), True), (("b", "0"), None, True)], key=str
        )
        # The watch resumes after the re-list: later changes still arrive, nothing is replayed.
        configmap(core, namespace, "after", "1")
        configmap(core, namespace, "fence", "1")  # the watch is ordered: a replay would come before it
        rec.wait(lambda r: (None, ("fence", "1"), False) in r.changes)
        assert rec.changes[initial + 3 :] == [(None, ("after", "1"), False), (None, ("fence", "1"), False)]
        server = {
            c.metadata.name: c.metadata.resource_version for c in core.list_namespaced_config_map(namespace).items
        }
        cached = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in store.list()}
        assert cached == server
    finally:
        began = time.monotonic()
        stop.set()
        reflector.join(3)
        assert not reflector.is_alive() and time.monotonic() - began < 1.5


def test_metadata_only_secrets_never_hold_data(api, namespace, run_reflector):
    core = kube_client.CoreV1Api(api)
    secret = {
        "metadata": {"name": "s", "namespace": namespace, "annotations": {LAST_APPLIED: '{"data": {"p": "c2VjcmV0"}}'}},
        "stringData": {"p": "hunter2-secret-value"},
    }
    core.create_namespaced_secret(namespace, secret)
    rec = Recorder()
    store = Store()
    run_reflector(rec, api_version="v1", kind="Secret", namespace=namespace, store=store, metadata_only=True)
    cached = store.get((namespace, "s"))
    assert cached is not None
    assert set(cached) == {"apiVersion", "kind", "metadata"}
    assert LAST_APPLIED not in (cached["metadata"].get("annotations") or {})
    assert "managedFields" not in cached["metadata"]
    assert "hunter2" not in repr(store.list()) and "c2VjcmV0" not in repr(store.list())

    before = len(rec.changes)
    core.patch_namespaced_secret("s", namespace, {"stringData": {"p": "hunter3-other"}})
    rec.wait(lambda r: len(r.changes) > before)
    updated = store.get((namespace, "s"))
    assert set(updated) == {"apiVersion", "kind", "metadata"}
    assert updated["metadata"]["resourceVersion"] != cached["metadata"]["resourceVersion"]
    assert "hunter" not in repr(rec.logs) and "c2VjcmV0" not in repr(rec.logs)


def test_watch_expiry_rewatches_from_the_last_resource_version_seen(api, namespace, run_reflector):
    core = kube_client.CoreV1Api(api)
    configmap(core, namespace, "a", "0")
    rec = Recorder()
    # Server-side timeout of 4-8 s: the watch expires and the reflector watches again, without a re-list.
    reflector = run_reflector(rec, api_version="v1", kind="ConfigMap", namespace=namespace, timeout_seconds=4)
    rec.wait(lambda r: "expired" in r.restarts, timeout=10)
    changed = configmap(core, namespace, "a", "1")
    configmap(core, namespace, "fence", "1")  # the watch is ordered: a replayed change would come before it
    rec.wait(lambda r: (None, ("fence", "1"), False) in r.changes)
    assert rec.changes.count((("a", "0"), ("a", "1"), False)) == 1
    assert reflector.lists == 1 and "gone" not in rec.restarts and "error" not in rec.restarts
    starts = [fields for event, fields in rec.logs if event == "watch_started"]
    assert len(starts) >= 2
    # Each watch starts where the previous left off: from the list's resourceVersion or one seen since, never "".
    seen = [starts[0]["resource_version"], *(f["resource_version"] for f in starts[1:])]
    assert all(seen) and [int(v) for v in seen] == sorted(int(v) for v in seen)
    assert int(reflector.resource_version) >= int(changed.metadata.resource_version)


def test_bookmarks_move_the_resource_version_past_other_namespaces_writes(api, namespace, run_reflector):
    """Without bookmarks a quiet namespace's watch would restart from an old resourceVersion, and once that is
    compacted it must re-list everything. The server sends a bookmark shortly before each watch's deadline (4-8 s
    here); under load one can be late, so this waits several watches long, and fails rather than skips."""
    core = kube_client.CoreV1Api(api)
    last = configmap(core, namespace, "a", "0")
    rec = Recorder()
    reflector = run_reflector(rec, api_version="v1", kind="ConfigMap", namespace=namespace, timeout_seconds=4)
    elsewhere = f"{namespace}-other"
    core.create_namespace({"metadata": {"name": elsewhere}})
    try:
        later = configmap(core, elsewhere, "b", "0")  # the server's revision moves on; nothing in our namespace
        beyond = int(later.metadata.resource_version)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (reflector.bookmarks and int(reflector.resource_version) >= beyond):
            configmap(core, elsewhere, "b", str(time.monotonic()))  # keeps the revision moving
            time.sleep(0.5)
        assert reflector.bookmarks >= 1, "no BOOKMARK from the API server in 60 s (several watches)"
        assert int(reflector.resource_version) >= beyond > int(last.metadata.resource_version)
        assert all(c[1][0] != "b" for c in rec.changes if c[1])  # only our namespace's objects were delivered
    finally:
        with contextlib.suppress(ApiException):
            core.delete_namespace(elsewhere)
