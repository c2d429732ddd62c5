# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writing what the claim layer decided: claim status, finalizer, Events. The I/O edge."""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._binding import FINALIZER

REPORTING_COMPONENT = "metalclaim"


def desired_status(claim: dict, updates: dict, conditions: list[tuple[str, str, str, str]], timestamp: str) -> dict:
    """The claim's status after `updates` (None clears a field) and conditions [(type, status, reason, message)]."""
    status = copy.deepcopy(claim.get("status") or {})
    generation = claim["metadata"].get("generation", 0)
    current = status.get("conditions") or []
    for type_, value, reason, message in conditions:
        current = cond.set_condition(current, type_, value, reason, message, generation, timestamp)
    current = cond.with_ready(current, generation, timestamp)
    for field, value in updates.items():
        if value is None:
            status.pop(field, None)
        else:
            status[field] = value
    status["conditions"] = current
    status["observedGeneration"] = generation
    return status


def status_patch(claim: dict, desired: dict) -> dict | None:
    """A merge patch from the claim's status to `desired`, or None when they already agree."""
    current = claim.get("status") or {}
    patch = {}
    for field in (set(current) | set(desired)) - {"lastUpdated"}:
        if field == "conditions":
            if not cond.same(current.get("conditions"), desired.get("conditions")):
                patch["conditions"] = desired["conditions"]
        elif current.get(field) != desired.get(field):
            patch[field] = desired.get(field)  # None deletes the field in a merge patch
    return patch or None


def write_status(kube, claim: dict, desired: dict, timestamp: str, check_mode: bool) -> bool:
    """Write the status when it differs; returns whether it did (or would)."""
    patch = status_patch(claim, desired)
    if patch is None:
        return False
    patch["lastUpdated"] = timestamp
    if not check_mode:
        kube.patch_status(claim, patch)
    return True


BINDING_ANNOTATION = "metalclaim.io/binding-attempt"


def lock_for_binding(kube, claim: dict, timestamp: str, check_mode: bool) -> dict:
    """Write the claim (finalizer + attempt stamp) under its resourceVersion before taking a host.

    Binders that read the same claim version race on this write: at most one wins, and
    the status written after the host is guarded by the winner's new resourceVersion, so
    a claim can never end up owning two hosts. Raises ConflictError for the losers.
    """
    if check_mode:
        return claim
    updated = copy.deepcopy(claim)
    meta = updated["metadata"]
    finalizers = meta.get("finalizers") or []
    if FINALIZER not in finalizers:
        meta["finalizers"] = [*finalizers, FINALIZER]
    # The time of the lock itself (not of the run): a binder that started earlier skips claims
    # stamped after its own start, which only a concurrent binder can have done.
    meta.setdefault("annotations", {})[BINDING_ANNOTATION] = max(cond.now(), timestamp)
    return kube.replace(updated)


def with_finalizer(kube, claim: dict, check_mode: bool) -> tuple[dict, bool]:
    """Make sure the claim carries our finalizer, so its deletion waits for the release."""
    finalizers = claim["metadata"].get("finalizers") or []
    if FINALIZER in finalizers:
        return claim, False
    if check_mode:
        return claim, True
    updated = copy.deepcopy(claim)
    updated["metadata"]["finalizers"] = [*finalizers, FINALIZER]
    return kube.replace(updated), True


def event(kube, claim: dict, event_type: str, reason: str, message: str, timestamp: str, check_mode: bool) -> None:
    """Record a Kubernetes Event on the claim (what `kubectl describe hostclaim` shows the tenant)."""
    if check_mode:
        return
    meta = claim["metadata"]
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": claim["apiVersion"],
                "kind": claim["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": REPORTING_COMPONENT},
            "reportingComponent": REPORTING_COMPONENT,
            "reportingInstance": REPORTING_COMPONENT,
            "firstTimestamp": timestamp,
            "lastTimestamp": timestamp,
            "count": 1,
        }
    )
