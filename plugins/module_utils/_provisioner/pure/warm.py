# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fast track: how many cleaned hosts of an infrastructure namespace stay warm. Pure: no I/O.

A warm host is available and powered on in the deploy system it booted for its last cleaning, its image writer
polling the media server for a next job (machine.py's ``warm`` operation). The infrastructure team opts a namespace in
with an annotation on its Namespace: a number of hosts ("3") or a share of the namespace's hosts ("25%", rounded
down). Without it, or with 0, every cleaned host is powered off as before.
"""

from __future__ import annotations

import re

POOL_ANNOTATION = "metalclaim.io/warm-hosts"
_SIZE = re.compile(r"(?P<number>[0-9]{1,6})(?P<percent>%?)")


def pool_size(value: str | None, hosts: int) -> tuple[int, str]:
    """(warm hosts allowed, a problem to report): a value that is neither a count nor a percentage allows none."""
    if value is None or value.strip() == "":
        return 0, ""
    match = _SIZE.fullmatch(value.strip())
    if not match:
        return 0, f"annotation {POOL_ANNOTATION}: {value!r} is neither a number of hosts nor a percentage (e.g. 2, 25%)"
    number = int(match["number"])
    if match["percent"]:
        if number > 100:
            return 0, f"annotation {POOL_ANNOTATION}: {value!r} is over 100%"
        return hosts * number // 100, ""
    return number, ""


class Pool:
    """Warm hosts counted per namespace while the run decides its hosts in name order (as the provisioning slots are):
    a host may stay or become warm only while its namespace is under its size."""

    def __init__(self, sizes: dict, warm_elsewhere: dict):
        self._sizes = sizes  # namespace -> size
        self._count = dict(warm_elsewhere)  # namespace -> warm hosts this run does not step

    def offered(self, namespace: str) -> bool:
        return self._sizes.get(namespace, 0) > 0

    def room(self, namespace: str) -> bool:
        return self._count.get(namespace, 0) < self._sizes.get(namespace, 0)

    def count(self, namespace: str, warm: bool) -> None:
        if warm:
            self._count[namespace] = self._count.get(namespace, 0) + 1
