# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names the tenant step writes and the claim layer reads (exclusive hosts, the bound-host limit, the lease cap, the
blocking CLAIM_BOUND and CLAIM_EXPIRED hooks' verdicts). Pure.

A reservation lives on the BareMetalHost itself, in one annotation listing the tenants it is reserved
for: the bind step already holds every host and every namespace's labels, so it checks a reservation
with no request of its own (reading Tenant objects there would cost a list per run, and an RBAC right).
A claim's tenant is the label the tenant step puts on each child namespace; tenants cannot write
Namespaces, so they cannot move a namespace into another tenant.
"""

from __future__ import annotations

import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import selectors

# On every object the tenant step creates (Namespace, RoleBinding, ResourceQuota, HostDeployPolicy): whose
# it is. An object of the name wanted without this label (or with another tenant's) is never taken over.
TENANT_LABEL = "tenancy.metalclaim.io/tenant"
# On a reserved BareMetalHost: the tenants it is reserved for, comma-separated, sorted.
RESERVED_FOR_ANNOTATION = "tenancy.metalclaim.io/reserved-for"
# On each of a tenant's namespaces while its spec.quota.maxBoundHosts is set: that maximum. A label, not a
# Tenant read: the bind step already lists namespace labels, and a change of labels wakes the namespace's claims.
MAX_BOUND_HOSTS_LABEL = "tenancy.metalclaim.io/max-bound-hosts"
# On each of a tenant's namespaces while one of its hooks is a blocking CLAIM_BOUND hook: the hooks' verdict per
# claim, a JSON object {claim uid: {"name", "allowed", "message", "attempts", "nextAskAt"}} ("{}" before any).
# Present, it means a claim of the namespace binds only once allowed; an annotation (a JSON value), on the
# namespace for the same reasons as the limit label.
BINDING_APPROVALS_ANNOTATION = "tenancy.metalclaim.io/binding-approvals"
# On each of a tenant's namespaces while one of its spec.hostPools has a hostSelector: {infra namespace: selector}
# (JSON). A claim of the namespace binds, in those infra namespaces, only hosts the selector matches.
HOST_POOLS_ANNOTATION = "tenancy.metalclaim.io/host-pools"
# On each of a tenant's namespaces while its spec.maxLeaseDuration is set: that cap, a Go-style duration (720h). A
# label, as the bound-host limit: the claim layer lists namespace labels anyway, a change of labels wakes the
# namespace's claims, and the HostClaim admission policy reads it (namespaceObject) to refuse a lease over it.
MAX_LEASE_DURATION_LABEL = "tenancy.metalclaim.io/max-lease-duration"
# On each of a tenant's namespaces while one of its hooks is a blocking CLAIM_EXPIRED hook: a JSON object
# {"graceSeconds": n, "claims": {claim uid: {"name", "end", "allowed", "message", "attempts", "nextAskAt"}}}. Present,
# it means a lease of the namespace ends (its host released) only once the hooks allowed that very end, or
# graceSeconds after it at the latest.
EXPIRY_APPROVALS_ANNOTATION = "tenancy.metalclaim.io/expiry-approvals"
# The longest a blocking CLAIM_EXPIRED hook may hold a lease's end (a Tenant's spec.leaseExpiryGrace may shorten it).
EXPIRY_GRACE_MAX_SECONDS = 900
# The Lease condition's reasons a claim shows from its warning until its host is released: the tenant step tells
# CLAIM_EXPIRING (and asks the blocking CLAIM_EXPIRED hooks) then. _claims/pure/lease.py has the same names.
LEASE_CONDITION = "Lease"
LEASE_ENDING_REASON = "LeaseEnding"
LEASE_EXPIRY_HELD_REASON = "LeaseExpiryHeld"
# What the bind step reads of a namespace besides its labels (a change of either wakes its claims).
BINDING_ANNOTATIONS = (BINDING_APPROVALS_ANNOTATION, HOST_POOLS_ANNOTATION, EXPIRY_APPROVALS_ANNOTATION)


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


def _json_object(namespace_annotations: dict | None, name: str) -> dict | bool | None:
    """The annotation's JSON object; None when absent, False when it is not a JSON object (its reader fails closed)."""
    value = (namespace_annotations or {}).get(name)
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return False
    return parsed if isinstance(parsed, dict) else False


def annotation_value(value: dict) -> str:
    """One spelling per value (sorted keys, no spaces): a value unchanged is an annotation unchanged."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def binding_approvals(namespace_annotations: dict | None) -> dict | None:
    """The verdicts by claim uid (None: the namespace's claims need no approval). An unreadable value is no
    verdict at all: a claim waits rather than binds unasked."""
    verdicts = _json_object(namespace_annotations, BINDING_APPROVALS_ANNOTATION)
    return {} if verdicts is False else verdicts


def host_pool_selectors(namespace_annotations: dict | None) -> dict | None:
    """{infra namespace: host selector} narrowing what the namespace's claims may bind there (None: nothing
    narrowed). An unreadable value narrows every infra namespace to nothing: a pool misread must not become all."""
    pools = _json_object(namespace_annotations, HOST_POOLS_ANNOTATION)
    if pools is False or (pools and not all(isinstance(v, dict) for v in pools.values())):
        return {"*": None}
    return pools


def host_pools(namespace_annotations: dict | None) -> dict | None:
    """The claim namespace's tenant host pools, validated once per namespace, not per host: {infra namespace:
    selector, or None for one that admits nothing} (None: no pool narrows anything). The claim layer binds within
    them and the catalog counts within them."""
    pools = host_pool_selectors(namespace_annotations)
    if pools is None:
        return None
    usable = {}
    for namespace, selector in pools.items():
        try:
            selectors.validate(selector, f"host pool {namespace}")
            usable[namespace] = selector
        except selectors.SelectorError:
            usable[namespace] = None  # the tenant step validates it: one that cannot be read admits nothing
    return usable


def in_host_pool(host: dict, pools: dict | None) -> bool:
    """Whether host_pools let a claim of the namespace have the host: a pool's selector narrows its infra namespace;
    the infra namespaces without one are not narrowed; "*" (an unreadable annotation) narrows all of them to nothing."""
    if pools is None:
        return True
    if "*" in pools:
        return False
    meta = host.get("metadata") or {}
    namespace = meta.get("namespace", "")
    if namespace not in pools:
        return True
    return pools[namespace] is not None and selectors.matches(pools[namespace], meta.get("labels"))


def binding_verdict(namespace_annotations: dict | None, claim_uid: str) -> tuple[bool, str] | None:
    """None when a claim of the namespace may bind as far as hooks go; else (refused, message): refused False
    while the hooks have not answered yet."""
    verdicts = binding_approvals(namespace_annotations)
    if verdicts is None:
        return None
    verdict = verdicts.get(claim_uid)
    if not isinstance(verdict, dict):
        return False, "waiting for the tenant's blocking CLAIM_BOUND hook(s) to allow the binding"
    if verdict.get("allowed") is True:
        return None
    message = str(verdict.get("message") or "a blocking CLAIM_BOUND hook refused the binding")
    if verdict.get("nextAskAt"):
        message += f"; asked again at {verdict['nextAskAt']}"
    return True, message


def max_lease_duration(namespace_labels: dict | None) -> str | None:
    """The tenant's lease cap as written on its namespace (a Go-style duration; None: no cap). Read only on a
    namespace of a tenant, as the bound-host limit; the claim layer parses it and fails closed on a bad value."""
    if not tenant_of(namespace_labels):
        return None
    return (namespace_labels or {}).get(MAX_LEASE_DURATION_LABEL)


def expiry_approvals(namespace_annotations: dict | None) -> dict | None:
    """{"graceSeconds": n, "claims": {uid: verdict}} (None: no hook holds the leases of the namespace). An unreadable
    value holds every lease for the longest grace: a hold misread must not become a release unasked."""
    found = _json_object(namespace_annotations, EXPIRY_APPROVALS_ANNOTATION)
    if found is None:
        return None
    if found is False or not isinstance(found.get("claims", {}), dict):
        return {"graceSeconds": EXPIRY_GRACE_MAX_SECONDS, "claims": {}}
    grace = found.get("graceSeconds")
    if isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace <= EXPIRY_GRACE_MAX_SECONDS:
        grace = EXPIRY_GRACE_MAX_SECONDS
    return {"graceSeconds": grace, "claims": found.get("claims") or {}}


def expiry_verdict(namespace_annotations: dict | None, claim_uid: str, end: str) -> tuple[int, str] | None:
    """None when the lease of this claim ending at `end` (RFC 3339, as status.lease.end) may end as far as hooks go;
    else (grace seconds, why it is held). A verdict given for another end (the lease was extended) does not count."""
    approvals = expiry_approvals(namespace_annotations)
    if approvals is None:
        return None
    verdict = approvals["claims"].get(claim_uid)
    if isinstance(verdict, dict) and verdict.get("end") == end and verdict.get("allowed") is True:
        return None
    if not isinstance(verdict, dict) or verdict.get("end") != end:
        return approvals["graceSeconds"], "waiting for the tenant's blocking CLAIM_EXPIRED hook(s) to allow the end"
    return approvals["graceSeconds"], str(verdict.get("message") or "a blocking CLAIM_EXPIRED hook refused the end")
