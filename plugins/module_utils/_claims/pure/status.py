# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A claim's binding as the claim holds it: the host its status records, our finalizer. Pure.

The status a run wants and the patch that gets there are _common/pure/status.py; the StatusBook
(_claims/io/writes.py) calls both and does the writing.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding


def recorded_host(claim: dict) -> tuple[str, str] | None:
    """(namespace, name) of the host the claim's status names (status.hardwareData), or None."""
    recorded = (claim.get("status") or {}).get("hardwareData") or {}
    return (recorded.get("namespace", ""), recorded.get("name", "")) if recorded else None


def locked_claim(claim: dict) -> dict:
    """The claim carrying our finalizer (so its deletion waits for its host's release)."""
    locked = copy.deepcopy(claim)
    meta = locked["metadata"]
    finalizers = meta.get("finalizers") or []
    if binding.FINALIZER not in finalizers:
        meta["finalizers"] = [*finalizers, binding.FINALIZER]
    return locked
