"""Reflectors (list, then watch) feeding thread-safe in-memory stores: client-go's reflector semantics.

A :class:`Reflector` lists one kind (paginated), then watches from the list's resourceVersion with
bookmarks and a jittered server-side timeout; it re-watches from the last resourceVersion when a watch
ends or goes silent, re-lists on 410 Gone (HTTP 410 or an ERROR event with code 410) and emits the
differences found by the re-list, and backs off exponentially (with jitter) on connection errors.
Every real change reaches ``on_change(old, new, initial)`` exactly once.

Objects are plain JSON dicts. Store and callbacks share them: treat them as read-only.
Logs carry resource names, resourceVersions and counts, never object contents.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import urllib3

Key = tuple[str, str]
Change = tuple[dict | None, dict | None]

EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")
RESTART_REASONS = ("expired", "gone", "error", "timeout")

PARTIAL_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
PARTIAL_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# Dropped from metadata-only objects: `kubectl apply` copies a Secret's data into this annotation.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

_logger = logging.getLogger(__name__)
_log_setup = threading.Lock()


def default_log(event: str, **fields: Any) -> None:
    """One JSON line through std logging; a stderr handler is attached if logging is not configured."""
    if not _logger.handlers and not logging.getLogger().handlers:
        with _log_setup:
            if not _logger.handlers:
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(logging.Formatter("%(message)s"))
                _logger.addHandler(handler)
                _logger.setLevel(logging.INFO)
    _logger.info(json.dumps({"event": event, **fields}, default=str, sort_keys=True))


def object_key(obj: dict) -> Key:
    """(namespace, name); namespace "" for cluster-scoped objects."""
    metadata = obj.get("metadata") or {}
    return (metadata.get("namespace") or "", metadata["name"])


def _normal_key(key: Key) -> Key:
    namespace, name = key
    return (namespace or "", name)


def _resource_version(obj: dict | None) -> str | None:
    if not obj:
        return None
    return (obj.get("metadata") or {}).get("resourceVersion")


def _same(old: dict, new: dict) -> bool:
    old_rv, new_rv = _resource_version(old), _resource_version(new)
    if old_rv and new_rv:
        return old_rv == new_rv
    return old == new


class Store:
    """Thread-safe cache of one kind: (namespace, name) -> object dict, with secondary indexes.

    Index functions map an object to an iterable of hashable values; indexes are kept in step on
    every change. Returned objects are the stored ones: do not mutate them.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[Key, dict] = {}
        self._index_funcs: dict[str, Callable[[dict], Iterable]] = {}
        self._indexes: dict[str, dict[Any, set[Key]]] = {}
        self._indexed: dict[str, dict[Key, frozenset]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def __contains__(self, key: Key) -> bool:
        with self._lock:
            return _normal_key(key) in self._objects

    def get(self, key: Key) -> dict | None:
        with self._lock:
            return self._objects.get(_normal_key(key))

    def list(self) -> list[dict]:
        with self._lock:
            return list(self._objects.values())

    def keys(self) -> list[Key]:
        with self._lock:
            return list(self._objects)

    def add_index(self, name: str, func: Callable[[dict], Iterable]) -> None:
        with self._lock:
            if name in self._index_funcs:
                raise ValueError(f"index {name!r} already exists")
            values = {key: frozenset(func(obj)) for key, obj in self._objects.items()}
            self._index_funcs[name] = func
            self._indexes[name] = {}
            self._indexed[name] = {}
            for key, vals in values.items():
                self._index_put(name, key, vals)

    def by_index(self, name: str, value: Any) -> list[dict]:
        with self._lock:
            if name not in self._index_funcs:
                raise KeyError(f"no index {name!r}")
            keys = self._indexes[name].get(value, ())
            return [self._objects[key] for key in sorted(keys)]

    def index_values(self, name: str) -> list:
        """The values index `name` currently holds objects under."""
        with self._lock:
            return list(self._indexes[name])

    def apply(self, event_type: str, obj: dict) -> Change:
        """Apply one watch event; returns (old, new): old None on add, new None on delete.

        For a delete, old is the object's final state as given. (None, None) when nothing changed:
        an add/modify of the stored resourceVersion, or a delete of an unknown key.
        """
        if event_type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}")
        key = object_key(obj)
        with self._lock:
            old = self._objects.get(key)
            if event_type == "DELETED":
                if old is None:
                    return (None, None)
                self._remove(key)
                return (obj, None)
            if old is not None and _same(old, obj):
                return (None, None)
            self._put(key, obj)
            return (old, obj)

    def replace_all(self, objects: Iterable[dict]) -> list[Change]:
        """Replace the contents with a fresh list; returns the changes: (None, new) adds, (old, new)
        updates, (old, None) deletes. Objects whose resourceVersion is unchanged produce nothing."""
        fresh: dict[Key, dict] = {}
        for obj in objects:
            fresh[object_key(obj)] = obj
        with self._lock:
            changes: list[Change] = []
            # Compute every index value first: a failing index function leaves the store untouched.
            staged = {key: self._values(obj) for key, obj in fresh.items()}
            for key in [key for key in self._objects if key not in fresh]:
                changes.append((self._objects[key], None))
                self._remove(key)
            for key, obj in fresh.items():
                old = self._objects.get(key)
                if old is not None and _same(old, obj):
                    continue
                self._put(key, obj, staged[key])
                changes.append((old, obj))
            return changes

    # -- internals (lock held) --

    def _values(self, obj: dict) -> dict[str, frozenset]:
        return {name: frozenset(func(obj)) for name, func in self._index_funcs.items()}

    def _put(self, key: Key, obj: dict, values: dict[str, frozenset] | None = None) -> None:
        if values is None:
            values = self._values(obj)
        if key in self._objects:
            self._unindex(key)
        self._objects[key] = obj
        for name, vals in values.items():
            self._index_put(name, key, vals)

    def _remove(self, key: Key) -> None:
        self._unindex(key)
        del self._objects[key]

    def _index_put(self, name: str, key: Key, values: frozenset) -> None:
        index = self._indexes[name]
        for value in values:
            index.setdefault(value, set()).add(key)
        self._indexed[name][key] = values

    def _unindex(self, key: Key) -> None:
        for name, index in self._indexes.items():
            for value in self._indexed[name].pop(key, ()):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]


class _HTTPError(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(f"HTTP {status} {reason}")
        self.status = status


def _iter_lines(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """Lines of a streamed (chunked) response, each as soon as its newline arrives."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        while True:
            newline = buffer.find(b"\n")
            if newline < 0:
                break
            line, buffer = buffer[:newline], buffer[newline + 1 :]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


class Reflector(threading.Thread):
    """Keeps `store` in step with one kind on the API server (list, then watch) and reports changes.

    ``on_change(old, new, initial)``: every real change, old None on add, new None on delete;
    initial=True for changes found by a (re)list. With metadata_only, objects are the
    PartialObjectMetadata the server sends (apiVersion/kind set to the watched kind's, no
    managedFields, no last-applied annotation): contents never reach memory. ``on_restart(reason)``: reason in
    RESTART_REASONS, for metrics. ``synced`` is set after the first successful list (and its
    on_change calls). The thread ends promptly once `stop` is set.
    """

    list_page_size = 500
    connect_timeout = 10.0
    list_read_timeout = 60.0

    def __init__(
        self,
        api_client,
        *,
        api_version: str,
        kind: str,
        plural: str | None = None,
        namespaced: bool | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        store: Store,
        on_change: Callable[[dict | None, dict | None, bool], None] | None = None,
        stop: threading.Event,
        timeout_seconds: float = 300,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        metadata_only: bool = False,
        on_restart: Callable[[str], None] | None = None,
        log: Callable[..., None] | None = None,
        transform: Callable[[dict], dict] | None = None,
        name: str | None = None,
    ):
        super().__init__(name=name or f"reflector-{kind}", daemon=True)
        self.api_client = api_client
        self.api_version = api_version
        self.kind = kind
        self.plural = plural
        self.namespaced = namespaced
        self.namespace = namespace
        self.label_selector = label_selector
        self.store = store
        self.on_change = on_change
        self.stop = stop
        self.timeout_seconds = timeout_seconds
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.metadata_only = metadata_only
        self.on_restart = on_restart
        self.log = log or default_log
        self.transform = transform
        self.synced = threading.Event()
        # Last resourceVersion seen (list, event or bookmark): where the next watch starts.
        self.resource_version: str | None = None
        self.bookmarks = 0
        self.lists = 0
        self.restarts: dict[str, int] = dict.fromkeys(RESTART_REASONS, 0)
        self._failures = 0
        self._current: urllib3.BaseHTTPResponse | None = None
        self._current_is_watch = False
        self._current_lock = threading.Lock()
        self._forced_rv: str | None = None
        self._restart_requested = False
        self._done = threading.Event()

    # -- public seams --

    def restart_watch(self, resource_version: str | None = None) -> None:
        """Drop the current watch; the next one starts from `resource_version` if given (e.g. "1",
        long compacted, to force a 410 Gone in tests) instead of the last one seen."""
        with self._current_lock:
            self._forced_rv = resource_version
            self._restart_requested = True
            if self._current_is_watch:
                self._shutdown_locked()

    # -- thread --

    def run(self) -> None:
        stopper = threading.Thread(target=self._stopper, name=f"{self.name}-stopper", daemon=True)
        stopper.start()
        try:
            self._run()
        except Exception as error:  # never die silently
            self.log("reflector_crashed", **self._fields(), error=type(error).__name__, detail=str(error)[:200])
            raise
        finally:
            self._done.set()
            self.log("reflector_stopped", **self._fields())

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self._discover()
                break
            except Exception as error:
                self.log("discovery_failed", **self._fields(), error=type(error).__name__, detail=str(error)[:200])
                self._backoff()
        need_list = True
        while not self.stop.is_set():
            if need_list:
                try:
                    self._list()
                except Exception as error:
                    if self.stop.is_set():
                        break
                    self.log("list_failed", **self._fields(), error=type(error).__name__, detail=str(error)[:200])
                    self._restarted("error")
                    self._backoff()
                    continue
                need_list = False
                self._failures = 0
            outcome = self._watch()
            if self.stop.is_set():
                break
            if outcome == "requested":
                continue
            self._restarted(outcome)
            if outcome == "gone":
                need_list = True
                self._failures = 0
            elif outcome in ("expired", "timeout"):
                self._failures = 0
            else:
                self._backoff()

    # -- list --

    def _list(self) -> None:
        started = time.monotonic()
        accept = PARTIAL_LIST_ACCEPT if self.metadata_only else "application/json"
        items: list[dict] = []
        continue_token: str | None = None
        pages = 0
        list_rv = None
        while True:
            if self.stop.is_set():
                raise InterruptedError("stopped")
            query: list[tuple[str, Any]] = [("limit", self.list_page_size)]
            if self.label_selector:
                query.append(("labelSelector", self.label_selector))
            if continue_token:
                query.append(("continue", continue_token))
            body = self._get_json(self._path(), query, accept)
            if body is None:  # 410: the continue token expired; start over
                if not continue_token:
                    raise _HTTPError(410, "Gone on a fresh list")
                self.log("list_continue_expired", **self._fields(), pages=pages)
                items, continue_token, pages = [], None, 0
                continue
            pages += 1
            metadata = body.get("metadata") or {}
            list_rv = metadata.get("resourceVersion")
            items.extend(self._prepare(item) for item in body.get("items") or [])
            continue_token = metadata.get("continue")
            if not continue_token:
                break
        changes = self.store.replace_all(items)
        self.resource_version = list_rv
        self.lists += 1
        self.log(
            "listed",
            **self._fields(),
            resource_version=list_rv,
            items=len(items),
            pages=pages,
            changes=len(changes),
            seconds=round(time.monotonic() - started, 3),
        )
        for old, new in changes:
            self._notify(old, new, True)
        self.synced.set()

    def _get_json(self, path: str, query: list, accept: str) -> dict | None:
        """GET a JSON document; None on 410 Gone; _HTTPError on other non-200 statuses."""
        response = self._request(path, query, accept, (self.connect_timeout, self.list_read_timeout))
        try:
            if response.status == 410:
                return None
            data = response.data
            if response.status != 200:
                raise _HTTPError(response.status, _status_message(data))
            return json.loads(data)
        finally:
            self._release(response)

    # -- watch --

    def _watch(self) -> str:
        """One watch; returns how it ended: expired, timeout, gone, error, requested (restart_watch) or stopped."""
        with self._current_lock:
            self._restart_requested = False
            forced, self._forced_rv = self._forced_rv, None
        resource_version = forced or self.resource_version
        server_timeout = max(1, int(self.timeout_seconds * (1 + random.random())))
        read_timeout = server_timeout * 1.1 + 5
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", server_timeout),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        accept = PARTIAL_ACCEPT if self.metadata_only else "application/json"
        started = time.monotonic()
        events = 0
        try:
            response = self._request(self._path(), query, accept, (self.connect_timeout, read_timeout), watch=True)
        except Exception as error:
            return self._ended("error", started, events, error=type(error).__name__, detail=str(error)[:200])
        try:
            if response.status == 410:
                return self._ended("gone", started, events, status=410)
            if response.status != 200:
                message = _status_message(response.data)
                return self._ended("error", started, events, status=response.status, detail=message)
            self.log("watch_started", **self._fields(), resource_version=resource_version, timeout=server_timeout)
            for line in _iter_lines(response):
                event = json.loads(line)
                event_type = event.get("type")
                obj = event.get("object") or {}
                if event_type == "ERROR":
                    code = obj.get("code")
                    outcome = "gone" if code == 410 else "error"
                    return self._ended(outcome, started, events, status=code, detail=str(obj.get("message"))[:200])
                if event_type == "BOOKMARK":
                    self.bookmarks += 1
                    self.resource_version = _resource_version(obj) or self.resource_version
                    continue
                if event_type not in EVENT_TYPES:
                    return self._ended("error", started, events, detail=f"unknown event type {event_type!r}")
                events += 1
                obj = self._prepare(obj)
                old, new = self.store.apply(event_type, obj)
                self.resource_version = _resource_version(obj) or self.resource_version
                if old is not None or new is not None:
                    self._notify(old, new, False)
            if self.stop.is_set():
                return "stopped"
            if self._restart_requested:
                return self._ended("requested", started, events)
            if events == 0 and time.monotonic() - started < 1:
                return self._ended("error", started, events, detail="very short watch")
            return self._ended("expired", started, events)
        except Exception as error:
            if self.stop.is_set():
                return "stopped"
            if self._restart_requested:
                return self._ended("requested", started, events)
            if isinstance(error, urllib3.exceptions.ReadTimeoutError):
                return self._ended("timeout", started, events)
            return self._ended("error", started, events, error=type(error).__name__, detail=str(error)[:200])
        finally:
            self._release(response, close=True)

    def _ended(self, outcome: str, started: float, events: int, **fields: Any) -> str:
        self.log(
            "watch_ended",
            **self._fields(),
            outcome=outcome,
            events=events,
            resource_version=self.resource_version,
            seconds=round(time.monotonic() - started, 3),
            **fields,
        )
        return outcome

    # -- plumbing --

    def _discover(self) -> None:
        if self.plural and self.namespaced is not None:
            return
        group_version = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        body = self._get_json(group_version, [], "application/json")
        if body is None:
            raise _HTTPError(410, f"discovery of {group_version}")
        for resource in body.get("resources") or []:
            if "/" in resource["name"]:
                continue
            if resource.get("kind") == self.kind and (not self.plural or resource["name"] == self.plural):
                self.plural = resource["name"]
                self.namespaced = bool(resource.get("namespaced"))
                break
        else:
            raise LookupError(f"no resource of kind {self.kind} in {self.api_version}")
        if self.namespace and not self.namespaced:
            raise ValueError(f"{self.kind} is cluster-scoped; namespace {self.namespace!r} given")

    def _path(self) -> str:
        prefix = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if self.namespace:
            return f"{prefix}/namespaces/{self.namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"

    def _request(
        self, path: str, query: list, accept: str, timeout: tuple[float, float], watch: bool = False
    ) -> urllib3.BaseHTTPResponse:
        method, url, headers, _body, _post = self.api_client.param_serialize(
            "GET", path, query_params=query, header_params={"Accept": accept}, auth_settings=["BearerToken"]
        )
        response = self.api_client.call_api(method, url, header_params=headers, _request_timeout=timeout).response
        with self._current_lock:
            self._current, self._current_is_watch = response, watch
            if self.stop.is_set() or (watch and self._restart_requested):
                self._shutdown_locked()
        return response

    def _release(self, response: urllib3.BaseHTTPResponse, close: bool = False) -> None:
        with self._current_lock:
            if self._current is response:
                self._current, self._current_is_watch = None, False
        if close:
            response.close()
        else:
            response.release_conn()

    def _abort_current(self) -> None:
        with self._current_lock:
            self._shutdown_locked()

    def _shutdown_locked(self) -> None:
        """Unblock a read in progress on the current response (from another thread)."""
        if self._current is None:
            return
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            self._current.shutdown()

    def _stopper(self) -> None:
        while not self.stop.wait(0.1):
            if self._done.is_set():
                return
        self._abort_current()

    def _prepare(self, obj: dict) -> dict:
        if self.metadata_only:
            metadata = dict(obj.get("metadata") or {})
            metadata.pop("managedFields", None)
            if LAST_APPLIED in (metadata.get("annotations") or {}):
                metadata["annotations"] = {k: v for k, v in metadata["annotations"].items() if k != LAST_APPLIED}
            obj = {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata}
        else:
            obj.setdefault("apiVersion", self.api_version)
            obj.setdefault("kind", self.kind)
        if self.transform is not None:
            obj = self.transform(obj)
        return obj

    def _notify(self, old: dict | None, new: dict | None, initial: bool) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(old, new, initial)
        except Exception as error:
            key = object_key(new or old)
            self.log("on_change_failed", **self._fields(), key=list(key), error=type(error).__name__)

    def _restarted(self, reason: str) -> None:
        self.restarts[reason] += 1
        if self.on_restart is not None:
            try:
                self.on_restart(reason)
            except Exception as error:
                self.log("on_restart_failed", **self._fields(), error=type(error).__name__)

    def _backoff(self) -> None:
        delay = min(self.backoff_cap, self.backoff_base * (2**self._failures))
        self._failures += 1
        delay = random.uniform(delay / 2, delay)
        self.log("backoff", **self._fields(), seconds=round(delay, 3), failures=self._failures)
        self.stop.wait(delay)

    def _fields(self) -> dict[str, Any]:
        return {"resource": self.plural or self.kind, "namespace": self.namespace}


def _status_message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message", ""))[:200]
    except (ValueError, AttributeError):
        return data[:200].decode("utf-8", "replace")
