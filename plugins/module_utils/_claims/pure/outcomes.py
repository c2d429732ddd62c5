# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each claim's outcome from a claim-layer run's result (release, bind, bound steps and the claims that failed). Pure.

A claim that failed alone (in ``errors``, or a step's entry in state ``error``) is an ``error``: the controller
retries it by itself while the rest of its batch settles; a conflict with another writer is a ``retry``; a claim
whose host is being deprovisioned, or that no host can take, ``wait``s for the change that brings it back.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import (
    DONE,
    ERROR,
    RETRY,
    WAIT,
    Outcomes,
)

STEPS = ("release", "lease", "booking", "bind", "bound")  # hostclaim_reconcile's steps, each result under its name


def claim_outcomes(result: dict) -> list[dict]:
    """The outcome of every claim a run reports: hostclaim_reconcile's steps, or one step module's `claims`.

    A lease's next deadline (an entry's `after`: its warning or its end; a booking's start) survives whatever else
    is reported for the claim: a `done` or `wait` outcome gets the soonest `after` of its entries, so the controller
    wakes the claim then, whatever event it also waits for."""
    steps = [result[step] for step in STEPS if isinstance(result.get(step), dict)] or [result]
    found = Outcomes()
    deadlines: dict = {}
    for entry in result.get("errors") or []:  # first: what failed, said best (an equal outcome noted later loses)
        message = entry.get("message") or ""
        found.note(entry["namespace"], entry["name"], ERROR, reason=f"error in {entry.get('step')}: {message}")
    for step in steps:
        for entry in step.get("claims") or []:
            found.note(entry["namespace"], entry["name"], *_of(entry))
            if entry.get("after") is not None:
                key = (entry["namespace"], entry["name"])
                deadlines[key] = min(entry["after"], deadlines.get(key, entry["after"]))
    listed = found.listed()
    for outcome in listed:
        deadline = deadlines.get((outcome["namespace"], outcome["name"]))
        if deadline is not None and outcome["result"] in (DONE, WAIT):
            soonest = deadline if outcome["after"] is None else min(deadline, outcome["after"])
            outcome["after"] = max(0.0, round(float(soonest), 3))
    return listed


def _of(entry: dict) -> tuple:
    """(result, after, reason) of one step's entry for a claim."""
    if "error" in (entry.get("action"), entry.get("state")):
        return ERROR, None, entry.get("reason") or "error"
    if "conflict" in (entry.get("action"), entry.get("state")):
        return RETRY, None, "conflict"
    if entry.get("state") == "waiting":  # released: its host's state change brings the claim back
        return WAIT, None, "release waiting for the host"
    if "action" in entry and entry.get("host") is None and entry["action"] in ("refuse", "skip", "bind"):
        return WAIT, None, entry.get("reason") or "unbound"  # a host, a policy or the claim changing brings it back
    return DONE, entry.get("after"), ""


def from_run_end(outcomes: list[dict], elapsed: float) -> list[dict]:
    """The outcomes with each `after` counted from the run's end, `elapsed` seconds after its timestamp."""
    shifted = []
    for entry in outcomes:
        if entry.get("after") is not None:
            entry = {**entry, "after": max(0.0, round(entry["after"] - max(0.0, elapsed), 3))}
        shifted.append(entry)
    return shifted
