"""Cluster API events -> keys (--cluster-api): what the provider reads wakes a machine or cluster; its own writes
(providerID, finalizer, status) and the claim layer's writes it does not read never do."""

from __future__ import annotations

import copy

from metalclaim.controller import mapper

PROVIDER = "infrastructure.cluster.x-k8s.io/v1alpha1"


def metal_machine(**spec) -> dict:
    meta = {
        "name": "w-1",
        "namespace": "ns",
        "uid": "mm",
        "generation": 1,
        "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
        "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "w-1"}],
    }
    return {"metadata": meta, "spec": {"image": {"url": "u"}, **spec}}


def machine(data="boot", infra_kind="MetalClaimMachine") -> dict:
    return {
        "metadata": {"name": "w-1", "namespace": "ns", "uid": "m"},
        "spec": {
            "clusterName": "c1",
            "bootstrap": {"dataSecretName": data},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": infra_kind, "name": "w-1"},
        },
    }


def cluster(paused=False, provisioned=False) -> dict:
    return {
        "metadata": {"name": "c1", "namespace": "ns", "uid": "c"},
        "spec": {"paused": paused, "infrastructureRef": {"kind": "MetalClaimCluster", "name": "c1"}},
        "status": {"initialization": {"infrastructureProvisioned": provisioned}},
    }


def claim(association=None, ready=None, owner_kind="MetalClaimMachine") -> dict:
    conditions = [{"type": t, "status": s} for t, s in (("Association", association), ("Ready", ready)) if s]
    owners = [{"apiVersion": PROVIDER, "kind": owner_kind, "name": "w-1", "uid": "mm", "controller": True}]
    return {
        "metadata": {"name": "w-1", "namespace": "ns", "uid": "hc", "ownerReferences": owners},
        "status": {"conditions": conditions},
    }


def test_a_machine_made_or_edited_is_a_key_its_own_writes_are_not():
    assert mapper.metal_machine_changed(None, metal_machine()).keys == [("capimachine", "ns", "w-1")]
    written = copy.deepcopy(metal_machine())
    written["spec"]["providerID"] = "metal3://infra/bm-0/w-1"  # ours
    written["metadata"]["finalizers"] = ["metalclaimmachine.infrastructure.cluster.x-k8s.io"]  # ours
    written["status"] = {"initialization": {"provisioned": True}}  # ours
    assert mapper.metal_machine_changed(metal_machine(), written).dropped
    assert mapper.metal_machine_changed(metal_machine(), metal_machine(image={"url": "v"})).keys
    paused = metal_machine()
    paused["metadata"]["annotations"] = {"cluster.x-k8s.io/paused": ""}
    assert mapper.metal_machine_changed(metal_machine(), paused).keys
    assert mapper.metal_machine_changed(metal_machine(), None).dropped  # its claim goes with it


def test_a_machines_bootstrap_data_wakes_its_infrastructure_machine_only_if_it_is_ours():
    assert mapper.capi_machine_changed(machine(data=""), machine()).keys == [("capimachine", "ns", "w-1")]
    assert not mapper.capi_machine_changed(machine(), machine()).keys
    other = machine(data="", infra_kind="Metal3Machine")
    assert not mapper.capi_machine_changed(other, machine(infra_kind="Metal3Machine")).keys


def test_a_cluster_paused_or_provisioned_wakes_its_machines_and_its_infrastructure():
    found = mapper.capi_cluster_changed(cluster(), cluster(provisioned=True), [metal_machine()])
    assert found.keys == [("capimachine", "ns", "w-1"), ("capicluster", "ns", "c1")]
    assert mapper.capi_cluster_changed(cluster(), cluster(paused=True), []).keys == [("capicluster", "ns", "c1")]
    assert not mapper.capi_cluster_changed(cluster(), cluster(), [metal_machine()]).keys
    assert mapper.metal_machine_cluster(metal_machine()) == [("ns", "c1")]


def test_a_machines_claim_bound_or_ready_wakes_the_machine_another_owners_claim_does_not():
    assert mapper.claim_changed_for_capi(claim(), claim(association="True")).keys == [("capimachine", "ns", "w-1")]
    assert mapper.claim_changed_for_capi(claim("True"), claim("True", "True")).keys
    assert mapper.claim_changed_for_capi(claim("True"), None).keys  # gone: the finalizer may go
    assert not mapper.claim_changed_for_capi(claim("True"), claim("True")).keys
    assert not mapper.claim_changed_for_capi(None, claim(owner_kind="HostClaimSet")).keys


def test_a_cluster_object_made_or_owned_is_a_key_its_status_is_not():
    metal_cluster = {"metadata": {"name": "c1", "namespace": "ns", "uid": "mc", "generation": 1}}
    assert mapper.metal_cluster_changed(None, metal_cluster).keys == [("capicluster", "ns", "c1")]
    with_status = {**metal_cluster, "status": {"initialization": {"provisioned": True}}}
    assert mapper.metal_cluster_changed(metal_cluster, with_status).dropped


def test_a_catalog_whose_failure_domains_change_wakes_its_namespaces_clusters():
    def catalog(*zones) -> dict:
        classes = [{"labels": {"topology.kubernetes.io/zone": z}, "free": 1} for z in zones]
        return {"metadata": {"name": "hosts", "namespace": "ns"}, "status": {"classes": classes}}

    metal_cluster = {"metadata": {"name": "c1", "namespace": "ns"}}
    assert mapper.catalog_changed_for_capi(catalog("a"), catalog("a", "b"), [metal_cluster]).keys == [
        ("capicluster", "ns", "c1")
    ]
    counted_again = catalog("a")
    counted_again["status"]["classes"][0]["free"] = 0  # counts change all the time: no run for them
    assert not mapper.catalog_changed_for_capi(catalog("a"), counted_again, [metal_cluster]).keys
