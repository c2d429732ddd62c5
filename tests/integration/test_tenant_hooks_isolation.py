"""Attack (issue 22): one tenant's slow hook holds only its own tenant, on the real API server.

Tenant A's hook trickles its answer (one byte a second, so no socket read ever times out) for its whole
timeoutSeconds; tenant B, in the same tenants run, has a hook that answers at once. B must be Deployed, and its
hook told, without waiting for A's deadline: a tenant's deliveries run beside the others', never before them.
Both ways A's hook can hold a run: a blocking hook asked before A's change, and a notification told after it.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from metalclaim_dev.netfixtures import HookListener
from metalclaim_dev.tenancy import TENANCY, condition, delete_tenants, read_tenant, reconcile

NAMESPACE_OWNED_ELSEWHERE = "NamespaceOwnedElsewhere"

pytestmark = pytest.mark.integration

DEADLINE = 10  # A's timeoutSeconds: what B waited for before deliveries of different tenants were independent
WITHIN = DEADLINE / 2  # B's bound (its onboarding takes about a second here; before, it waited DEADLINE and more)
SLOW_SECONDS = 3  # a blocking hook that allows, in its own time


@pytest.fixture
def listener():
    server = HookListener(trickle_seconds=4 * DEADLINE, slow_seconds=SLOW_SECONDS)
    yield server
    server.stop()


@pytest.fixture
def tenants(clients, devenv):
    """Tenant names for one test, made in the order asked so they sort so; deleted afterwards, hooks first."""
    names: list[str] = []
    stem = uuid.uuid4().hex[:6]

    def new() -> str:
        names.append(f"ti{stem}{chr(ord('a') + len(names))}")
        return names[-1]

    new.names = names  # a test may add a name of its own making
    yield new
    delete_tenants(clients, devenv, names)


def manifest(name: str, hooks: list[dict], children: tuple[str, ...] = ("work",)) -> dict:
    return {
        "apiVersion": TENANCY,
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"tenantName": name, "childNamespaces": list(children), "hooks": hooks},
    }


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "notification"])
def test_a_trickling_hook_of_one_tenant_does_not_delay_another_tenant_in_the_same_run(
    devenv, clients, listener, tenants, blocking
):
    slow, quick = tenants(), tenants()  # sorted so: a one-after-another run reaches the slow tenant first
    trickle = {
        "name": "trickle",
        "url": listener.url("/trickle-a"),
        "blockingCall": blocking,
        "eventTypes": ["CREATE"],
        "timeoutSeconds": DEADLINE,
    }
    told = {"name": "notify", "url": listener.url("/notify-b"), "eventTypes": ["CREATE"], "timeoutSeconds": DEADLINE}
    tenants_api = clients["admin"].resources.get(api_version=TENANCY, kind="Tenant")
    tenants_api.create(body=manifest(slow, [trickle]))
    tenants_api.create(body=manifest(quick, [told]))

    deployed_at: list[float] = []
    done = threading.Event()

    def watch_quick():
        while not done.is_set() and not deployed_at:
            if ((read_tenant(clients, quick) or {}).get("status") or {}).get("state") == "Deployed":
                deployed_at.append(time.monotonic())
            time.sleep(0.1)

    watcher = threading.Thread(target=watch_quick, daemon=True)
    started = time.monotonic()  # both Tenants applied: the run starts
    watcher.start()
    try:
        result = reconcile(devenv, [slow, quick])
    finally:
        ran = time.monotonic() - started
        time.sleep(0.3)
        done.set()
        watcher.join()

    [trickled] = listener.trickles
    lasted = (trickled["ended"] or time.monotonic()) - trickled["started"]
    notified = listener.at("/notify-b")
    b_deployed = deployed_at[0] - started if deployed_at else float("nan")
    b_told = notified[0]["at"] - started if notified else float("nan")
    print(
        f"\n{'blocking' if blocking else 'notification'} hook of A trickling (deadline {DEADLINE}s): A's delivery "
        f"{lasted:.2f}s; B Deployed after {b_deployed:.2f}s, B's hook told after {b_told:.2f}s; run {ran:.2f}s"
    )
    # A's delivery is cut at its deadline, as before.
    assert lasted <= DEADLINE + 0.5, f"A's trickled delivery lasted {lasted:.1f}s, its deadline is {DEADLINE}s"
    a_status = read_tenant(clients, slow)["status"]
    if blocking:
        refusal = condition(read_tenant(clients, slow), "Hooks")
        assert refusal["message"] == f"blocking hook 'trickle' refused CREATE: no answer within {DEADLINE}s"
        assert a_status["state"] == "New"
    else:
        assert a_status["state"] == "Deployed"
        [pending] = a_status["hooks"]["pending"]
        assert pending["lastError"] == f"no answer within {DEADLINE}s"
    # B did not wait for it.
    assert deployed_at, "tenant B was not Deployed by the run"
    assert len(notified) == 1, f"B's hook was told {len(notified)} time(s)"
    assert b_deployed <= WITHIN, f"tenant B waited {b_deployed:.1f}s for A's trickling hook (deadline {DEADLINE}s)"
    assert b_told <= WITHIN, f"B's hook was told after {b_told:.1f}s, behind A's trickling hook"
    b_status = read_tenant(clients, quick)["status"]
    assert b_status["state"] == "Deployed" and b_status["hooks"]["pending"] == []
    assert condition(read_tenant(clients, quick), "Hooks")["reason"] == "HooksDelivered"
    # One run for both, each Tenant's result reported once.
    assert sorted(r["name"] for r in result["tenants"]) == [slow, quick]
    assert result["hook_requests"] == 2


def test_what_another_tenant_wrote_while_a_blocking_hook_was_asked_refuses_the_change_it_allowed(
    devenv, clients, listener, tenants
):
    """Tenants go on while one's blocking hook is asked: a namespace another tenant made meanwhile is seen again
    before the allowed change is written, so the change is refused as a spec (nothing written), never half-applied
    and failing on an object that is not its own. Whoever made the namespace first keeps it."""
    first = tenants()
    second = f"{first}-b"  # "<first>-b" + "work" and "<first>" + "b-work" name the same namespace
    tenants.names.append(second)
    shared = f"{first}-b-work"
    gate = {
        "name": "gate",
        "url": listener.url("/slow-gate"),
        "blockingCall": True,
        "eventTypes": ["CREATE"],
        "timeoutSeconds": DEADLINE,
    }
    tenants_api = clients["admin"].resources.get(api_version=TENANCY, kind="Tenant")
    tenants_api.create(body=manifest(first, [gate], children=("b-work",)))
    tenants_api.create(body=manifest(second, []))
    reconcile(devenv, [first, second])

    namespace = clients["admin"].resources.get(api_version="v1", kind="Namespace").get(name=shared).to_dict()
    owner = namespace["metadata"]["labels"]["tenancy.metalclaim.io/tenant"]
    loser = first if owner == second else second
    print(f"\nnamespace {shared} went to {owner}; {loser} refused")
    assert read_tenant(clients, owner)["status"]["state"] == "Deployed"
    refused = read_tenant(clients, loser)
    accepted = condition(refused, "Accepted")
    assert (refused["status"]["state"], accepted["status"], accepted["reason"]) == (
        "New",
        "False",
        NAMESPACE_OWNED_ELSEWHERE,
    ), refused["status"]
    assert not [c for c in refused["status"]["conditions"] if c.get("reason") == "ApplyFailed"]
    rolebindings = clients["admin"].resources.get(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding")
    made = rolebindings.get(label_selector=f"tenancy.metalclaim.io/tenant={loser}").items
    assert made == [], f"the refused tenant got RoleBindings: {[(i.metadata.namespace, i.metadata.name) for i in made]}"
