"""What a Tenant asks for and whether it may have it: validation, ownership, pools, exclusive hosts, updates."""

from __future__ import annotations

import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    BINDING_APPROVALS_ANNOTATION,
    HOST_POOLS_ANNOTATION,
    MAX_BOUND_HOSTS_LABEL,
    RESERVED_FOR_ANNOTATION,
    TENANT_LABEL,
    may_bind,
    reserved_for,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import tenant as plan

CLAIM_SIDE = [{"kind": "User", "name": "metalclaim-controller", "apiGroup": "rbac.authorization.k8s.io"}]


def tenant(name="blue", created="2026-01-01T00:00:00Z", **spec) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"tenantName": name, **spec}}


def host(name="h1", namespace="infrahost", reserved=None) -> dict:
    annotations = {RESERVED_FOR_ANNOTATION: reserved} if reserved is not None else {}
    return {"metadata": {"name": name, "namespace": namespace, "annotations": annotations}, "spec": {}}


def test_a_valid_spec_has_no_problem():
    assert plan.validate(tenant(childNamespaces=["a", "b"], hostPools=[{"namespace": "infra"}])) == []


def test_invalid_names_are_refused_naming_the_field():
    assert plan.validate(tenant("Blue_"))[0].field == "spec.tenantName"
    mismatch = {"metadata": {"name": "blue"}, "spec": {"tenantName": "green"}}
    assert plan.validate(mismatch)[0].message == "spec.tenantName 'green' must equal metadata.name"
    prefixed = plan.validate(tenant(), required_prefix="vcluster-")
    assert [(p.field, p.reason) for p in prefixed] == [("spec.tenantName", plan.INVALID_TENANT_NAME)]
    assert plan.validate(tenant("vcluster-blue"), required_prefix="vcluster-") == []
    children = plan.validate(tenant(childNamespaces=["ok", "Bad", "ok", "x" * 60]))
    assert [p.field for p in children] == [f"spec.childNamespaces[{i}]" for i in (1, 2, 3)]
    assert plan.validate(tenant(quota={"maxHostClaims": -1}))[0].field == "spec.quota.maxHostClaims"
    assert plan.validate(tenant(quota={"maxBoundHosts": True}))[0].field == "spec.quota.maxBoundHosts"
    assert plan.validate(tenant(quota={"maxHostClaimSets": "2"}))[0].field == "spec.quota.maxHostClaimSets"


def test_the_quota_counts_claims_and_sets_as_the_tenant_asks():
    """Issue 40: a set of 1000 replicas was admitted and nothing bounded sets per tenant."""

    def hard(quota: dict) -> dict | None:
        found = [
            o
            for o in plan.desired_objects(tenant(childNamespaces=["a"], quota=quota), [])
            if o["kind"] == "ResourceQuota"
        ]
        return found[0]["spec"]["hard"] if found else None

    assert hard({"maxHostClaims": 4, "maxHostClaimSets": 1}) == {
        "count/hostclaims.metal3.io": "4",
        "count/hostclaimsets.metal3.io": "1",
    }
    assert hard({"maxHostClaimSets": 0}) == {"count/hostclaimsets.metal3.io": "0"}
    assert hard({"maxBoundHosts": 3}) is None


def test_desired_objects_are_labelled_and_named_after_the_tenant():
    objects = plan.desired_objects(
        tenant(childNamespaces=["a"], hostPools=[{"namespace": "infra"}], quota={"maxHostClaims": 3}), CLAIM_SIDE
    )
    keys = [plan.object_key(o) for o in objects]
    assert keys == [
        ("Namespace", "", "blue-a"),
        ("RoleBinding", "blue-a", plan.ADMIN_BINDING),
        ("RoleBinding", "blue-a", plan.CLAIM_SIDE_BINDING),
        ("ResourceQuota", "blue-a", plan.QUOTA_NAME),
        ("HostDeployPolicy", "infra", "tenant-blue"),
    ]
    assert all(o["metadata"]["labels"][TENANT_LABEL] == "blue" for o in objects)
    assert objects[1]["subjects"][0]["name"] == "blue-tenant-admin"
    assert objects[3]["spec"] == {"hard": {"count/hostclaims.metal3.io": "3"}}
    assert objects[4]["spec"] == {
        "hostclaimNamespaces": {"names": ["blue-a"], "hasLabels": [{"name": TENANT_LABEL, "value": "blue"}]}
    }
    custom = plan.desired_objects(tenant(childNamespaces=["a"], adminGroup="ops"), [])
    assert [o["subjects"][0]["name"] for o in custom if o["kind"] == "RoleBinding"] == ["ops"]


def test_objects_of_the_wanted_names_that_are_not_the_tenants_refuse_it():
    wanted = tenant(childNamespaces=["a", "b"], hostPools=[{"namespace": "infra"}])
    desired = plan.desired_objects(wanted, [])
    by_hand = {"kind": "Namespace", "metadata": {"name": "blue-b", "labels": {}}}
    others = {"kind": "HostDeployPolicy", "metadata": {"name": "tenant-blue", "namespace": "infra", "labels": {}}}
    current = {plan.object_key(by_hand): by_hand, plan.object_key(others): others}
    problems = plan.ownership_problems(wanted, desired, current)
    assert [(p.field, p.reason) for p in problems] == [
        ("spec.childNamespaces[1]", plan.NAMESPACE_OWNED_ELSEWHERE),
        ("spec.hostPools", plan.OBJECT_NAME_TAKEN),
    ]
    assert "made by hand" in problems[0].message
    mine = {"kind": "Namespace", "metadata": {"name": "blue-b", "labels": {TENANT_LABEL: "blue"}}}
    assert plan.ownership_problems(wanted, desired, {plan.object_key(mine): mine}) == []
    green = {"kind": "Namespace", "metadata": {"name": "blue-b", "labels": {TENANT_LABEL: "green"}}}
    assert "tenant 'green'" in plan.ownership_problems(wanted, desired, {plan.object_key(green): green})[0].message


def test_pools_must_exist():
    problems = plan.pool_problems(tenant(hostPools=[{"namespace": "infra"}, {"namespace": "gone"}]), {"infra"})
    assert [(p.field, p.reason) for p in problems] == [("spec.hostPools[1].namespace", plan.HOST_POOL_NOT_FOUND)]


def exclusive(name, hosts, enforce=True, created="2026-01-01T00:00:00Z"):
    spec = {"enforceExclusive": enforce, "hosts": [{"namespace": "infrahost", "name": h} for h in hosts]}
    return tenant(name, created=created, exclusiveHosts=spec)


def test_exclusive_hosts_must_exist():
    blue = exclusive("blue", ["h1", "nope"])
    problems = plan.exclusive_problems(blue, {("infrahost", "h1"): host()}, [blue])
    assert [(p.field, p.reason) for p in problems] == [("spec.exclusiveHosts.hosts[1]", plan.EXCLUSIVE_HOST_NOT_FOUND)]


def test_the_second_enforcing_tenant_is_refused():
    blue = exclusive("blue", ["h1"], created="2026-01-01T00:00:00Z")
    green = exclusive("green", ["h1"], created="2026-01-02T00:00:00Z")
    hosts = {("infrahost", "h1"): host()}
    # Neither applied yet: the older one wins, whichever is reconciled first.
    assert plan.exclusive_problems(blue, hosts, [blue, green]) == []
    assert plan.exclusive_problems(green, hosts, [blue, green])[0].reason == plan.EXCLUSIVE_HOST_TAKEN
    # Already reserved for the younger one: it keeps it, the older one (edited to list it later) is refused.
    reserved = {("infrahost", "h1"): host(reserved="green")}
    assert "tenant 'green'" in plan.exclusive_problems(blue, reserved, [blue, green])[0].message
    assert plan.exclusive_problems(green, reserved, [blue, green]) == []
    # Without enforceExclusive on both sides, a host may be shared by the tenants that list it.
    shared = exclusive("green", ["h1"], enforce=False, created="2026-01-02T00:00:00Z")
    assert plan.exclusive_problems(shared, hosts, [blue, shared]) == []
    assert plan.exclusive_problems(blue, hosts, [blue, shared]) == []


def test_reservations_add_and_remove_one_tenant():
    first = plan.with_reservation(host(), "blue", True)
    assert reserved_for(first) == ["blue"]
    assert plan.with_reservation(first, "blue", True) is None
    both = plan.with_reservation(first, "green", True)
    assert both["metadata"]["annotations"][RESERVED_FOR_ANNOTATION] == "blue,green"
    assert reserved_for(plan.with_reservation(both, "blue", False)) == ["green"]
    assert RESERVED_FOR_ANNOTATION not in plan.with_reservation(first, "blue", False)["metadata"]["annotations"]
    assert plan.with_reservation(host(), "blue", False) is None


def test_may_bind_reads_the_reservation_and_the_namespace_tenant():
    assert may_bind(host(), {})
    assert may_bind(host(reserved="blue"), {TENANT_LABEL: "blue"})
    assert not may_bind(host(reserved="blue"), {TENANT_LABEL: "green"})
    assert not may_bind(host(reserved="blue"), {})
    assert may_bind(host(reserved="blue,green"), {TENANT_LABEL: "green"})


def test_updates_touch_only_owned_fields():
    desired = plan.desired_objects(tenant(childNamespaces=["a"], quota={"maxHostClaims": 2}), [])
    labels = {"team": "x", **desired[0]["metadata"]["labels"]}
    namespace = {"kind": "Namespace", "metadata": {"name": "blue-a", "labels": labels}}
    assert plan.updated_object(desired[0], namespace) is None
    quota = {**desired[2], "spec": {"hard": {"count/hostclaims.metal3.io": "5"}, "scopes": None}}
    assert plan.updated_object(desired[2], quota)["spec"] == desired[2]["spec"]
    same_quota = {**desired[2], "spec": {"hard": {"count/hostclaims.metal3.io": "2"}, "scopes": None}}
    assert plan.updated_object(desired[2], same_quota) is None
    binding = {**desired[1], "subjects": [{**desired[1]["subjects"][0], "namespace": None}]}
    assert plan.updated_object(desired[1], binding) is None
    assert plan.recreate_needed(desired[1], {**desired[1], "roleRef": {"kind": "ClusterRole", "name": "admin"}})


def test_the_bound_host_limit_is_a_label_of_each_namespace_and_goes_with_the_limit():
    limited = plan.desired_objects(tenant(childNamespaces=["a", "b"], quota={"maxBoundHosts": 0}), [])
    namespaces = [o for o in limited if o["kind"] == "Namespace"]
    assert [o["metadata"]["labels"][MAX_BOUND_HOSTS_LABEL] for o in namespaces] == ["0", "0"]
    assert all(MAX_BOUND_HOSTS_LABEL not in o["metadata"]["labels"] for o in limited if o["kind"] != "Namespace")
    unlimited = plan.desired_objects(tenant(childNamespaces=["a"]), [])[0]
    current = {"kind": "Namespace", "metadata": {"name": "blue-a", "labels": {"team": "x"}}}
    current["metadata"]["labels"].update(namespaces[0]["metadata"]["labels"])
    lifted = plan.updated_object(unlimited, current)
    assert lifted["metadata"]["labels"] == {"team": "x", **unlimited["metadata"]["labels"]}
    raised = plan.desired_objects(tenant(childNamespaces=["a"], quota={"maxBoundHosts": 4}), [])[0]
    assert plan.updated_object(raised, current)["metadata"]["labels"][MAX_BOUND_HOSTS_LABEL] == "4"


def test_a_namespace_of_a_tenant_with_a_blocking_bound_hook_is_born_needing_approval():
    gate = {"name": "gate", "url": "http://127.0.0.1:9/", "blockingCall": True, "eventTypes": ["CLAIM_BOUND"]}
    gated = plan.desired_objects(tenant(childNamespaces=["a"], hooks=[gate]), [])[0]
    assert gated["metadata"]["annotations"] == {BINDING_APPROVALS_ANNOTATION: "{}"}
    told = {**gate, "blockingCall": False}
    assert "annotations" not in plan.desired_objects(tenant(childNamespaces=["a"], hooks=[told]), [])[0]["metadata"]
    # The verdicts on an existing namespace are the hook step's: updating the namespace leaves them alone.
    current = {"kind": "Namespace", "metadata": {"name": "blue-a", "labels": dict(gated["metadata"]["labels"])}}
    current["metadata"]["annotations"] = {BINDING_APPROVALS_ANNOTATION: '{"u1":{"allowed":true}}'}
    assert plan.updated_object(gated, current) is None


def test_host_pool_selectors_are_an_annotation_of_each_namespace_and_go_with_them():
    selector = {"matchLabels": {"pool": "blue"}}
    pools = [{"namespace": "infra", "hostSelector": selector}, {"namespace": "spare"}]
    assert plan.validate(tenant(childNamespaces=["a"], hostPools=pools)) == []
    (namespace,) = [
        o for o in plan.desired_objects(tenant(childNamespaces=["a"], hostPools=pools), []) if o["kind"] == "Namespace"
    ]
    assert json.loads(namespace["metadata"]["annotations"][HOST_POOLS_ANNOTATION]) == {"infra": selector}
    current = {"kind": "Namespace", "metadata": {"name": "blue-a", "labels": dict(namespace["metadata"]["labels"])}}
    current["metadata"]["annotations"] = {"keep": "me"}
    narrowed = plan.updated_object(namespace, current)
    assert narrowed["metadata"]["annotations"] == {"keep": "me", **namespace["metadata"]["annotations"]}
    assert plan.updated_object(namespace, narrowed) is None
    unnarrowed = plan.desired_objects(tenant(childNamespaces=["a"], hostPools=[{"namespace": "infra"}]), [])[0]
    assert plan.updated_object(unnarrowed, narrowed)["metadata"]["annotations"] == {"keep": "me"}


def test_a_bad_host_pool_is_refused_naming_the_field():
    bad = [{"namespace": "infra", "hostSelector": {"matchExpressions": [{"key": "pool", "operator": "In"}]}}]
    (problem,) = plan.validate(tenant(hostPools=bad))
    assert problem.field == "spec.hostPools[0].hostSelector" and "needs at least one value" in problem.message
    twice = [{"namespace": "infra"}, {"namespace": "infra"}]
    (problem,) = plan.validate(tenant(hostPools=twice))
    assert problem.field == "spec.hostPools[1].namespace" and "listed twice" in problem.message


def test_every_tenant_condition_reason_is_in_the_infra_guide():
    import ast
    import re
    from pathlib import Path

    guide = Path(__file__).resolve().parents[6] / "docs" / "infra-guide.md"
    documented = set(re.findall(r"`([A-Za-z]+)`", guide.read_text()))
    tree = ast.parse(Path(plan.__file__).read_text())
    reasons = {
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)*", node.value.value)
    } - {plan.KIND}
    assert {plan.SPEC_ACCEPTED, plan.EXCLUSIVE_HOST_TAKEN, plan.DEPLOYED} <= reasons
    missing = sorted(reasons - documented)
    assert not missing, f"Tenant states, conditions or reasons docs/infra-guide.md does not explain: {missing}"


def test_planned_writes_create_what_is_missing_keep_what_is_there_and_delete_what_is_no_longer_asked():
    """Issue 25: the tenant step's plan of writes, decided without I/O from what the run read."""
    mine = tenant("blue")
    wanted = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "blue-a", "labels": {"x": "1"}}}
    stale = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "blue-old", "labels": {"x": "1"}}}
    assert plan.planned_writes({}, [], {}, mine, [wanted]) == [(plan.NAMESPACES, "create", wanted, None)]
    existing = {plan.object_key(wanted): wanted, plan.object_key(stale): stale}
    assert plan.planned_writes(existing, [wanted, stale], {}, mine, [wanted]) == [
        (plan.NAMESPACES, "delete", stale, stale)
    ]
    going = {**stale, "metadata": {**stale["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert plan.planned_writes(existing, [wanted, going], {}, mine, [wanted]) == []
