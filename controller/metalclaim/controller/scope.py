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
# Tenant onboarding (tenant.yml): namespaces, RoleBindings, quotas, policies. Opt-in, as its own identity
# (config/rbac/tenancy_role.yaml): neither other side needs those rights.
TENANTS = "tenants"
SIDES = (CLAIMS, PROVISIONER, TENANTS)
DEFAULT_SIDES = (CLAIMS, PROVISIONER)


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


def parse_subject(text: str) -> dict:
    """`user:NAME`, `group:NAME` or `serviceaccount:NAMESPACE:NAME` -> an RBAC subject."""
    kind, _colon, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind in ("user", "group") and rest:
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind.capitalize(), "name": rest}
    namespace, _colon, name = rest.partition(":")
    if kind == "serviceaccount" and namespace and name:
        return {"kind": "ServiceAccount", "namespace": namespace, "name": name}
    raise ValueError(f"{text!r}: expected user:NAME, group:NAME or serviceaccount:NAMESPACE:NAME")


@dataclass(frozen=True)
class Scope:
    sides: tuple[str, ...] = DEFAULT_SIDES
    shard: tuple[int, int] = (0, 1)

    def owns_namespace(self, namespace: str) -> bool:
        index, count = self.shard
        return count == 1 or shard_of(namespace, count) == index

    def lease_name(self, base: str) -> str:
        """Each shard elects its own leader."""
        index, count = self.shard
        return base if count == 1 else f"{base}-shard-{index}-of-{count}"
