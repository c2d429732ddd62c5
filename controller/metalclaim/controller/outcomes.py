"""What the controller does next with each key of a run, from the outcomes its step returned. Pure.

Every step returns ``outcomes`` (plugins/module_utils/_common/pure/outcomes.py): per object ``done``, ``wait``,
``retry`` or ``error``, and ``after``. Here they become what the queue does:

DONE: forget the key (reset its backoff). RETRY: ``retry`` and ``error`` (a conflict with another writer, a claim
that failed by itself) and every key of a failed run: back off and try again. REQUEUE: due again after ``delay``
seconds (``after``: a host's next provisioning step, a remote cluster's poll, a hook's next delivery). WAIT: nothing
to do until something changes (no free host, a missing Secret): an event brings the key back, never a timer.
"""

from __future__ import annotations

from dataclasses import dataclass

DONE, RETRY, REQUEUE, WAIT = "done", "retry", "requeue", "wait"
_BACK_OFF = ("retry", "error")  # the step's results the controller backs off


@dataclass(frozen=True)
class Outcome:
    result: str
    delay: float = 0.0
    reason: str = ""


def failed_run(keys, reason: str) -> dict:
    """Every key of a run that failed as a whole (a task failed, the run was cancelled or timed out) backs off."""
    return {key: Outcome(RETRY, reason=reason) for key in keys}


def read(kind: str, keys, result: dict | None) -> dict:
    """Each key's outcome from a step's result; a key the step does not report is done.

    A result without ``outcomes`` (a task that did not run, a collection older than the controller) backs every key
    off, saying so: settling them as done would drop their work silently.
    """
    if result is None or "outcomes" not in result:
        return failed_run(keys, "the run returned no outcomes")
    found = {key: Outcome(DONE) for key in keys}
    for entry in result["outcomes"]:
        key = (kind, entry.get("namespace") or "", entry["name"])
        if key in found:
            found[key] = _of(entry)
    return found


def _of(entry: dict) -> Outcome:
    reason = entry.get("reason") or ""
    if entry["result"] in _BACK_OFF:
        return Outcome(RETRY, reason=reason or entry["result"])
    if entry.get("after") is not None:
        return Outcome(REQUEUE, delay=max(0.0, float(entry["after"])), reason=reason)
    return Outcome(WAIT if entry["result"] == "wait" else DONE, reason=reason)
