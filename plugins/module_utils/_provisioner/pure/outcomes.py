# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each host's outcome from a provisioning run's per-host results. Pure.

The provisioner backs off a failing host itself (its status's error count), so a host is never ``retry``: it is
``done``, looked at again when its next step is due (``requeue_after``: a power change to confirm, a callback to
wait for, a backoff) or, once settled, when its power is to be read again (``poll_after``).
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import DONE, Outcomes


def host_outcomes(hosts: list[dict]) -> list[dict]:
    found = Outcomes()
    for entry in hosts:
        if entry.get("requeue_after") is not None:
            found.note(entry["namespace"], entry["name"], DONE, entry["requeue_after"], entry.get("state") or "")
        elif entry.get("poll_after") is not None:
            found.note(entry["namespace"], entry["name"], DONE, entry["poll_after"], "poll")
        else:
            found.note(entry["namespace"], entry["name"], DONE)
    return found.listed()
