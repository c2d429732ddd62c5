"""Event -> keys: each side reacts to what it reads, never to the controller's own writes."""

from __future__ import annotations

import copy

from metalclaim.controller import mapper
from metalclaim.controller.mapper import CLAIM, HOST

CLAIM_OBJ = {
    "metadata": {"namespace": "tenant-a", "name": "c1", "uid": "u1", "generation": 1, "resourceVersion": "10"},
    "spec": {"online": False, "userData": {"name": "ud"}, "metaData": {"name": "md", "namespace": "other"}},
}
HOST_OBJ = {
    "metadata": {"namespace": "infra", "name": "h1", "uid": "h", "generation": 3, "labels": {"infra-kind": "medium"}},
    "spec": {"online": False},
    "status": {"provisioning": {"state": "available"}, "poweredOn": False},
}


def changed(obj, **edits):
    new = copy.deepcopy(obj)
    for path, value in edits.items():
        target = new
        *parents, last = path.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return new


def test_a_claims_own_status_finalizer_and_our_annotations_cause_nothing():
    new = changed(CLAIM_OBJ, status={"conditions": [{"type": "Ready", "status": "True"}]})
    new = changed(new, metadata__finalizers=["metal3.io/hostclaim"], metadata__resourceVersion="11")
    new = changed(new, metadata__annotations={"metalclaim.io/binding-attempt": "token"}, metadata__labels={"a": "b"})
    assert mapper.claim_changed(CLAIM_OBJ, new).dropped


def test_a_claims_spec_deletion_reboot_and_existence_concern_it():
    key = [(CLAIM, "tenant-a", "c1")]
    assert mapper.claim_changed(None, CLAIM_OBJ).keys == key
    assert mapper.claim_changed(CLAIM_OBJ, changed(CLAIM_OBJ, metadata__generation=2)).keys == key
    assert mapper.claim_changed(CLAIM_OBJ, changed(CLAIM_OBJ, metadata__deletionTimestamp="t")).keys == key
    reboot = changed(CLAIM_OBJ, metadata__annotations={"reboot.metal3.io/x": ""})
    assert mapper.claim_changed(CLAIM_OBJ, reboot).keys == key
    assert mapper.claim_changed(CLAIM_OBJ, None).keys == key


def test_the_claim_layers_host_writes_wake_the_provisioner_not_the_claim_layer():
    bound = changed(HOST_OBJ, spec__consumerRef={"kind": "HostClaim", "namespace": "tenant-a", "name": "c1"})
    bound = changed(bound, metadata__generation=4)  # spec written by the claim layer
    found = mapper.host_changed(HOST_OBJ, bound, unbound_claims=[])
    assert found.keys == [(HOST, "infra", "h1")]


def test_the_provisioners_status_writes_wake_the_consumer_claim_not_the_provisioner():
    bound = changed(HOST_OBJ, spec__consumerRef={"kind": "HostClaim", "namespace": "tenant-a", "name": "c1"})
    provisioned = changed(bound, status={"provisioning": {"state": "provisioned"}, "poweredOn": True})
    provisioned = changed(provisioned, metadata__annotations={"provisioner.metalclaim.io/operation": "{}"})
    assert mapper.host_changed(bound, provisioned, unbound_claims=[]).keys == [(CLAIM, "tenant-a", "c1")]


def test_a_host_becoming_free_concerns_the_waiting_claims():
    bound = changed(HOST_OBJ, spec__consumerRef={"kind": "HostClaim", "namespace": "tenant-a", "name": "c1"})
    waiting = [changed(CLAIM_OBJ, metadata__name="c2")]
    released = changed(HOST_OBJ, metadata__generation=5)  # consumerRef cleared: a spec change
    found = mapper.host_changed(bound, released, unbound_claims=waiting)
    assert (CLAIM, "tenant-a", "c2") in found.keys and (HOST, "infra", "h1") in found.keys
    deprovisioning = changed(HOST_OBJ, status={"provisioning": {"state": "deprovisioning"}})
    assert (CLAIM, "tenant-a", "c2") not in mapper.host_changed(bound, deprovisioning, waiting).keys


def test_policy_namespace_and_secret_changes():
    claims = [CLAIM_OBJ]
    policy = {"metadata": {"name": "p"}, "spec": {"hostclaimNamespaces": {"names": ["tenant-a"]}}}
    assert mapper.policy_changed(None, policy, claims).keys == [(CLAIM, "tenant-a", "c1")]
    assert mapper.policy_changed(policy, copy.deepcopy(policy), claims).dropped
    namespace = {"metadata": {"name": "tenant-a", "labels": {"a": "1"}}}
    assert mapper.namespace_changed(namespace, changed(namespace, metadata__labels={}), claims).keys
    assert mapper.namespace_changed(namespace, changed(namespace, metadata__annotations={"x": "y"}), claims).dropped
    secret = {"metadata": {"namespace": "tenant-a", "name": "ud", "resourceVersion": "1"}}
    assert mapper.secret_changed(secret, changed(secret, metadata__resourceVersion="2"), claims).keys
    assert mapper.secret_changed(secret, secret, claims).dropped


def test_secret_refs_default_to_the_claims_namespace():
    assert mapper.secret_refs(CLAIM_OBJ) == [("tenant-a", "ud"), ("other", "md")]


def test_the_provisioner_label_of_an_infra_namespace_concerns_its_hosts():
    hosts = [HOST_OBJ]
    namespace = {"metadata": {"name": "infra", "labels": {"team": "a"}}}
    opted_in = changed(namespace, metadata__labels={"team": "a", "metalclaim.io/provisioner": "metalclaim"})
    assert mapper.infra_namespace_changed(namespace, opted_in, hosts).keys == [(HOST, "infra", "h1")]
    assert mapper.infra_namespace_changed(opted_in, namespace, hosts).keys == [(HOST, "infra", "h1")]
    assert mapper.infra_namespace_changed(None, opted_in, hosts).keys == [(HOST, "infra", "h1")]
    # Other labels are the claim side's business (policies), not the provisioner's.
    assert mapper.infra_namespace_changed(namespace, changed(namespace, metadata__labels={"team": "b"}), hosts).dropped
    assert mapper.infra_namespace_changed(namespace, copy.deepcopy(namespace), hosts).dropped


def test_a_tenant_event_concerns_the_tenant_unless_it_is_the_tenant_steps_own_write():
    tenant = {"metadata": {"name": "blue", "uid": "u", "generation": 1}}
    assert mapper.tenant_changed(None, tenant).keys == [("tenant", "", "blue")]
    status_written = {
        **tenant,
        "status": {"state": "Deployed"},
        "metadata": {**tenant["metadata"], "finalizers": ["f"]},
    }
    assert mapper.tenant_changed(tenant, status_written).dropped
    edited = {"metadata": {**tenant["metadata"], "generation": 2}}
    assert mapper.tenant_changed(tenant, edited).keys == [("tenant", "", "blue")]
    deleting = {"metadata": {**tenant["metadata"], "deletionTimestamp": "now"}}
    assert mapper.tenant_changed(tenant, deleting).keys == [("tenant", "", "blue")]
    assert mapper.tenant_changed(deleting, None).dropped
