# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One claim's failure, as its own condition: what a tenant is told when a request made for its claim fails. Pure.

A run reconciles a batch of claims; a request the API server refuses for one of them (a 403 on a Secret of a
namespace the claim side may not read, a 422 on a host or a status, an internal error on a claim no test foresaw)
is that claim's failure, never the batch's. The claim gets `ReconcileError` on the condition of the step that
failed (Synchronization for a bound claim), or, when its own status is what the API server refuses, a minimal
status whose Ready says `StatusRefused`; the run reports the key as an error and the controller retries it alone.

What is shown is what the claim layer was doing and the server's answer, with URLs and IP addresses taken out (a
server message about a host may quote any of its fields), cut to SHOWN_LIMIT bytes.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.sync import without_addresses
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond

RECONCILE_ERROR = "ReconcileError"
STATUS_REFUSED = "StatusRefused"
# What a condition shows of an error (it is also one line of Ready), and what a run's result keeps of it.
SHOWN_LIMIT = 1024
REPORTED_LIMIT = 4096
# What a minimal status keeps of each condition's message: enough to read, far from any limit.
MINIMAL_MESSAGE_LIMIT = 256
# The status fields a minimal status may set: the binding (its commit), the power state, the conditions.
MINIMAL_FIELDS = ("hardwareData", "hostUID", "poweredOn", "observedGeneration")


def shown(detail: str, limit: int = SHOWN_LIMIT) -> str:
    """An error's text as a tenant may read it: one line, no URL or address, at most `limit` bytes."""
    return cond.truncated(" ".join(without_addresses(detail).split()), limit)


def error_message(detail: str, internal: bool = False) -> str:
    """The failed condition's message for an API error (`detail`: what was refused and why) or an internal one."""
    if internal:
        return (
            f"the claim layer failed on this claim ({shown(detail, 128)}); the next reconcile tries again, and the "
            "infrastructure team finds the details in the controller's log"
        )
    return f"a request for this claim failed: {shown(detail)}; the next reconcile tries again"


def refused_message(detail: str) -> str:
    """Ready's message when the API server refused the claim's whole status."""
    return (
        f"the API server refused this claim's status ({shown(detail)}); only a minimal status is shown, "
        "the next reconcile tries again"
    )


def minimal_status(claim: dict, desired: dict, message: str, timestamp: str) -> dict:
    """The status to write when the API server refused `desired`: the claim's current status with only the binding,
    the power state and the conditions taken from `desired`, each condition's reason checked and message cut short,
    and Ready False/StatusRefused saying why."""
    minimal = copy.deepcopy(claim.get("status") or {})
    for name in MINIMAL_FIELDS:
        if name in desired:
            minimal[name] = desired[name]
        else:
            minimal.pop(name, None)
    generation = claim["metadata"].get("generation", 0)
    conditions = []
    for condition in desired.get("conditions") or []:
        condition = dict(condition)
        if not cond.valid_reason(condition.get("reason", "")):
            condition["reason"] = "Unknown"
        condition["message"] = cond.truncated(condition.get("message") or "", MINIMAL_MESSAGE_LIMIT)
        conditions.append(condition)
    # Over the desired Ready: its lastTransitionTime is kept when it was False already.
    minimal["conditions"] = cond.set_condition(
        conditions, cond.READY, "False", STATUS_REFUSED, message, generation, timestamp
    )
    return minimal
