# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A claim's binding lock: the host its status records, our finalizer and this run's token on it. Pure.

The status a run wants and the patch that gets there are _common/pure/status.py; the StatusBook
(_claims/io/writes.py) calls both and does the writing.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding

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
