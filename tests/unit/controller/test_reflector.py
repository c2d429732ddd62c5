"""Store: indexes kept in step, replace_all diffs; Reflector error handling against a scripted fake API."""

from __future__ import annotations

import json
import threading
import time

import pytest
import urllib3

from metalclaim.controller.reflector import Reflector, Store, object_key


def obj(name: str, rv: str, namespace: str = "ns", host: str | None = None, **labels: str) -> dict:
    metadata = {"name": name, "namespace": namespace, "resourceVersion": rv, "labels": labels}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"host": host or ""}}


def by_host(o: dict):
    host = o["data"]["host"]
    return [host] if host else []


def by_label(o: dict):
    return [f"{k}={v}" for k, v in o["metadata"]["labels"].items()]


def names(objects) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def test_get_list_keys_and_cluster_scoped_key():
    store = Store()
    store.apply("ADDED", obj("a", "1"))
    store.apply("ADDED", obj("n", "2", namespace=None))
    assert store.get(("ns", "a"))["metadata"]["resourceVersion"] == "1"
    assert store.get(("", "n")) is store.get((None, "n"))
    assert store.get(("ns", "missing")) is None
    assert sorted(store.keys()) == [("", "n"), ("ns", "a")]
    assert names(store.list()) == ["a", "n"]
    assert len(store) == 2 and ("ns", "a") in store
    assert object_key(obj("x", "1", namespace="other")) == ("other", "x")


def test_apply_returns_old_and_new():
    store = Store()
    a1, a2 = obj("a", "1"), obj("a", "2")
    assert store.apply("ADDED", a1) == (None, a1)
    assert store.apply("MODIFIED", a2) == (a1, a2)
    assert store.apply("MODIFIED", obj("a", "2")) == (None, None)  # same resourceVersion: no change
    final = obj("a", "3")
    assert store.apply("DELETED", final) == (final, None)
    assert store.apply("DELETED", final) == (None, None)  # unknown key
    assert store.get(("ns", "a")) is None
    with pytest.raises(ValueError):
        store.apply("BOOKMARK", a1)


def test_indexes_follow_add_update_delete():
    store = Store()
    store.apply("ADDED", obj("pre", "1", host="h0"))
    store.add_index("host", by_host)  # built over existing objects
    store.add_index("label", by_label)
    assert names(store.by_index("host", "h0")) == ["pre"]

    store.apply("ADDED", obj("a", "2", host="h1", team="x"))
    store.apply("ADDED", obj("b", "3", host="h1", team="y"))
    assert names(store.by_index("host", "h1")) == ["a", "b"]
    assert names(store.by_index("label", "team=x")) == ["a"]

    store.apply("MODIFIED", obj("a", "4", host="h2", team="y"))
    assert names(store.by_index("host", "h1")) == ["b"]
    assert names(store.by_index("host", "h2")) == ["a"]
    assert store.by_index("label", "team=x") == []
    assert names(store.by_index("label", "team=y")) == ["a", "b"]

    store.apply("DELETED", obj("b", "5", host="h1", team="y"))
    assert store.by_index("host", "h1") == []
    assert "h1" not in store.index_values("host")  # emptied values are dropped
    assert names(store.by_index("label", "team=y")) == ["a"]

    store.apply("MODIFIED", obj("a", "6"))  # no host: out of the host index
    assert store.by_index("host", "h2") == []
    assert sorted(store.index_values("host")) == ["h0"]
    with pytest.raises(KeyError):
        store.by_index("nope", "x")
    with pytest.raises(ValueError):
        store.add_index("host", by_host)


def test_replace_all_diff():
    store = Store()
    store.add_index("host", by_host)
    keep, update, gone = obj("keep", "1", host="h1"), obj("update", "2", host="h1"), obj("gone", "3", host="h2")
    assert store.replace_all([keep, update, gone]) == [(None, keep), (None, update), (None, gone)]

    updated, added = obj("update", "7", host="h3"), obj("added", "8", host="h2")
    changes = store.replace_all([obj("keep", "1", host="h1"), updated, added])
    assert (gone, None) in changes
    assert (update, updated) in changes
    assert (None, added) in changes
    assert len(changes) == 3  # the unchanged object produced nothing
    assert store.get(("ns", "keep")) is keep  # unchanged objects are not replaced
    assert names(store.by_index("host", "h1")) == ["keep"]
    assert names(store.by_index("host", "h2")) == ["added"]
    assert names(store.by_index("host", "h3")) == ["update"]

    assert store.replace_all([obj("keep", "1", host="h1"), updated, added]) == []
    assert sorted(c[0]["metadata"]["name"] for c in store.replace_all([])) == ["added", "keep", "update"]
    assert len(store) == 0 and store.index_values("host") == []


def test_failing_index_function_leaves_store_untouched():
    store = Store()
    store.replace_all([obj("a", "1", host="h1")])

    def broken(o):
        if o["metadata"]["name"] == "bad":
            raise RuntimeError("boom")
        return by_host(o)

    store.add_index("host", broken)
    with pytest.raises(RuntimeError):
        store.replace_all([obj("bad", "2")])
    assert names(store.list()) == ["a"]
    assert names(store.by_index("host", "h1")) == ["a"]


def test_store_is_thread_safe():
    store = Store()
    store.add_index("host", by_host)

    def writer(prefix: str):
        for i in range(300):
            store.apply("ADDED", obj(f"{prefix}{i}", "1", host=prefix))
            store.apply("MODIFIED", obj(f"{prefix}{i}", "2", host=prefix + "x"))
            if i % 2:
                store.apply("DELETED", obj(f"{prefix}{i}", "3"))

    threads = [threading.Thread(target=writer, args=(p,)) for p in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store) == 4 * 150
    assert all(len(store.by_index("host", p + "x")) == 150 for p in "abcd")
    assert all(store.by_index("host", p) == [] for p in "abcd")


# -- Reflector against a scripted fake API client --


class FakeResponse:
    def __init__(self, status: int, body: bytes | list[bytes] = b"", hang: bool = False, raise_after=None):
        self.status = status
        self._chunks = body if isinstance(body, list) else [body]
        self._hang = hang
        self._raise_after = raise_after
        self._shut = threading.Event()

    @property
    def data(self) -> bytes:
        return b"".join(self._chunks)

    def stream(self, amt=None, decode_content=True):
        yield from self._chunks
        if self._raise_after is not None:
            raise self._raise_after
        if self._hang:
            self._shut.wait(10)
            raise urllib3.exceptions.ProtocolError("connection shut down")

    def shutdown(self):
        self._shut.set()

    def close(self):
        pass

    def release_conn(self):
        pass


class FakeApi:
    """param_serialize/call_api like kubernetes 37's ApiClient; answers from a script of responses."""

    def __init__(self, lists: list[dict], watches: list[FakeResponse]):
        self.lists, self.watches, self.calls = lists, watches, []

    def param_serialize(self, method, path, query_params=None, header_params=None, auth_settings=None):
        return method, (path, dict(query_params or [])), header_params, None, None

    def call_api(self, method, url, header_params=None, _request_timeout=None):
        _path, query = url
        self.calls.append(query)
        if query.get("watch"):
            response = self.watches.pop(0) if self.watches else FakeResponse(200, hang=True)
        else:
            response = FakeResponse(200, json.dumps(self.lists.pop(0)).encode())
        return type("RESTResponse", (), {"response": response})()


def event(type_: str, o: dict) -> bytes:
    return json.dumps({"type": type_, "object": o}).encode() + b"\n"


def listing(rv: str, *items: dict) -> dict:
    return {"kind": "ConfigMapList", "metadata": {"resourceVersion": rv}, "items": list(items)}


def gone_event() -> bytes:
    return event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})


@pytest.mark.parametrize("gone", [FakeResponse(410, b"{}"), FakeResponse(200, [gone_event()])], ids=["http", "event"])
def test_reflector_relists_on_gone_and_emits_each_change_once(gone):
    a, b = obj("a", "5"), obj("b", "6")
    modified = event("MODIFIED", obj("b", "11"))
    api = FakeApi(
        lists=[listing("10", a, b), listing("20", obj("a", "15"), obj("c", "16"))],
        watches=[
            # an event split across two chunks, a bookmark; then the watch expires
            FakeResponse(
                200, [modified[:10], modified[10:], event("BOOKMARK", {"metadata": {"resourceVersion": "12"}})]
            ),
            gone,
        ],
    )
    seen, restarts, stop = [], [], threading.Event()
    reflector = Reflector(
        api, api_version="v1", kind="ConfigMap", plural="configmaps", namespaced=True, namespace="ns",
        store=Store(), stop=stop, on_restart=restarts.append, log=lambda *a, **k: None,
        on_change=lambda old, new, initial: seen.append((_name_rv(old), _name_rv(new), initial)),
    )  # fmt: skip
    reflector.start()
    try:
        assert reflector.synced.wait(5)
        deadline = time.monotonic() + 5
        while reflector.lists < 2 or len(api.calls) < 5:
            assert time.monotonic() < deadline, (seen, restarts, api.calls)
            time.sleep(0.01)
    finally:
        stop.set()
        reflector.join(2)
    assert not reflector.is_alive()
    assert seen == [
        (None, ("a", "5"), True),
        (None, ("b", "6"), True),
        (("b", "6"), ("b", "11"), False),
        (("b", "11"), None, True),
        (("a", "5"), ("a", "15"), True),
        (None, ("c", "16"), True),
    ]
    assert restarts == ["expired", "gone"]
    watch_rvs = [c.get("resourceVersion") for c in api.calls if c.get("watch")]
    assert watch_rvs[:3] == ["10", "12", "20"]  # the bookmark advanced the resourceVersion
    assert reflector.bookmarks == 1
    assert all(
        c.get("allowWatchBookmarks") == "true" and c["timeoutSeconds"] >= 300 for c in api.calls if c.get("watch")
    )


def test_reflector_read_timeout_and_errors_rewatch_from_last_resource_version():
    timeout = urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out")
    api = FakeApi(
        lists=[listing("10")],
        watches=[
            FakeResponse(200, [event("ADDED", obj("a", "11"))], raise_after=timeout),
            FakeResponse(500, b'{"message": "etcd down"}'),
            FakeResponse(200, [b"not json\n"]),
            FakeResponse(200, [event("ERROR", {"kind": "Status", "code": 500, "message": "internal"})]),
        ],
    )
    restarts, stop = [], threading.Event()
    reflector = Reflector(
        api, api_version="v1", kind="ConfigMap", plural="configmaps", namespaced=True, store=Store(), stop=stop,
        on_restart=restarts.append, log=lambda *a, **k: None, backoff_base=0.01, backoff_cap=0.05,
    )  # fmt: skip
    reflector.start()
    deadline = time.monotonic() + 5
    while len(restarts) < 4:
        assert time.monotonic() < deadline, restarts
        time.sleep(0.01)
    started = time.monotonic()
    stop.set()
    reflector.join(2)
    assert not reflector.is_alive() and time.monotonic() - started < 1
    assert restarts == ["timeout", "error", "error", "error"]
    assert reflector.lists == 1  # no re-list: the resourceVersion stayed valid
    watch_rvs = [c.get("resourceVersion") for c in api.calls if c.get("watch")]
    assert watch_rvs[0] == "10" and len(watch_rvs) >= 4 and set(watch_rvs[1:]) == {"11"}


def _name_rv(o):
    return None if o is None else (o["metadata"]["name"], o["metadata"]["resourceVersion"])
