# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each remote claim's outcome from a mirroring run's per-claim results. Pure.

The hardware cluster is polled: a mirrored (or unreachable, or deleting) claim is ``done`` and looked at again
when its result says (``requeue_after``, backing off an unreachable cluster); a refused one ``wait``s for a local
change (its claim or Secret); a conflict is a ``retry``, a local API error an ``error``.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import (
    DONE,
    ERROR,
    RETRY,
    WAIT,
    Outcomes,
)


def remote_outcomes(claims: list[dict]) -> list[dict]:
    found = Outcomes()
    for entry in claims:
        state = entry.get("state") or ""
        if state == "conflict":
            found.note(entry["namespace"], entry["name"], RETRY, reason="conflict")
        elif state == "error":
            found.note(entry["namespace"], entry["name"], ERROR, reason=f"error: {entry.get('message') or ''}")
        elif entry.get("requeue_after") is not None:
            found.note(entry["namespace"], entry["name"], DONE, entry["requeue_after"], state)
        elif state == "refused":
            found.note(entry["namespace"], entry["name"], WAIT, reason=entry.get("reason") or "refused")
        else:
            found.note(entry["namespace"], entry["name"], DONE, reason=state)
    return found.listed()
