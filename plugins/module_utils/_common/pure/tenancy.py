# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names the tenant step writes and the claim layer reads (exclusive hosts, the bound-host limit). Pure.

A reservation lives on the BareMetalHost itself, in one annotation listing the tenants it is reserved
for: the bind step already holds every host and every namespace's labels, so it checks a reservation
with no request of its own (reading Tenant objects there would cost a list per run, and an RBAC right).
A claim's tenant is the label the tenant step puts on each child namespace; tenants cannot write
Namespaces, so they cannot move a namespace into another tenant.
"""

from __future__ import annotations

# On every object the tenant step creates (Namespace, RoleBinding, ResourceQuota, HostDeployPolicy): whose
# it is. An object of the name wanted without this label (or with another tenant's) is never taken over.
TENANT_LABEL = "tenancy.metalclaim.io/tenant"
# On a reserved BareMetalHost: the tenants it is reserved for, comma-separated, sorted.
RESERVED_FOR_ANNOTATION = "tenancy.metalclaim.io/reserved-for"
# On each of a tenant's namespaces while its spec.quota.maxBoundHosts is set: that maximum. A label, not a
# Tenant read: the bind step already lists namespace labels, and a change of labels wakes the namespace's claims.
MAX_BOUND_HOSTS_LABEL = "tenancy.metalclaim.io/max-bound-hosts"


def reserved_for(host: dict) -> list[str]:
    """The tenants a host is reserved for (empty: anyone its policies admit may bind it)."""
    value = ((host.get("metadata") or {}).get("annotations") or {}).get(RESERVED_FOR_ANNOTATION) or ""
    return sorted({name.strip() for name in value.split(",") if name.strip()})


def reservation_value(tenants) -> str:
    return ",".join(sorted(set(tenants)))


def tenant_of(namespace_labels: dict | None) -> str:
    """The tenant a namespace belongs to ("" when none)."""
    return (namespace_labels or {}).get(TENANT_LABEL, "")


def may_bind(host: dict, namespace_labels: dict | None) -> bool:
    """Whether a claim of a namespace with these labels may bind the host, as far as reservations go."""
    tenants = reserved_for(host)
    return not tenants or tenant_of(namespace_labels) in tenants


def max_bound_hosts(namespace_labels: dict | None) -> int | None:
    """The most hosts the namespace's tenant may hold (None: no limit). A value that is not a count binds nothing:
    only the tenant step and the infra team write it, and a limit misread must not become no limit."""
    value = (namespace_labels or {}).get(MAX_BOUND_HOSTS_LABEL)
    if value is None or not tenant_of(namespace_labels):
        return None
    return int(value) if value.isdigit() else 0


def hosts_held(tenant: str, consumers: list[dict], labels_of: dict) -> int:
    """How many of these consumerRefs name a HostClaim in a namespace of the tenant (labels_of: namespace -> labels)."""
    return sum(
        1
        for ref in consumers
        if ref.get("kind") == "HostClaim" and tenant_of(labels_of.get(ref.get("namespace", ""))) == tenant
    )
