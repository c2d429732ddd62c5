"""What one controller serves: its side(s) and its shard of namespaces. Pure: no I/O.

Two sides, each meant to run as its own identity (config/manager): `claims` reconciles
HostClaims (reads tenant Secrets, writes copies beside hosts, never talks to a BMC);
`provisioner` steps BareMetalHosts over Redfish (reads BMC Secrets in infrastructure
namespaces, never reads a tenant namespace). A shard `i/n` owns the claims whose namespace,
and the hosts whose namespace, hash to i: several Deployments split a large fleet, each with
its own Lease, and Kubernetes' optimistic concurrency arbitrates hosts wanted by two shards.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

CLAIMS = "claims"
PROVISIONER = "provisioner"
SIDES = (CLAIMS, PROVISIONER)


def parse_sides(text: str) -> tuple[str, ...]:
    sides = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise ValueError(f"--controllers {text!r}: a comma-separated list of {', '.join(SIDES)}")
    return sides


def parse_shard(text: str) -> tuple[int, int]:
    """`i/n` -> (i, n) with 0 <= i < n."""
    index, slash, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not slash or not 0 <= shard[0] < shard[1]:
        raise ValueError(f"--shard {text!r}: expected i/n with 0 <= i < n, e.g. 0/1 or 2/4")
    return shard


def shard_of(namespace: str, count: int) -> int:
    """Stable across processes and restarts (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(namespace.encode()).digest()[:8], "big") % count


@dataclass(frozen=True)
class Scope:
    sides: tuple[str, ...] = SIDES
    shard: tuple[int, int] = (0, 1)

    def owns_namespace(self, namespace: str) -> bool:
        index, count = self.shard
        return count == 1 or shard_of(namespace, count) == index

    def lease_name(self, base: str) -> str:
        """Each shard elects its own leader."""
        index, count = self.shard
        return base if count == 1 else f"{base}-shard-{index}-of-{count}"
