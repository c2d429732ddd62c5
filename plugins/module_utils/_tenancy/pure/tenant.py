# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Tenant asks for, as objects, and whether it may have them. Pure: the caller reads, this decides.

Every object made for a tenant carries the label TENANT_LABEL=<tenantName>; that label is how an object is
recognised as the tenant's. The tenant's HostDeployPolicy "entries" are whole policies of their own,
`tenant-<tenantName>` in each host pool's namespace: several policies of a namespace OR together, so a
policy written by hand is never edited, and one of the name wanted that is not the tenant's is never
taken over (the Tenant is refused instead, nothing written).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.selectors import (
    SelectorError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.selectors import (
    validate as validate_selector,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    BINDING_APPROVALS_ANNOTATION,
    HOST_POOLS_ANNOTATION,
    MAX_BOUND_HOSTS_LABEL,
    MAX_LEASE_DURATION_LABEL,
    RESERVED_FOR_ANNOTATION,
    TENANT_LABEL,
    annotation_value,
    reservation_value,
    reserved_for,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks

API_GROUP = "tenancy.metalclaim.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "Tenant"
# Held until the tenant's objects are gone (deletion runs in order: claims, namespaces, then pool entries).
FINALIZER = f"{API_GROUP}/tenant"
RBAC_VERSION = "rbac.authorization.k8s.io/v1"
# The rights the admin group gets in each child namespace (config/rbac/tenant_role.yaml): HostClaims, Secrets
# and Events there, and nowhere else, because the binding is a RoleBinding in that namespace.
TENANT_CLUSTER_ROLE = "metalclaim-tenant"
ADMIN_BINDING = "metalclaim-tenant-admin"
# The claim side reads the Secrets claims reference (config/rbac/tenant_secrets_reader_role.yaml; the install
# role's binding of the same name in its install_tenant_namespaces).
CLAIM_SIDE_CLUSTER_ROLE = "metalclaim-tenant-secrets-reader"
CLAIM_SIDE_BINDING = "metalclaim-tenant-secrets-reader"
QUOTA_NAME = "metalclaim-tenant"
QUOTA_RESOURCE = "count/hostclaims.metal3.io"
SET_QUOTA_RESOURCE = "count/hostclaimsets.metal3.io"
# quota field -> the ResourceQuota resource counting it in each child namespace (the API server enforces it).
QUOTA_RESOURCES = {"maxHostClaims": QUOTA_RESOURCE, "maxHostClaimSets": SET_QUOTA_RESOURCE}
POLICY_PREFIX = "tenant-"
ADMIN_GROUP_SUFFIX = "-tenant-admin"

# States (TAPMS's).
NEW = "New"
DEPLOYING = "Deploying"
DEPLOYED = "Deployed"
DELETING = "Deleting"

# Condition types.
ACCEPTED = "Accepted"
NAMESPACES = "Namespaces"
ACCESS = "Access"
HOST_POOLS = "HostPools"
QUOTA = "Quota"
EXCLUSIVE_HOSTS = "ExclusiveHosts"
DELETION = "Deletion"
# Which condition each kind of object reports on.
STEP_OF_KIND = {
    "Namespace": NAMESPACES,
    "RoleBinding": ACCESS,
    "HostDeployPolicy": HOST_POOLS,
    "ResourceQuota": QUOTA,
    "BareMetalHost": EXCLUSIVE_HOSTS,
}
STEPS = (NAMESPACES, ACCESS, HOST_POOLS, QUOTA, EXCLUSIVE_HOSTS)

# Reasons.
SPEC_ACCEPTED = "SpecAccepted"
INVALID_TENANT_NAME = "InvalidTenantName"
INVALID_FIELD = "InvalidField"
NAMESPACE_OWNED_ELSEWHERE = "NamespaceOwnedElsewhere"
OBJECT_NAME_TAKEN = "ObjectNameTaken"
HOST_POOL_NOT_FOUND = "HostPoolNotFound"
EXCLUSIVE_HOST_NOT_FOUND = "ExclusiveHostNotFound"
EXCLUSIVE_HOST_TAKEN = "ExclusiveHostTaken"
APPLIED = "Applied"
APPLY_FAILED = "ApplyFailed"
RELEASING_CLAIMS = "ReleasingClaims"
DELETING_NAMESPACES = "DeletingNamespaces"
DELETION_FAILED = "DeletionFailed"

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A Go-style duration of hours, minutes and seconds (the CRD's pattern; the claim layer parses it).
DURATION = re.compile(r"(?:\d{1,6}h)?(?:\d{1,6}m)?(?:\d{1,6}s)?")
# The labels of ours on a namespace that go when their spec field goes (the limits lifted).
LIFTED_LABELS = (MAX_BOUND_HOSTS_LABEL, MAX_LEASE_DURATION_LABEL)


@dataclass(frozen=True)
class Problem:
    """Why a Tenant's spec is refused: the field, a reason, a message naming both."""

    field: str
    reason: str
    message: str


def name(tenant: dict) -> str:
    return (tenant.get("metadata") or {}).get("name", "")


def spec(tenant: dict) -> dict:
    return tenant.get("spec") or {}


def tenant_name(tenant: dict) -> str:
    return spec(tenant).get("tenantName") or name(tenant)


def child_namespaces(tenant: dict) -> list[str]:
    return [f"{tenant_name(tenant)}-{child}" for child in spec(tenant).get("childNamespaces") or []]


def admin_group(tenant: dict) -> str:
    return spec(tenant).get("adminGroup") or f"{tenant_name(tenant)}{ADMIN_GROUP_SUFFIX}"


def exclusive_hosts(tenant: dict) -> list[tuple[str, str]]:
    hosts = (spec(tenant).get("exclusiveHosts") or {}).get("hosts") or []
    return [(h.get("namespace", ""), h.get("name", "")) for h in hosts]


def enforces_exclusive(tenant: dict) -> bool:
    return bool((spec(tenant).get("exclusiveHosts") or {}).get("enforceExclusive"))


def policy_name(tenant: dict) -> str:
    return f"{POLICY_PREFIX}{tenant_name(tenant)}"


def owner(obj: dict | None) -> str:
    """The tenant an object was made for ("" for an object no tenant step made)."""
    return ((obj or {}).get("metadata") or {}).get("labels", {}).get(TENANT_LABEL, "") if obj else ""


def object_key(obj: dict) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


def validate(tenant: dict, required_prefix: str = "") -> list[Problem]:
    """What is wrong with the spec alone (the CRD refuses most of it already; this holds without the CRD's
    CEL too, and checks what the CRD cannot: the site's required prefix, duplicates)."""
    problems = []
    given = spec(tenant).get("tenantName")
    if not isinstance(given, str) or not DNS_LABEL.fullmatch(given) or len(given) > 63:
        problems.append(
            Problem("spec.tenantName", INVALID_TENANT_NAME, f"spec.tenantName {given!r} is not a DNS label")
        )
        return problems
    if given != name(tenant):
        problems.append(
            Problem("spec.tenantName", INVALID_TENANT_NAME, f"spec.tenantName {given!r} must equal metadata.name")
        )
    if required_prefix and not given.startswith(required_prefix):
        problems.append(
            Problem(
                "spec.tenantName",
                INVALID_TENANT_NAME,
                f"spec.tenantName {given!r} does not start with the required prefix {required_prefix!r}",
            )
        )
    seen = set()
    for index, child in enumerate(spec(tenant).get("childNamespaces") or []):
        full = f"{given}-{child}"
        field = f"spec.childNamespaces[{index}]"
        if not isinstance(child, str) or not DNS_LABEL.fullmatch(child) or len(full) > 63:
            problems.append(Problem(field, INVALID_FIELD, f"{field}: {full!r} is not a namespace name (DNS label)"))
        elif child in seen:
            problems.append(Problem(field, INVALID_FIELD, f"{field}: {child!r} is listed twice"))
        seen.add(child)
    pools = set()
    for index, pool in enumerate(spec(tenant).get("hostPools") or []):
        namespace, field = pool.get("namespace"), f"spec.hostPools[{index}]"
        if not isinstance(namespace, str) or not DNS_LABEL.fullmatch(namespace):
            problems.append(
                Problem(
                    f"{field}.namespace", INVALID_FIELD, f"{field}.namespace: {namespace!r} is not a namespace name"
                )
            )
        elif namespace in pools:
            problems.append(
                Problem(f"{field}.namespace", INVALID_FIELD, f"{field}.namespace: {namespace!r} is listed twice")
            )
        pools.add(namespace)
        try:
            validate_selector(pool.get("hostSelector"), f"{field}.hostSelector")
        except SelectorError as error:
            problems.append(Problem(f"{field}.hostSelector", INVALID_FIELD, str(error)))
    for index, (namespace, host) in enumerate(exclusive_hosts(tenant)):
        if not namespace or not host:
            field = f"spec.exclusiveHosts.hosts[{index}]"
            problems.append(Problem(field, INVALID_FIELD, f"{field}: namespace and name are required"))
    for limit in (*QUOTA_RESOURCES, "maxBoundHosts"):
        maximum = (spec(tenant).get("quota") or {}).get(limit)
        if maximum is not None and (isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < 0):
            field = f"spec.quota.{limit}"
            problems.append(Problem(field, INVALID_FIELD, f"{field} must be an integer >= 0"))
    cap = spec(tenant).get("maxLeaseDuration")
    if cap is not None and not (
        isinstance(cap, str) and cap and DURATION.fullmatch(cap) and any(ch in "123456789" for ch in cap)
    ):
        field = "spec.maxLeaseDuration"
        problems.append(Problem(field, INVALID_FIELD, f"{field} {cap!r} is not a duration such as 720h or 90m"))
    problems += [Problem(field, INVALID_FIELD, message) for field, message in hooks.validate(tenant)]
    return problems


def _labels(tenant: dict) -> dict:
    return {TENANT_LABEL: tenant_name(tenant), "app.kubernetes.io/managed-by": "metalclaim-tenant"}


def _meta(tenant: dict, object_name: str, namespace: str | None = None) -> dict:
    meta = {"name": object_name, "labels": _labels(tenant)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def max_bound_hosts(tenant: dict) -> int | None:
    return (spec(tenant).get("quota") or {}).get("maxBoundHosts")


def max_lease_duration(tenant: dict) -> str | None:
    return spec(tenant).get("maxLeaseDuration")


def host_pool_selectors(tenant: dict) -> dict:
    """{infra namespace: hostSelector} of the pools that narrow their namespace's hosts."""
    return {p["namespace"]: p["hostSelector"] for p in spec(tenant).get("hostPools") or [] if p.get("hostSelector")}


def _namespace(tenant: dict, namespace: str) -> dict:
    meta = _meta(tenant, namespace)
    if host_pool_selectors(tenant):
        # Where the bind step reads them (an HostDeployPolicy admits namespaces; it has no host selector).
        meta.setdefault("annotations", {})[HOST_POOLS_ANNOTATION] = annotation_value(host_pool_selectors(tenant))
    if max_bound_hosts(tenant) is not None:
        # Where the bind step reads the limit (it counts the tenant's hosts from what it lists anyway).
        meta["labels"][MAX_BOUND_HOSTS_LABEL] = str(max_bound_hosts(tenant))
    if max_lease_duration(tenant) is not None:
        # Where the claim layer reads the cap (with the namespace's labels) and the admission policy too.
        meta["labels"][MAX_LEASE_DURATION_LABEL] = max_lease_duration(tenant)
    if hooks.asks_before_binding(tenant):
        # Born needing approval: a claim made the moment the namespace exists cannot bind before the hooks are
        # asked. The verdicts are the hook step's to write (updated_object leaves annotations alone).
        meta.setdefault("annotations", {})[BINDING_APPROVALS_ANNOTATION] = "{}"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def desired_objects(tenant: dict, claim_side_subjects: list[dict]) -> list[dict]:
    """Every object the tenant's spec asks for, in creation order (namespaces first)."""
    objects: list[dict] = []
    children = child_namespaces(tenant)
    for namespace in children:
        objects.append(_namespace(tenant, namespace))
    for namespace in children:
        objects.append(
            _role_binding(
                tenant,
                ADMIN_BINDING,
                namespace,
                TENANT_CLUSTER_ROLE,
                [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": admin_group(tenant)}],
            )
        )
        if claim_side_subjects:
            objects.append(
                _role_binding(tenant, CLAIM_SIDE_BINDING, namespace, CLAIM_SIDE_CLUSTER_ROLE, claim_side_subjects)
            )
        quota = spec(tenant).get("quota") or {}
        hard = {
            resource: str(quota[limit]) for limit, resource in QUOTA_RESOURCES.items() if quota.get(limit) is not None
        }
        if hard:
            objects.append(
                {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": _meta(tenant, QUOTA_NAME, namespace),
                    "spec": {"hard": hard},
                }
            )
    for pool in spec(tenant).get("hostPools") or []:
        objects.append(
            {
                "apiVersion": metal3.API_VERSION,
                "kind": "HostDeployPolicy",
                "metadata": _meta(tenant, policy_name(tenant), pool["namespace"]),
                # The names and the namespaces' tenant label (which only onboarding writes, and which the tenants
                # side can never change on a namespace): a name another tenant's prefix also makes (a + b-c and
                # a-b + c are both a-b-c) admits only this tenant's namespace of that name (issue 40).
                "spec": {
                    "hostclaimNamespaces": {
                        "names": sorted(children),
                        "hasLabels": [{"name": TENANT_LABEL, "value": tenant_name(tenant)}],
                    }
                },
            }
        )
    return objects


def _role_binding(tenant: dict, binding: str, namespace: str, cluster_role: str, subjects: list[dict]) -> dict:
    return {
        "apiVersion": RBAC_VERSION,
        "kind": "RoleBinding",
        "metadata": _meta(tenant, binding, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": subjects,
    }


def ownership_problems(tenant: dict, desired: list[dict], current: dict) -> list[Problem]:
    """Objects of the names wanted that are not this tenant's (current: object_key -> object, or absent)."""
    problems = []
    mine = tenant_name(tenant)
    children = child_namespaces(tenant)
    for obj in desired:
        existing = current.get(object_key(obj))
        if existing is None or owner(existing) == mine:
            continue
        kind, namespace, object_name = object_key(obj)
        other = owner(existing)
        if kind == "Namespace":
            index = children.index(object_name)
            holder = f"tenant {other!r}" if other else "no tenant (it was made by hand)"
            problems.append(
                Problem(
                    f"spec.childNamespaces[{index}]",
                    NAMESPACE_OWNED_ELSEWHERE,
                    f"spec.childNamespaces[{index}]: namespace {object_name!r} already exists and belongs to {holder}",
                )
            )
        elif kind == "HostDeployPolicy":
            problems.append(
                Problem(
                    "spec.hostPools",
                    OBJECT_NAME_TAKEN,
                    f"spec.hostPools: HostDeployPolicy {namespace}/{object_name} exists and is not this tenant's",
                )
            )
        elif namespace not in children or current.get(("Namespace", "", namespace)) is not None:
            problems.append(
                Problem(
                    "spec.childNamespaces",
                    OBJECT_NAME_TAKEN,
                    f"spec.childNamespaces: {kind} {namespace}/{object_name} exists and is not this tenant's",
                )
            )
    return problems


def pool_problems(tenant: dict, existing_namespaces: set[str]) -> list[Problem]:
    problems = []
    for index, pool in enumerate(spec(tenant).get("hostPools") or []):
        if pool["namespace"] not in existing_namespaces:
            field = f"spec.hostPools[{index}].namespace"
            problems.append(
                Problem(field, HOST_POOL_NOT_FOUND, f"{field}: namespace {pool['namespace']!r} does not exist")
            )
    return problems


def _created_at(tenant: dict) -> tuple[str, str]:
    return (tenant.get("metadata") or {}).get("creationTimestamp") or "", name(tenant)


def exclusive_problems(tenant: dict, hosts: dict, tenants: list[dict]) -> list[Problem]:
    """Reserved hosts that do not exist, and (enforceExclusive) hosts another enforcing tenant holds.

    hosts: (namespace, name) -> BareMetalHost. A host belongs to the enforcing tenant already reserved on it;
    when neither is yet, to the older Tenant (creation time, then name), so two tenants created at once
    settle the same way whichever is reconciled first.
    """
    problems = []
    mine = tenant_name(tenant)
    rivals = [
        t
        for t in tenants
        if tenant_name(t) != mine and enforces_exclusive(t) and not t["metadata"].get("deletionTimestamp")
    ]
    for index, host_key in enumerate(exclusive_hosts(tenant)):
        field = f"spec.exclusiveHosts.hosts[{index}]"
        host = hosts.get(host_key)
        if host is None:
            problems.append(
                Problem(
                    field,
                    EXCLUSIVE_HOST_NOT_FOUND,
                    f"{field}: BareMetalHost {host_key[0]}/{host_key[1]} does not exist",
                )
            )
            continue
        if not enforces_exclusive(tenant):
            continue
        reserved = reserved_for(host)
        for rival in rivals:
            if host_key not in exclusive_hosts(rival):
                continue
            rival_name = tenant_name(rival)
            if rival_name in reserved or (mine not in reserved and _created_at(rival) < _created_at(tenant)):
                problems.append(
                    Problem(
                        field,
                        EXCLUSIVE_HOST_TAKEN,
                        f"{field}: BareMetalHost {host_key[0]}/{host_key[1]} is reserved exclusively "
                        f"by tenant {rival_name!r}",
                    )
                )
                break
    return problems


def with_reservation(host: dict, tenant: str, reserve: bool) -> dict | None:
    """The host with `tenant` added to (or removed from) its reservation; None when nothing changes."""
    tenants = set(reserved_for(host))
    wanted = tenants | {tenant} if reserve else tenants - {tenant}
    if wanted == tenants:
        return None
    updated = copy.deepcopy(host)
    annotations = updated["metadata"].setdefault("annotations", {}) or {}
    updated["metadata"]["annotations"] = annotations
    if wanted:
        annotations[RESERVED_FOR_ANNOTATION] = reservation_value(wanted)
    else:
        annotations.pop(RESERVED_FOR_ANNOTATION, None)
    return updated


def updated_object(desired: dict, current: dict) -> dict | None:
    """`current` brought to what `desired` says (labels added, owned fields set); None when it already is.

    Only the fields the tenant step owns are compared: labels it sets (others' labels stay; a namespace's limit
    label goes with the limit), a namespace's host-pools annotation, a RoleBinding's roleRef and subjects, a
    quota's spec.hard, a policy's spec.
    """
    updated = copy.deepcopy(current)
    meta = updated.setdefault("metadata", {})
    labels = dict(meta.get("labels") or {})
    for lifted in LIFTED_LABELS if desired["kind"] == "Namespace" else ():
        if lifted not in desired["metadata"]["labels"]:
            labels.pop(lifted, None)  # the limit was lifted: the only labels of ours that may go
    labels.update(desired["metadata"].get("labels") or {})
    meta["labels"] = labels
    kind = desired["kind"]
    if kind == "Namespace":
        # The host pools' selectors are the spec's (the binding verdicts are the hook step's: left alone).
        annotations = dict(meta.get("annotations") or {})
        wanted = (desired["metadata"].get("annotations") or {}).get(HOST_POOLS_ANNOTATION)
        if wanted is None:
            annotations.pop(HOST_POOLS_ANNOTATION, None)
        else:
            annotations[HOST_POOLS_ANNOTATION] = wanted
        meta["annotations"] = annotations
    if kind == "RoleBinding":
        updated["roleRef"] = desired["roleRef"]
        updated["subjects"] = desired["subjects"]
    elif kind in ("ResourceQuota", "HostDeployPolicy"):
        updated["spec"] = desired["spec"]
    return None if _same(updated, current) else updated


def recreate_needed(desired: dict, current: dict) -> bool:
    """A RoleBinding's roleRef cannot change in place."""
    return desired["kind"] == "RoleBinding" and current.get("roleRef") != desired["roleRef"]


def _same(left: dict, right: dict) -> bool:
    def comparable(obj: dict) -> dict:
        meta = obj.get("metadata") or {}
        return {
            "labels": meta.get("labels") or {},
            "host pools": (meta.get("annotations") or {}).get(HOST_POOLS_ANNOTATION),
            "roleRef": obj.get("roleRef"),
            "subjects": _normalized_subjects(obj.get("subjects")),
            "spec": _normalized_spec(obj.get("spec")),
        }

    return comparable(left) == comparable(right)


def _normalized_subjects(subjects):
    # The API server defaults a Group's apiGroup and drops empty fields: compare what both say.
    if subjects is None:
        return None
    return [{k: v for k, v in subject.items() if v not in (None, "")} for subject in subjects]


def _normalized_spec(value):
    # to_dict() of the dynamic client keeps None for absent fields; quota quantities come back as strings.
    if isinstance(value, dict):
        return {k: _normalized_spec(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_normalized_spec(v) for v in value]
    return value


def reference(obj: dict) -> dict:
    kind, namespace, object_name = object_key(obj)
    ref = {"apiVersion": obj.get("apiVersion", ""), "kind": kind, "name": object_name}
    if namespace:
        ref["namespace"] = namespace
    return ref


def host_reference(host_key: tuple[str, str]) -> dict:
    return {"apiVersion": metal3.API_VERSION, "kind": "BareMetalHost", "namespace": host_key[0], "name": host_key[1]}


def refusal(problems: list[Problem]) -> tuple[str, str]:
    """(reason, message) of an Accepted=False condition: the first problem's reason, every message."""
    return problems[0].reason, "; ".join(p.message for p in problems)


def planned_writes(
    objects: dict, owned: list[dict], hosts: dict, tenant: dict, desired: list[dict]
) -> list[tuple[str, str, dict, dict | None]]:
    """(step, action, object, the object as it is) for what differs between `desired` and what exists (`objects` by
    object_key, `owned`: the objects labelled as the tenant's, `hosts` by key): create, replace, recreate, delete;
    reservations last."""
    writes = []
    wanted_keys = set()
    for obj in desired:
        key = object_key(obj)
        wanted_keys.add(key)
        current = objects.get(key)
        step = STEP_OF_KIND[obj["kind"]]
        if current is None:
            writes.append((step, "create", obj, None))
        elif recreate_needed(obj, current):
            writes.append((step, "recreate", obj, current))
        else:
            updated = updated_object(obj, current)
            if updated is not None:
                writes.append((step, "replace", updated, current))
    mine = tenant_name(tenant)
    # What was made for an earlier spec and is no longer asked for (a child namespace, pool or quota removed).
    for stale in owned:
        if object_key(stale) not in wanted_keys and not stale["metadata"].get("deletionTimestamp"):
            writes.append((STEP_OF_KIND[stale["kind"]], "delete", stale, stale))
    reserved = set(exclusive_hosts(tenant))
    for host_key, host in hosts.items():
        updated = with_reservation(host, mine, host_key in reserved)
        if updated is not None:
            writes.append((EXCLUSIVE_HOSTS, "replace", updated, host))
    return writes
