"""A HostClaimSet's plan: which claims to make (names, bodies), which to delete (the scale-down rule), its status, and
the binder's spread over failure domains for its members."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claimsets.pure import plan as sets
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.claimsets import (
    SET_LABEL,
    SPREAD_ANNOTATION,
)

NS = "cluster-ns"
ZONE = "topology.kubernetes.io/zone"
T = "2030-01-01T00:00:00Z"


def claim_set(replicas=3, name="web", uid="set-uid", spread=None, **spec) -> dict:
    spec = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"online": False, "hostSelector": {}}},
        **spec,
    }
    if spread:
        spec["spreadBy"] = spread
    return {"metadata": {"name": name, "namespace": NS, "uid": uid, "generation": 2}, "spec": spec}


def member(name, created=T, association=None, ready=None, owner="set-uid", deleting=False, namespace=NS) -> dict:
    conditions = []
    if association:
        conditions.append(
            {"type": "Association", "status": association, "reason": "X" if association != "True" else "B"}
        )
    if ready:
        conditions.append({"type": "Ready", "status": ready})
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "creationTimestamp": created,
        "ownerReferences": [
            {
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "HostClaimSet",
                "name": "web",
                "uid": owner,
                "controller": True,
            }
        ],
    }
    if deleting:
        meta["deletionTimestamp"] = T
    return {"metadata": meta, "spec": {}, "status": {"conditions": conditions}}


def names(claims):
    return [c["metadata"]["name"] for c in claims]


def test_a_new_set_makes_its_claims_named_by_the_smallest_free_numbers():
    hand_made = {"metadata": {"name": "web-1", "namespace": NS, "uid": "u"}}  # a tenant's own claim, not a member
    planned = sets.plan(claim_set(3), [hand_made])
    assert names(planned.create) == ["web-0", "web-2", "web-3"]
    assert planned.delete == [] and planned.live == []


def test_a_member_body_is_the_template_in_the_sets_namespace_controlled_by_the_set():
    body = sets.member_body(claim_set(spread=ZONE), "web-0")
    meta = body["metadata"]
    assert (meta["namespace"], meta["name"], body["kind"]) == (NS, "web-0", "HostClaim")
    assert meta["labels"] == {"app": "web", SET_LABEL: "web"}
    assert meta["annotations"] == {SPREAD_ANNOTATION: ZONE}
    [owner] = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaimSet",
        "name": "web",
        "uid": "set-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert body["spec"] == {"online": False, "hostSelector": {}}


def test_the_template_cannot_set_the_spread_annotation_of_a_set_without_spread():
    template_set = claim_set()
    template_set["spec"]["template"]["metadata"]["annotations"] = {SPREAD_ANNOTATION: ZONE, "keep": "me"}
    assert sets.member_body(template_set, "web-0")["metadata"]["annotations"] == {"keep": "me"}


def test_a_settled_set_plans_nothing_and_claims_of_other_owners_do_not_count():
    claims = [member("web-0"), member("web-1"), member("web-2"), member("other-0", owner="another-set")]
    planned = sets.plan(claim_set(3), claims)
    assert planned.create == [] and planned.delete == []
    assert names(planned.live) == ["web-0", "web-1", "web-2"]


def test_a_member_of_another_namespace_is_never_the_sets():
    assert sets.members(claim_set(), [member("web-0", namespace="elsewhere")]) == []


def test_members_being_deleted_are_replaced_under_new_names():
    claims = [member("web-0", deleting=True), member("web-1")]
    planned = sets.plan(claim_set(2), claims)
    assert names(planned.create) == ["web-2"]
    assert planned.releasing == 1


@pytest.mark.parametrize(
    ("claims", "deleted"),
    [
        # not looked at yet, then waiting for a host, then bound not Ready, then Ready
        (
            [
                member("a", association="True", ready="True"),
                member("b", association="True", ready="False"),
                member("c", association="False"),
                member("d"),
            ],
            ["d", "c", "b"],
        ),
        # within one stage the newest first
        (
            [
                member("web-0", created="2030-01-01T00:00:00Z", association="True", ready="True"),
                member("web-1", created="2030-01-02T00:00:00Z", association="True", ready="True"),
                member("web-2", created="2030-01-01T12:00:00Z", association="True", ready="True"),
            ],
            ["web-1", "web-2"],
        ),
        # same time: the highest number first (web-10 after web-9 in numbers, not in letters)
        (
            [
                member("web-9", association="False"),
                member("web-10", association="False"),
                member("web-2", association="False"),
            ],
            ["web-10", "web-9"],
        ),
    ],
)
def test_scale_down_deletes_by_the_rule(claims, deleted):
    planned = sets.plan(claim_set(len(claims) - len(deleted)), claims)
    assert names(planned.delete) == deleted
    assert planned.create == []


def test_scale_to_zero_deletes_every_member():
    claims = [member("web-0"), member("web-1")]
    assert sorted(names(sets.plan(claim_set(0), claims).delete)) == ["web-0", "web-1"]


def test_a_burst_makes_at_most_create_burst_claims_and_says_how_many_are_left():
    planned = sets.plan(claim_set(sets.CREATE_BURST + 5), [])
    assert len(planned.create) == sets.CREATE_BURST and planned.more_later == 5


def test_a_set_being_deleted_plans_nothing():
    deleted = claim_set(3)
    deleted["metadata"]["deletionTimestamp"] = T
    planned = sets.plan(deleted, [member("web-0")])
    assert planned.create == [] and planned.delete == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"selector": {"matchLabels": {"app": "db"}}}, "does not match spec.template.metadata.labels"),
        ({"selector": {}}, "selects nothing"),
        ({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}, "needs at least one value"),
        ({"spreadBy": "not a key!"}, "spec.spreadBy"),
    ],
)
def test_an_unusable_spec_makes_and_deletes_nothing(change, problem):
    unusable = claim_set(3)
    unusable["spec"].update(change)
    planned = sets.plan(unusable, [member("web-0"), member("web-1"), member("web-2"), member("web-3")])
    assert planned.create == [] and planned.delete == []
    assert any(problem in p for p in planned.problems), planned.problems


@pytest.mark.parametrize("role", ["userData", "metaData", "networkData"])
def test_a_template_naming_a_secret_of_another_namespace_is_refused(role):
    """The claims are made by the claim side's identity: the set may not name what its tenant could not."""
    crossing = claim_set(1)
    crossing["spec"]["template"]["spec"][role] = {"name": "s", "namespace": "victim"}
    planned = sets.plan(crossing, [])
    assert planned.create == []
    assert planned.problems == [f"spec.template.spec.{role}.namespace: a set's claims are made in {NS!r} only"]
    own = claim_set(1)
    own["spec"]["template"]["spec"][role] = {"name": "s", "namespace": NS}
    assert names(sets.plan(own, []).create) == ["web-0"]


def test_status_counts_and_conditions_of_a_set_larger_than_the_free_hosts():
    live = [member(f"web-{i}", association="True", ready="True") for i in range(3)]
    live += [member("web-3", association="False"), member("web-4")]
    status = sets.desired_status(claim_set(5), live, 0, [], "", 0, T)
    assert (status["replicas"], status["boundReplicas"], status["readyReplicas"], status["waitingReplicas"]) == (
        5,
        3,
        3,
        2,
    )
    assert status["selector"] == "app=web"
    assert status["observedGeneration"] == 2
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Scaled"]["status"] == "True"
    assert conditions["Bound"]["reason"] == sets.HOSTS_WAITING
    assert conditions["Bound"]["message"].startswith("3 of 5 claims hold a host; 2 wait (NotYetLookedAt 1, X 1)")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", sets.REPLICAS_NOT_READY)


def test_status_of_a_refused_create_quotes_the_api_server():
    status = sets.desired_status(claim_set(3), [member("web-0")], 0, [], "exceeded quota: q, used 1, limited 1", 0, T)
    scaled = next(c for c in status["conditions"] if c["type"] == "Scaled")
    assert (scaled["status"], scaled["reason"]) == ("False", sets.CREATE_REFUSED)
    assert "1 of 3 claims made" in scaled["message"] and "exceeded quota" in scaled["message"]


def test_a_settled_status_is_the_same_twice():
    live = [member("web-0", association="True", ready="True")]
    first = sets.desired_status(claim_set(1), live, 0, [], "", 0, T)
    settled = {**claim_set(1), "status": first}
    assert sets.desired_status(settled, live, 0, [], "", 0, "2031-01-01T00:00:00Z") == first
    assert {c["type"]: c["status"] for c in first["conditions"]} == {"Ready": "True", "Scaled": "True", "Bound": "True"}


def test_selector_string_of_expressions():
    selector = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["y", "x"]},
            {"key": "gpu", "operator": "Exists"},
            {"key": "old", "operator": "DoesNotExist"},
            {"key": "z", "operator": "NotIn", "values": ["q"]},
        ],
    }
    assert sets.selector_string(selector) == "a=1,b=2,tier in (x,y),gpu,!old,z notin (q)"


def test_outcomes():
    results = [
        {"namespace": NS, "name": "a", "state": "ScaledToReplicas"},
        {"namespace": NS, "name": "b", "refused": "quota"},
        {"namespace": NS, "name": "c", "more_later": 3},
        {"namespace": NS, "name": "d", "result": "retry", "reason": "Conflict"},
    ]
    found = {o["name"]: (o["result"], o["after"]) for o in sets.set_outcomes(results)}
    assert found == {
        "a": ("done", None),
        "b": ("wait", sets.REFUSED_RETRY_SECONDS),
        "c": ("done", sets.BURST_RETRY_SECONDS),
        "d": ("retry", None),
    }


# -- the binder's spread ----------------------------------------------------------------------------------------------


def host(name, zone=None, consumer=None) -> dict:
    labels = {"infra-kind": "medium", **({ZONE: zone} if zone else {})}
    return {
        "metadata": {"name": name, "namespace": "infrahost", "uid": f"uid-{name}", "labels": labels},
        "spec": {"consumerRef": {"kind": "HostClaim", "namespace": NS, "name": consumer}} if consumer else {},
        "status": {"provisioning": {"state": "available"}},
    }


def spread_member(name, spread=ZONE, owner="set-uid") -> dict:
    claim = member(name, owner=owner)
    if spread:
        claim["metadata"]["annotations"] = {SPREAD_ANNOTATION: spread}
    claim["spec"] = {"hostSelector": {"matchLabels": {"infra-kind": "medium"}}}
    return claim


def test_a_member_prefers_the_zone_its_set_holds_fewest_hosts_in():
    hosts = [
        host("a1", "a", consumer="web-0"),
        host("a2", "a"),
        host("b1", "b", consumer="web-1"),
        host("b2", "b"),
        host("c1", "c"),
    ]
    claims = [spread_member("web-0"), spread_member("web-1"), spread_member("web-2")]
    spread = binding.spread_counts(claims[2], hosts, claims)
    assert spread == {"label": ZONE, "counts": {"a": 1, "b": 1}}
    plan = binding.plan(claims[2], hosts, ["infrahost"], spread=spread)
    assert plan.candidates[0]["metadata"]["name"] == "c1"  # the zone none of its set holds


def test_hosts_of_claims_of_other_owners_do_not_count_and_unlabelled_hosts_are_one_domain():
    hosts = [host("a1", "a", consumer="x-0"), host("n1", consumer="web-0"), host("n2"), host("a2", "a")]
    claims = [spread_member("web-0"), spread_member("web-1"), spread_member("x-0", owner="other-set")]
    spread = binding.spread_counts(claims[1], hosts, claims)
    assert spread["counts"] == {"": 1}
    plan = binding.plan(claims[1], hosts, ["infrahost"], spread=spread)
    assert plan.candidates[0]["metadata"]["name"] == "a2"


def test_claims_without_a_spread_rule_rank_as_before():
    claims = [spread_member("web-0", spread=None)]
    assert binding.spread_counts(claims[0], [host("a1", "a")], claims) is None
    loose = {"metadata": {"name": "c", "namespace": NS, "annotations": {SPREAD_ANNOTATION: ZONE}}}  # not a member
    assert binding.spread_counts(loose, [], []) is None


def test_three_members_bound_one_after_another_land_in_three_zones():
    """The binder binds a batch's claims in turn, each seeing the hosts the earlier ones took."""
    hosts = [host(f"{zone}{i}", zone) for zone in "abc" for i in range(3)]
    claims = [spread_member(f"web-{i}") for i in range(3)]
    for claim in claims:
        spread = binding.spread_counts(claim, hosts, claims)
        chosen = binding.plan(claim, hosts, ["infrahost"], spread=spread).candidates[0]
        chosen["spec"]["consumerRef"] = {"kind": "HostClaim", "namespace": NS, "name": claim["metadata"]["name"]}
    zones = sorted(h["metadata"]["labels"][ZONE] for h in hosts if h["spec"].get("consumerRef"))
    assert zones == ["a", "b", "c"]
