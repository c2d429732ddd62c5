"""Event -> keys: each side reacts to what it reads, never to the controller's own writes."""

from __future__ import annotations

import copy
import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.media_protocol import token_for

from metalclaim.controller import mapper
from metalclaim.controller.mapper import CLAIM, HOST, REMOTE

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


def test_a_claim_gone_concerns_it_only_while_a_host_still_names_it():
    deleting = changed(CLAIM_OBJ, metadata__deletionTimestamp="t")
    assert mapper.claim_changed(deleting, None, named_by_a_host=True).keys == [(CLAIM, "tenant-a", "c1")]
    assert mapper.claim_changed(deleting, None, named_by_a_host=False).dropped  # our own release's echo
    # A remote claim's going is its mirror's business, whatever the hosts here say.
    assert mapper.claim_changed(REMOTE_CLAIM, None, named_by_a_host=False).keys == [(REMOTE, "tenant-a", "r1")]


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
    # The waiting claims are woken (run again only while they wait: WorkQueue.wake); the host's own key is firm.
    assert found.wake == [(CLAIM, "tenant-a", "c2")] and (HOST, "infra", "h1") in found.keys
    assert (CLAIM, "tenant-a", "c2") not in found.keys and not found.dropped
    deprovisioning = changed(HOST_OBJ, status={"provisioning": {"state": "deprovisioning"}})
    assert (CLAIM, "tenant-a", "c2") not in mapper.host_changed(bound, deprovisioning, waiting).wake


def test_a_host_giving_up_its_provisioning_slot_wakes_the_hosts_waiting_for_one():
    provisioning = changed(HOST_OBJ, status={"provisioning": {"state": "provisioning"}})
    provisioned = changed(HOST_OBJ, status={"provisioning": {"state": "provisioned"}})
    delayed = changed(
        HOST_OBJ, metadata__name="h2", status={"provisioning": {"state": "available"}, "operationalStatus": "delayed"}
    )
    assert mapper.waits_for_a_slot(delayed) and not mapper.waits_for_a_slot(provisioned)
    found = mapper.host_changed(provisioning, provisioned, [], [delayed])
    # Its own status is the provisioner's write: no key of its own, the waiting host only while it waits.
    assert found.keys == [] and found.wake == [(HOST, "infra", "h2")] and not found.dropped
    assert mapper.host_changed(provisioning, None, [], [delayed]).wake == [(HOST, "infra", "h2")]  # deleted
    # Still holding it, or never holding one: nobody is woken.
    assert mapper.host_changed(provisioning, copy.deepcopy(provisioning), [], [delayed]).dropped
    deprovisioning = changed(HOST_OBJ, status={"provisioning": {"state": "deprovisioning"}})
    assert mapper.host_changed(provisioning, deprovisioning, [], [delayed]).wake == []
    assert mapper.host_changed(provisioned, changed(provisioned, status__poweredOn=True), [], [delayed]).dropped


def test_policy_namespace_and_secret_changes():
    claims = [CLAIM_OBJ]
    policy = {"metadata": {"name": "p"}, "spec": {"hostclaimNamespaces": {"names": ["tenant-a"]}}}
    assert mapper.policy_changed(None, policy, claims).keys == [(CLAIM, "tenant-a", "c1")]
    assert mapper.policy_changed(policy, copy.deepcopy(policy), claims).dropped
    namespace = {"metadata": {"name": "tenant-a", "labels": {"a": "1"}}}
    assert mapper.namespace_changed(namespace, changed(namespace, metadata__labels={}), claims).keys
    assert mapper.namespace_changed(namespace, changed(namespace, metadata__annotations={"x": "y"}), claims).dropped
    # The tenant's blocking CLAIM_BOUND hooks' verdicts: a new one may let a claim bind.
    verdicts = changed(namespace, metadata__annotations={"tenancy.metalclaim.io/binding-approvals": '{"u":1}'})
    assert mapper.namespace_changed(namespace, verdicts, claims).keys == [(CLAIM, "tenant-a", "c1")]
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


def test_a_claim_bound_provisioned_or_released_concerns_the_tenants_whose_hooks_want_claim_events():
    hook = {"name": "h", "url": "http://127.0.0.1:9/", "eventTypes": ["CLAIM_BOUND"]}
    blue = {"metadata": {"name": "blue"}, "spec": {"tenantName": "blue", "childNamespaces": ["w"], "hooks": [hook]}}
    deaf = {"metadata": {"name": "red"}, "spec": {"tenantName": "red", "childNamespaces": ["w"]}}
    assert mapper.tenant_claim_namespaces(blue) == ["blue-w"] and mapper.tenant_claim_namespaces(deaf) == []

    unbound = {"metadata": {"namespace": "blue-w", "name": "c"}, "status": {}}
    bound = {**unbound, "status": {"hardwareData": {"name": "h1"}, "conditions": []}}
    provisioned = {**unbound, "status": {**bound["status"], "conditions": [{"type": "Provisioned", "status": "True"}]}}
    relabelled = copy.deepcopy(bound)
    relabelled["metadata"]["labels"] = {"x": "y"}
    blue_key = [("tenant", "", "blue")]
    assert mapper.claim_changed_for_tenants(unbound, bound, [blue]).keys == blue_key
    assert mapper.claim_changed_for_tenants(bound, provisioned, [blue]).keys == blue_key
    assert mapper.claim_changed_for_tenants(provisioned, None, [blue]).keys == blue_key  # gone: released
    assert mapper.claim_changed_for_tenants(bound, unbound, [blue]).keys == blue_key
    # Nothing to tell: created unbound, deleted unbound, a change of something else, no tenant listening.
    assert mapper.claim_changed_for_tenants(None, unbound, [blue]).keys == []
    assert mapper.claim_changed_for_tenants(unbound, None, [blue]).keys == []
    assert mapper.claim_changed_for_tenants(bound, relabelled, [blue]).keys == []
    assert mapper.claim_changed_for_tenants(unbound, bound, []).keys == []
    # A tenant whose blocking CLAIM_BOUND hook is asked before a binding hears of claims made and gone too.
    gate = {**hook, "blockingCall": True}
    gated = {"metadata": {"name": "green"}, "spec": {"tenantName": "green", "childNamespaces": ["w"], "hooks": [gate]}}
    assert mapper.claim_changed_for_tenants(None, unbound, [blue, gated]).keys == [("tenant", "", "green")]
    assert mapper.claim_changed_for_tenants(unbound, None, [gated]).keys == [("tenant", "", "green")]
    assert mapper.claim_changed_for_tenants(unbound, relabelled_unbound(unbound), [gated]).keys == []


def relabelled_unbound(claim: dict) -> dict:
    relabelled = copy.deepcopy(claim)
    relabelled["metadata"]["labels"] = {"x": "y"}
    return relabelled


# -- kind routing: a claim's spec.kind picks its key, and a kind no playbook serves gets none ----------------

REMOTE_CLAIM = changed(
    CLAIM_OBJ,
    metadata__name="r1",
    spec__kind="remote",
    spec__remote={"kubeconfigSecretRef": {"name": "hw-kubeconfig"}},
)
OTHER_CLAIM = changed(CLAIM_OBJ, metadata__name="v1", spec__kind="vm")


def test_a_claims_kind_picks_its_key():
    assert mapper.claim_key(CLAIM_OBJ) == (CLAIM, "tenant-a", "c1")  # no kind: baremetal
    assert mapper.claim_key(changed(CLAIM_OBJ, spec__kind="baremetal")) == (CLAIM, "tenant-a", "c1")
    assert mapper.claim_key(REMOTE_CLAIM) == (REMOTE, "tenant-a", "r1")
    assert mapper.claim_key(OTHER_CLAIM) is None
    assert mapper.claim_changed(None, REMOTE_CLAIM).keys == [(REMOTE, "tenant-a", "r1")]
    other = mapper.claim_changed(None, OTHER_CLAIM)
    assert other.keys == [] and not other.dropped


def test_hosts_policies_and_namespace_labels_concern_baremetal_claims_only():
    claims = [CLAIM_OBJ, REMOTE_CLAIM, OTHER_CLAIM]
    bound = changed(HOST_OBJ, spec__consumerRef={"kind": "HostClaim", "namespace": "tenant-a", "name": "c9"})
    freed = mapper.host_changed(bound, changed(HOST_OBJ, metadata__generation=5), unbound_claims=claims)
    assert freed.wake == [(CLAIM, "tenant-a", "c1")]
    policy = {"metadata": {"name": "p"}, "spec": {}}
    assert mapper.policy_changed(None, policy, claims).keys == [(CLAIM, "tenant-a", "c1")]
    namespace = {"metadata": {"name": "tenant-a", "labels": {"a": "1"}}}
    relabelled = mapper.namespace_changed(namespace, changed(namespace, metadata__labels={}), claims)
    assert relabelled.keys == [(CLAIM, "tenant-a", "c1")]
    # A namespace appearing (into the namespace selector) concerns every claim with a key.
    assert mapper.namespace_changed(None, namespace, claims).keys == [
        (CLAIM, "tenant-a", "c1"),
        (REMOTE, "tenant-a", "r1"),
    ]


def test_a_remote_claims_kubeconfig_secret_is_one_of_its_secrets():
    assert mapper.secret_refs(REMOTE_CLAIM) == [("tenant-a", "ud"), ("other", "md"), ("tenant-a", "hw-kubeconfig")]
    # spec.remote on a claim of another kind names nothing the runs read.
    assert mapper.secret_refs(changed(REMOTE_CLAIM, spec__kind="baremetal")) == [("tenant-a", "ud"), ("other", "md")]
    secret = {"metadata": {"namespace": "tenant-a", "name": "hw-kubeconfig", "resourceVersion": "1"}}
    edited = changed(secret, metadata__resourceVersion="2")
    assert mapper.secret_changed(secret, edited, [REMOTE_CLAIM, OTHER_CLAIM]).keys == [(REMOTE, "tenant-a", "r1")]


def test_kinds_flag():
    assert mapper.parse_kinds("baremetal") == ("baremetal",)
    assert mapper.parse_kinds(" remote, baremetal,remote") == ("remote", "baremetal")
    for text in ("", "vm", "baremetal,vm"):
        with pytest.raises(ValueError, match="--kinds"):
            mapper.parse_kinds(text)


# -- the image writers' callbacks (callbacks.CallbackWatch) ------------------------------------------------------------

# Hosts record references (22 characters); the tokens are what the media key makes of them.
KEY = bytes(range(32))
REFERENCES = {name: letter * 22 for name, letter in (("token", "T"), ("warm", "W"), ("wait", "A"), ("other", "O"))}
TOKEN, WARM, WAIT, OTHER = (token_for(KEY, REFERENCES[name]) for name in ("token", "warm", "wait", "other"))


def with_operation(host: dict, name: str, **operation) -> dict:
    host = changed(host, metadata__name=name)
    host["metadata"]["annotations"] = {"provisioner.metalclaim.io/operation": json.dumps(operation)}
    return host


def test_a_callback_file_names_its_token_and_nothing_else_does():
    assert mapper.callback_token(f"{TOKEN}.json") == TOKEN
    for name in (f".{TOKEN}.json.tmp", ".0123456789abcdef.tmp", TOKEN, f"{TOKEN}.jsonx", "short.json", "a/b.json"):
        assert mapper.callback_token(name) is None, name


def test_a_callback_wakes_the_host_whose_operation_holds_its_token_and_an_unknown_one_wakes_nothing():
    ref = REFERENCES
    deploy = with_operation(HOST_OBJ, "h1", kind="deploy", token=ref["token"])
    warm = with_operation(HOST_OBJ, "h2", kind="deploy", token=ref["other"], warm=ref["warm"])
    cleaning = with_operation(HOST_OBJ, "h3", kind="clean", token=ref["other"], wait=ref["wait"])
    assert mapper.operation_tokens(deploy, KEY) == [TOKEN]
    # the job's callback and the warm writer's acknowledgement
    assert mapper.operation_tokens(warm, KEY) == [OTHER, WARM]
    assert mapper.operation_tokens(HOST_OBJ, KEY) == [] and mapper.operation_tokens(None, KEY) == []
    assert mapper.callback_arrived(TOKEN, [deploy], KEY).keys == [(HOST, "infra", "h1")]
    assert mapper.callback_arrived(WARM, [warm], KEY).keys == [(HOST, "infra", "h2")]
    assert mapper.callback_arrived(WAIT, [cleaning], KEY).keys == [(HOST, "infra", "h3")]
    assert mapper.callback_arrived("U" * 43, [], KEY).keys == []
    # What the index named, checked against the host as it is: a token its operation no longer holds wakes nothing.
    assert mapper.callback_arrived(TOKEN, [warm, HOST_OBJ], KEY).keys == []
    # A reference is not its token: a callback under what the host shows wakes nothing, and another key opens it
    # into another token.
    assert mapper.callback_arrived(ref["token"], [deploy], KEY).keys == []
    assert mapper.operation_tokens(deploy, bytes(32)) != [TOKEN]
