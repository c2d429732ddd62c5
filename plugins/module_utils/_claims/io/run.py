# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run of the claim layer: what its steps share (client, status book, caches, token). I/O edge.

A run is one module invocation: a single step, or release -> bind -> secrets -> sync in
hostclaim_reconcile. Steps read through run.kube, note statuses in run.book, and finish()
writes each claim's status once. Asked for a diff (`--diff`), steps record() each change they
make (or would make, in check mode) from the objects they hold: a diff costs no API call.

A batch holds many tenants' claims, so one claim's failure is its own (issue 22): step_each turns
an error on one claim (an API error other than a conflict, or an internal one) into that claim's
failed condition (failed()) and an `error` result, and goes on with the others; finish() reports
the failed keys in `errors`, which the controller retries alone. An Event the API server will not
take (its namespace is being deleted, say) is a warning, never a failure: it is not worth a claim.
"""

from __future__ import annotations

import copy
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.writes import (
    StatusBook,
    error_detail,
    in_order,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, failures
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.binding import committed, select_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.outcomes import claim_outcomes
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io import events
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    WRITERS,
    ConflictError,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.diff import (
    changed_fields,
    entry,
    redacted_secret,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import status_patch

# events.k8s.io's limit on an Event's note; core/v1 takes longer messages, nobody reads them.
EVENT_MESSAGE_LIMIT = 1024


class Snapshot:
    """A Kube whose list() reads each (kind, namespace, selector) once and follows this process's own writes."""

    def __init__(self, kube):
        self._kube = kube
        self._lists: dict = {}  # (api_version, kind, namespace, label_selector) -> {(namespace, name): object}
        self._lock = threading.RLock()  # the steps of several claims may run at once (ClaimRun.each)
        self.reads = 0  # list calls that went to the server

    def list(self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None):
        key = (api_version, kind, namespace, label_selector)
        with self._lock:
            if key not in self._lists:
                self.reads += 1
                objects = self._kube.list(api_version, kind, namespace, label_selector=label_selector)
                self._lists[key] = {binding.key(obj): obj for obj in objects}
            objects = list(self._lists[key].values())
        return [copy.deepcopy(obj) for obj in objects]

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
        namespace = (written.get("metadata") or {}).get("namespace")
        with self._lock:
            for list_key in list(self._lists):
                list_api, list_kind, list_ns, selector = list_key
                if (list_api, list_kind) != (api_version, kind) or list_ns not in (None, namespace):
                    continue
                if selector:
                    del self._lists[list_key]  # whether it still matches is the server's call: read again if asked
                else:
                    self._lists[list_key][binding.key(written)] = written
        return copy.deepcopy(written)


class ClaimRun:
    def __init__(self, kube, wanted: list[dict] | None, timestamp: str, check_mode: bool, diff: bool = False):
        self.kube = Snapshot(kube)
        self.api = kube  # the client itself: its request counts
        self.wanted = wanted
        self.timestamp = timestamp
        self.check_mode = check_mode
        # Ansible diff entries (see record()), or None when the module was not asked for a diff.
        self.diff: list[dict] | None = [] if diff else None
        self.book = StatusBook(
            self.kube, timestamp, check_mode, on_write=self.record_status if diff else None, each=self.each
        )
        # Compared exactly, never by time: see _claims/pure/status.py locked_by_another.
        self.token = uuid.uuid4().hex
        self.first_seen: dict[tuple[str, str], dict] = {}  # claims as this run first listed them
        self._secrets: dict[tuple[str, str], dict | None] = {}
        self.event_failures: list[str] = []  # Events the API server did not take: the run's warnings
        self._events_lock = threading.Lock()

    def claims(self) -> list[dict]:
        """The run's claims (those named in `wanted`, or all), oldest first.

        hostclaim_reconcile's client answers lists with what this run wrote, so a later step
        sees an earlier step's writes.
        """
        claims = select_claims(self.kube.list(API_VERSION, "HostClaim"), self.wanted)
        for claim in claims:
            self.first_seen.setdefault(binding.key(claim), claim)
        return claims

    def each(self, function, items: list) -> list:
        """[function(item) for item in items], WRITERS at a time: each item is one claim's writes, independent of
        the others'. In order, one at a time, in check and diff mode (a diff lists its entries in claim order)."""
        if len(items) < 2 or self.check_mode or self.diff is not None:
            return in_order(function, items)
        with ThreadPoolExecutor(max_workers=min(WRITERS, len(items)), thread_name_prefix="claim") as pool:
            return list(pool.map(function, items))

    def secret(self, namespace: str, name: str) -> dict | None:
        """A tenant Secret, read at most once per run however many claims and roles name it."""
        if (namespace, name) not in self._secrets:
            self._secrets[(namespace, name)] = self.kube.get("v1", "Secret", name, namespace)
        return self._secrets[(namespace, name)]

    def event(self, obj: dict, event_type: str, reason: str, message: str) -> None:
        """Record an Event (its message cut to EVENT_MESSAGE_LIMIT bytes); one the API server does not take is a
        warning of the run, not a failure of the claim."""
        message = cond.truncated(message, EVENT_MESSAGE_LIMIT)
        try:
            events.record(self.kube, obj, event_type, reason, message, self.timestamp, self.check_mode)
        except KubeError as error:
            metadata = obj.get("metadata") or {}
            where = f"{obj.get('kind', '')} {metadata.get('namespace', '')}/{metadata.get('name', '')}"
            with self._events_lock:
                self.event_failures.append(
                    cond.truncated(f"Event {reason} on {where} not recorded: {error}", failures.SHOWN_LIMIT)
                )

    def failed(self, claim: dict, error: Exception, step: str, type_: str = cond.SYNCHRONIZATION) -> dict:
        """One claim's step failed with `error` (any but a conflict): the claim's `type_` condition says so (False,
        ReconcileError; a Warning Event when that is new), the key is reported in `errors`, and the step's result
        for it is returned (state `error`)."""
        namespace, name = binding.key(claim)
        detail = error_detail(error)
        message = failures.error_message(detail, internal=not isinstance(error, KubeError))
        condition = (type_, "False", failures.RECONCILE_ERROR, message)
        previous = cond.find((claim.get("status") or {}).get("conditions"), type_) or {}
        self.book.failed(claim, step, condition, detail)
        if (previous.get("reason"), previous.get("message")) != (failures.RECONCILE_ERROR, cond.truncated(message)):
            self.event(claim, "Warning", failures.RECONCILE_ERROR, message)
        shown = failures.shown(detail, failures.REPORTED_LIMIT)
        return {"namespace": namespace, "name": name, "state": "error", "message": shown, "changed": False}

    def record(self, kind: str, before: dict | None, after: dict | None, secret: bool = False) -> None:
        """For the diff: an object as it was (None: created) and as it is written (None: deleted).

        Call it once the write succeeded, or where check mode skips it. Only the changed fields are
        shown; a Secret's values never are (secret=True).
        """
        if self.diff is None:
            return
        old, new = changed_fields(before, after)
        if not old and not new:
            return
        if secret:
            old, new = redacted_secret(old), redacted_secret(new)
        metadata = (after or before)["metadata"]
        self.diff.append(entry(kind, metadata.get("namespace"), metadata["name"], old, new))

    def record_status(self, claim: dict, desired: dict) -> None:
        """For the diff: the fields of a claim's status its write changes (conditions by type; not lastUpdated)."""
        patch = status_patch(claim, desired) or {}
        current = claim.get("status") or {}
        old = {name: _by_type(current[name]) for name in patch if current.get(name) is not None}
        new = {name: _by_type(value) for name, value in patch.items() if value is not None}
        metadata = claim["metadata"]
        self.record("HostClaim", {"metadata": metadata, "status": old}, {"metadata": metadata, "status": new})

    def finish(self, result: dict) -> dict:
        """Write the statuses; the module result with `changed` covering them, the run's API cost, its diff."""
        self.book.flush()
        result["changed"] = bool(result.get("changed")) or self.book.writes > 0
        result["status_writes"] = self.book.writes
        result["errors"] = sorted(self.book.errors, key=lambda e: (e["namespace"], e["name"], e["step"]))
        result["outcomes"] = claim_outcomes(result)
        if self.event_failures:
            result["warnings"] = [*(result.get("warnings") or []), *sorted(set(self.event_failures))]
        if self.diff is not None:
            result["diff"] = self.diff
        calls = getattr(self.api, "calls", None)
        if calls is not None:
            result["api_calls"] = dict(sorted(calls.items()))
        return result


def _by_type(value):
    """Conditions keyed by type, so a diff shows only those that changed; any other value as it is."""
    if isinstance(value, list) and all(isinstance(c, dict) and "type" in c for c in value):
        return {c["type"]: c for c in value}
    return value


def bound_claims(run: ClaimRun) -> list[tuple[dict, dict]]:
    """(claim, its host) for each live claim of ours whose binding is committed (or being committed by
    this run): one list call per kind."""
    claims = [
        c
        for c in run.claims()
        if not c["metadata"].get("deletionTimestamp") and binding.claim_kind(c) == binding.DEFAULT_CLAIM_KIND
    ]
    hosts = run.kube.list(API_VERSION, "BareMetalHost") if claims else []
    pairs = []
    for claim in claims:
        own = sorted((h for h in hosts if binding.consumed_by(h, claim)), key=binding.key)
        if own and (committed(claim, own[0]) or run.book.is_committing(claim)):
            pairs.append((claim, own[0]))
    return pairs


def namespace_metadata(kube) -> dict:
    """namespace name -> its metadata (labels: what hasLabels in a policy is checked against), in one list call."""
    return {ns["metadata"]["name"]: ns["metadata"] for ns in kube.list("v1", "Namespace")}


def namespace_labels(kube) -> dict:
    """namespace name -> its labels, in one list call."""
    return {name: meta.get("labels") or {} for name, meta in namespace_metadata(kube).items()}


def step_each(pairs: list[tuple[dict, object]], step, refresh=None, each=None, on_error=None) -> dict:
    """Run step(claim, what it needs) -> result for each pair; a conflict or an error on one claim does not stop
    the others. each(function, items): how the pairs are gone through (ClaimRun.each: several at once).

    On a conflict, refresh(claim, what) may read both again (None: nothing left to do) for one
    more try: steps are idempotent, and the object most often changed under us because a
    concurrent run wrote what we were about to write.

    Any other error (an API error, or an internal one) is the claim's: on_error(claim, error) -> its result
    (ClaimRun.failed: a condition on the claim, the key reported), by default a result of state `error`.
    """

    def failed(claim: dict, error: Exception) -> dict:
        if on_error is not None:
            return on_error(claim, error)
        namespace, name = binding.key(claim)
        message = failures.shown(error_detail(error), failures.REPORTED_LIMIT)
        return {"namespace": namespace, "name": name, "state": "error", "message": message, "changed": False}

    def one(pair) -> dict:
        claim, needed = pair
        try:
            return step(claim, needed)
        except ConflictError as error:
            conflict = error
        except Exception as error:  # one claim's failure, whatever it is, is not the batch's
            return failed(claim, error)
        try:
            fresh = refresh(claim, needed) if refresh else None
            if fresh is not None:
                return step(*fresh)
        except ConflictError as error:
            conflict = error
        except Exception as error:
            return failed(claim, error)
        namespace, name = binding.key(claim)
        return {"namespace": namespace, "name": name, "state": "conflict", "message": str(conflict), "changed": False}

    results = (each or in_order)(one, pairs)
    return {"changed": any(r["changed"] for r in results), "claims": results}


def reread_bound(run: ClaimRun):
    """A step_each refresh for (claim, host) pairs: both read again, None when they are no longer bound."""

    def reread(claim: dict, host: dict):
        namespace, name = binding.key(claim)
        fresh_claim = run.kube.get(API_VERSION, "HostClaim", name, namespace)
        fresh_host = run.kube.get(API_VERSION, "BareMetalHost", binding.key(host)[1], binding.key(host)[0])
        if fresh_claim is None or fresh_host is None or fresh_claim["metadata"].get("deletionTimestamp"):
            return None
        if not binding.consumed_by(fresh_host, fresh_claim):
            return None
        run.book.wrote(fresh_claim)
        return fresh_claim, fresh_host

    return reread
