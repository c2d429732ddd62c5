"""The Cluster API provider's decisions for one MetalClaimMachine (_capi/pure/machine.py) and one MetalClaimCluster."""

from __future__ import annotations

import base64
import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure import cluster as clusters
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure import machine as m

NS = "cluster-ns"
NOW = "2026-12-02T12:00:00Z"


def metal_machine(name="w-1", owner="w-1", finalizers=(), deleting=False, annotations=None, **spec) -> dict:
    meta = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "generation": 1,
        "labels": {m.CLUSTER_NAME_LABEL: "c1"},
        "finalizers": list(finalizers),
        "annotations": annotations or {},
    }
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": m.CAPI_API_VERSION, "kind": "Machine", "name": owner, "uid": "m-uid", "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = NOW
    body = {"hostSelector": {"matchLabels": {"infra-kind": "medium"}}, "image": {"url": "http://x/i.iso"}, **spec}
    return {"apiVersion": m.API_VERSION, "kind": m.MACHINE_KIND, "metadata": meta, "spec": body}


def machine(name="w-1", data="w-1-bootstrap", failure_domain="") -> dict:
    spec = {"clusterName": "c1", "bootstrap": {"dataSecretName": data} if data else {}}
    if failure_domain:
        spec["failureDomain"] = failure_domain
    return {"metadata": {"name": name, "namespace": NS}, "spec": spec}


def cluster(provisioned=True, paused=False, annotations=None) -> dict:
    return {
        "metadata": {"name": "c1", "namespace": NS, "annotations": annotations or {}},
        "spec": {"paused": paused},
        "status": {"initialization": {"infrastructureProvisioned": provisioned}},
    }


def claim_of(owner: dict, associated=None, ready=None, host=("infrahost", "bm-3"), ips=("192.0.2.7",)) -> dict:
    body = m.claim_body(owner, machine())
    body["metadata"]["uid"] = "claim-uid"
    conditions = []
    if associated is not None:
        conditions.append({"type": "Association", "status": "True" if associated else "False", "reason": "R"})
    if ready is not None:
        conditions.append({"type": "Ready", "status": "True" if ready else "False", "reason": "Provisioning"})
    status = {"conditions": conditions}
    if associated:
        status["hardwareData"] = {"namespace": host[0], "name": host[1]}
        status["hardware"] = {"nics": [{"name": "eth0", "mac": "00:00:00:00:00:01", "ip": ip} for ip in ips]}
    body["status"] = status
    return body


def test_it_waits_for_its_owner_machine_its_clusters_infrastructure_and_the_bootstrap_data():
    unowned = m.plan(metal_machine(owner=""), None, None, None, None)
    assert (unowned.ready[1], unowned.create_claim, unowned.add_finalizer) == (m.WAITING_FOR_MACHINE, None, False)
    no_cluster = m.plan(metal_machine(), machine(), cluster(provisioned=False), None, None)
    assert no_cluster.ready[1] == m.WAITING_FOR_CLUSTER and no_cluster.create_claim is None
    no_data = m.plan(metal_machine(), machine(data=""), cluster(), None, None)
    assert no_data.ready[1] == m.WAITING_FOR_BOOTSTRAP and no_data.create_claim is None


def test_a_new_machine_takes_the_finalizer_and_makes_a_claim_without_image_or_data():
    owner = metal_machine(firmware={"settings": {"SriovEnable": "Enabled"}}, lease={"duration": "2h"})
    planned = m.plan(owner, machine(failure_domain="rack-2"), cluster(), None, None)
    assert planned.add_finalizer and planned.ready[1] == m.WAITING_FOR_HOST
    body = planned.create_claim
    assert body["metadata"]["name"] == "w-1" and body["metadata"]["namespace"] == NS
    assert body["metadata"]["labels"] == {m.CLUSTER_NAME_LABEL: "c1"}
    [ref] = body["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
        m.MACHINE_KIND,
        "uid-w-1",
        True,
        True,
    )
    spec = body["spec"]
    assert spec["consumerRef"] == {
        "apiVersion": m.API_VERSION,
        "kind": m.MACHINE_KIND,
        "name": "w-1",
        "namespace": NS,
        "uid": "uid-w-1",
    }
    assert spec["online"] is False and "image" not in spec and "userData" not in spec and "metaData" not in spec
    assert spec["failureDomain"] == "rack-2" and spec["lease"] == {"duration": "2h"}
    assert spec["firmware"] == {"settings": {"SriovEnable": "Enabled"}}


def test_a_bound_claim_gets_its_metadata_first_then_its_data_image_and_power():
    owner = metal_machine(finalizers=[m.FINALIZER], networkData={"name": "net"})
    planned = m.plan(owner, machine(), cluster(), claim_of(owner, associated=True), None)
    pid = "metal3://infrahost/bm-3/w-1"
    assert planned.provider_id == pid
    secret = planned.metadata
    assert secret["metadata"]["name"] == "w-1-metadata" and secret["type"] == "Opaque"
    assert secret["metadata"]["labels"][m.METADATA_LABEL] == "uid-w-1"
    assert json.loads(base64.b64decode(secret["data"]["metaData"])) == {
        "instance-id": "uid-w-1",
        "local-hostname": "w-1",
        "providerid": pid,
    }
    spec = planned.claim_spec
    assert spec["userData"] == {"name": "w-1-bootstrap"} and spec["metaData"] == {"name": "w-1-metadata"}
    assert spec["networkData"] == {"name": "net"} and spec["image"] == {"url": "http://x/i.iso"}
    assert spec["online"] is True
    assert planned.ready[1] == m.PROVISIONING and planned.provisioned is None


def test_a_ready_claim_makes_the_machine_provisioned_with_its_addresses_and_a_second_run_writes_nothing():
    owner = metal_machine(finalizers=[m.FINALIZER])
    claim = claim_of(owner, associated=True, ready=True, ips=("192.0.2.7", "198.51.100.2"))
    claim["spec"] = m.claim_spec(owner, machine(), with_data=True)
    secret = m.metadata_secret(owner, machine(), "metal3://infrahost/bm-3/w-1")
    owner["spec"]["providerID"] = "metal3://infrahost/bm-3/w-1"
    planned = m.plan(owner, machine(), cluster(), claim, secret)
    assert (planned.metadata, planned.claim_spec, planned.provider_id, planned.create_claim) == (None, None, "", None)
    assert planned.ready == ("True", m.PROVISIONED, "HostClaim w-1 is Ready") and planned.provisioned is True
    status = m.desired_status(owner, planned, NOW)
    assert status["initialization"] == {"provisioned": True}
    assert status["addresses"] == [
        {"type": "Hostname", "address": "w-1"},
        {"type": "InternalIP", "address": "192.0.2.7"},
        {"type": "InternalIP", "address": "198.51.100.2"},
    ]
    owner["status"] = status
    again = m.desired_status(owner, m.plan(owner, machine(), cluster(), claim, secret), NOW)
    assert again == status


def test_provisioned_never_goes_back_when_the_claim_stops_being_ready():
    owner = metal_machine(finalizers=[m.FINALIZER])
    owner["status"] = {"initialization": {"provisioned": True}}
    claim = claim_of(owner, associated=True, ready=False)
    planned = m.plan(owner, machine(), cluster(), claim, None)
    assert planned.provisioned is True and planned.ready[0] == "False"


def test_a_claim_or_secret_of_its_names_it_does_not_control_is_never_touched():
    owner = metal_machine(finalizers=[m.FINALIZER])
    foreign = claim_of(owner)
    foreign["metadata"]["ownerReferences"] = []  # the tenant's own claim of that name
    planned = m.plan(owner, machine(), cluster(), foreign, None)
    assert planned.ready[1] == m.NAME_TAKEN
    assert (planned.create_claim, planned.claim_spec, planned.delete_claim, planned.metadata) == (
        None,
        None,
        None,
        None,
    )
    tenants_secret = {"metadata": {"name": "w-1-metadata", "labels": {}}, "type": "Opaque", "data": {"x": "eQ=="}}
    planned = m.plan(owner, machine(), cluster(), claim_of(owner, associated=True), tenants_secret)
    assert planned.ready[1] == m.NAME_TAKEN and planned.metadata is None and planned.claim_spec is None


def test_paused_changes_nothing_but_the_paused_condition():
    for paused_cluster, marks in ((cluster(paused=True), None), (cluster(), {m.PAUSED_ANNOTATION: ""})):
        owner = metal_machine(annotations=marks)
        planned = m.plan(owner, machine(), paused_cluster, None, None)
        assert planned.paused and planned.create_claim is None and not planned.add_finalizer
        status = m.desired_status(owner, planned, NOW)
        paused = next(c for c in status["conditions"] if c["type"] == m.PAUSED)
        assert paused["status"] == "True" and "initialization" not in status


def test_deleting_releases_the_claim_before_the_finalizer_goes():
    owner = metal_machine(finalizers=[m.FINALIZER], deleting=True)
    claim = claim_of(owner, associated=True, ready=True)
    first = m.plan(owner, machine(), cluster(), claim, None)
    assert first.delete_claim is claim and not first.remove_finalizer and first.ready[1] == m.DELETING
    claim["metadata"]["deletionTimestamp"] = NOW  # being released: not deleted twice, the finalizer stays
    second = m.plan(owner, machine(), cluster(), claim, None)
    assert second.delete_claim is None and not second.remove_finalizer
    gone = m.plan(owner, machine(), cluster(), None, None)
    assert gone.remove_finalizer and gone.delete_claim is None


def test_a_cluster_is_provisioned_once_owned_and_reports_the_endpoint_it_was_given():
    metal_cluster = {
        "metadata": {"name": "c1", "namespace": NS, "generation": 2},
        "spec": {"controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443}},
    }
    status, waiting = clusters.desired_status(metal_cluster, None, NOW)
    assert waiting and "initialization" not in status
    status, waiting = clusters.desired_status(metal_cluster, cluster(), NOW)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert not waiting and status["initialization"] == {"provisioned": True}
    assert (ready["reason"], ready["message"]) == (clusters.ENDPOINT_GIVEN, "control plane endpoint 192.0.2.10:6443")
    paused_status, _ = clusters.desired_status({"metadata": metal_cluster["metadata"]}, cluster(paused=True), NOW)
    assert "initialization" not in paused_status


def test_failure_domains_are_what_the_namespaces_catalog_publishes():
    catalog = {
        "status": {
            "classes": [
                {"labels": {"infrastructure.cluster.x-k8s.io/failure-domain": "rack-b"}},
                {"labels": {"topology.kubernetes.io/zone": "zone-1"}},  # the zone label where Cluster API's is absent
                {"labels": {"infrastructure.cluster.x-k8s.io/failure-domain": "rack-a", "kind": "gpu"}},
                {"labels": {"infrastructure.cluster.x-k8s.io/failure-domain": "rack-a"}},
                {"labels": {"infrastructure.cluster.x-k8s.io/failure-domain": "HIDDEN"}},  # would name a host
                {"labels": {"kind": "small"}},
            ]
        }
    }
    assert clusters.failure_domains(catalog) == [
        {"name": "rack-a", "controlPlane": True},
        {"name": "rack-b", "controlPlane": True},
        {"name": "zone-1", "controlPlane": True},
    ]
    assert clusters.failure_domains(None) == []
    metal_cluster = {"metadata": {"name": "c1", "namespace": NS, "generation": 1}, "spec": {}}
    status, _ = clusters.desired_status(metal_cluster, cluster(), NOW, catalog)
    assert [d["name"] for d in status["failureDomains"]] == ["rack-a", "rack-b", "zone-1"]
    metal_cluster["status"] = status
    status, _ = clusters.desired_status(metal_cluster, cluster(), NOW, None)  # no longer published
    assert "failureDomains" not in status
