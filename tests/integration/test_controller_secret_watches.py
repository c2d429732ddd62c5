"""The claim side's Secret watches on the real API server: one per namespace holding a claim it serves, no more.

A tenant who creates claims in many namespaces (or namespaces that come and go) must not leave a watch and its
Secrets in memory behind each: the watch of a namespace stops when its last claim goes, and starts again with the
next. Seen as an operator sees it, on /metrics (metalclaim_secret_watches, metalclaim_secrets_cached), and in the
controller's log (each watch's thread ends).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import METAL3
from metalclaim_dev.controllerproc import ControllerProcess, claim_side, runs_of
from metalclaim_dev.devenv.env import tenant_namespace_bindings
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration
REACTION = 20  # seconds: as test_controller.py


@pytest.fixture
def controller(devenv, rack, tmp_path):
    rack.policy()  # no host: the claims wait for one, so a deleted claim goes at once (nothing to release)
    process = ControllerProcess(devenv, tmp_path, *claim_side(rack))
    yield process
    process.stop()


@pytest.fixture
def namespaces(clients):
    """Fresh tenant namespaces (the claim side may read their Secrets), removed afterwards."""
    made = []
    api = clients["admin"].resources.get(api_version="v1", kind="Namespace")
    bindings = clients["admin"].resources.get(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding")

    def make() -> str:
        name = f"sw-{uuid.uuid4().hex[:8]}"
        api.create(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        for binding in tenant_namespace_bindings(name):
            bindings.create(body=binding)
        made.append(name)
        return name

    yield make
    claims = clients["admin"].resources.get(api_version=METAL3, kind="HostClaim")
    for name in made:
        for claim in claims.get(namespace=name).items:  # the controller may be gone: drop its finalizer
            claims.patch(
                body={"metadata": {"finalizers": None}},
                name=claim.metadata.name,
                namespace=name,
                content_type="application/merge-patch+json",
            )
        api.delete(name=name)


def create_claim(clients, rack, namespace: str, name: str, user_data: str | None = None) -> None:
    spec = {"online": False, "hostSelector": {"matchLabels": {"infra-kind": rack.kind}}}
    if user_data:
        spec["userData"] = {"name": user_data}
    clients["admin"].resources.get(api_version=METAL3, kind="HostClaim").create(
        body={
            "apiVersion": METAL3,
            "kind": "HostClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def delete_claim(clients, namespace: str, name: str) -> None:
    claims = clients["admin"].resources.get(api_version=METAL3, kind="HostClaim")
    claims.delete(name=name, namespace=namespace)

    def gone() -> bool:
        try:
            claims.get(name=name, namespace=namespace)
        except ApiException as error:
            return error.status == 404
        return False

    eventually(gone, timeout=REACTION, message=f"claim {namespace}/{name} deleted (its finalizer removed)")


def secret(clients, namespace: str, name: str, text: str) -> None:
    clients["admin"].resources.get(api_version="v1", kind="Secret").create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"userData": text},
        }
    )


def log_events(controller: ControllerProcess, event: str, namespace: str) -> list[dict]:
    found = []
    for line in controller.output(full=True).splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event and entry.get("namespace") == namespace:
            found.append(entry)
    return found


def watches(controller: ControllerProcess) -> float:
    return controller.metric("metalclaim_secret_watches")


def test_a_namespaces_secret_watch_stops_with_its_last_claim_and_starts_with_the_next(
    controller, clients, rack, namespaces
):
    baseline = watches(controller)  # other namespaces' claims (a reused devenv): not this test's
    cached = controller.metric("metalclaim_secrets_cached")
    ns = namespaces()
    secret(clients, ns, "ud", "#cloud-config\n")
    create_claim(clients, rack, ns, "c1", user_data="ud")
    create_claim(clients, rack, ns, "c2")
    # Before: no such metric (the watches were never counted, nor stopped).
    eventually(
        lambda: watches(controller) == baseline + 1,
        timeout=REACTION,
        message=f"one watch of {ns}\n{controller.output()}",
    )
    eventually(lambda: log_events(controller, "watch_started", ns), timeout=REACTION, message=f"{ns}'s Secrets watched")
    eventually(
        lambda: controller.metric("metalclaim_secrets_cached") >= cached + 1, timeout=REACTION, message="ud cached"
    )

    delete_claim(clients, ns, "c1")
    time.sleep(2)  # a claim is left: the watch stays
    assert watches(controller) == baseline + 1 and not log_events(controller, "secret_watch_stopped", ns)

    delete_claim(clients, ns, "c2")  # the last one
    eventually(
        lambda: watches(controller) == baseline,
        timeout=REACTION,
        message=f"{ns}'s watch stopped\n{controller.output()}",
    )
    assert controller.metric("metalclaim_secrets_cached") == cached  # its Secrets went with it
    # Its thread ended (the reflector says so as it stops), and the controller stays healthy.
    stopped = eventually(
        lambda: [e for e in log_events(controller, "reflector_stopped", ns) if e.get("resource") == "secrets"],
        timeout=10,
        message=f"{ns}'s Secret reflector thread ended\n{controller.output()}",
    )
    assert len(stopped) == 1
    assert controller.get(controller.health_port, "/healthz")[0] == 200

    create_claim(clients, rack, ns, "c3", user_data="ud")  # a claim comes back: so does the watch
    eventually(lambda: watches(controller) == baseline + 1, timeout=REACTION, message=f"{ns} watched again")
    eventually(lambda: len(log_events(controller, "watch_started", ns)) >= 2, timeout=REACTION, message="relisted")
    eventually(
        lambda: controller.metric("metalclaim_secrets_cached") >= cached + 1, timeout=REACTION, message="relisted"
    )


def test_a_secret_change_wakes_its_claim_and_another_namespaces_watch_leaves_it_alone(
    controller, clients, rack, namespaces
):
    a, b = namespaces(), namespaces()
    secret(clients, a, "ud", "#cloud-config\nfirst: 1\n")
    create_claim(clients, rack, a, "c1", user_data="ud")
    key = f"claim/{a}/c1"
    eventually(
        lambda: runs_of(controller, key) >= 1, timeout=REACTION, message=f"{key} reconciled\n{controller.output()}"
    )
    eventually(lambda: log_events(controller, "watch_started", a), timeout=REACTION, message=f"{a}'s Secrets watched")
    time.sleep(2)
    runs = runs_of(controller, key)

    # A watch starts in another namespace: its list replaces that namespace's Secrets only. Before: the one Store of
    # every namespace's Secrets was replaced by b's, a's Secret seen deleted, and a's claim run again.
    create_claim(clients, rack, b, "c1")
    eventually(lambda: runs_of(controller, f"claim/{b}/c1") >= 1, timeout=REACTION, message=f"{b}'s claim reconciled")
    eventually(lambda: log_events(controller, "listed", b), timeout=REACTION, message=f"{b}'s Secrets listed")
    time.sleep(3)
    assert runs_of(controller, key) == runs, controller.output()

    # The Secret a claim references changes: its claim runs, within seconds.
    clients["admin"].resources.get(api_version="v1", kind="Secret").patch(
        body={"stringData": {"userData": "#cloud-config\nsecond: 2\n"}},
        name="ud",
        namespace=a,
        content_type="application/merge-patch+json",
    )
    eventually(
        lambda: runs_of(controller, key) > runs,
        timeout=REACTION,
        message=f"{key} woken by its Secret\n{controller.output()}",
    )
