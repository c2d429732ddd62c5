# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A claim's status as data: the whole status a run wants, and the patch that gets there. Pure.

Shared by the claim layer (its StatusBook, _claims/io/writes.py, does the writing) and the remote
claims (_remote/pure/mirror.py), which write the same HostClaim status.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond


def desired_status(claim: dict, updates: dict, conditions: list[tuple[str, str, str, str]], timestamp: str) -> dict:
    """The claim's status after `updates` (None clears a field) and conditions [(type, status, reason, message)]
    (a status of None removes that condition)."""
    status = copy.deepcopy(claim.get("status") or {})
    generation = claim["metadata"].get("generation", 0)
    current = status.get("conditions") or []
    for type_, value, reason, message in conditions:
        if value is None:
            current = [c for c in current if c.get("type") != type_]
            continue
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
