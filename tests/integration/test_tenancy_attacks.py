"""Attacks on the tenancy side (issue 22), each played against the real API server.

1. The tenancy guard without its parameters: the ConfigMap metalclaim-system/metalclaim-tenancy-side absent, the
   tenants side's token still cannot bind a Secret-reading role beside hosts nor delete a namespace onboarding did
   not make (config/admission/tenancy_policy.yaml names the shipped identities itself).
2. Hook credentials belong to one tenant: tenant B's Tenant names tenant A's credentials Secret and points its hook
   at a listener of the test; A's token never reaches it.
3. A hook that trickles its answer (one byte a second) costs its delivery one deadline (timeoutSeconds, for the
   whole exchange, not per socket read), and another tenant in the same run is onboarded without waiting for it.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import yaml
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks as hook_plan
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.netfixtures import HookListener
from metalclaim_dev.support import REPO_ROOT, status_of
from metalclaim_dev.tenancy import (
    RBAC,
    TENANCY,
    as_user,
    condition,
    delete_tenants,
    read_tenant,
    reconcile,
    tenancy_rights,
)

pytestmark = pytest.mark.integration

TENANT_LABEL = "tenancy.metalclaim.io/tenant"
GUARD = "ValidatingAdmissionPolicy 'metalclaim-tenancy-side"  # the guard and its -extra policy
PARAMS = ("metalclaim-system", "metalclaim-tenancy-side")
HOOKS_NAMESPACE = hook_plan.CREDENTIALS_NAMESPACE
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
    """The ConfigMap still adds identities (the install role's install_tenancy_users)."""
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
        for d in yaml.safe_load((ADMISSION / "tenancy_policy.yaml").read_text())["items"]
        if d["kind"] == "ValidatingAdmissionPolicy"
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
    defaults = yaml.safe_load((REPO_ROOT / "roles/install/defaults/main.yml").read_text())
    for user in defaults["install_tenancy_users"]:
        assert f"'{user}'" in guard["matchConditions"][0]["expression"]
        assert f"'{user}'" in extra["matchConditions"][0]["expression"]  # held once, by the guard
    bindings = {
        d["spec"]["policyName"]: d["spec"]
        for d in yaml.safe_load((ADMISSION / "tenancy_binding.yaml").read_text())["items"]
    }
    assert "paramRef" not in bindings["metalclaim-tenancy-side"]
    assert bindings["metalclaim-tenancy-side-extra"]["paramRef"]["name"] == PARAMS[1]


# -- 2. hook credentials belong to one tenant ------------------------------------------------------------------


@pytest.fixture
def listener():
    server = HookListener()
    yield server
    server.stop()


def manifest(name: str, hooks: list[dict]) -> dict:
    return {
        "apiVersion": TENANCY,
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"tenantName": name, "childNamespaces": ["work"], "hooks": hooks},
    }


@pytest.fixture
def tenants(clients, devenv):
    """Tenant names for one test (made in the order asked, so they sort so); deleted afterwards, hooks first."""
    names: list[str] = []
    stem = uuid.uuid4().hex[:6]

    def new() -> str:
        names.append(f"ta{stem}{chr(ord('a') + len(names))}")
        return names[-1]

    yield new
    delete_tenants(clients, devenv, names)


@pytest.fixture
def hook_secrets(clients):
    """make(tenant or None, token): a credentials Secret in the hooks namespace, labelled for `tenant` when given."""
    if status_of(lambda: api(clients, "Namespace").get(name=HOOKS_NAMESPACE)) == 404:
        api(clients, "Namespace").create(
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HOOKS_NAMESPACE}}
        )
    made: list[str] = []

    def make(tenant: str | None, token: str) -> str:
        made.append(f"cred-{uuid.uuid4().hex[:8]}")
        api(clients, "Secret").create(
            body={
                "apiVersion": "v1",
                "kind": "Secret",
                "type": hook_plan.CREDENTIALS_TYPE,
                "metadata": {
                    "name": made[-1],
                    "namespace": HOOKS_NAMESPACE,
                    "labels": {TENANT_LABEL: tenant} if tenant else {},
                },
                "stringData": {"token": token},
            }
        )
        return made[-1]

    yield make
    for name in made:
        api(clients, "Secret").delete(name=name, namespace=HOOKS_NAMESPACE)


def test_a_tenant_cannot_have_another_tenants_hook_token_sent_to_its_url(
    devenv, clients, listener, tenants, hook_secrets
):
    a, b, c = tenants(), tenants(), tenants()
    token_a = f"tok-a-{uuid.uuid4().hex}"
    secret_a = hook_secrets(a, token_a)
    unlabelled = hook_secrets(None, f"tok-nobody-{uuid.uuid4().hex}")

    def hook(path: str, secret: str, blocking: bool) -> dict:
        return {
            "name": path.strip("/"),
            "url": listener.url(path),
            "blockingCall": blocking,
            "eventTypes": ["CREATE"],
            "credentialsSecretRef": {"name": secret},
        }

    tenants_api = api(clients, "Tenant", TENANCY)
    tenants_api.create(body=manifest(a, [hook("/a", secret_a, blocking=True)]))
    # B names A's Secret twice: a blocking hook asked before B's creation, a notification told after it.
    tenants_api.create(body=manifest(b, [hook("/b-gate", secret_a, True), hook("/b-notify", secret_a, False)]))
    # C names a credentials Secret labelled for nobody: nobody's (fails closed).
    tenants_api.create(body=manifest(c, [hook("/c-notify", unlabelled, False)]))
    reconcile(devenv, [a, b, c])
    leaked = [r["path"] for r in listener.requests if r["path"] != "/a" and token_a in str(r["headers"])]
    assert leaked == [], f"tenant A's token was sent to tenant B's (or C's) URL: {leaked}"
    assert [r["path"] for r in listener.requests] == ["/a"], listener.requests  # nothing sent with a foreign Secret
    assert listener.at("/a")[0]["headers"]["Authorization"] == f"Bearer {token_a}"  # A's own hook: A's token
    assert read_tenant(clients, a)["status"]["state"] == "Deployed"

    gate = condition(read_tenant(clients, b), "Hooks")
    assert (gate["status"], gate["reason"]) == ("False", "HookRefused")
    assert gate["message"] == (
        f"blocking hook 'b-gate' refused CREATE: spec.hooks[0].credentialsSecretRef: credentials Secret "
        f"{HOOKS_NAMESPACE}/{secret_a} is not labelled {TENANT_LABEL}={b}: it is another tenant's (not used)"
    )
    b_status = read_tenant(clients, b)["status"]
    assert b_status["state"] == "New" and token_a not in str(b_status)

    [pending] = read_tenant(clients, c)["status"]["hooks"]["pending"]
    assert pending["lastError"] == (
        f"spec.hooks[0].credentialsSecretRef: credentials Secret {HOOKS_NAMESPACE}/{unlabelled} has no label "
        f"{TENANT_LABEL} (it must name the tenant it belongs to; not used)"
    )
    assert condition(read_tenant(clients, c), "Hooks")["reason"] == "DeliveryRetrying"

    # B allowed through once its hooks name no foreign Secret: the notification is sent, without credentials.
    tenants_api.patch(
        body={
            "spec": {"hooks": [{k: v for k, v in hook("/b-notify", "", False).items() if k != "credentialsSecretRef"}]}
        },
        name=b,
        content_type="application/merge-patch+json",
    )
    reconcile(devenv, [b])
    assert read_tenant(clients, b)["status"]["state"] == "Deployed"
    assert [r["path"] for r in listener.requests] == ["/a", "/b-notify"]
    assert "Authorization" not in listener.at("/b-notify")[0]["headers"]


# -- 3. a trickling hook costs one deadline ---------------------------------------------------------------------


def test_a_trickling_hook_costs_one_deadline_and_does_not_hold_another_tenant(devenv, clients, listener, tenants):
    deadline = 2
    listener.trickle_seconds = 40
    slow, other = tenants(), tenants()  # sorted so: the run reaches the slow one first
    hook = {
        "name": "trickle",
        "url": listener.url("/trickle"),
        "blockingCall": True,
        "eventTypes": ["CREATE"],
        "timeoutSeconds": deadline,
    }
    api(clients, "Tenant", TENANCY).create(body=manifest(slow, [hook]))
    api(clients, "Tenant", TENANCY).create(body=manifest(other, []))

    deployed_at: list[float] = []
    done = threading.Event()

    def watch_other():
        while not done.is_set() and not deployed_at:
            if ((read_tenant(clients, other) or {}).get("status") or {}).get("state") == "Deployed":
                deployed_at.append(time.monotonic())
            time.sleep(0.1)

    watcher = threading.Thread(target=watch_other, daemon=True)
    started = time.monotonic()
    watcher.start()
    try:
        reconcile(devenv, [slow, other])
    finally:
        ran = time.monotonic() - started
        time.sleep(0.3)
        done.set()
        watcher.join()
    [trickled] = listener.trickles
    lasted = (trickled["ended"] or time.monotonic()) - trickled["started"]
    print(
        f"\ntrickling hook (deadline {deadline}s): delivery {lasted:.2f}s ({trickled['sent']} byte(s) trickled), "
        f"other tenant Deployed after {deployed_at[0] - started if deployed_at else float('nan'):.2f}s, run {ran:.2f}s"
    )
    assert lasted <= deadline + 0.5, f"the trickled delivery lasted {lasted:.1f}s, its deadline is {deadline}s"
    refused_ = condition(read_tenant(clients, slow), "Hooks")
    assert refused_["message"] == f"blocking hook 'trickle' refused CREATE: no answer within {deadline}s"
    assert read_tenant(clients, slow)["status"]["state"] == "New"
    assert deployed_at, "the other tenant was not Deployed by the run"
    assert deployed_at[0] - started <= deadline + 4, (
        f"the other tenant waited {deployed_at[0] - started:.1f}s for the trickling hook (deadline {deadline}s)"
    )
