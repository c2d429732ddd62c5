# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run kernel: what one module run of any concern is made of. I/O edge.

A concern's run (ClaimRun, TenantRun, RemoteRun) is a Run plus what only it knows. A Run gives it:
- `kube`, a Snapshot: each (kind, namespace, selector) listed once, kept current with the run's own writes;
- `api`, the client itself: its request counts (`api_calls`);
- `record`/`record_status`: the diff (`--diff`), built from the objects the run holds, never an API call;
- `each`: items gone through WRITERS at a time, one by one in check and diff mode (a diff is then in item order);
- `event`: an Event, one the API server does not take being a warning of the run, not a failure;
- `finish`: the module result with `api_calls`, `diff` and `warnings` added.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io import events
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import WRITERS, KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.diff import (
    changed_fields,
    entry,
    redacted_secret,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.selectors import (
    label_selector_matches,
)

# events.k8s.io's limit on an Event's note; core/v1 takes longer messages, nobody reads them.
EVENT_MESSAGE_LIMIT = 1024
# A warning quotes the API server's refusal, which may quote the object: kept short.
WARNING_LIMIT = 1024


def object_key(obj: dict) -> tuple[str, str]:
    """(namespace, name); the namespace "" for a cluster-scoped object."""
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata.get("name", "")


class Snapshot:
    """A Kube whose list() reads each (kind, namespace, selector) once and follows the run's own writes.

    list() hands out copies, the caller may change them; held() the objects themselves, for readers that never do.
    get() always asks the server. A write through the Snapshot updates every list it belongs in (an object of a
    selected list is kept or left out by its labels, or the list is read again when the selector is not one
    label_selector_matches judges); a delete takes the object out. A write made past it (`Run.api`) is not seen.
    """

    def __init__(self, kube):
        self._kube = kube
        self._lists: dict = {}  # (api_version, kind, namespace, label_selector) -> {(namespace, name): object}
        self._lock = threading.RLock()  # the items of Run.each may be worked on at once
        self.reads = 0  # list calls that went to the server

    def held(self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None):
        """The listed objects themselves (not copies): read them, never change them."""
        key = (api_version, kind, namespace, label_selector)
        with self._lock:
            if key not in self._lists:
                self._keep(key, self._kube.list(api_version, kind, namespace, label_selector=label_selector))
            return list(self._lists[key].values())

    def prefetch(self, kinds: list[tuple[str, str]], workers: int) -> None:
        """List these kinds (every namespace) that are not listed yet, at once: a run that reads them all waits for
        about one list, not for each in turn (an idle claim's run reads four before its first write)."""
        with self._lock:
            due = [(api_version, kind, None, None) for api_version, kind in kinds]
            due = [key for key in due if key not in self._lists]
        if len(due) < 2:
            return  # one list: held() reads it when it is asked for
        found = bounded_map(lambda key: self._kube.list(*key[:3], label_selector=None), due, workers, "list")
        with self._lock:
            for index, key in enumerate(due):
                if key not in self._lists:  # else another thread's read came first
                    self._keep(key, found[index])

    def _keep(self, key: tuple, objects: list[dict]) -> None:
        """Lock held: a list read from the server, as the run holds it."""
        api_version, kind = key[:2]
        self.reads += 1
        for obj in objects:  # a list's items may lack them; a write of one needs them
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
        self._lists[key] = {object_key(obj): obj for obj in objects}

    def list(self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None):
        return [copy.deepcopy(obj) for obj in self.held(api_version, kind, namespace, label_selector)]

    def relist(self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None):
        with self._lock:
            self._lists.pop((api_version, kind, namespace, label_selector), None)
            return self.list(api_version, kind, namespace, label_selector)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None):
        return self._kube.get(api_version, kind, name, namespace)

    def replace(self, obj: dict) -> dict:
        return self._remember(self._kube.replace(obj))

    def patch_status(self, obj: dict, status: dict) -> dict:
        return self._remember(self._kube.patch_status(obj, status))

    def create(self, obj: dict) -> dict:
        return self._remember(self._kube.create(obj))

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, uid: str = "") -> bool:
        deleted = self._kube.delete(api_version, kind, name, namespace, uid=uid)
        with self._lock:
            for (list_api, list_kind, list_ns, _selector), objects in self._lists.items():
                if (list_api, list_kind) == (api_version, kind) and list_ns in (None, namespace):
                    objects.pop((namespace or "", name), None)
        return deleted

    def _remember(self, written: dict) -> dict:
        api_version, kind = written.get("apiVersion"), written.get("kind")
        metadata = written.get("metadata") or {}
        with self._lock:
            for list_key in list(self._lists):
                list_api, list_kind, list_ns, selector = list_key
                if (list_api, list_kind) != (api_version, kind) or list_ns not in (None, metadata.get("namespace")):
                    continue
                belongs = label_selector_matches(selector, metadata.get("labels")) if selector else True
                if belongs is None:
                    del self._lists[list_key]  # whether it still matches is the server's call: read again if asked
                elif belongs:
                    self._lists[list_key][object_key(written)] = written
                else:
                    self._lists[list_key].pop(object_key(written), None)
        return copy.deepcopy(written)


def bounded_map(function, items: list, workers: int, thread_name: str = "run") -> list:
    """[function(item) for item in items], at most `workers` at once (in order, in this thread, when that is 1)."""
    if len(items) < 2 or workers <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix=thread_name) as pool:
        return list(pool.map(function, items))


class Run:
    """One module run: its snapshot, counts, diff, warnings. A concern's run subclasses it."""

    def __init__(
        self, kube, timestamp: str, check_mode: bool, diff: bool = False, workers: int = WRITERS, thread_name="run"
    ):
        self.kube = Snapshot(kube)
        self.api = kube  # the client itself: its request counts, and writes the snapshot must not follow
        self.timestamp = timestamp
        self.check_mode = check_mode
        # Ansible diff entries (see record()), or None when the module was not asked for a diff.
        self.diff: list[dict] | None = [] if diff else None
        self.workers = workers
        self.thread_name = thread_name
        self.warnings: list[str] = []  # Events the API server did not take, said once each in finish()
        self._warnings_lock = threading.Lock()

    def each(self, function, items: list) -> list:
        """[function(item) for item in items], `workers` at a time: each item's writes are independent of the
        others'. One at a time in check and diff mode, so that a diff lists its entries in item order."""
        sequential = self.check_mode or self.diff is not None
        return bounded_map(function, items, 1 if sequential else self.workers, self.thread_name)

    def event(self, obj: dict, event_type: str, reason: str, message: str) -> None:
        """Record an Event (its message cut to EVENT_MESSAGE_LIMIT bytes); one the API server does not take is a
        warning of the run, never a failure of the object it is about."""
        message = cond.truncated(message, EVENT_MESSAGE_LIMIT)
        try:
            events.record(self.kube, obj, event_type, reason, message, self.timestamp, self.check_mode)
        except KubeError as error:
            metadata = obj.get("metadata") or {}
            where = f"{obj.get('kind', '')} {metadata.get('namespace', '')}/{metadata.get('name', '')}"
            with self._warnings_lock:
                self.warnings.append(cond.truncated(f"Event {reason} on {where} not recorded: {error}", WARNING_LIMIT))

    def warn(self, message: str) -> None:
        """A warning of the run (said once in finish()), for whoever runs it: never shown to a tenant."""
        with self._warnings_lock:
            self.warnings.append(cond.truncated(message, WARNING_LIMIT))

    def record(self, kind: str, before: dict | None, after: dict | None, secret: bool = False) -> None:
        """For the diff: an object as it was (None: created) and as it is written (None: deleted).

        Call it once the write succeeded, or where check mode skips it. Only the changed fields are
        shown; a Secret's values never are (secret=True).
        """
        if self.diff is None:
            return
        old, new = changed_fields(_without_managed_fields(before), _without_managed_fields(after))
        if not old and not new:
            return
        if secret:
            old, new = redacted_secret(old), redacted_secret(new)
        metadata = (after or before)["metadata"]
        self.diff.append(entry(kind, metadata.get("namespace"), metadata["name"], old, new))

    def record_status(self, kind: str, obj: dict, patch: dict) -> None:
        """For the diff: the status fields a merge patch of `obj`'s status changes (conditions by type)."""
        if self.diff is None:
            return
        current = obj.get("status") or {}
        old = {name: _by_type(current[name]) for name in patch if current.get(name) is not None}
        new = {name: _by_type(value) for name, value in patch.items() if value is not None}
        metadata = obj["metadata"]
        self.record(kind, {"metadata": metadata, "status": old}, {"metadata": metadata, "status": new})

    def finish(self, result: dict) -> dict:
        """The module result with the run's warnings, its diff (when asked) and its API cost added."""
        if self.warnings:
            result["warnings"] = [*(result.get("warnings") or []), *sorted(set(self.warnings))]
        if self.diff is not None:
            result["diff"] = self.diff
        calls = getattr(self.api, "calls", None)
        if calls is not None:
            result["api_calls"] = dict(sorted(calls.items()))
        return result


def _without_managed_fields(obj: dict | None) -> dict | None:
    """The object without metadata.managedFields: the server's bookkeeping, noise in a diff."""
    if not obj or "managedFields" not in (obj.get("metadata") or {}):
        return obj
    metadata = {key: value for key, value in obj["metadata"].items() if key != "managedFields"}
    return {**obj, "metadata": metadata}


def _by_type(value):
    """Conditions keyed by type, so a diff shows only those that changed; any other value as it is."""
    if isinstance(value, list) and all(isinstance(c, dict) and "type" in c for c in value):
        return {c["type"]: c for c in value}
    return value
