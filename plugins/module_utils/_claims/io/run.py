# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run of the claim layer: the run kernel (_common/io/run.py) plus a status book, caches, a token. I/O edge.

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

import contextlib
import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.writes import (
    StatusBook,
    error_detail,
    in_order,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, failures
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.binding import committed, select_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.outcomes import claim_outcomes
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    WRITERS,
    ConflictError,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import Run
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import status_patch


class ClaimRun(Run):
    """A Run (_common/io/run.py) of the claim layer: the claims it was asked about, their status book, the tenant
    Secrets it read."""

    def __init__(self, kube, wanted: list[dict] | None, timestamp: str, check_mode: bool, diff: bool = False):
        super().__init__(kube, timestamp, check_mode, diff=diff, workers=WRITERS, thread_name="claim")
        self.wanted = wanted
        self.book = StatusBook(
            self.kube, timestamp, check_mode, on_write=self.record_claim_status if diff else None, each=self.each
        )
        self._secrets: dict[tuple[str, str], dict | None] = {}
        self._events: list[tuple] = []  # sent by finish(), after every status

    def claims(self) -> list[dict]:
        """The run's claims (those named in `wanted`, or all), oldest first.

        hostclaim_reconcile's client answers lists with what this run wrote, so a later step
        sees an earlier step's writes.
        """
        return [copy.deepcopy(c) for c in select_claims(self.kube.held(API_VERSION, "HostClaim"), self.wanted)]

    @contextlib.contextmanager
    def narrowed(self, claims: list[dict]):
        """Meanwhile the run's claims are these (a chunk of the batch): steps that go through run.claims() see
        only them."""
        wanted = self.wanted
        self.wanted = [{"namespace": namespace, "name": name} for namespace, name in map(binding.key, claims)]
        try:
            yield
        finally:
            self.wanted = wanted

    def event(self, obj: dict, event_type: str, reason: str, message: str) -> None:
        """An Event, sent when the run finishes: it tells people of what the statuses say, so it never delays one
        (in a storm a claim's Bound Event would otherwise cost its chunk one more request each)."""
        self._events.append((obj, event_type, reason, message))

    def secret(self, namespace: str, name: str) -> dict | None:
        """A tenant Secret, read at most once per run however many claims and roles name it."""
        if (namespace, name) not in self._secrets:
            self._secrets[(namespace, name)] = self.kube.get("v1", "Secret", name, namespace)
        return self._secrets[(namespace, name)]

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

    def record_claim_status(self, claim: dict, desired: dict) -> None:
        """For the diff: the fields of a claim's status its write changes (not lastUpdated)."""
        self.record_status("HostClaim", claim, status_patch(claim, desired) or {})

    def finish(self, result: dict) -> dict:
        """Write the statuses; the module result with `changed` covering them, the run's API cost, its diff."""
        self.book.flush()
        self.each(lambda args: super(ClaimRun, self).event(*args), self._events)
        result["changed"] = bool(result.get("changed")) or self.book.writes > 0
        result["status_writes"] = self.book.writes
        result["errors"] = sorted(self.book.errors, key=lambda e: (e["namespace"], e["name"], e["step"]))
        result["outcomes"] = claim_outcomes(result)
        return super().finish(result)


def bound_claims(run: ClaimRun) -> list[tuple[dict, dict]]:
    """(claim, its host) for each live claim of ours whose binding is committed (or being committed by
    this run): one list call per kind."""
    claims = [
        c
        for c in run.claims()
        if not c["metadata"].get("deletionTimestamp") and binding.claim_kind(c) == binding.DEFAULT_CLAIM_KIND
    ]
    index = binding.HostIndex(run.kube.held(API_VERSION, "BareMetalHost") if claims else [])
    pairs = []
    for claim in claims:
        # The host its status names, or the one this run took for it: never another binder's, which a claim may
        # name too for the time that binder takes to find our commit and give its own back.
        taking = run.book.committing_to(claim)
        host = next((h for h in index.owned_by(claim) if committed(claim, h) or binding.key(h) == taking), None)
        if host is not None:
            pairs.append((claim, copy.deepcopy(host)))
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
