"""A tenant namespace's HostCatalog: which namespaces get one, the classes and counts, what is hidden, and that a
recount of an unchanged fleet writes nothing."""

from __future__ import annotations

import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._catalog.pure import catalog as cat
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    HOST_POOLS_ANNOTATION,
    RESERVED_FOR_ANNOTATION,
    TENANT_LABEL,
)

T1 = "2030-01-01T00:00:00Z"
T2 = "2030-01-01T00:00:10Z"
CLASS = "example.com/hostclass"


def policy(namespace="infra-a", name="p", names=("team-a",), public=(CLASS,)) -> dict:
    spec = {"hostclaimNamespaces": {"names": list(names)}}
    if public is not None:
        spec["catalog"] = {"publicLabels": list(public)}
    return {"metadata": {"namespace": namespace, "name": name}, "spec": spec}


def host(name, namespace="infra-a", state="available", labels=None, consumer=None, **extra) -> dict:
    spec = {"bmc": {"address": f"redfish://10.0.0.1/{name}"}, "bootMACAddress": "52:54:00:00:00:01"}
    if consumer:
        spec["consumerRef"] = {"kind": "HostClaim", "namespace": "team-x", "name": consumer}
    meta = {"namespace": namespace, "name": name, "labels": dict(labels or {}), **extra}
    return {"metadata": meta, "spec": spec, "status": {"provisioning": {"state": state}}}


def counts(result) -> dict:
    return {tuple(e["labels"].values()): (e["total"], e["free"], e["bound"], e["booked"]) for e in result["classes"]}


def test_only_namespaces_a_publishing_policy_admits_get_a_catalog():
    policies = [policy(names=("team-a",)), policy(name="quiet", names=("team-b",), public=None)]
    namespaces = {"team-a": {}, "team-b": {}, "team-c": {}}
    assert cat.catalog_namespaces(policies, namespaces) == ["team-a"]
    assert cat.catalog_namespaces([policy(public=None)], namespaces) == []


def test_classes_count_free_bound_and_other_hosts_per_public_label_value():
    hosts = [
        host("h1", labels={CLASS: "gpu"}),
        host("h2", labels={CLASS: "gpu"}, consumer="c1"),
        host("h3", labels={CLASS: "gpu"}, state="provisioning"),
        host("h4", labels={CLASS: "small"}),
        host("h5", labels={CLASS: "small", "secret": "x"}, deletionTimestamp=T1),  # being deleted: not counted
        host("h6"),  # no class label: its own class, shown empty
        host("h7", labels={CLASS: "small"}, annotations={"baremetalhost.metal3.io/paused": ""}),  # not free
    ]
    result = cat.count("team-a", {}, [policy()], hosts)
    assert result["admitted"] and result["labels"] == [CLASS]
    assert counts(result) == {("",): (1, 1, 0, 0), ("gpu",): (3, 1, 1, 0), ("small",): (2, 1, 0, 0)}
    assert "secret" not in json.dumps(result)


def test_hosts_of_an_infra_namespace_that_does_not_publish_are_not_listed():
    hosts = [host("h1", labels={CLASS: "gpu"}), host("h2", namespace="infra-b", labels={CLASS: "gpu"})]
    policies = [policy(), policy(namespace="infra-b", public=None)]
    assert counts(cat.count("team-a", {}, policies, hosts)) == {("gpu",): (1, 1, 0, 0)}
    # A namespace no publishing policy admits gets nothing.
    assert cat.count("team-z", {}, policies, hosts) == {"admitted": False, "labels": [], "classes": [], "hidden": 0}


def test_the_union_of_public_labels_groups_and_a_label_is_shown_only_where_its_policy_publishes_it():
    zone = "topology.kubernetes.io/zone"
    policies = [policy(public=(CLASS,)), policy(namespace="infra-b", public=(CLASS, zone))]
    hosts = [
        host("h1", labels={CLASS: "gpu", zone: "z1"}),
        host("h2", namespace="infra-b", labels={CLASS: "gpu", zone: "z1"}),
    ]
    result = cat.count("team-a", {}, policies, hosts)
    assert result["labels"] == [CLASS, zone]
    assert counts(result) == {("gpu", ""): (1, 1, 0, 0), ("gpu", "z1"): (1, 1, 0, 0)}


def test_a_label_value_naming_a_host_a_namespace_or_a_bmc_is_hidden():
    hosts = [
        host("node-17", labels={CLASS: "node-17"}),  # its own name
        host("h2", labels={CLASS: "infra-a"}),  # its namespace
        host("h3", labels={CLASS: "team-a"}),  # the tenant namespace itself
        host("h4", labels={CLASS: "52:54:00:00:00:01"}),  # its boot MAC
        host("h5", labels={CLASS: "gpu"}),
    ]
    result = cat.count("team-a", {}, [policy()], hosts, {"infra-a"})
    assert counts(result) == {("HIDDEN",): (4, 4, 0, 0), ("gpu",): (1, 1, 0, 0)}
    assert result["hidden"] == 4
    status = cat.desired_status(result, None, T1)
    text = json.dumps(status)
    assert "node-17" not in text and "infra-a" not in text and "52:54" not in text
    ready = status["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", cat.VALUES_HIDDEN)


def test_a_value_telling_anything_of_the_fleet_is_hidden():
    """Issue 40: a value naming the BMC's IP, the boot MAC with dashes, another host or another tenant's namespace was
    shown to the tenant in clear; each is compared against the whole fleet now."""
    other = host("db-3", namespace="infra-b")
    other["spec"]["bmc"]["address"] = "redfish+https://192.168.7.12:8000/redfish/v1/Systems/1"
    other["status"]["hardware"] = {"nics": [{"name": "eth1", "mac": "AA:BB:CC:00:11:22"}]}
    leaks = [
        "10.0.0.1",  # this host's BMC IP (redfish://10.0.0.1/...)
        "192.168.7.12",  # another host's BMC IP
        "192-168-7-12",  # ... dashed
        "52-54-00-00-00-01",  # this host's boot MAC with dashes
        "525400000001",  # ... with none
        "aabb.cc00.1122",  # another host's NIC MAC, dotted
        "db-3",  # another host's name
        "rack2-db-3",  # ... as a run of the value's parts
        "team-b",  # another tenant's namespace
        "infra-b",  # another infra namespace
    ]
    hosts = [host(f"h{i}", labels={CLASS: value}) for i, value in enumerate(leaks)]
    hosts += [host("h-ok", labels={CLASS: "gpu"}), host("h-ok2", labels={CLASS: "db-30"}), other]
    namespaces = {"team-a": {}, "team-b": {"labels": {TENANT_LABEL: "b"}}, "kube-system": {}}
    told = cat.fleet(hosts, namespaces, [policy()])
    result = cat.count("team-a", {}, [policy()], hosts, told=told)
    assert counts(result) == {("HIDDEN",): (10, 10, 0, 0), ("db-30",): (1, 1, 0, 0), ("gpu",): (1, 1, 0, 0)}
    shown = {value for entry in cat.desired_status(result, None, T1)["classes"] for value in entry["labels"].values()}
    assert shown == {"HIDDEN", "db-30", "gpu"}
    # A namespace that is no tenant's (no policy admits it, no Tenant made it) is not a secret of the fleet.
    assert not told.tells("kube-system") and told.tells("team-a")


def test_host_pools_and_reservations_narrow_the_catalog_as_they_narrow_a_claim():
    hosts = [
        host("h1", labels={CLASS: "gpu", "pool": "a"}),
        host("h2", labels={CLASS: "gpu", "pool": "b"}),
        host("h3", labels={CLASS: "gpu"}, annotations={RESERVED_FOR_ANNOTATION: "other-tenant"}),
    ]
    meta = {
        "labels": {TENANT_LABEL: "acme"},
        "annotations": {HOST_POOLS_ANNOTATION: json.dumps({"infra-a": {"matchLabels": {"pool": "a"}}})},
    }
    assert counts(cat.count("team-a", meta, [policy()], hosts)) == {("gpu",): (1, 1, 0, 0)}
    # An unreadable pool annotation narrows everything to nothing (as it does for a claim).
    unreadable = {"annotations": {HOST_POOLS_ANNOTATION: "not json"}}
    assert counts(cat.count("team-a", unreadable, [policy()], hosts)) == {}


def test_status_totals_summary_and_a_recount_that_changes_nothing_patches_nothing():
    hosts = [host("h1", labels={CLASS: "gpu"}), host("h2", labels={CLASS: "small"}, consumer="c")]
    status = cat.desired_status(cat.count("team-a", {}, [policy()], hosts), None, T1)
    assert (status["total"], status["free"], status["bound"], status["booked"], status["classCount"]) == (2, 1, 1, 0, 2)
    assert status["summary"] == "gpu=1/1 small=0/1" and status["groupedBy"] == [CLASS]
    patch = cat.status_patch(None, status, T1)
    assert patch["lastUpdated"] == T1 and patch["free"] == 1
    written = {**status, **patch}
    again = cat.desired_status(cat.count("team-a", {}, [policy()], hosts), written, T2)
    assert cat.status_patch(written, again, T2) is None  # nothing changed: no write, lastUpdated stays
    hosts[0]["spec"]["consumerRef"] = {"kind": "HostClaim", "namespace": "team-x", "name": "c2"}
    changed = cat.desired_status(cat.count("team-a", {}, [policy()], hosts), written, T2)
    patch = cat.status_patch(written, changed, T2)
    assert patch["free"] == 0 and patch["bound"] == 2 and patch["lastUpdated"] == T2
    assert "conditions" not in patch  # Ready says hosts and classes, both the same: no new condition


def test_too_many_classes_are_cut_and_said():
    hosts = [host(f"h{i}", labels={CLASS: f"c{i:04d}"}) for i in range(cat.MAX_CLASSES + 3)]
    status = cat.desired_status(cat.count("team-a", {}, [policy()], hosts), None, T1)
    assert len(status["classes"]) == cat.MAX_CLASSES and status["classCount"] == cat.MAX_CLASSES + 3
    assert status["total"] == cat.MAX_CLASSES + 3
    assert status["conditions"][0]["reason"] == cat.TOO_MANY_CLASSES
    assert status["summary"].endswith(f"+{cat.MAX_CLASSES + 3 - cat.SUMMARY_CLASSES} more")


def test_only_our_catalogs_are_ours():
    body = cat.new_catalog("team-a")
    assert cat.ours(body) and body["metadata"]["name"] == "hosts"
    assert not cat.ours({"metadata": {"name": "hosts"}})
    assert not cat.ours({"metadata": {"name": "other", "labels": {cat.MANAGED_BY_LABEL: cat.MANAGED_BY}}})


def test_bookings_ahead_count_per_class_and_started_ones_do_not():
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import booking

    assert cat.BOOKINGS_ANNOTATION == booking.ANNOTATION  # the claim layer's record, read here
    entries = [
        {
            "uid": "a",
            "namespace": "team-x",
            "name": "a",
            "start": "2030-01-01T00:00:05Z",
            "end": "2030-01-01T01:00:00Z",
        },
        {
            "uid": "b",
            "namespace": "team-x",
            "name": "b",
            "start": "2030-01-02T00:00:00Z",
            "end": "2030-01-03T00:00:00Z",
        },
        {
            "uid": "c",
            "namespace": "team-x",
            "name": "c",
            "start": "2029-12-31T00:00:00Z",
            "end": "2030-01-03T00:00:00Z",
        },
    ]
    booked = {cat.BOOKINGS_ANNOTATION: json.dumps(entries)}
    hosts = [
        host("h1", labels={CLASS: "gpu"}, annotations=booked),
        host("h2", labels={CLASS: "gpu"}, annotations={cat.BOOKINGS_ANNOTATION: "not json"}),  # counts none
        host("h3", labels={CLASS: "small"}),
    ]
    # At T1, a and b start later (c has started): 2 booked on gpu; h1 is free now all the same.
    assert counts(cat.count("team-a", {}, [policy()], hosts, now=T1)) == {
        ("gpu",): (2, 2, 0, 2),
        ("small",): (1, 1, 0, 0),
    }
    assert counts(cat.count("team-a", {}, [policy()], hosts, now=T2))[("gpu",)] == (2, 2, 0, 1)  # a started
    text = json.dumps(cat.desired_status(cat.count("team-a", {}, [policy()], hosts, now=T1), None, T1))
    assert "team-x" not in text and '"uid"' not in text  # counts only


def test_a_host_held_for_a_node_reuse_is_not_free():
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import reuse

    assert cat.HOLD_ANNOTATION == reuse.HOLD_ANNOTATION  # the claim layer's mark, read here
    hosts = [
        host("h1", labels={CLASS: "gpu"}, annotations={cat.HOLD_ANNOTATION: "{}"}),
        host("h2", labels={CLASS: "gpu"}),
    ]
    assert counts(cat.count("team-a", {}, [policy()], hosts)) == {("gpu",): (2, 1, 0, 0)}
