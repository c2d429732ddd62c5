# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""bmh_redfish's `wait` loop, as data: each host's figures over the run's steps, and when it wants the next one.

Pure: the caller (_provisioner/io/provisioner.py) passes each moment in (a monotonic clock) and does the sleeping.
"""

from __future__ import annotations

import collections


class Settling:
    """The `wait` loop's bookkeeping: each host's figures for the run, and when it wants its next step."""

    def __init__(self):
        self._latest: dict = {}  # (namespace, name) -> the run's result for the host
        self._due: dict = {}  # hosts that want another step -> when (a monotonic time)

    def record(self, results: list[dict], asked: list[dict] | None, moment: float) -> None:
        stepped = set()
        for result in results:
            key = (result["namespace"], result["name"])
            stepped.add(key)
            earlier = self._latest.get(key)
            if earlier is not None:  # the run's figures for the host, with its last step's outcome
                result = {
                    **result,
                    "previous": earlier["previous"],
                    "changed": earlier["changed"] or result["changed"],
                    "redfish_requests": earlier["redfish_requests"] + result["redfish_requests"],
                    "api_calls": _sum_counts(earlier.get("api_calls"), result.get("api_calls")),
                }
            self._latest[key] = result
            if result.get("requeue_after") is None:
                self._due.pop(key, None)
            else:
                self._due[key] = moment + result["requeue_after"]
        for item in asked or []:
            # Asked for but not stepped: deleted, or handed to another provisioner meanwhile.
            if (item["namespace"], item["name"]) not in stepped:
                self._due.pop((item["namespace"], item["name"]), None)

    def next_at(self) -> float | None:
        return min(self._due.values()) if self._due else None

    def due_now(self, moment: float) -> list[dict]:
        return [{"namespace": key[0], "name": key[1]} for key, at in sorted(self._due.items()) if at <= moment]

    def requeue_after(self, moment: float) -> float | None:
        next_at = self.next_at()
        return None if next_at is None else round(max(0.0, next_at - moment), 3)

    def hosts(self) -> list[dict]:
        return [self._latest[key] for key in sorted(self._latest)]


def _sum_counts(*counts: dict | None) -> dict:
    total: collections.Counter = collections.Counter()
    for count in counts:
        total.update(count or {})
    return dict(sorted(total.items()))
