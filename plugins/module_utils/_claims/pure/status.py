# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A claim's status as data: the whole status a run wants, the patch that gets there, the binding lock's token.

Pure: the StatusBook (_claims/io/writes.py) calls these and does the writing.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond


def desired_status(claim: dict, updates: dict, conditions: list[tuple[str, str, str, str]], timestamp: str) -> dict:
    """The claim's status after `updates` (None clears a field) and conditions [(type, status, reason, message)]."""
    status = copy.deepcopy(claim.get("status") or {})
    generation = claim["metadata"].get("generation", 0)
    current = status.get("conditions") or []
    for type_, value, reason, message in conditions:
        current = cond.set_condition(current, type_, value, reason, message, generation, timestamp)
    current = cond.with_ready(current, generation, timestamp)
    for name, value in updates.items():
        if value is None:
            status.pop(name, None)
        else:
            status[name] = value
    status["conditions"] = current
    status["observedGeneration"] = generation
    return status


def status_patch(claim: dict, desired: dict) -> dict | None:
    """A merge patch from the claim's status to `desired`, or None when they already agree."""
    current = claim.get("status") or {}
    patch = {}
    for name in (set(current) | set(desired)) - {"lastUpdated"}:
        if name == "conditions":
            if not cond.same(current.get("conditions"), desired.get("conditions")):
                patch["conditions"] = desired["conditions"]
        elif current.get(name) != desired.get(name):
            patch[name] = desired.get(name)  # None deletes the field in a merge patch
    return patch or None


BINDING_ANNOTATION = "metalclaim.io/binding-attempt"


def recorded_host(claim: dict) -> tuple[str, str] | None:
    """(namespace, name) of the host the claim's status names (status.hardwareData), or None."""
    recorded = (claim.get("status") or {}).get("hardwareData") or {}
    return (recorded.get("namespace", ""), recorded.get("name", "")) if recorded else None


def locked_claim(claim: dict, token: str | None = None) -> dict:
    """The claim carrying our finalizer and, given a token, this run's binding lock."""
    locked = copy.deepcopy(claim)
    meta = locked["metadata"]
    finalizers = meta.get("finalizers") or []
    if binding.FINALIZER not in finalizers:
        meta["finalizers"] = [*finalizers, binding.FINALIZER]
    if token is not None:
        meta.setdefault("annotations", {})[BINDING_ANNOTATION] = token
    return locked


def binding_token(claim: dict | None) -> str | None:
    return ((claim or {}).get("metadata", {}).get("annotations") or {}).get(BINDING_ANNOTATION)


def locked_by_another(claim: dict, first_seen: dict | None, token: str) -> bool:
    """Whether another binder is working on the claim right now.

    It is when the claim carries another run's token and changed while this run was going
    (its resourceVersion moved since this run first listed it). A token left by a finished
    or killed run, on a claim nobody writes, does not hold anyone back: there is no clock
    to compare, so no second in which two runs can collide.
    """
    stamp = binding_token(claim)
    if not stamp or stamp == token or first_seen is None:
        return False
    return first_seen["metadata"].get("resourceVersion") != claim["metadata"].get("resourceVersion")
