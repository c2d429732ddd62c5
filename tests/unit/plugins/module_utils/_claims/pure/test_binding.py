"""Which host a claim gets: authorization, selection, failure domains, the consumerRef truth."""

from __future__ import annotations

import datetime
import json
import random

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, booking, reuse
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    IN_USE_ANNOTATION,
    PAUSED_ANNOTATION,
    WARM_ANNOTATION,
)


def host(name, namespace="infrahost", labels=None, state="available", consumer=None, **meta) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {}, **meta},
        "spec": {"consumerRef": consumer} if consumer else {},
        "status": {"provisioning": {"state": state}},
    }


def claim(name="c", namespace="cluster-ns", uid="claim-uid", status=None, **spec) -> dict:
    spec.setdefault("hostSelector", {"matchLabels": {"infra-kind": "medium"}})
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": spec, "status": status or {}}


MEDIUM = {"infra-kind": "medium"}


def names(hosts):
    return [h["metadata"]["name"] for h in hosts]


def test_only_free_matching_hosts_in_authorized_namespaces_are_candidates():
    hosts = [
        host("ok", labels=MEDIUM),
        host("large", labels={"infra-kind": "large"}),
        host("elsewhere", namespace="rack-9", labels=MEDIUM),
        host("taken", labels=MEDIUM, consumer={"kind": "HostClaim", "namespace": "x", "name": "y"}),
        host("provisioning", labels=MEDIUM, state="provisioning"),
        host("paused", labels=MEDIUM, annotations={PAUSED_ANNOTATION: ""}),
        host("deleting", labels=MEDIUM, deletionTimestamp="2026-01-01T00:00:00Z"),
        host("ready", labels=MEDIUM, state="ready"),
    ]
    hosts.append(host("broken", labels=MEDIUM))
    hosts[-1]["status"]["errorType"] = "registration error"
    result = binding.plan(claim(), hosts, ["infrahost"])
    assert result.action == "bind"
    assert sorted(names(result.candidates)) == ["ok", "ready"]


def test_no_policy_refuses_with_the_policy_message():
    result = binding.plan(claim(), [host("ok", labels=MEDIUM)], [])
    assert (result.action, result.reason, result.message) == (
        "refuse",
        binding.NOT_AUTHORIZED,
        "no HostDeployPolicy admits namespace 'cluster-ns'",
    )


def test_in_namespace_restricts_to_one_authorized_namespace():
    hosts = [host("a", labels=MEDIUM), host("b", namespace="rack-2", labels=MEDIUM)]
    selector = {"matchLabels": MEDIUM, "inNamespace": "rack-2"}
    result = binding.plan(claim(hostSelector=selector), hosts, ["infrahost", "rack-2"])
    assert names(result.candidates) == ["b"]
    refused = binding.plan(claim(hostSelector=selector), hosts, ["infrahost"])
    assert (refused.reason, refused.message) == (
        binding.NOT_AUTHORIZED,
        "no HostDeployPolicy in namespace 'rack-2' admits namespace 'cluster-ns'",
    )


def test_no_matching_host():
    result = binding.plan(claim(), [host("large", labels={"infra-kind": "large"})], ["infrahost"])
    assert (result.action, result.reason) == ("refuse", binding.NO_HOST)
    # Tenants read this: never the names of infrastructure namespaces they cannot see.
    assert result.message == "no free BareMetalHost matches spec.hostSelector among the hosts this namespace may use"
    assert "infrahost" not in result.message


@pytest.mark.parametrize("label", binding.FAILURE_DOMAIN_LABELS)
def test_failure_domain_hosts_come_first(label):
    hosts = [host(f"h{i}", labels={**MEDIUM, label: f"zone-{i % 2}"}) for i in range(10)]
    result = binding.plan(claim(failureDomain="zone-1"), hosts, ["infrahost"])
    assert [h["metadata"]["labels"][label] for h in result.candidates[:5]] == ["zone-1"] * 5


def test_cluster_api_failure_domain_label_wins_over_the_zone_label():
    capi, zone = binding.FAILURE_DOMAIN_LABELS
    assert binding.FAILURE_DOMAIN_LABELS == (
        "infrastructure.cluster.x-k8s.io/failure-domain",
        "topology.kubernetes.io/zone",
    )
    both = host("both", labels={**MEDIUM, capi: "fd-1", zone: "zone-9"})
    assert binding.failure_domain(both) == "fd-1"
    assert binding.failure_domain(host("zone-only", labels={**MEDIUM, zone: "zone-9"})) == "zone-9"


def test_invalid_selector_never_binds():
    # DoesNotExist on an invalid key would match every host if evaluated.
    bad = claim()
    bad["spec"]["hostSelector"] = {"matchExpressions": [{"key": "bad key", "operator": "DoesNotExist"}]}
    result = binding.plan(bad, [host("free", labels=MEDIUM)], ["infrahost"])
    assert (result.action, result.reason) == ("refuse", binding.INVALID_SELECTOR)
    assert result.message.startswith("spec.hostSelector.matchExpressions[0].key: name part 'bad key'")


def test_existing_consumer_ref_wins_over_everything():
    ref = {"kind": "HostClaim", "namespace": "cluster-ns", "name": "c", "uid": "claim-uid"}
    # Even a host in a state no new binding would accept: it is already this claim's.
    mine = host("mine", labels={"infra-kind": "large"}, state="provisioned", consumer=ref)
    result = binding.plan(claim(), [host("free", labels=MEDIUM), mine], [])
    assert (result.action, result.host["metadata"]["name"]) == ("keep", "mine")


def test_consumer_ref_of_a_recreated_claim_is_not_mine():
    ref = {"kind": "HostClaim", "namespace": "cluster-ns", "name": "c", "uid": "old-uid"}
    result = binding.plan(claim(), [host("old", labels=MEDIUM, consumer=ref)], ["infrahost"])
    assert result.action == "refuse"


def test_forged_status_is_stale_and_the_claim_binds_elsewhere():
    forged = {"hardwareData": {"name": "victim", "namespace": "infrahost"}}
    someone = {"kind": "HostClaim", "namespace": "tenant-b", "name": "theirs"}
    hosts = [host("victim", labels=MEDIUM, state="provisioned", consumer=someone), host("free", labels=MEDIUM)]
    result = binding.plan(claim(status=forged), hosts, ["infrahost"])
    assert result.stale_status is True
    assert (result.action, names(result.candidates)) == ("bind", ["free"])
    assert result.reason == ""  # the host exists: not MissingBareMetalHost


def test_deleted_host_is_reported_missing_and_the_claim_binds_again():
    recorded = {"hardwareData": {"name": "gone", "namespace": "infrahost"}}
    result = binding.plan(claim(status=recorded), [host("free", labels=MEDIUM)], ["infrahost"])
    assert (result.action, result.reason) == ("bind", binding.MISSING_HOST)
    assert result.message == "BareMetalHost infrahost/gone no longer exists"
    none_left = binding.plan(claim(status=recorded), [], ["infrahost"])
    assert (none_left.action, none_left.reason) == ("refuse", binding.MISSING_HOST)


def test_other_kinds_and_deleting_claims_are_skipped():
    assert binding.plan(claim(kind="vm"), [host("h", labels=MEDIUM)], ["infrahost"]).action == "skip"
    deleting = claim()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert binding.plan(deleting, [host("h", labels=MEDIUM)], ["infrahost"]).action == "skip"


def test_invalid_selector_is_refused_with_the_field():
    bad = claim(hostSelector={"matchExpressions": [{"key": "k", "operator": "In"}]})
    result = binding.plan(bad, [host("h", labels=MEDIUM)], ["infrahost"])
    assert (result.action, result.reason) == ("refuse", binding.INVALID_SELECTOR)
    assert "values: In needs at least one value" in result.message


def test_concurrent_claims_spread_over_candidates():
    hosts = [host(f"h{i:02d}", labels=MEDIUM) for i in range(50)]
    firsts = {
        names(binding.plan(claim(name=f"c{i}", uid=f"u{i}"), hosts, ["infrahost"]).candidates)[0] for i in range(50)
    }
    # 50 claims racing for 50 hosts: their first choices are spread, not all on one host.
    assert len(firsts) > 25


def test_two_hosts_naming_one_claim_keep_the_recorded_one_and_give_back_the_other():
    ref = {"kind": "HostClaim", "namespace": "cluster-ns", "name": "c", "uid": "claim-uid"}
    status = {"hardwareData": {"name": "b", "namespace": "infrahost"}}
    hosts = [host("a", labels=MEDIUM, consumer=ref), host("b", labels=MEDIUM, consumer=ref)]
    result = binding.plan(claim(status=status), hosts, ["infrahost"])
    assert (result.action, result.host["metadata"]["name"], names(result.extra_hosts)) == ("keep", "b", ["a"])


def test_a_host_reserved_for_other_tenants_is_never_a_candidate():
    reserved = host("h1", labels={"infra-kind": "medium"}, annotations={"tenancy.metalclaim.io/reserved-for": "blue"})
    tenant_label = "tenancy.metalclaim.io/tenant"
    green = binding.plan(claim(), [reserved], ["infrahost"], {tenant_label: "green"})
    assert (green.action, green.reason) == ("refuse", binding.NO_HOST)
    assert binding.plan(claim(), [reserved], ["infrahost"], {}).action == "refuse"
    blue = binding.plan(claim(), [reserved], ["infrahost"], {tenant_label: "blue"})
    assert blue.action == "bind" and blue.candidates == [reserved]


def test_a_tenant_at_its_bound_host_limit_waits_and_keeps_what_it_holds():
    tenant_label = "tenancy.metalclaim.io/tenant"
    limit_label = "tenancy.metalclaim.io/max-bound-hosts"
    labels = {tenant_label: "blue", limit_label: "1"}
    free = host("h1", labels=MEDIUM)
    waiting = binding.plan(claim(), [free], ["infrahost"], labels, held_by_tenant=1)
    assert (waiting.action, waiting.reason) == ("refuse", binding.TENANT_HOST_LIMIT)
    assert "'blue' holds 1 hosts" in waiting.message and "maxBoundHosts: 1" in waiting.message
    assert binding.plan(claim(), [free], ["infrahost"], labels, held_by_tenant=0).action == "bind"
    # Lowered under what it holds: nothing is taken away.
    mine = host("h2", labels=MEDIUM, consumer=binding.claim_ref(claim()))
    assert binding.plan(claim(), [mine, free], ["infrahost"], {**labels, limit_label: "0"}, 1).action == "keep"
    # No limit without a tenant; a value that is not a count binds nothing.
    assert binding.plan(claim(), [free], ["infrahost"], {limit_label: "0"}, 5).action == "bind"
    garbled = binding.plan(claim(), [free], ["infrahost"], {**labels, limit_label: "many"}, 0)
    assert garbled.reason == binding.TENANT_HOST_LIMIT


def test_a_claim_of_a_namespace_with_blocking_bound_hooks_binds_only_once_allowed():
    annotation = "tenancy.metalclaim.io/binding-approvals"
    free = host("h1", labels=MEDIUM)
    mine = claim()
    uid = mine["metadata"]["uid"]

    def plan_with(value):
        return binding.plan(mine, [free], ["infrahost"], {}, 0, {annotation: value})

    pending = plan_with("{}")
    assert (pending.action, pending.reason) == ("refuse", binding.BINDING_HOOK_PENDING)
    assert "waiting for the tenant's blocking CLAIM_BOUND hook" in pending.message
    refused = plan_with(json.dumps({uid: {"allowed": False, "message": "hook 'cmdb': HTTP 500", "nextAskAt": "T"}}))
    assert (refused.action, refused.reason) == ("refuse", binding.BINDING_HOOK_REFUSED)
    assert refused.message == "hook 'cmdb': HTTP 500; asked again at T"
    assert plan_with(json.dumps({uid: {"allowed": True}})).action == "bind"
    # Another claim's approval (a claim of the same name deleted and made again has another uid) is not this one's.
    assert plan_with(json.dumps({"another-uid": {"allowed": True}})).reason == binding.BINDING_HOOK_PENDING
    # An unreadable value binds nothing; no annotation at all: no hook to ask.
    assert plan_with("not json").reason == binding.BINDING_HOOK_PENDING
    assert plan_with("[]").reason == binding.BINDING_HOOK_PENDING
    assert binding.plan(mine, [free], ["infrahost"], {}, 0, {}).action == "bind"
    # A claim already bound keeps its host whatever the hooks say now.
    held = host("h2", labels=MEDIUM, consumer=binding.claim_ref(mine))
    assert binding.plan(mine, [held], ["infrahost"], {}, 0, {annotation: "{}"}).action == "keep"


def test_a_tenant_host_pool_selector_narrows_its_infra_namespace_only():
    annotation = "tenancy.metalclaim.io/host-pools"
    blue = host("h1", labels={**MEDIUM, "pool": "blue"})
    plain = host("h2", labels=MEDIUM)
    elsewhere = host("h3", namespace="other", labels=MEDIUM)
    hosts = [blue, plain, elsewhere]

    def candidates(value):
        planned = binding.plan(claim(), hosts, ["infrahost", "other"], {}, 0, {annotation: value})
        return sorted(names(planned.candidates)) if planned.action == "bind" else planned.reason

    assert candidates(json.dumps({"infrahost": {"matchLabels": {"pool": "blue"}}})) == ["h1", "h3"]
    expressions = {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["blue"]}]}
    assert candidates(json.dumps({"infrahost": expressions})) == ["h2", "h3"]
    # A selector that cannot be read admits nothing in its namespace; an unreadable annotation nothing anywhere.
    assert candidates(json.dumps({"infrahost": {"matchLabels": {"bad key!": "x"}}})) == ["h3"]
    assert candidates("{not json") == binding.NO_HOST
    assert candidates(json.dumps({"infrahost": "pool=blue"})) == binding.NO_HOST
    assert sorted(names(binding.plan(claim(), hosts, ["infrahost", "other"], {}, 0, {}).candidates)) == [
        "h1",
        "h2",
        "h3",
    ]


def test_hosts_held_counts_claims_of_every_namespace_of_the_tenant():
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import hosts_held

    labels_of = {"blue-a": {"tenancy.metalclaim.io/tenant": "blue"}, "blue-b": {"tenancy.metalclaim.io/tenant": "blue"}}
    labels_of["green-a"] = {"tenancy.metalclaim.io/tenant": "green"}
    refs = [
        {"kind": "HostClaim", "namespace": "blue-a", "name": "x"},
        {"kind": "HostClaim", "namespace": "blue-b", "name": "y"},
        {"kind": "HostClaim", "namespace": "green-a", "name": "z"},
        {"kind": "Machine", "namespace": "blue-a", "name": "m"},
        {"kind": "HostClaim", "namespace": "gone", "name": "w"},
    ]
    assert hosts_held("blue", refs, labels_of) == 2


def test_a_released_host_is_given_back_only_available_read_powered_off_and_no_longer_in_use():
    def released(state="available", powered_on=False, in_use=False) -> dict:
        h = host("h", state=state, annotations={IN_USE_ANNOTATION: "{}"} if in_use else {})
        if powered_on is not None:
            h["status"]["poweredOn"] = powered_on
        return h

    assert binding.why_not_given_back(released()) is None
    assert binding.why_not_given_back(released(state="deprovisioning")) == "to be deprovisioned (now deprovisioning)"
    # Still on under the last consumer: a request to power off is not a power-off.
    assert binding.why_not_given_back(released(powered_on=True)) == "to report itself powered off"
    assert binding.why_not_given_back(released(powered_on=None)) == "to report itself powered off"  # never read
    assert "deprovisioned after" in binding.why_not_given_back(released(in_use=True))
    # And nobody binds a host still marked in use (its consumerRef cleared by hand, say).
    assert binding.why_not_free(released(in_use=True)) == "still to be deprovisioned after its last consumer"


def test_a_warm_host_is_given_back_on_and_preferred_for_disk_images_only():
    """Fast track: the provisioner's warm mark says the host is on in the deploy system its cleaning booted."""
    warm = host("h9", labels=MEDIUM, annotations={WARM_ANNOTATION: "2026-11-26T00:00:00Z"})
    warm["status"]["poweredOn"] = True
    assert binding.why_not_given_back(warm) is None and binding.why_not_free(warm) is None
    cold = [host(f"h{i}", labels=MEDIUM) for i in range(3)]
    disk = {"url": "http://images/node.qcow2", "checksum": "0" * 64}
    unmarked = host("h9", labels=MEDIUM)
    assert names(binding.plan(claim(image=disk), [*cold, unmarked], ["infrahost"]).candidates)[0] != "h9"
    assert names(binding.plan(claim(image=disk), [*cold, warm], ["infrahost"]).candidates)[0] == "h9"
    live = {"url": "http://images/live.iso", "format": "live-iso"}
    # A live ISO gains nothing from the waiting writer: the order is the one without the mark.
    order = names(binding.plan(claim(image=live), [*cold, unmarked], ["infrahost"]).candidates)
    assert names(binding.plan(claim(image=live), [*cold, warm], ["infrahost"]).candidates) == order
    # The tenant's placement comes first: a warm host elsewhere does not beat its failure domain.
    zoned = [host("z1", labels={**MEDIUM, binding.FAILURE_DOMAIN_LABELS[1]: "zone-1"}), warm]
    assert names(binding.plan(claim(image=disk, failureDomain="zone-1"), zoned, ["infrahost"]).candidates)[0] == "z1"


def test_a_batch_planned_against_one_index_takes_each_host_once_and_agrees_with_lists():
    """A binder plans a batch against one HostIndex, putting each host it takes back in: every claim gets a host of
    its own, and each plan's candidates are those of a plan against a plain list of the same hosts."""
    hosts = [host(f"h{i:02d}", labels=MEDIUM) for i in range(20)] + [host("other", labels={"infra-kind": "large"})]
    index = binding.HostIndex(hosts)
    current = list(hosts)
    taken = []
    for i in range(20):
        c = claim(name=f"c{i}", uid=f"u{i}")
        planned = binding.plan(c, index, ["infrahost"])
        assert names(planned.candidates) == names(binding.plan(c, current, ["infrahost"]).candidates)
        chosen = dict(planned.candidates[0], spec={"consumerRef": binding.claim_ref(c)})
        index.put(chosen)
        current = [chosen if binding.key(h) == binding.key(chosen) else h for h in current]
        taken.append(names([chosen])[0])
    assert sorted(taken) == [f"h{i:02d}" for i in range(20)]
    assert binding.plan(claim(name="late", uid="late"), index, ["infrahost"]).action == "refuse"
    # What the index says a claim owns follows put(): the claim keeps its host, a host given back is free again.
    first = claim(name="c0", uid="u0")
    assert binding.plan(first, index, ["infrahost"]).action == "keep"
    given_back = next(h for h in index.all() if binding.consumed_by(h, first))
    index.put(dict(given_back, spec={}))
    assert index.owned_by(first) == []
    assert names(binding.plan(claim(name="late", uid="late"), index, ["infrahost"]).candidates) == names([given_back])


def test_the_spread_order_is_each_claims_own_and_the_same_for_two_binders():
    hosts = [host(f"h{i:02d}", labels=MEDIUM) for i in range(30)]
    one, other = binding.HostIndex(hosts), binding.HostIndex(list(reversed(hosts)))
    c = claim(name="c", uid="u")
    # Two binders listing the same hosts (in any order) agree on a claim's first choice...
    assert names(binding.plan(c, one, ["infrahost"]).candidates) == names(
        binding.plan(c, other, ["infrahost"]).candidates
    )
    # ...and the order is a ring: every host once, started at the claim's own place.
    order = names(binding.plan(c, one, ["infrahost"]).candidates)
    assert sorted(order) == sorted(names(hosts))
    starts = {
        names(binding.plan(claim(name=f"c{i}", uid=f"u{i}"), one, ["infrahost"]).candidates)[0] for i in range(30)
    }
    assert len(starts) > 10


NAMESPACE_UID = "uid-of-cluster-ns"


def test_the_candidates_are_those_of_asking_every_host_with_bookings_holds_and_warm_hosts_about():
    """plan() takes a claim's plain free hosts (no booking, hold or warm mark) in its ring order straight from the
    index, asking only the marked ones. Over random fleets and a batch that takes hosts as it goes, its candidates
    are exactly those of filtering and sorting every free host of the class, as plan() did before."""
    now = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)
    disk = {"url": "http://images/node.qcow2", "checksum": "0" * 64}

    def marked(name: str, rng: random.Random) -> dict:
        kind = rng.choice(["plain", "plain", "plain", "warm", "held", "held-ended", "booked", "booked-later"])
        annotations = {}
        if kind == "warm":
            annotations[WARM_ANNOTATION] = "2026-05-31T00:00:00Z"
        elif kind.startswith("held"):
            until = "2026-05-01T00:00:00Z" if kind == "held-ended" else "2026-07-01T00:00:00Z"
            hold = {"namespace": "cluster-ns", "key": rng.choice(["k1", "k2"]), "claim": "x", "until": until}
            hold["namespaceUID"] = rng.choice([NAMESPACE_UID, "a namespace of that name before"])
            annotations[reuse.HOLD_ANNOTATION] = json.dumps(hold)
        elif kind.startswith("booked"):
            start = "2026-05-01T00:00:00Z" if kind == "booked" else "2026-09-01T00:00:00Z"
            entry = {"uid": rng.choice(["u1", "other"]), "namespace": "cluster-ns", "name": "b", "start": start}
            annotations[booking.ANNOTATION] = json.dumps([{**entry, "end": "2026-12-01T00:00:00Z"}])
        state = rng.choice(["available"] * 6 + ["provisioned"])
        return host(name, labels=MEDIUM, state=state, annotations=annotations)

    def asked_every_host(c: dict, index: binding.HostIndex) -> list[str]:
        bookable, rank = booking.may_take(c, now), index.spread_rank(c)
        free = [h for h in index.all() if binding.why_not_free(h) is None and h["metadata"]["labels"] == MEDIUM]
        eligible = [h for h in free if bookable(h) and reuse.may_take(h, c, now, NAMESPACE_UID)]
        warm_first = binding.wants_disk_image(c)
        eligible.sort(
            key=lambda h: (
                0 if reuse.preferred(h, c, now, NAMESPACE_UID) else 1,
                0 if warm_first and binding.is_warm(h) else 1,
                rank(h),
            )
        )
        return names(eligible)

    for seed in range(20):
        rng = random.Random(seed)
        hosts = [marked(f"h{i:02d}", rng) for i in range(40)] + [host("large", labels={"infra-kind": "large"})]
        index = binding.HostIndex(hosts)
        for i in range(45):
            spec = {}
            if rng.random() < 0.4:
                spec["image"] = disk
            if rng.random() < 0.4:
                spec["nodeReuse"] = {"key": rng.choice(["k1", "k2"])}
            if rng.random() < 0.1:
                spec["lease"] = {"start": "2026-06-01T00:00:00Z"}  # unreadable: it may take no booked host either
            c = claim(name=f"c{i}", uid=rng.choice([f"u{i}", "u1"]), **spec)
            planned = binding.plan(c, index, ["infrahost"], now=now, namespace_uid=NAMESPACE_UID)
            expected = asked_every_host(c, index)
            assert names(planned.candidates) == expected, (seed, i)
            if planned.action == "bind" and planned.candidates:
                index.put(dict(planned.candidates[0], spec={"consumerRef": binding.claim_ref(c)}))
            if rng.random() < 0.3:  # a host given back, free again and plain or marked now
                index.put(marked(rng.choice(names(index.all())[:40]), rng))
