"""The foundation on the real thing: CRDs, identities and RBAC, the controller-manager's controllers.

Every request is made as the identity a user would have.
"""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.support import REPO_ROOT, eventually, status_of, walkthrough_object

INFRA = "infrahost"
TENANT_A = "cluster-ns"
TENANT_B = "tenant-b"

pytestmark = pytest.mark.integration


def resource(clients, identity: str, kind: str, api_version: str = "metal3.io/v1alpha1"):
    return clients[identity].resources.get(api_version=api_version, kind=kind)


def claim(name: str, namespace: str, **spec) -> dict:
    body = {"hostSelector": {"matchLabels": {"infra-kind": "medium"}}, "online": False}
    body.update(spec)
    return {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# -- Metal3's HostClaim walkthrough applies verbatim ------------------------------------------------------


def test_walkthrough_policy_applies_verbatim_as_infra(devenv, clients):
    text, parsed = walkthrough_object("HostDeployPolicy")
    devenv.kubectl("infra", "apply", "-f", "-", stdin=text)
    try:
        policy = resource(clients, "infra", "HostDeployPolicy").get(name="policy", namespace=INFRA)
        assert policy.to_dict()["spec"] == parsed["spec"] == {"hostclaimNamespaces": {}}
    finally:  # it admits every namespace to the fleet: the worker's later tests must not find it
        devenv.kubectl("infra", "delete", "--wait=false", "-f", "-", stdin=text)


def test_walkthrough_claim_applies_verbatim_as_tenant(devenv, clients):
    text, parsed = walkthrough_object("HostClaim")
    # Strict field validation (kubectl's default) rejects any field our schema lacks.
    result = devenv.kubectl("tenant-a", "apply", "--validate=strict", "-f", "-", stdin=text)
    try:
        assert "hostclaim.metal3.io/my-hostclaim" in result.stdout
        stored = resource(clients, "tenant-a", "HostClaim").get(name="my-hostclaim", namespace=TENANT_A).to_dict()
        expected = dict(parsed["spec"])
        expected.setdefault("kind", "baremetal")  # the schema's default for hybrid routing
        assert stored["spec"] == expected
    finally:  # the tenant namespace is shared by the worker's later tests, whose controllers would run it
        devenv.kubectl("tenant-a", "delete", "--wait=false", "-f", "-", stdin=text)


def test_upstream_aliases_are_accepted(clients):
    claims = resource(clients, "tenant-a", "HostClaim")
    name = unique("alias")
    body = claim(name, TENANT_A)
    del body["spec"]["online"]
    body["spec"]["poweredOn"] = True
    assert claims.create(body=body).spec.poweredOn is True
    claims.delete(name=name, namespace=TENANT_A)
    policies = resource(clients, "infra", "HostDeployPolicy")
    policy = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostDeployPolicy",
        "metadata": {"name": unique("alias"), "namespace": INFRA},
        "spec": {"hostClaimNamespaces": {"names": [TENANT_A], "hasLabels": [{"name": "metalclaim.io/role"}]}},
    }
    created = policies.create(body=policy)
    assert created.spec.hostClaimNamespaces.names == [TENANT_A]
    policies.delete(name=created.metadata.name, namespace=INFRA)


def test_existing_metal3_inventory_applies_unchanged_as_infra(devenv):
    inventory = REPO_ROOT / "tests" / "fixtures" / "metal3_bmh_inventory.yaml"
    result = devenv.kubectl("infra", "apply", "--validate=strict", "-n", INFRA, "-f", str(inventory))
    assert "baremetalhost.metal3.io/" in result.stdout
    devenv.kubectl("infra", "delete", "-n", INFRA, "-f", str(inventory), "--wait=false")


# -- the apiserver's own validation rejects malformed claims ----------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"image": {"url": "http://127.0.0.1/img.iso", "format": "iso"}},
            'spec.image.format: Unsupported value: "iso"',
        ),
        (
            {"hostSelector": {"matchExpressions": [{"key": "infra-kind", "operator": "Like", "values": ["m"]}]}},
            'spec.hostSelector.matchExpressions[0].operator: Unsupported value: "Like"',
        ),
        ({"image": {"format": "qcow2"}}, "spec.image.url: Required value"),
        ({"userData": {"namespace": TENANT_A}}, "spec.userData.name: Required value"),
    ],
    ids=["image-format", "selector-operator", "image-without-url", "secret-ref-without-name"],
)
def test_crd_validation_rejects_malformed_claims(clients, spec, expected):
    with pytest.raises(ApiException) as raised:
        resource(clients, "tenant-a", "HostClaim").create(body=claim(unique("bad"), TENANT_A, **spec))
    assert raised.value.status == 422
    assert expected in json.loads(raised.value.body)["message"]


# -- RBAC is real: attacks by tenants and the controller ----------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "namespace"),
    [
        ("v1", "Secret", INFRA),
        ("metal3.io/v1alpha1", "BareMetalHost", INFRA),
        ("metal3.io/v1alpha1", "HostDeployPolicy", INFRA),
        ("metal3.io/v1alpha1", "HardwareData", INFRA),
        ("v1", "Secret", TENANT_B),
        ("metal3.io/v1alpha1", "HostClaim", TENANT_B),
    ],
)
def test_tenant_cannot_read_outside_its_namespace(clients, api_version, kind, namespace):
    api = resource(clients, "tenant-a", kind, api_version)
    assert status_of(lambda: api.get(namespace=namespace)) == 403


def test_tenant_cannot_read_a_named_bmc_secret(devenv, clients):
    secrets = resource(clients, "tenant-a", "Secret", "v1")
    assert status_of(lambda: secrets.get(name="bm-00-bmc-secret", namespace=INFRA)) == 403
    # ...nor list anything cluster-wide, which would cover every namespace at once.
    assert status_of(secrets.get) == 403
    assert status_of(lambda: resource(clients, "tenant-a", "HostClaim").get()) == 403


def test_tenant_cannot_write_outside_its_namespace(clients):
    claims = resource(clients, "tenant-a", "HostClaim")
    assert status_of(lambda: claims.create(body=claim(unique("x"), TENANT_B))) == 403
    policy = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostDeployPolicy",
        "metadata": {"name": "steal", "namespace": INFRA},
        "spec": {"hostclaimNamespaces": {}},
    }
    assert status_of(lambda: resource(clients, "tenant-a", "HostDeployPolicy").create(body=policy)) == 403
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "bm-00-userdata", "namespace": INFRA},
        "stringData": {"userData": "#cloud-config"},
    }
    assert status_of(lambda: resource(clients, "tenant-a", "Secret", "v1").create(body=secret)) == 403


def test_tenant_cannot_write_claim_status(clients):
    """Status is the claim layer's word; a tenant forging `Association: True` is refused."""
    claims = resource(clients, "tenant-a", "HostClaim")
    name = unique("forge")
    created = claims.create(body=claim(name, TENANT_A))
    forged = created.to_dict()
    forged["status"] = {"hardwareData": {"name": "bm-00", "namespace": INFRA}}
    assert status_of(lambda: claims.status.replace(body=forged)) == 403
    # Writing status through the main resource is silently dropped by the status subresource.
    claims.replace(body=forged)
    assert claims.get(name=name, namespace=TENANT_A).to_dict().get("status") in (None, {})
    claims.delete(name=name, namespace=TENANT_A)


def test_infra_is_confined_to_infra_namespaces(clients):
    assert status_of(lambda: resource(clients, "infra", "Secret", "v1").get(namespace=TENANT_A)) == 403
    assert status_of(lambda: resource(clients, "infra", "HostClaim").get(namespace=TENANT_A)) == 403


def test_controller_has_only_what_the_deploy_manifests_grant(clients):
    controller = "controller"
    assert status_of(lambda: resource(clients, controller, "BareMetalHost").get(namespace=INFRA)) == 200
    assert status_of(lambda: resource(clients, controller, "HostClaim").get()) == 200
    assert (
        status_of(lambda: resource(clients, controller, "BareMetalHost").delete(name="bm-00", namespace=INFRA)) == 403
    )
    # It creates HostClaims (a HostClaimSet's members) but never a set: those are the tenants'.
    hostclaimset = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaimSet",
        "metadata": {"name": "s", "namespace": TENANT_A},
        "spec": {"selector": {"matchLabels": {"s": "s"}}, "template": {"metadata": {"labels": {"s": "s"}}, "spec": {}}},
    }
    assert status_of(lambda: resource(clients, controller, "HostClaimSet").create(body=hostclaimset)) == 403
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": unique("ctrl")}}
    assert status_of(lambda: resource(clients, controller, "Namespace", "v1").create(body=namespace)) == 403


def test_fleet_is_registered_by_infra(devenv, clients):
    hosts = resource(clients, "infra", "BareMetalHost").get(namespace=INFRA).items
    registered = {h.metadata.name: h for h in hosts if h.metadata.name.startswith("bm-")}
    assert len(registered) == devenv.state["fleet_size"]
    systems = {s["address"] for s in devenv.state["redfish"]["systems"]}
    assert {h.spec.bmc.address for h in registered.values()} == systems
    secrets = resource(clients, "infra", "Secret", "v1")
    for host in registered.values():
        assert secrets.get(name=host.spec.bmc.credentialsName, namespace=INFRA).data.keys() >= {"username", "password"}


# -- kube-controller-manager's controllers run --------------------------------------------------------


def test_namespace_deletion_removes_its_claims(clients):
    name = unique("ns-del")
    namespaces = resource(clients, "admin", "Namespace", "v1")
    namespaces.create(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    resource(clients, "admin", "HostClaim").create(body=claim("doomed", name))
    namespaces.delete(name=name)
    eventually(lambda: status_of(lambda: namespaces.get(name=name)) == 404, message=f"namespace {name} deleted")


def test_owner_reference_garbage_collection(clients):
    hosts = resource(clients, "infra", "BareMetalHost")
    secrets = resource(clients, "infra", "Secret", "v1")
    name = unique("gc")
    host = hosts.create(
        body={
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": INFRA},
            "spec": {
                "online": False,
                "bmc": {"address": "redfish+http://127.0.0.1:1/redfish/v1/Systems/x", "credentialsName": f"{name}-bmc"},
            },
        }
    )
    owner = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "name": name,
        "uid": host.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    secrets.create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-userdata", "namespace": INFRA, "ownerReferences": [owner]},
            "stringData": {"userData": "#cloud-config"},
        }
    )
    hosts.delete(name=name, namespace=INFRA)
    eventually(
        lambda: status_of(lambda: secrets.get(name=f"{name}-userdata", namespace=INFRA)) == 404,
        message="owned secret garbage-collected",
    )


def test_resource_quota_limits_claims(clients):
    quotas = resource(clients, "admin", "ResourceQuota", "v1")
    quota_name = unique("claims")
    quotas.create(
        body={
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": quota_name, "namespace": TENANT_B},
            "spec": {"hard": {"count/hostclaims.metal3.io": "1"}},
        }
    )
    eventually(lambda: quotas.get(name=quota_name, namespace=TENANT_B).status.hard, message="quota synced")
    claims = resource(clients, "tenant-b", "HostClaim")
    claims.create(body=claim("first", TENANT_B))
    try:
        with pytest.raises(ApiException) as raised:
            claims.create(body=claim("second", TENANT_B))
        assert raised.value.status == 403
        assert "exceeded quota" in json.loads(raised.value.body)["message"]
    finally:
        claims.delete(name="first", namespace=TENANT_B)
        quotas.delete(name=quota_name, namespace=TENANT_B)


def test_clusterrole_aggregation_extends_edit(clients):
    roles = resource(clients, "admin", "ClusterRole", "rbac.authorization.k8s.io/v1")

    def edit_covers_hostclaims():
        rules = roles.get(name="edit").rules or []
        return any("metal3.io" in (r.apiGroups or []) and "hostclaims" in (r.resources or []) for r in rules)

    eventually(edit_covers_hostclaims, message="edit aggregates hostclaims")
