# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writing what the claim layer decided: claim status (once per run; it commits a binding), finalizer.

Steps do not write a claim's status themselves. Each one notes what it found in the run's
StatusBook; the book computes the whole status (every condition, then Ready) and writes it
in one merge patch, only when it differs. A tenant watching a claim sees at most one status
update per run and no transient Ready; the one exception is a claim the run binds, whose status is
written as soon as its host is taken (that write commits the binding) and at the end only if a later
step changed it.

A status write that fails other than by a conflict fails that claim alone: the book records the
error (the run reports the key as failed), and when the API server refused the status itself (400,
413, 422: a field it will not take) writes a minimal one instead, whose Ready says why
(_claims/pure/failures.py). The other claims' statuses are written as usual.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, failures
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.status import (
    locked_claim,
    recorded_host,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import ConflictError, KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import (
    desired_status,
    status_patch,
)

# Tries to commit a binding over writes of others to the claim (labels, annotations) before giving the host back.
COMMIT_ATTEMPTS = 3
# Answers to a status write that say the status itself is what the API server will not take: a minimal one may pass.
STATUS_REFUSED_CODES = (400, 413, 422)
# What _flush_one returns for a claim whose status was not written (the error is in StatusBook.errors), or
# whose status was refused and a minimal one written instead.
ERROR = "error"
MINIMAL = "minimal"


def api_status(error: Exception) -> int | None:
    """The HTTP status of the API server's answer behind a KubeError (None: no answer, or not an API error)."""
    status = getattr(error.__cause__, "status", None)
    return status if isinstance(status, int) else None


def error_detail(error: Exception) -> str:
    """What failed, as the run reports it: a KubeError's own message (the request, the status, the server's
    message for a refusal), with the server's message of a refused status write, which KubeError leaves out."""
    detail = str(error) if isinstance(error, KubeError) else f"{type(error).__name__}: {error}"
    body = getattr(error.__cause__, "body", None)
    if isinstance(error, KubeError) and isinstance(body, (str, bytes)) and not getattr(error, "server_message", ""):
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if isinstance(message, str) and message and message not in detail:
            detail = f"{detail}: {message}"
    return detail


@dataclass
class _Entry:
    claim: dict  # the newest version of the claim this run knows (it follows the run's own writes)
    conditions: dict = field(default_factory=dict)  # type -> (status, reason, message)
    updates: dict = field(default_factory=dict)
    # Set when this run took a host for the claim: the status write is then the commit point
    # of the binding (guarded by the lock's resourceVersion); if it fails, give_back() runs.
    give_back: object = None
    results: list = field(default_factory=list)  # step results to mark when the write conflicts
    on_commit: list = field(default_factory=list)  # callables run once the status is written (or was current)
    written: bool = False
    # The host the claim's status named when this run first decided about it. Only status writes
    # change it, and this run's only status write is the flush: if the claim this run holds at the
    # end names another, another run bound or released the claim meanwhile, and what this run
    # decided (say "no free host", from a host list older than that binding) is stale.
    decided_on: object = None
    # The host a stale status names (one that vanished, or names another claim), which the binding this run made
    # replaces: finding it still there at the commit is not another binder's commit (issue 40).
    replacing: object = None
    refused: bool = False  # its status write failed and nothing was written: not tried again in this run


def in_order(function, items: list) -> list:
    """[function(item) for item in items]: the way to go through claims one at a time."""
    return [function(item) for item in items]


class StatusBook:
    """Each claim's status for one run: noted by the steps, written by the last flush() (a binding this run
    made: by its own flush(only=...) first, which commits it; see amend())."""

    def __init__(self, kube, timestamp: str, check_mode: bool, on_write=None, each=None):
        self._kube = kube
        self._timestamp = timestamp
        self._check_mode = check_mode
        # on_write(claim before, desired status): told of each status write made (or, in check mode, due).
        self._on_write = on_write
        # each(function, items): how flush() goes through the claims (ClaimRun.each: several at once).
        self._each = each or in_order
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()  # the entries and the count, for steps running claims at once
        self.writes = 0  # status writes this run made (or would make, in check mode)
        # One per failure of a claim (a step's or its status write's): {namespace, name, step, message}.
        self.errors: list[dict] = []

    def wrote(self, claim: dict) -> None:
        """Remember a newer version of a claim: one this run wrote (as the API server returned it) or re-read."""
        self._entry(claim).claim = claim

    def note(
        self,
        claim: dict,
        conditions: list[tuple[str, str, str, str]] = (),
        updates: dict | None = None,
        result: dict | None = None,
    ) -> None:
        """Record what a step found about `claim` (the newest version the step has); later notes win."""
        entry = self._entry(claim)
        if not entry.conditions and not entry.updates:
            entry.decided_on = recorded_host(claim)
        entry.claim = claim
        for type_, status, reason, message in conditions:
            entry.conditions[type_] = (status, reason, message)
        entry.updates.update(updates or {})
        if result is not None:
            entry.results.append(result)

    def amend(self, claim: dict, conditions: list[tuple[str, str, str, str]]) -> None:
        """Conditions a step learned after it noted the claim (from a write it made since).

        A claim whose status this run already wrote (the commit of a binding made by this run)
        is written once more by the last flush; the binding is committed by then, so that write
        is an ordinary one.
        """
        entry = self._entry(claim)
        for type_, status, reason, message in conditions:
            entry.conditions[type_] = (status, reason, message)
        if entry.written and not entry.refused:
            entry.written = False
            entry.give_back, entry.on_commit = None, []
            entry.decided_on = recorded_host(entry.claim)

    def failed(self, claim: dict, step: str, condition: tuple[str, str, str, str], detail: str) -> None:
        """A step failed for `claim` (`detail`: what, as the run reports it): `condition` says so on the claim,
        over what the step noted, and the key is reported as failed. Like amend(), a status this run already
        wrote is written once more by the last flush."""
        entry = self._entry(claim)  # the newest version of the claim this run knows stays
        if not entry.conditions and not entry.updates:
            entry.decided_on = recorded_host(entry.claim)
        self.amend(claim, [condition])
        self.error(claim, step, detail)

    def error(self, claim: dict, step: str, detail: str) -> None:
        """Report the claim as failed in this run (`detail` as the run's result shows it)."""
        namespace, name = binding.key(claim)
        message = failures.shown(detail, failures.REPORTED_LIMIT)
        with self._lock:
            self.errors.append({"namespace": namespace, "name": name, "step": step, "message": message})

    def committing(self, claim: dict, give_back, on_commit, replacing: tuple[str, str] | None = None) -> None:
        """This run took a host for `claim`: its status write commits the binding (then on_commit()) or
        give_back() undoes it. `replacing`: the host the claim's stale status names (binding.Plan.stale_status),
        which the binding's status write replaces."""
        entry = self._entry(claim)
        entry.give_back = give_back
        entry.replacing = replacing
        entry.on_commit.append(on_commit)

    def is_committing(self, claim: dict) -> bool:
        return self.committing_to(claim) is not None

    def committing_to(self, claim: dict) -> tuple[str, str] | None:
        """(namespace, name) of the host this run took for `claim` and has not committed yet, or None."""
        entry = self._entries.get(binding.key(claim))
        if not entry or entry.give_back is None:
            return None
        ours = entry.updates.get("hardwareData") or {}
        return ours.get("namespace", ""), ours.get("name", "")

    def desired(self, key: tuple[str, str], claim: dict | None = None) -> dict:
        """The claim's status as this run decided it, over the newest version it knows (or over `claim`)."""
        entry = self._entries[key]
        conditions = [(t, *v) for t, v in entry.conditions.items()]
        return desired_status(claim or entry.claim, entry.updates, conditions, self._timestamp)

    def condition(self, claim: dict, type_: str) -> tuple[str, str, str] | None:
        """What this run noted for a condition so far, or None."""
        entry = self._entries.get(binding.key(claim))
        return entry.conditions.get(type_) if entry else None

    def flush(self, only: tuple[str, str] | None = None, keys: list | None = None) -> dict:
        """Write every noted claim's status that differs (or only one claim's, or only those of `keys`); {key:
        changed | "conflict" | ERROR | MINIMAL}. A claim whose write fails does not stop the others'."""
        with self._lock:
            if only:
                keys = [only]
            keys = sorted(self._entries) if keys is None else [key for key in keys if key in self._entries]
            due = [key for key in keys if not self._entries[key].written]
            for key in due:
                self._entries[key].written = True
        written = self._each(self._flush_one, due) if not only else [self._flush_one(key) for key in due]
        return {key: written[index] for index, key in enumerate(due)}

    def _flush_one(self, key: tuple[str, str]):
        entry = self._entries[key]
        before, desired = entry.claim, self.desired(key)
        try:
            outcome = self._write(key, entry)
        except KubeError as error:  # not a conflict: _write handles those
            outcome, desired = self._refused(key, entry, error)
        if outcome in (True, MINIMAL):
            with self._lock:
                self.writes += 1
            if self._on_write:
                self._on_write(before, desired)
        if outcome not in ("conflict", ERROR):
            for then in entry.on_commit:
                then()
        return outcome

    def _refused(self, key: tuple[str, str], entry: _Entry, error: KubeError) -> tuple[object, dict | None]:
        """(ERROR or MINIMAL, the status written) after the API server failed the claim's status write.

        A status it refused as such is written again minimal, Ready saying why, and that write commits a
        binding this run made as the full one would have; otherwise (or if that fails too) the binding is
        given back. Either way the claim is reported as failed, to be tried again.
        """
        detail = error_detail(error)
        self.error(entry.claim, "status", detail)
        written = None
        if api_status(error) in STATUS_REFUSED_CODES:
            minimal = failures.minimal_status(
                entry.claim, self.desired(key), failures.refused_message(detail), self._timestamp
            )
            patch = status_patch(entry.claim, minimal)
            if patch is not None:
                patch["lastUpdated"] = self._timestamp
                try:
                    entry.claim = self._kube.patch_status(entry.claim, patch)
                    written = minimal
                except KubeError as second:
                    self.error(entry.claim, "status", f"the minimal status too: {error_detail(second)}")
        message = failures.shown(detail, failures.REPORTED_LIMIT)
        if written is None:
            entry.refused = True  # not written again by this run (its updates may name a host given back)
            if entry.give_back is not None:
                try:  # the commit failed: the claim must not hold a host its status does not name
                    entry.give_back()
                except KubeError as give_back_error:
                    self.error(entry.claim, "status", f"giving its host back: {error_detail(give_back_error)}")
        for result in entry.results:
            result.update(state=ERROR, message=message, changed=False)
            if "action" in result and written is None:  # a bind result whose host went back
                result.update(action=ERROR, host=None)
        return (ERROR, None) if written is None else (MINIMAL, written)

    def _write(self, key: tuple[str, str], entry: _Entry):
        patch = status_patch(entry.claim, self.desired(key))
        if patch is None:
            return False
        if entry.give_back is None and recorded_host(entry.claim) != entry.decided_on:
            # Bound or released by another run since this one decided: its write is an event
            # that brings the claim back, decided again from a newer view.
            message = "the claim was bound or released by another reconcile during this one"
            for result in entry.results:
                result.update(state="conflict", message=message, changed=False)
                if "action" in result:
                    result.update(action="conflict", host=None)
            return "conflict"
        if entry.give_back is not None and _bound_elsewhere(self._kube, entry.claim, entry):
            # A later step of this run noted a newer version of the claim (the sync step reads the claims again
            # after a binder's re-list), whose status another binder committed to its host meanwhile: writing ours
            # over it would leave the claim on two hosts. The first commit wins; ours goes back.
            conflict = ConflictError("another reconcile bound the claim to another host during this one")
        elif self._check_mode:
            return True
        else:
            patch["lastUpdated"] = self._timestamp
            try:
                entry.claim = self._kube.patch_status(entry.claim, patch)
                return True
            except ConflictError as error:
                conflict = error
        # Someone wrote the claim since we read it. For a binding this run made, what it found
        # still holds while no other binder committed one (the claim's status names no host, or
        # ours: a run that merely saw our binding writes the same status): commit it over the
        # newer version, as often as a write by someone else (a label, a tenant's annotation) gets
        # in between. Any other status is left to the run that wrote: its view of
        # the hosts is newer than ours (claims are always listed before hosts), and the write
        # it made is an event that brings the claim back to the next run. A claim whose finalizer
        # went meanwhile (its tenant stripped it before the status named a host, when admission
        # still allows that) is not ours either: committing would let it vanish on delete with
        # its host never released, so the host goes back and the next run locks it again.
        for _attempt in range(COMMIT_ATTEMPTS if entry.give_back is not None else 0):
            fresh = self._kube.get(API_VERSION, "HostClaim", key[1], key[0])
            if not _still_ours(self._kube, fresh, entry):
                break
            entry.claim = fresh
            patch = status_patch(fresh, self.desired(key))
            if patch is None:
                return False
            patch["lastUpdated"] = self._timestamp
            try:
                entry.claim = self._kube.patch_status(fresh, patch)
                return True
            except ConflictError as error:
                conflict = error
        if entry.give_back is None:
            # Concurrent runs over the same claims decide the same for most of them (no free host, say): a claim
            # that already says what this run would write was not taken from it.
            fresh = self._kube.get(API_VERSION, "HostClaim", key[1], key[0])
            if fresh is not None and status_patch(fresh, self.desired(key, fresh)) is None:
                entry.claim = fresh
                return False
        if entry.give_back is not None:
            # Another binder committed another host for the claim (or the claim changed under us):
            # give ours back so the claim never owns two; the next run sees what is there.
            entry.give_back()
        for result in entry.results:
            result.update(state="conflict", message=str(conflict), changed=False)
            if "action" in result:  # a bind result: the host went back
                result.update(action="conflict", host=None)
        return "conflict"

    def _entry(self, claim: dict) -> _Entry:
        key = binding.key(claim)
        with self._lock:
            if key not in self._entries:
                self._entries[key] = _Entry(claim=claim)
            return self._entries[key]


def _still_ours(kube, fresh: dict | None, entry: _Entry) -> bool:
    """Whether a binding this run made may still be committed on the claim as it is now (`fresh`).

    Binders race on the claim's status, each write guarded by the resourceVersion it read: the first to
    write a host into it wins, and any other finds that host there and gives its own back. The claim must
    also be the one this run planned for (same generation: its spec did not change) and still carry our
    finalizer (a claim that lost it would vanish on delete with its host never released).
    """
    if fresh is None or fresh["metadata"].get("deletionTimestamp"):
        return False
    if fresh["metadata"].get("generation") != entry.claim["metadata"].get("generation"):
        return False
    if binding.FINALIZER not in (fresh["metadata"].get("finalizers") or []):
        return False
    return not _bound_elsewhere(kube, fresh, entry)


def _bound_elsewhere(kube, claim: dict, entry: _Entry) -> bool:
    """Whether the claim's status names a host other than the one this run's binding would write into it.

    The stale host the binding replaces (entry.replacing: gone, or naming another claim, when the run planned) is
    another binder's only if it names the claim now: asked of the server (the run's host list may be older than
    its claim list), once, and only then."""
    ours = entry.updates.get("hardwareData") or {}
    recorded = recorded_host(claim)
    if recorded in (None, (ours.get("namespace", ""), ours.get("name", ""))):
        return False
    if recorded != entry.replacing:
        return True
    host = kube.get(API_VERSION, "BareMetalHost", recorded[1], recorded[0])
    return host is not None and binding.consumed_by(host, claim)


def with_finalizer(kube, claim: dict, check_mode: bool) -> tuple[dict, bool]:
    """Make sure the claim carries our finalizer, so its deletion waits for the release.

    Concurrent binders walking the same claims all write it: one whose write conflicts reads the claim again and
    goes on when the finalizer is there, on the claim as planned (same generation, not being deleted, its status
    naming the same host or none, as it did). Which binder binds the claim is decided later, by the host's and the
    status's resourceVersions; this write decides nothing. The version returned is the one the status write is
    guarded by: a version whose status another binder already bound would let this run bind the claim a second
    time, so that is a conflict.
    """
    finalizers = claim["metadata"].get("finalizers") or []
    if binding.FINALIZER in finalizers:
        return claim, False
    if check_mode:
        return claim, True
    try:
        return kube.replace(locked_claim(claim)), True
    except ConflictError:
        namespace, name = binding.key(claim)
        fresh = kube.get(API_VERSION, "HostClaim", name, namespace)
        planned = fresh is not None and not fresh["metadata"].get("deletionTimestamp")
        if not planned or fresh["metadata"].get("generation") != claim["metadata"].get("generation"):
            raise
        if recorded_host(fresh) != recorded_host(claim):  # bound (or released) by another binder meanwhile
            raise
        if binding.FINALIZER in (fresh["metadata"].get("finalizers") or []):
            return fresh, False
        return kube.replace(locked_claim(fresh)), True
