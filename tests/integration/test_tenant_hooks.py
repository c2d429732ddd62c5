"""Tenant hooks on the real API server, served by a real HTTP server on 127.0.0.1: blocking hooks stop a tenant
change (create, update, delete) until they answer 200, non-blocking ones never delay it and are retried with
backoff, claim events are told from current state, and credentials go to the hook only (never to the status, the
module results, Events or the logs; never to a redirect or from a Secret not meant for hooks)."""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks as hook_plan
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from metalclaim_dev.claimlayer import condition as claim_condition
from metalclaim_dev.support import REPO_ROOT, eventually, run_playbook, status_of
from metalclaim_dev.tenancy import (
    CLAIM_SIDE,
    TENANCY,
    as_user,
    condition,
    delete_tenants,
    read_tenant,
    reconcile,
    tenants_side,
)

pytestmark = [pytest.mark.integration, pytest.mark.minutes(2)]

PLAYBOOK = REPO_ROOT / "playbooks" / "tenant.yml"
METAL3 = "metal3.io/v1alpha1"
RBAC = "rbac.authorization.k8s.io/v1"
TENANT_LABEL = "tenancy.metalclaim.io/tenant"
HOOKS_NAMESPACE = hook_plan.CREDENTIALS_NAMESPACE
# Unguessable per run, so finding them anywhere but in a hook's request is a leak.
TOKEN = f"tok-{uuid.uuid4().hex}"
USERNAME = "hook-user"
PASSWORD = f"pw-{uuid.uuid4().hex}"
SECRETS = (TOKEN, PASSWORD, base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode())


class HookServer:
    """A hook endpoint on 127.0.0.1: records each POST (path, headers, JSON body) and answers per path."""

    def __init__(self):
        self.requests: list[dict] = []
        self.answers: dict[str, object] = {}  # path -> status, (status, body, headers) or callable(request)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                request = {
                    "path": self.path,
                    "headers": dict(self.headers.items()),
                    "body": json.loads(self.rfile.read(length) or b"{}"),
                    "at": time.monotonic(),
                }
                server.requests.append(request)
                answer = server.answers.get(self.path, 200)
                if callable(answer):
                    answer = answer(request)
                status, body, headers = answer if isinstance(answer, tuple) else (answer, b"", {})
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                try:
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except BrokenPipeError:
                    pass  # the caller's timeout ran out first (as the test wants)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[dict]:
        return [r for r in self.requests if r["path"] == path]

    def events(self, path: str) -> list[str]:
        return [r["body"]["eventType"] for r in self.at(path)]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    hook_server = HookServer()
    yield hook_server
    hook_server.stop()


def api(clients, kind: str, api_version: str = "v1"):
    return clients["admin"].resources.get(api_version=api_version, kind=kind)


@pytest.fixture
def credentials(clients):
    """Credentials Secrets in the hooks namespace: a token, a username/password, and a token in an Opaque Secret."""
    if status_of(lambda: api(clients, "Namespace").get(name=HOOKS_NAMESPACE)) == 404:
        api(clients, "Namespace").create(
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HOOKS_NAMESPACE}}
        )
    suffix = uuid.uuid4().hex[:6]
    names = {"token": f"token-{suffix}", "basic": f"basic-{suffix}", "opaque": f"opaque-{suffix}"}
    bodies = [
        (names["token"], hook_plan.CREDENTIALS_TYPE, {"token": TOKEN}),
        (names["basic"], hook_plan.CREDENTIALS_TYPE, {"username": USERNAME, "password": PASSWORD}),
        (names["opaque"], "Opaque", {"token": TOKEN}),
    ]
    for name, type_, data in bodies:
        api(clients, "Secret").create(
            body={
                "apiVersion": "v1",
                "kind": "Secret",
                "type": type_,
                "metadata": {"name": name, "namespace": HOOKS_NAMESPACE},
                "stringData": data,
            }
        )
    yield names
    for name in names.values():
        api(clients, "Secret").delete(name=name, namespace=HOOKS_NAMESPACE)


def owned_by(clients, secret: str, tenant: str) -> str:
    """`secret` labelled as `tenant`'s credentials: only that tenant's hooks may use it (another's get nothing)."""
    api(clients, "Secret").patch(
        name=secret,
        namespace=HOOKS_NAMESPACE,
        body={"metadata": {"labels": {TENANT_LABEL: tenant}}},
        content_type="application/merge-patch+json",
    )
    return secret


def owned_namespaces(clients, name: str) -> list[str]:
    items = api(clients, "Namespace").get(label_selector=f"{TENANT_LABEL}={name}").items
    return sorted(i.metadata.name for i in items if not i.metadata.deletionTimestamp)


def manifest(name: str, hooks: list[dict], **spec) -> dict:
    return {
        "apiVersion": TENANCY,
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"tenantName": name, "childNamespaces": ["work"], "hooks": hooks, **spec},
    }


@pytest.fixture
def tenants(clients, devenv, tmp_path):
    """Tenant names for one test; each is deleted afterwards, its hooks removed first so none can hold it."""
    names: list[str] = []

    def new() -> str:
        names.append(f"hk{uuid.uuid4().hex[:6]}")
        return names[-1]

    yield new
    delete_tenants(clients, devenv, names)


def playbook(devenv, tmp_path, run: str, **extravars) -> dict:
    extravars.setdefault("tenancy_claim_side_subjects", CLAIM_SIDE)
    extravars.setdefault("tenancy_fail_on_refusal", False)
    tasks = run_playbook(tmp_path / run, PLAYBOOK, devenv.kubeconfig("admin"), extravars)
    result = {t["task"]: t for t in tasks}["Reconcile the Tenants"]
    assert not result["failed"], result
    return result


def claim_layer(devenv, rack) -> None:
    """One claim layer run in process, as the controller's claims side (reconcile.yml) runs it."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.reconcile import reconcile_claims
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import now

    run = ClaimRun(Kube({"kubeconfig": devenv.kubeconfig("controller")}), rack.claim_args(), now(), False)
    run.finish(reconcile_claims(run))


def hooks_reason(clients, name: str) -> str:
    conditions = ((read_tenant(clients, name) or {}).get("status") or {}).get("conditions") or []
    return next((c["reason"] for c in conditions if c["type"] == "Hooks"), "")


def wait_for_next_ask(clients, name: str) -> None:
    """Sleep past the refusal's backoff (the blocking hooks are not asked again before)."""
    refused = (read_tenant(clients, name)["status"].get("hooks") or {}).get("refused") or {}
    if refused:
        due = hook_plan.parse_time(refused["nextAskAt"]).timestamp()
        time.sleep(max(0.0, due - time.time()) + 1.1)


def wait_until_due(clients, name: str, hook: str):
    """Sleep until the pending delivery to `hook` is due; its nextAttemptAt."""
    entry = next(e for e in read_tenant(clients, name)["status"]["hooks"]["pending"] if e["hook"] == hook)
    due = hook_plan.parse_time(entry["nextAttemptAt"])
    time.sleep(max(0.0, due.timestamp() - time.time()) + 0.2)
    return due


def assert_never_leaked(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a credential leaked: ...{text[max(0, text.find(secret) - 80) :][:200]}"


def everything_written_down(clients, tmp_path, name: str) -> list[str]:
    """Where a credential must never be: the Tenant, every Event of the cluster, every run's artifacts."""
    found = [json.dumps(read_tenant(clients, name) or {}, default=str)]
    found.append(json.dumps(api(clients, "Event").get().to_dict(), default=str))
    for path in tmp_path.rglob("*"):
        if path.is_file():
            found.append(path.read_text(errors="replace"))
    return found


def test_a_blocking_hook_stops_create_update_and_delete_until_it_answers_200(
    devenv, clients, server, credentials, tenants, tmp_path
):
    name = tenants()
    gate = {
        "name": "gate",
        "url": server.url("/gate"),
        "blockingCall": True,
        "eventTypes": ["CREATE", "UPDATE", "DELETE"],
        "credentialsSecretRef": {"name": owned_by(clients, credentials["token"], name)},
        "timeoutSeconds": 3,
    }
    notify = {
        "name": "notify",
        "url": server.url("/notify"),
        "eventTypes": ["CREATE", "UPDATE", "DELETE"],
        "credentialsSecretRef": {"name": owned_by(clients, credentials["basic"], name)},
    }
    # The hook refuses, echoing the Authorization header it got (a careless or hostile hook): never in the status.
    server.answers["/gate"] = lambda r: (500, f"not in the CMDB yet ({r['headers']['Authorization']})".encode(), {})
    source = tmp_path / "tenant.json"
    source.write_text(json.dumps(manifest(name, [gate, notify])))

    # CREATE refused: nothing of the tenant exists, the status says which hook and why.
    result = playbook(devenv, tmp_path, "create-refused", tenancy_src=str(source))
    tenant = read_tenant(clients, name)
    hooks_condition = condition(tenant, "Hooks")
    assert tenant["status"]["state"] == "New"
    assert (hooks_condition["status"], hooks_condition["reason"]) == ("False", "HookRefused")
    assert hooks_condition["message"] == (
        "blocking hook 'gate' refused CREATE: answered 500: not in the CMDB yet ([redacted])"
    )
    assert condition(tenant, "Ready")["status"] == "False"
    assert owned_namespaces(clients, name) == [] and not tenant["metadata"].get("finalizers")
    assert result["tenants"][0]["reason"] == "HookRefused" and result["requeue"] == [name]
    (asked,) = server.at("/gate")
    assert asked["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert asked["headers"]["Content-Type"] == "application/json"
    assert asked["body"]["eventType"] == "CREATE"
    assert asked["body"]["tenantSpec"]["tenantName"] == name and asked["body"]["tenantSpec"]["state"] == "New"
    assert asked["body"]["tenantSpec"]["hooks"][0]["credentialsSecretRef"] == {"name": credentials["token"]}
    assert server.at("/notify") == []  # non-blocking hooks hear of a change that happened, only

    # Within the backoff the refusal stands and the hook is not asked again; after it, a 200 lets CREATE through.
    within = reconcile(devenv, [name])
    assert len(server.at("/gate")) == 1 and within["hook_requests"] == 0 and within["writes"] == 0
    assert within["tenants"][0]["reason"] == "HookRefused" and within["tenants"][0]["requeue_after"] > 0
    server.answers["/gate"] = 200
    wait_for_next_ask(clients, name)
    playbook(devenv, tmp_path, "create-allowed", tenancy_names=[name])
    tenant = read_tenant(clients, name)
    assert tenant["status"]["state"] == "Deployed" and owned_namespaces(clients, name) == [f"{name}-work"]
    assert (condition(tenant, "Hooks")["reason"], condition(tenant, "Ready")["status"]) == ("HooksDelivered", "True")
    assert server.events("/gate") == ["CREATE", "CREATE"] and server.events("/notify") == ["CREATE"]
    (told,) = server.at("/notify")
    assert told["headers"]["Authorization"] == "Basic " + SECRETS[2]
    assert told["body"]["tenantSpec"]["state"] == "Deployed"  # told after the change
    assert tenant["status"]["hooks"]["pending"] == []
    # Settled: a run asks and tells nobody and writes nothing.
    settled = playbook(devenv, tmp_path, "settled", tenancy_names=[name])
    assert settled["writes"] == 0 and settled["hook_requests"] == 0

    # UPDATE refused: the new child namespace is not made, the tenant stays Deployed as it was.
    server.answers["/gate"] = (403, b"change freeze", {})
    api(clients, "Tenant", TENANCY).patch(
        body={"spec": {"childNamespaces": ["work", "more"]}}, name=name, content_type="application/merge-patch+json"
    )
    playbook(devenv, tmp_path, "update-refused", tenancy_names=[name])
    tenant = read_tenant(clients, name)
    assert tenant["status"]["state"] == "Deployed" and owned_namespaces(clients, name) == [f"{name}-work"]
    assert condition(tenant, "Hooks")["message"] == "blocking hook 'gate' refused UPDATE: answered 403: change freeze"
    server.answers["/gate"] = 200
    wait_for_next_ask(clients, name)
    playbook(devenv, tmp_path, "update-allowed", tenancy_names=[name])
    assert owned_namespaces(clients, name) == [f"{name}-more", f"{name}-work"]
    assert server.events("/gate")[-1] == "UPDATE" and server.events("/notify") == ["CREATE", "UPDATE"]
    assert server.at("/notify")[-1]["body"]["tenantSpec"]["childNamespaces"] == ["work", "more"]

    # DELETE refused: nothing is removed (namespaces, finalizer), the Deletion condition says which hook and why.
    server.answers["/gate"] = (503, b"tenant still billed", {})
    api(clients, "Tenant", TENANCY).delete(name=name)
    playbook(devenv, tmp_path, "delete-refused", tenancy_names=[name])
    tenant = read_tenant(clients, name)
    deletion = condition(tenant, "Deletion")
    assert tenant["status"]["state"] == "Deleting"
    assert (deletion["reason"], deletion["message"]) == (
        "HookRefused",
        "blocking hook 'gate' refused DELETE: answered 503: tenant still billed",
    )
    assert owned_namespaces(clients, name) == [f"{name}-more", f"{name}-work"]
    assert tenant["metadata"]["finalizers"] == ["tenancy.metalclaim.io/tenant"]
    server.answers["/gate"] = 200
    wait_for_next_ask(clients, name)
    for attempt in range(20):
        playbook(devenv, tmp_path, f"delete-{attempt}", tenancy_names=[name])
        if read_tenant(clients, name) is None:
            break
        time.sleep(1)
    assert read_tenant(clients, name) is None and owned_namespaces(clients, name) == []
    assert server.events("/gate")[-1] == "DELETE" and server.events("/notify") == ["CREATE", "UPDATE", "DELETE"]
    assert server.at("/notify")[-1]["body"]["tenantSpec"]["state"] == "Deleting"

    # Never written down anywhere: not in the Tenant (gone now: its status was checked above), Events, run artifacts.
    assert_never_leaked(*everything_written_down(clients, tmp_path, name))


def test_a_non_blocking_hook_never_delays_the_change_and_is_retried_with_backoff(
    devenv, clients, server, credentials, tenants, tmp_path
):
    name = tenants()
    state_when_told = []
    release = threading.Event()

    def slow(request):
        # What the tenant looked like while this hook was being told: the change is already there.
        state_when_told.append((read_tenant(clients, name)["status"] or {}).get("state"))
        release.wait(10)
        return 200

    server.answers["/slow"] = slow
    server.answers["/down"] = (503, b"maintenance", {})
    hooks = [
        {"name": "slow", "url": server.url("/slow"), "eventTypes": ["CREATE"], "timeoutSeconds": 2},
        {
            "name": "down",
            "url": server.url("/down"),
            "eventTypes": ["CREATE"],
            "credentialsSecretRef": {"name": owned_by(clients, credentials["token"], name)},
        },
    ]
    api(clients, "Tenant", TENANCY).create(body=manifest(name, hooks))
    started = time.monotonic()
    result = reconcile(devenv, [name])
    release.set()
    print(f"\nreconcile with a hanging and a failing non-blocking hook: {time.monotonic() - started:.1f}s")
    assert state_when_told == ["Deployed"]
    tenant = read_tenant(clients, name)
    assert tenant["status"]["state"] == "Deployed" and owned_namespaces(clients, name) == [f"{name}-work"]
    pending = {e["hook"]: e for e in tenant["status"]["hooks"]["pending"]}
    assert sorted(pending) == ["down", "slow"]
    assert pending["down"]["attempts"] == 1 and pending["down"]["lastError"] == "answered 503: maintenance"
    assert pending["slow"]["lastError"] == "no answer within 2s"
    retrying = condition(tenant, "Hooks")
    assert (retrying["status"], retrying["reason"]) == ("True", "DeliveryRetrying")  # never holds the tenant
    assert condition(tenant, "Ready")["status"] == "True"
    assert result["requeue"] == [name] and 0 < result["tenants"][0]["requeue_after"] <= 2

    # Not due yet: nobody is called again.
    reconcile(devenv, [name])
    assert len(server.at("/down")) == 1
    # Due: tried again; still failing, the next try is twice as far.
    first_retry = wait_until_due(clients, name, "down")
    reconcile(devenv, [name])
    pending = {e["hook"]: e for e in read_tenant(clients, name)["status"]["hooks"]["pending"]}
    assert len(server.at("/down")) == 2 and pending["down"]["attempts"] == 2 and "slow" not in pending
    assert server.at("/down")[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"
    second_retry = hook_plan.parse_time(pending["down"]["nextAttemptAt"])
    assert (second_retry - first_retry).total_seconds() >= 4 - 1  # the backoff doubled (timestamps are in seconds)
    server.answers["/down"] = 200
    wait_until_due(clients, name, "down")
    reconcile(devenv, [name])
    tenant = read_tenant(clients, name)
    assert tenant["status"]["hooks"]["pending"] == [] and condition(tenant, "Hooks")["reason"] == "HooksDelivered"
    assert server.events("/down") == ["CREATE"] * 3 and server.events("/slow") == ["CREATE"] * 2
    assert_never_leaked(json.dumps(tenant, default=str), json.dumps(result, default=str))


def test_a_failing_hook_is_called_once_per_run_however_much_it_is_owed(devenv, clients, server, tenants):
    """A hanging or failing hook costs one timeout per run: what else it is owed waits for its retry."""
    name = tenants()
    server.answers["/down"] = (503, b"maintenance", {})
    hook = {"name": "down", "url": server.url("/down"), "eventTypes": ["CREATE", "UPDATE"]}
    api(clients, "Tenant", TENANCY).create(body=manifest(name, [hook]))
    reconcile(devenv, [name])
    assert server.events("/down") == ["CREATE"]
    wait_until_due(clients, name, "down")
    api(clients, "Tenant", TENANCY).patch(
        body={"spec": {"childNamespaces": ["work", "more"]}}, name=name, content_type="application/merge-patch+json"
    )
    reconcile(devenv, [name])  # CREATE due again and UPDATE new: one call, the CREATE's, fails
    assert server.events("/down") == ["CREATE", "CREATE"]
    created, updated = read_tenant(clients, name)["status"]["hooks"]["pending"]
    assert (created["eventType"], created["attempts"]) == ("CREATE", 2)
    assert (updated["eventType"], updated["attempts"]) == ("UPDATE", 0)  # not tried: not counted against it
    assert updated["nextAttemptAt"] == created["nextAttemptAt"]
    server.answers["/down"] = 200
    wait_until_due(clients, name, "down")
    reconcile(devenv, [name])
    assert server.events("/down") == ["CREATE", "CREATE", "CREATE", "UPDATE"]
    assert read_tenant(clients, name)["status"]["hooks"]["pending"] == []


def test_claim_events_are_told_from_current_state(devenv, clients, server, tenants, rack, tmp_path):
    name = tenants()
    rack.host("h1", annotations={"bmc-password": "never-told"})
    hook = {
        "name": "claims",
        "url": server.url("/claims"),
        "eventTypes": ["CLAIM_BOUND", "CLAIM_PROVISIONED", "CLAIM_RELEASED"],
    }
    api(clients, "Tenant", TENANCY).create(body=manifest(name, [hook], hostPools=[{"namespace": rack.namespace}]))
    reconcile(devenv, [name])
    assert server.at("/claims") == []  # no claim yet (and tenant events are not subscribed)

    namespace = f"{name}-work"
    rack.claim("c1", namespace=namespace, identity="admin")
    claim_layer(devenv, rack)
    assert rack.read_host("h1")["spec"]["consumerRef"]["name"] == "c1"
    reconcile(devenv, [name])
    (bound,) = server.at("/claims")
    assert bound["body"]["eventType"] == "CLAIM_BOUND"
    assert {k: v for k, v in bound["body"]["claim"].items() if k != "conditions"} == {
        "namespace": namespace,
        "name": "c1",
        "hostName": "h1",
    }
    assert {c["type"] for c in bound["body"]["claim"]["conditions"]} >= {"Association", "Provisioned"}
    assert "bmc" not in json.dumps(bound["body"]).lower() and "never-told" not in json.dumps(bound["body"])

    rack.set_state("h1", "provisioned")
    claim_layer(devenv, rack)
    reconcile(devenv, [name])
    reconcile(devenv, [name])  # told once
    assert server.events("/claims") == ["CLAIM_BOUND", "CLAIM_PROVISIONED"]
    provisioned = server.at("/claims")[-1]["body"]["claim"]["conditions"]
    assert any(c["type"] == "Provisioned" and c["status"] == "True" for c in provisioned)

    # The claim gone (its finalizer dropped, as the rack's cleanup does): released, with the host it had.
    api(clients, "HostClaim", METAL3).patch(
        body={"metadata": {"finalizers": None}},
        name="c1",
        namespace=namespace,
        content_type="application/merge-patch+json",
    )
    api(clients, "HostClaim", METAL3).delete(name="c1", namespace=namespace)
    rack.claims.clear()
    eventually(lambda: status_of(lambda: api(clients, "HostClaim", METAL3).get(name="c1", namespace=namespace)) == 404)
    reconcile(devenv, [name])
    assert server.events("/claims") == ["CLAIM_BOUND", "CLAIM_PROVISIONED", "CLAIM_RELEASED"]
    assert server.at("/claims")[-1]["body"]["claim"] == {
        "namespace": namespace,
        "name": "c1",
        "hostName": "h1",
        "conditions": [],
    }
    assert read_tenant(clients, name)["status"]["hooks"]["claims"] == []


APPROVALS = "tenancy.metalclaim.io/binding-approvals"


def binding_verdicts(clients, namespace: str) -> dict | None:
    annotations = api(clients, "Namespace").get(name=namespace).to_dict()["metadata"].get("annotations") or {}
    return json.loads(annotations[APPROVALS]) if APPROVALS in annotations else None


def association(rack, name: str, namespace: str) -> tuple[str, str, str]:
    """The claim's Association condition ("" each while the claim layer has not written its status yet)."""
    claim = rack.read_claim(name, namespace=namespace)
    if not (claim.get("status") or {}).get("conditions"):
        return "", "", ""
    found = claim_condition(claim, "Association")
    return found["status"], found["reason"], found["message"]


def test_a_blocking_bound_hook_holds_a_claim_unbound_until_it_allows_the_binding(
    devenv, clients, server, tenants, rack, tmp_path
):
    name = tenants()
    rack.host("h1")
    server.answers["/gate"] = (500, b"cmdb: rack quota reached", {})
    gate = {"name": "gate", "url": server.url("/gate"), "blockingCall": True, "eventTypes": ["CLAIM_BOUND"]}
    notify = {"name": "notify", "url": server.url("/notify"), "eventTypes": ["CLAIM_BOUND"]}
    api(clients, "Tenant", TENANCY).create(
        body=manifest(name, [gate, notify], hostPools=[{"namespace": rack.namespace}])
    )
    reconcile(devenv, [name])
    namespace = f"{name}-work"
    assert binding_verdicts(clients, namespace) == {}  # born needing approval

    rack.claim("c1", namespace=namespace, identity="admin")
    uid = rack.read_claim("c1", namespace=namespace)["metadata"]["uid"]
    claim_layer(devenv, rack)
    assert association(rack, "c1", namespace)[:2] == ("False", "BindingHookPending")
    assert not rack.read_host("h1")["spec"].get("consumerRef")

    refused = reconcile(devenv, [name])
    (asked,) = server.at("/gate")
    assert asked["body"]["eventType"] == "CLAIM_BOUND"
    assert {k: v for k, v in asked["body"]["claim"].items() if k != "conditions"} == {
        "namespace": namespace,
        "name": "c1",
        "hostName": "",  # asked before the binding: no host chosen yet
    }
    (entry,) = refused["tenants"]
    assert entry["requeue"] and 0 < entry["requeue_after"] <= hook_plan.backoff(1)
    verdict = binding_verdicts(clients, namespace)[uid]
    assert (verdict["allowed"], verdict["attempts"]) == (False, 1)
    claim_layer(devenv, rack)
    status, reason, message = association(rack, "c1", namespace)
    assert (status, reason) == ("False", "BindingHookRefused")
    assert "'gate' refused CLAIM_BOUND" in message and "cmdb: rack quota reached" in message
    assert not rack.read_host("h1")["spec"].get("consumerRef") and server.at("/notify") == []

    # Attack: the tenant's own admin cannot write the verdict (nor anything of its namespace).
    alice = as_user(devenv, "alice", f"{name}-tenant-admin").resources.get(api_version="v1", kind="Namespace")
    approve = {"metadata": {"annotations": {APPROVALS: json.dumps({uid: {"allowed": True}})}}}
    assert (
        status_of(lambda: alice.patch(body=approve, name=namespace, content_type="application/merge-patch+json")) == 403
    )

    server.answers["/gate"] = 200
    due = hook_plan.parse_time(binding_verdicts(clients, namespace)[uid]["nextAskAt"]).timestamp()
    time.sleep(max(0.0, due - time.time()) + 1.1)
    reconcile(devenv, [name])
    assert len(server.at("/gate")) == 2 and binding_verdicts(clients, namespace)[uid] == {"name": "c1", "allowed": True}
    claim_layer(devenv, rack)
    assert association(rack, "c1", namespace)[:2] == ("True", "BareMetalHostAssociated")
    assert rack.read_host("h1")["spec"]["consumerRef"]["name"] == "c1"
    reconcile(devenv, [name])  # the binding told to the non-blocking hook; the blocking one was asked already
    assert server.events("/notify") == ["CLAIM_BOUND"] and server.at("/notify")[0]["body"]["claim"]["hostName"] == "h1"
    assert len(server.at("/gate")) == 2
    settled = reconcile(devenv, [name])
    assert settled["writes"] == 0 and len(server.requests) == 3  # nothing new: nobody asked, nothing written

    # The blocking hook removed: the namespace no longer needs approval.
    api(clients, "Tenant", TENANCY).patch(
        body={"spec": {"hooks": [notify]}}, name=name, content_type="application/merge-patch+json"
    )
    reconcile(devenv, [name])
    assert binding_verdicts(clients, namespace) is None


def test_credentials_go_nowhere_else(devenv, clients, server, credentials, tenants, tmp_path):
    """Attacks: a Secret not meant for hooks, a redirect to another endpoint, a hook echoing the credentials."""
    opaque, redirected = tenants(), tenants()
    # A Tenant author names a Secret of the hooks namespace that is not hook credentials: it is never read out.
    api(clients, "Tenant", TENANCY).create(
        body=manifest(
            opaque,
            [
                {
                    "name": "gate",
                    "url": server.url("/steal"),
                    "blockingCall": True,
                    "eventTypes": ["CREATE"],
                    "credentialsSecretRef": {"name": owned_by(clients, credentials["opaque"], opaque)},
                }
            ],
        )
    )
    # A hook redirects elsewhere: the Authorization header is not carried there (no redirect is followed).
    server.answers["/moved"] = (307, b"", {"Location": server.url("/elsewhere")})
    api(clients, "Tenant", TENANCY).create(
        body=manifest(
            redirected,
            [
                {
                    "name": "gate",
                    "url": server.url("/moved"),
                    "blockingCall": True,
                    "eventTypes": ["CREATE"],
                    "credentialsSecretRef": {"name": owned_by(clients, credentials["token"], redirected)},
                }
            ],
        )
    )
    result = reconcile(devenv, [opaque, redirected])
    assert server.at("/steal") == [] and server.at("/elsewhere") == []
    assert server.at("/moved")[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"  # the hook itself, only
    refused = condition(read_tenant(clients, opaque), "Hooks")
    assert refused["message"] == (
        f"blocking hook 'gate' refused CREATE: spec.hooks[0].credentialsSecretRef: credentials Secret "
        f"{HOOKS_NAMESPACE}/{credentials['opaque']} "
        f"is not of type {hook_plan.CREDENTIALS_TYPE} (not used)"
    )
    assert (
        condition(read_tenant(clients, redirected), "Hooks")["message"]
        == "blocking hook 'gate' refused CREATE: answered 307"
    )
    assert owned_namespaces(clients, opaque) == [] and owned_namespaces(clients, redirected) == []
    assert_never_leaked(json.dumps(result, default=str), *everything_written_down(clients, tmp_path, opaque))


def test_the_tenancy_identity_gets_hook_credentials_by_name_only(clients, devenv, credentials):
    """config/rbac/tenancy_hooks_role.yaml bound to the tenants side: get a Secret of the hooks namespace by name; no
    list or watch there, no Secret anywhere else."""
    import yaml

    role = next(
        d
        for d in yaml.safe_load_all((REPO_ROOT / "config/rbac/tenancy_hooks_role.yaml").read_text())
        if d["kind"] == "Role"
    )
    role["metadata"]["name"] = f"test-{uuid.uuid4().hex[:6]}"
    user = f"tenancy-{uuid.uuid4().hex[:6]}"
    api(clients, "Role", RBAC).create(body=role)
    binding = {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": {"name": role["metadata"]["name"], "namespace": HOOKS_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    api(clients, "RoleBinding", RBAC).create(body=binding)
    try:
        api_client = kube_config.new_client_from_config(config_file=devenv.kubeconfig("admin"))
        api_client.set_default_header("Impersonate-User", user)
        secrets = DynamicClient(api_client).resources.get(api_version="v1", kind="Secret")
        eventually(lambda: status_of(lambda: secrets.get(name=credentials["token"], namespace=HOOKS_NAMESPACE)) == 200)
        assert status_of(lambda: secrets.get(namespace=HOOKS_NAMESPACE)) == 403  # list
        assert status_of(lambda: secrets.get(namespace=HOOKS_NAMESPACE, watch=False, label_selector="x")) == 403
        assert status_of(lambda: secrets.get(namespace="default")) == 403
        assert status_of(lambda: secrets.get(name="anything", namespace="kube-system")) == 403
        assert status_of(lambda: secrets.delete(name=credentials["token"], namespace=HOOKS_NAMESPACE)) == 403
    finally:
        api(clients, "RoleBinding", RBAC).delete(name=role["metadata"]["name"], namespace=HOOKS_NAMESPACE)
        api(clients, "Role", RBAC).delete(name=role["metadata"]["name"], namespace=HOOKS_NAMESPACE)


def test_bad_hooks_are_refused_by_the_api_server_naming_the_field(clients):
    tenants_api = api(clients, "Tenant", TENANCY)
    good = {"name": "a", "url": "http://127.0.0.1:9/a", "eventTypes": ["CREATE"]}
    cases = {
        "spec.hooks[0].url": [{**good, "url": "file:///etc/passwd"}],
        "spec.hooks[1]": [good, good],  # the same name twice
        "spec.hooks[0].eventTypes[0]": [{**good, "eventTypes": ["EXPLODE"]}],
    }
    for field, hooks in cases.items():
        name = f"bad{uuid.uuid4().hex[:6]}"
        with pytest.raises(ApiException) as refused:
            tenants_api.create(body=manifest(name, hooks))
        assert refused.value.status == 422 and field in refused.value.body, (field, refused.value.body)


@pytest.fixture
def tenancy_side(clients):
    """The controller identity as the tenants side of a cluster install: metalclaim-tenancy, and the hooks Role."""
    import yaml

    suffix = uuid.uuid4().hex[:6]
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "metalclaim-controller"}]
    role = next(
        d
        for d in yaml.safe_load_all((REPO_ROOT / "config/rbac/tenancy_hooks_role.yaml").read_text())
        if d["kind"] == "Role"
    )
    role["metadata"]["name"] = f"test-hooks-{suffix}"
    api(clients, "Role", RBAC).create(body=role)
    created = [
        (
            "RoleBinding",
            HOOKS_NAMESPACE,
            {
                "apiVersion": RBAC,
                "kind": "RoleBinding",
                "metadata": {"name": role["metadata"]["name"], "namespace": HOOKS_NAMESPACE},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
                "subjects": subject,
            },
        ),
        (
            "ClusterRoleBinding",
            None,
            {
                "apiVersion": RBAC,
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"test-tenancy-{suffix}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "metalclaim-tenancy",
                },
                "subjects": subject,
            },
        ),
    ]
    for kind, _namespace, body in created:
        api(clients, kind, RBAC).create(body=body)
    yield
    for kind, namespace, body in created:
        api(clients, kind, RBAC).delete(name=body["metadata"]["name"], namespace=namespace)
    api(clients, "Role", RBAC).delete(name=role["metadata"]["name"], namespace=HOOKS_NAMESPACE)


def test_the_controller_asks_again_and_retries_by_itself(
    devenv, clients, server, credentials, tenancy_side, tenants, tmp_path
):
    from metalclaim_dev.controllerproc import ControllerProcess

    name = tenants()
    server.answers["/gate"] = (500, b"not yet", {})
    server.answers["/notify"] = (502, b"", {})
    hooks = [
        {
            "name": "gate",
            "url": server.url("/gate"),
            "blockingCall": True,
            "eventTypes": ["CREATE", "DELETE"],
            "credentialsSecretRef": {"name": owned_by(clients, credentials["token"], name)},
        },
        {"name": "notify", "url": server.url("/notify"), "eventTypes": ["CREATE"]},
    ]
    controller = ControllerProcess(
        devenv, tmp_path / "controller", "--controllers", "tenants", "--tenant-claim-side", "user:metalclaim-controller"
    )
    try:
        api(clients, "Tenant", TENANCY).create(body=manifest(name, hooks))
        eventually(lambda: hooks_reason(clients, name) == "HookRefused", timeout=60, message="CREATE refused")
        assert read_tenant(clients, name)["status"]["state"] == "New" and owned_namespaces(clients, name) == []
        # The hook allows it: the controller asks again after the backoff, nobody runs anything.
        allowed = time.monotonic()
        server.answers["/gate"] = 200
        eventually(lambda: read_tenant(clients, name)["status"]["state"] == "Deployed", timeout=60, message="Deployed")
        print(f"\nblocking hook allows -> Deployed by the controller: {time.monotonic() - allowed:.1f}s")
        assert server.at("/gate")[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"  # read with the Role only
        # The notification failed, and is retried by the controller with backoff until it is delivered.
        # Four attempts, three gaps: enough to see each wait grow (2, 4, 8 s), not only one retry.
        eventually(lambda: len(server.at("/notify")) >= 4, timeout=60, message="three retries")
        server.answers["/notify"] = 200
        eventually(
            lambda: read_tenant(clients, name)["status"]["hooks"]["pending"] == [], timeout=60, message="delivered"
        )
        gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(server.at("/notify"))]
        print(f"notify attempts {len(gaps) + 1}, gaps {[round(g, 1) for g in gaps]}")
        assert len(gaps) >= 3
        # Backing off: each wait at least its backoff (timestamps in the status are in whole seconds: 1 s slack).
        assert all(gap >= hook_plan.backoff(n) - 1.0 for n, gap in enumerate(gaps[:3], start=1)), gaps
        assert gaps[2] > gaps[0] + 2, gaps
        assert condition(read_tenant(clients, name), "Hooks")["reason"] == "HooksDelivered"
    except BaseException:
        print(controller.output())
        raise
    finally:
        controller.stop()
    assert_never_leaked(*everything_written_down(clients, tmp_path, name))


def test_the_controller_tells_claim_events_as_claims_change(
    devenv, clients, server, tenancy_side, tenants, rack, tmp_path
):

    name = tenants()
    rack.host("h1")
    hook = {
        "name": "claims",
        "url": server.url("/claims"),
        "eventTypes": ["CLAIM_BOUND", "CLAIM_PROVISIONED", "CLAIM_RELEASED"],
    }
    controller = tenants_side(devenv, tmp_path / "controller", rack.namespace)
    try:
        api(clients, "Tenant", TENANCY).create(body=manifest(name, [hook], hostPools=[{"namespace": rack.namespace}]))
        eventually(lambda: (read_tenant(clients, name).get("status") or {}).get("state") == "Deployed", timeout=60)
        namespace = f"{name}-work"
        rack.claim("c1", namespace=namespace, identity="admin")
        eventually(lambda: server.events("/claims") == ["CLAIM_BOUND"], timeout=60, message="CLAIM_BOUND told")
        bound_at = time.monotonic()
        assert server.at("/claims")[0]["body"]["claim"]["hostName"] == "h1"
        rack.set_state("h1", "provisioned")  # as the host's provisioner would
        eventually(
            lambda: server.events("/claims") == ["CLAIM_BOUND", "CLAIM_PROVISIONED"], timeout=60, message="provisioned"
        )
        print(f"\nhost provisioned -> CLAIM_PROVISIONED told: {time.monotonic() - bound_at:.1f}s after CLAIM_BOUND")
        api(clients, "HostClaim", METAL3).delete(name="c1", namespace=namespace)

        def released() -> bool:
            host = rack.read_host("h1")
            if not host["spec"].get("image") and host["status"]["provisioning"]["state"] != "available":
                rack.set_state("h1", "available")  # deprovisioned, as the host's provisioner would say
            return server.events("/claims")[-1:] == ["CLAIM_RELEASED"]

        eventually(released, timeout=90, message="CLAIM_RELEASED told")
        assert server.at("/claims")[-1]["body"]["claim"]["hostName"] == "h1"
        assert server.events("/claims") == ["CLAIM_BOUND", "CLAIM_PROVISIONED", "CLAIM_RELEASED"]
    except BaseException:
        print(controller.output())
        raise
    finally:
        controller.stop()


def test_the_controller_binds_a_claim_once_its_blocking_bound_hook_allows_it(
    devenv, clients, server, tenancy_side, tenants, rack, tmp_path
):
    name = tenants()
    rack.host("h1")
    server.answers["/gate"] = (503, b"change freeze", {})
    gate = {"name": "gate", "url": server.url("/gate"), "blockingCall": True, "eventTypes": ["CLAIM_BOUND"]}
    controller = tenants_side(devenv, tmp_path / "controller", rack.namespace)
    try:
        api(clients, "Tenant", TENANCY).create(body=manifest(name, [gate], hostPools=[{"namespace": rack.namespace}]))
        eventually(lambda: (read_tenant(clients, name).get("status") or {}).get("state") == "Deployed", timeout=60)
        namespace = f"{name}-work"
        created = time.monotonic()
        rack.claim("c1", namespace=namespace, identity="admin")
        eventually(lambda: association(rack, "c1", namespace)[1] == "BindingHookRefused", timeout=60, message="refused")
        print(f"\nclaim created -> BindingHookRefused on the claim: {time.monotonic() - created:.1f}s")
        assert "change freeze" in association(rack, "c1", namespace)[2]
        assert not rack.read_host("h1")["spec"].get("consumerRef")
        allowed = time.monotonic()
        server.answers["/gate"] = 200
        eventually(lambda: association(rack, "c1", namespace)[0] == "True", timeout=60, message="bound once allowed")
        print(f"hook allows -> claim bound by the controller: {time.monotonic() - allowed:.1f}s")
        assert rack.read_host("h1")["spec"]["consumerRef"]["name"] == "c1"
    except BaseException:
        print(controller.output())
        raise
    finally:
        controller.stop()
