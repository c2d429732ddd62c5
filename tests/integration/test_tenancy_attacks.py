"""Attacks on the tenancy side (issue 22), each played against the real API server.

1. The tenancy guard without its parameters: the ConfigMap metalclaim-system/metalclaim-tenancy-side absent, the
   tenants side's token still cannot bind a Secret-reading role beside hosts nor delete a namespace onboarding did
   not make (config/admission/tenancy_policy.yaml names the shipped identities itself).
"""

from __future__ import annotations

import time
import uuid

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.support import REPO_ROOT, status_of
from tests.tenancy import RBAC, as_user, tenancy_rights

pytestmark = pytest.mark.integration

TENANT_LABEL = "tenancy.metalclaim.io/tenant"
GUARD = "ValidatingAdmissionPolicy 'metalclaim-tenancy-side"  # the guard and its -extra policy
PARAMS = ("metalclaim-system", "metalclaim-tenancy-side")
ADMISSION = REPO_ROOT / "config" / "admission"


def api(clients, kind: str, api_version: str = "v1", identity: str = "admin"):
    return clients[identity].resources.get(api_version=api_version, kind=kind)


def refused(what: str, call) -> str:
    """The body of the guard's 403 for `call`; fails naming `what` when it went through (or RBAC refused it)."""
    try:
        call()
    except ApiException as refusal:
        assert refusal.status == 403, refusal.body
        assert GUARD in refusal.body, f"{what}: refused by RBAC, not the guard: {refusal.body}"
        return refusal.body
    pytest.fail(f"{what}: accepted, the tenancy guard let it through")


def reader_binding(namespace: str, role: str, tenant: str | None = None) -> dict:
    return {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": {
            "name": f"stolen-{role}",
            "namespace": namespace,
            "labels": {TENANT_LABEL: tenant} if tenant else {},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "metalclaim-controller"}],
    }


@pytest.fixture
def victim(clients):
    """A namespace the admin made (no tenant label), removed afterwards."""
    name = f"victim-{uuid.uuid4().hex[:6]}"
    api(clients, "Namespace").create(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    if status_of(lambda: api(clients, "Namespace").delete(name=name)) not in (200, 404):
        raise AssertionError(f"namespace {name} left behind")


@pytest.fixture
def params_absent(clients):
    """The guard's ConfigMap deleted (as a broken install or anyone with rights in metalclaim-system may leave it);
    put back afterwards."""
    configmaps = api(clients, "ConfigMap")
    kept = configmaps.get(name=PARAMS[1], namespace=PARAMS[0]).to_dict()
    configmaps.delete(name=PARAMS[1], namespace=PARAMS[0])
    time.sleep(2)  # the API server's admission informers see the deletion
    try:
        yield
    finally:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "data": kept.get("data") or {}}
        body["metadata"] = {k: kept["metadata"][k] for k in ("name", "namespace", "labels") if kept["metadata"].get(k)}
        configmaps.create(body=body)


def attack_without_parameters(side, clients, rack, victim) -> None:
    """What a leaked tenants-side token tries once the guard's ConfigMap is gone."""
    assert (
        status_of(
            lambda: side.resources.get(api_version="v1", kind="ConfigMap").delete(name=PARAMS[1], namespace=PARAMS[0])
        )
        == 403
    )  # it cannot remove the parameters itself (no ConfigMap right)
    bindings = side.resources.get(api_version=RBAC, kind="RoleBinding")
    try:
        message = refused(
            f"a RoleBinding to metalclaim-tenant-secrets-reader in the infrastructure namespace {rack.namespace}",
            lambda: bindings.create(body=reader_binding(rack.namespace, "metalclaim-tenant-secrets-reader")),
        )
        assert f"rolebindings {rack.namespace}/stolen-metalclaim-tenant-secrets-reader" in message
        refused(
            "a RoleBinding to metalclaim-tenant labelled as a tenant's, beside hosts",
            lambda: bindings.create(body=reader_binding(rack.namespace, "metalclaim-tenant", tenant="evil")),
        )
        assert f"namespaces {victim}:" in refused(
            f"deleting the unlabelled namespace {victim}",
            lambda: side.resources.get(api_version="v1", kind="Namespace").delete(name=victim),
        )
        # And so the BMC credentials beside the hosts stay out of reach.
        assert (
            status_of(lambda: side.resources.get(api_version="v1", kind="Secret").get(namespace=rack.namespace)) == 403
        )
    finally:
        for role in ("metalclaim-tenant-secrets-reader", "metalclaim-tenant"):
            status_of(
                lambda r=role: api(clients, "RoleBinding", RBAC).delete(name=f"stolen-{r}", namespace=rack.namespace)
            )
    assert api(clients, "Namespace").get(name=victim).metadata.deletionTimestamp is None


def test_without_its_configmap_the_guard_still_holds_the_tenants_side(clients, rack, victim, params_absent):
    """The devenv's tenants side (user metalclaim-controller) bound to metalclaim-tenancy, the ConfigMap absent."""
    with tenancy_rights(clients):
        attack_without_parameters(clients["controller"], clients, rack, victim)


@pytest.mark.parametrize(
    "user",
    [
        "system:serviceaccount:metalclaim-system:metalclaim-tenancy",  # the guide's tenants side
        "system:serviceaccount:metalclaim-system:metalclaim-controller",  # one process running every side
        "system:serviceaccount:metalclaim-system:tenants-elsewhere",  # any ServiceAccount of metalclaim's namespace
    ],
)
def test_without_its_configmap_the_guard_holds_metalclaims_service_accounts(
    clients, devenv, rack, victim, params_absent, user
):
    with tenancy_rights(clients, user=user):
        side = as_user(devenv, user, "system:serviceaccounts:metalclaim-system")
        attack_without_parameters(side, clients, rack, victim)


def test_extra_identities_of_the_configmap_are_held_too(clients, devenv, rack):
    """The ConfigMap still adds identities (the install role's hostclaim_install_tenancy_users)."""
    user = f"tenancy-extra-{uuid.uuid4().hex[:6]}"
    configmaps = api(clients, "ConfigMap")
    users = configmaps.get(name=PARAMS[1], namespace=PARAMS[0]).data["users"]
    configmaps.patch(
        name=PARAMS[1],
        namespace=PARAMS[0],
        body={"data": {"users": users + user + "\n"}},
        content_type="application/merge-patch+json",
    )
    bindings = api(clients, "RoleBinding", RBAC)
    try:
        with tenancy_rights(clients, user=user):
            side = as_user(devenv, user, "extra-group")
            sides_bindings = side.resources.get(api_version=RBAC, kind="RoleBinding")
            body = reader_binding(rack.namespace, "metalclaim-tenant-secrets-reader")
            deadline = time.monotonic() + 20
            while True:  # the API server's parameter informer picks the new name up within a moment
                try:
                    sides_bindings.create(body=body)
                except ApiException as refusal:
                    assert refusal.status == 403 and "metalclaim-tenancy-side-extra" in refusal.body, refusal.body
                    break
                bindings.delete(name=body["metadata"]["name"], namespace=rack.namespace)
                assert time.monotonic() < deadline, "the extra identity is not held by the guard"
                time.sleep(0.5)
    finally:
        configmaps.patch(
            name=PARAMS[1],
            namespace=PARAMS[0],
            body={"data": {"users": users}},
            content_type="application/merge-patch+json",
        )


def test_the_guard_and_its_extra_policy_say_the_same_rule():
    """No API server needed: the two policies differ only in who they hold (fixed names, the ConfigMap's)."""
    policies = {
        d["metadata"]["name"]: d["spec"]
        for d in yaml.safe_load_all((ADMISSION / "tenancy_policy.yaml").read_text())
        if d and d["kind"] == "ValidatingAdmissionPolicy"
    }
    guard, extra = policies["metalclaim-tenancy-side"], policies["metalclaim-tenancy-side-extra"]
    assert "paramKind" not in guard and extra["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    for key in ("matchConstraints", "validations", "failurePolicy"):
        assert guard[key] == extra[key], key
    assert guard["variables"] == extra["variables"]
    # The extra policy holds those the ConfigMap lists, but not the guard's own (held once, by the guard).
    assert [c["name"] for c in extra["matchConditions"]] == [
        "not-one-metalclaim-tenancy-side-holds",
        "listed-in-the-configmap",
    ]
    # The identities the guard names itself are the install role's defaults and the devenv's tenants side.
    defaults = yaml.safe_load((REPO_ROOT / "roles/hostclaim_install/defaults/main.yml").read_text())
    for user in defaults["hostclaim_install_tenancy_users"]:
        assert f"'{user}'" in guard["matchConditions"][0]["expression"]
        assert f"'{user}'" in extra["matchConditions"][0]["expression"]  # held once, by the guard
    bindings = {
        d["spec"]["policyName"]: d["spec"]
        for d in yaml.safe_load_all((ADMISSION / "tenancy_binding.yaml").read_text())
        if d
    }
    assert "paramRef" not in bindings["metalclaim-tenancy-side"]
    assert bindings["metalclaim-tenancy-side-extra"]["paramRef"]["name"] == PARAMS[1]
