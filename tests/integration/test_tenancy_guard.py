"""The tenants side's token, stolen: what config/admission/tenancy_policy.yaml stops that RBAC alone lets through.

The tenancy ClusterRole is cluster-wide (tenants' namespaces are not known in advance): create and delete
Namespaces, create RoleBindings to metalclaim-tenant anywhere. Played here as the controller identity bound to
metalclaim-tenancy, as a cluster binds its tenants side; each attack is refused by the admission policy (not by
RBAC: the same request labelled as onboarding makes it, in a tenant's namespace, goes through).
"""

from __future__ import annotations

import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import step
from metalclaim_dev.tenancy import RBAC, tenancy_rights

pytestmark = pytest.mark.integration

METAL3 = "metal3.io/v1alpha1"
TENANT_LABEL = "tenancy.metalclaim.io/tenant"
POLICY = "ValidatingAdmissionPolicy 'metalclaim-tenancy-side'"


@pytest.fixture
def tenancy_side(clients):
    """The controller identity with the tenants side's rights (config/rbac/tenancy_role.yaml)."""
    with tenancy_rights(clients):
        yield clients["controller"]


@pytest.fixture
def namespaces(clients):
    """Namespaces made for one test (by the admin or the tenants side), all removed afterwards."""
    made: list[str] = []

    def name(prefix: str) -> str:
        made.append(f"{prefix}-{uuid.uuid4().hex[:6]}")
        return made[-1]

    yield name
    api = clients["admin"].resources.get(api_version="v1", kind="Namespace")
    for namespace in made:
        try:
            api.delete(name=namespace)
        except ApiException as error:
            if error.status != 404:
                raise


def namespace(name: str, tenant: str | None = None) -> dict:
    labels = {TENANT_LABEL: tenant} if tenant else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def tenant_role_binding(namespace: str, tenant: str | None = None) -> dict:
    labels = {TENANT_LABEL: tenant} if tenant else {}
    return {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": {"name": "stolen-tenant-rights", "namespace": namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metalclaim-tenant"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "metalclaim-controller"}],
    }


def refused(call) -> str:
    with pytest.raises(ApiException) as refusal:
        call()
    assert refusal.value.status == 403, refusal.value.body
    assert POLICY in refusal.value.body, f"refused by RBAC, not the guard: {refusal.value.body}"
    return refusal.value.body


def test_a_stolen_tenancy_token_cannot_read_bmc_secrets_through_a_tenant_role_binding(tenancy_side, rack):
    """metalclaim-tenant lets its subjects read Secrets: bound beside hosts, it would hand over BMC credentials."""
    bindings = tenancy_side.resources.get(api_version=RBAC, kind="RoleBinding")
    message = refused(lambda: bindings.create(body=tenant_role_binding(rack.namespace)))
    assert f"rolebindings {rack.namespace}/stolen-tenant-rights" in message and "metalclaim-controller" in message
    # Labelled as onboarding labels its bindings, but the namespace is no tenant's.
    refused(lambda: bindings.create(body=tenant_role_binding(rack.namespace, tenant="evil")))
    secrets = tenancy_side.resources.get(api_version="v1", kind="Secret")
    with pytest.raises(ApiException) as denied:
        secrets.get(namespace=rack.namespace)
    assert denied.value.status == 403


def test_a_stolen_tenancy_token_cannot_delete_or_take_over_a_namespace_onboarding_did_not_make(
    tenancy_side, clients, namespaces
):
    victim = namespaces("victim")
    clients["admin"].resources.get(api_version="v1", kind="Namespace").create(body=namespace(victim))
    api = tenancy_side.resources.get(api_version="v1", kind="Namespace")
    assert f"namespaces {victim}:" in refused(lambda: api.delete(name=victim))
    taken_over = api.get(name=victim).to_dict()
    taken_over["metadata"]["labels"] = {TENANT_LABEL: "evil"}
    refused(lambda: api.replace(body=taken_over))  # labelled first, to be deleted next
    refused(lambda: api.create(body=namespace(namespaces("unlabelled"))))
    assert api.get(name=victim).metadata.labels.get(TENANT_LABEL) is None


def test_what_onboarding_makes_goes_through_and_stays_its_tenants(tenancy_side, rack, namespaces):
    api = tenancy_side.resources.get(api_version="v1", kind="Namespace")
    home = namespaces("t1-home")
    api.create(body=namespace(home, tenant="t1"))
    bindings = tenancy_side.resources.get(api_version=RBAC, kind="RoleBinding")
    bindings.create(body=tenant_role_binding(home, tenant="t1"))
    refused(
        lambda: bindings.create(
            body=dict(
                tenant_role_binding(home, tenant="t2"),
                metadata={"name": "other-tenants", "namespace": home, "labels": {TENANT_LABEL: "t2"}},
            )
        )
    )
    quotas = tenancy_side.resources.get(api_version="v1", kind="ResourceQuota")
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "hostclaims", "namespace": home, "labels": {TENANT_LABEL: "t1"}},
        "spec": {"hard": {"count/hostclaims.metal3.io": "2"}},
    }
    quotas.create(body=quota)
    refused(lambda: quotas.create(body=dict(quota, metadata={"name": "q", "namespace": rack.namespace})))
    # Policies live beside the hosts: labelled they are onboarding's, unlabelled they are the infra team's.
    policies = tenancy_side.resources.get(api_version=METAL3, kind="HostDeployPolicy")
    policy = {
        "apiVersion": METAL3,
        "kind": "HostDeployPolicy",
        "metadata": {"name": "tenant-t1", "namespace": rack.namespace, "labels": {TENANT_LABEL: "t1"}},
        "spec": {"hostclaimNamespaces": {"names": [home], "hasLabels": [{"name": TENANT_LABEL, "value": "t1"}]}},
    }
    policies.create(body=policy)
    refused(lambda: policies.create(body=dict(policy, metadata={"name": "handmade", "namespace": rack.namespace})))
    stored = api.get(name=home).to_dict()
    stored["metadata"]["labels"][TENANT_LABEL] = "t2"
    assert "may not change that label" in refused(lambda: api.replace(body=stored))
    policies.delete(name="tenant-t1", namespace=rack.namespace)
    api.delete(name=home)


def test_a_stolen_tenancy_token_cannot_open_an_infra_namespace_with_a_labelled_policy(tenancy_side, rack, namespaces):
    """Issue 40: the guard checked only a HostDeployPolicy's tenant label, never its content, so a stolen tenancy token
    could open an infra namespace to every namespace with firmware allowances, nodeReuse clean: false or metadataCopy.
    A policy of the tenants side is now only what onboarding writes: spec.hostclaimNamespaces.names, each name one of
    its tenant's namespaces (<tenant>-<child>)."""
    policies = tenancy_side.resources.get(api_version=METAL3, kind="HostDeployPolicy")
    home = namespaces("t1-home")

    def labelled(spec: dict, name: str = "tenant-t1") -> dict:
        meta = {"name": name, "namespace": rack.namespace, "labels": {TENANT_LABEL: "t1"}}
        return {"apiVersion": METAL3, "kind": "HostDeployPolicy", "metadata": meta, "spec": spec}

    attacks = {
        "every namespace": {"hostclaimNamespaces": {"nameMatches": ".*"}},
        "every labelled namespace": {"hostclaimNamespaces": {"hasLabels": [{"name": TENANT_LABEL}]}},
        "another tenant's namespace": {"hostclaimNamespaces": {"names": [home, "t2-home"]}},
        "names alone (any namespace of the prefix)": {"hostclaimNamespaces": {"names": [home]}},
        "firmware allowances": {
            "hostclaimNamespaces": {"names": [home]},
            "firmware": {"allowedSettings": [{"name": "HttpBootUri", "values": ["http://10.9.9.9/evil.efi"]}]},
        },
        "uncleaned reuse": {
            "hostclaimNamespaces": {"names": [home]},
            "nodeReuse": {"maxHoldDuration": "720h", "clean": False},
        },
        "metadata copies": {"hostclaimNamespaces": {"names": [home]}, "metadataCopy": {"labels": [".*"]}},
    }
    for what, spec in attacks.items():
        message = refused(lambda spec=spec: policies.create(body=labelled(spec)))
        assert "only as onboarding does" in message, (what, message)
    # What onboarding writes goes through, and cannot be widened afterwards.
    onboarding = {"names": [home], "hasLabels": [{"name": TENANT_LABEL, "value": "t1"}]}
    policies.create(body=labelled({"hostclaimNamespaces": onboarding}))
    stored = policies.get(name="tenant-t1", namespace=rack.namespace).to_dict()
    stored["spec"]["hostclaimNamespaces"] = {"nameMatches": ".*"}
    refused(lambda: policies.replace(body=stored))
    policies.delete(name="tenant-t1", namespace=rack.namespace)


def test_a_stolen_tenancy_token_cannot_open_another_tenants_namespace_of_a_colliding_name(
    tenancy_side, rack, clients, devenv, tmp_path
):
    """Issue 40: tenant `a` with child `b-c` and tenant `a-b` with child `c` both make `a-b-c`. The guard can only
    check the prefix, so a stolen tenancy token could write tenant a-b's policy naming `a-b-c`, tenant a's
    namespace, and open a-b's host pool to it. Onboarding's policies now also require the namespace's tenant label
    (which the tenants side can never add or change), and the guard requires that."""
    a = f"t{uuid.uuid4().hex[:5]}"
    colliding = f"{a}-b-c"  # tenant a's namespace (child b-c); tenant a-b's child c would be named the same
    admin_namespaces = clients["admin"].resources.get(api_version="v1", kind="Namespace")
    admin_namespaces.create(body=namespace(colliding, tenant=a))
    try:
        rack.host("h1")
        policies = tenancy_side.resources.get(api_version=METAL3, kind="HostDeployPolicy")
        meta = {"name": f"tenant-{a}-b", "namespace": rack.namespace, "labels": {TENANT_LABEL: f"{a}-b"}}

        def policy(rule: dict) -> dict:
            return {"apiVersion": METAL3, "kind": "HostDeployPolicy", "metadata": meta, "spec": rule}

        message = refused(lambda: policies.create(body=policy({"hostclaimNamespaces": {"names": [colliding]}})))
        assert "only as onboarding does" in message and "hasLabels" in message, message
        wrong_label = {"names": [colliding], "hasLabels": [{"name": TENANT_LABEL, "value": a}]}
        refused(lambda: policies.create(body=policy({"hostclaimNamespaces": wrong_label})))
        # What onboarding writes for tenant a-b: accepted, and it admits no namespace of tenant a.
        own = {"names": [colliding], "hasLabels": [{"name": TENANT_LABEL, "value": f"{a}-b"}]}
        policies.create(body=policy({"hostclaimNamespaces": own}))
        rack.claim("across", namespace=colliding, identity="admin")
        result = step("hostclaim_bind", devenv, tmp_path, rack)
        assert result["bound"] == 0, result
        assert "consumerRef" not in rack.read_host("h1")["spec"]
    finally:
        admin_namespaces.delete(name=colliding)
