# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a step says about each object it reconciled: the contract between the collection and its controller. Pure.

Every step module returns ``outcomes``: one entry per object it looked at, as controller-runtime's reconciler
returns its ``Result``, so the controller reads what to do next instead of inferring it from each module's shape:

- ``done``: nothing left to do; with ``after``, look again in that many seconds (a host's next step, a poll).
- ``wait``: waiting for a change of another object, whose event brings the key back (no free host, a missing
  Secret, a host being deprovisioned); with ``after``, also at that time (a hook's next delivery).
- ``retry``: a temporary failure (a conflict with another writer): back off and try again.
- ``error``: this object failed by itself (an API error, a refused status): back off; ``reason`` says why.

An object a step does not report is ``done``. A step never reports another step's objects.
"""

from __future__ import annotations

DONE, WAIT, RETRY, ERROR = "done", "wait", "retry", "error"
RESULTS = (DONE, WAIT, RETRY, ERROR)
# Most urgent first: when one step reports an object twice, the more urgent entry stands.
_URGENCY = {ERROR: 0, RETRY: 1, WAIT: 2, DONE: 3}
# What an outcome keeps of a reason (the controller logs it with the retry).
REASON_LIMIT = 300


def outcome(namespace: str, name: str, result: str, after: float | None = None, reason: str = "") -> dict:
    if result not in RESULTS:
        raise ValueError(f"outcome result must be one of {', '.join(RESULTS)}, not {result!r}")
    return {
        "namespace": namespace,
        "name": name,
        "result": result,
        "after": None if after is None else max(0.0, round(float(after), 3)),
        "reason": (reason or "")[:REASON_LIMIT],
    }


class Outcomes:
    """Collects one outcome per object, the most urgent winning (then the soonest `after`)."""

    def __init__(self):
        self._by_key: dict[tuple[str, str], dict] = {}

    def note(self, namespace: str, name: str, result: str, after: float | None = None, reason: str = "") -> None:
        new = outcome(namespace, name, result, after, reason)
        old = self._by_key.get((namespace, name))
        if old is None or _before(new, old):
            self._by_key[(namespace, name)] = new

    def listed(self) -> list[dict]:
        return [self._by_key[key] for key in sorted(self._by_key)]


def _before(new: dict, old: dict) -> bool:
    """Whether `new` is more urgent than `old`: by result, then the sooner `after` (none: never)."""
    if _URGENCY[new["result"]] != _URGENCY[old["result"]]:
        return _URGENCY[new["result"]] < _URGENCY[old["result"]]
    return new["after"] is not None and (old["after"] is None or new["after"] < old["after"])
