"""A Tenant's hooks and leases through the controller (claims and tenants sides) on the real API server: a lease
entering its warning is told (CLAIM_EXPIRING), its end too (CLAIM_EXPIRED, before CLAIM_RELEASED); a blocking
CLAIM_EXPIRED hook holds the end (the host stays bound, Lease=True LeaseExpiryHeld) until it allows it, or until the
Tenant's spec.leaseExpiryGrace has passed, when the host is released anyway. Nothing polls: the claim layer wakes at
the grace's end (the outcome's `after`) and when the hook's verdict lands on the namespace."""

from __future__ import annotations

import datetime
import time

import pytest

from metalclaim_dev.claimlayer import condition as claim_condition
from metalclaim_dev.support import eventually
from metalclaim_dev.tenancy import read_tenant, tenants_side
from tests.integration import test_tenant_hooks as hook_tests
from tests.integration.test_tenant_hooks import TENANCY, api, association, manifest

# The hook tests' fixtures: a hook server on 127.0.0.1, the controller identity as the tenants side, Tenant names.
server = hook_tests.server
tenancy_side = hook_tests.tenancy_side
tenants = hook_tests.tenants

pytestmark = pytest.mark.integration
REACTION = 30  # seconds: a run of each side, one after the other


def lease_reason(rack, name: str, namespace: str) -> str:
    claim = rack.read_claim(name, namespace=namespace)
    if not (claim.get("status") or {}).get("conditions"):
        return ""
    return (claim_condition(claim, "Lease") or {}).get("reason", "")


def lease_end(rack, name: str, namespace: str) -> float:
    text = rack.read_claim(name, namespace=namespace)["status"]["lease"]["end"]
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def released_at(rack, host: str, timeout: float) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not rack.read_host(host)["spec"].get("consumerRef"):
            return time.time()
        time.sleep(0.1)
    raise AssertionError(f"{host} not released within {timeout:.0f}s")


def deployed(clients, name: str) -> bool:
    return (read_tenant(clients, name).get("status") or {}).get("state") == "Deployed"


def test_a_blocking_expired_hook_holds_the_end_until_it_allows_it_and_the_end_is_told(
    devenv, clients, server, tenancy_side, tenants, rack, tmp_path
):
    name = tenants()
    rack.host("h1")
    server.answers["/gate"] = (503, b"backup running", {})
    hooks = [
        {
            "name": "told",
            "url": server.url("/told"),
            "eventTypes": ["CLAIM_EXPIRING", "CLAIM_EXPIRED", "CLAIM_RELEASED"],
        },
        {"name": "gate", "url": server.url("/gate"), "blockingCall": True, "eventTypes": ["CLAIM_EXPIRED"]},
    ]
    controller = tenants_side(devenv, tmp_path / "controller", rack.namespace)
    try:
        body = manifest(name, hooks, hostPools=[{"namespace": rack.namespace}], leaseExpiryGrace="10m")
        api(clients, "Tenant", TENANCY).create(body=body)
        eventually(lambda: deployed(clients, name), timeout=60, message="Deployed")
        namespace = f"{name}-work"
        rack.claim("c1", namespace=namespace, identity="admin", lease={"duration": "20s"})
        eventually(lambda: association(rack, "c1", namespace)[0] == "True", timeout=REACTION, message="bound")
        end = lease_end(rack, "c1", namespace)

        # The warning (2 s before the end) is told, and the gate asked about the end: it refuses.
        eventually(lambda: server.events("/told")[:1] == ["CLAIM_EXPIRING"], timeout=REACTION, message="EXPIRING")
        told = server.at("/told")[0]["body"]["claim"]
        assert told["hostName"] == "h1" and told["name"] == "c1" and told["leaseEnd"]
        eventually(lambda: server.events("/gate")[:1] == ["CLAIM_EXPIRED"], timeout=REACTION, message="gate asked")
        eventually(lambda: lease_reason(rack, "c1", namespace) == "LeaseExpiryHeld", timeout=REACTION, message="held")
        assert time.time() >= end

        def held_message() -> str:
            return claim_condition(rack.read_claim("c1", namespace=namespace), "Lease")["message"]

        # Held while the hooks are asked, then saying why: the hook's refusal, and until when at the latest.
        eventually(lambda: "backup running" in held_message(), timeout=REACTION, message="the refusal on the claim")
        assert "at the latest" in held_message()
        assert rack.read_host("h1")["spec"]["consumerRef"]["name"] == "c1"  # still the tenant's
        assert "CLAIM_EXPIRED" not in server.events("/told")

        # The gate allows it (asked again after its backoff): the host goes, the end and the release are told.
        server.answers["/gate"] = 200
        allowed = time.time()
        released = released_at(rack, "h1", timeout=REACTION + 10)
        print(f"\nblocking hook allows -> host released: {released - allowed:.1f} s (held {released - end:.1f} s)")
        eventually(
            lambda: server.events("/told") == ["CLAIM_EXPIRING", "CLAIM_EXPIRED", "CLAIM_RELEASED"],
            timeout=REACTION,
            message=f"told: {server.events('/told')}",
        )
        claim = rack.read_claim("c1", namespace=namespace)
        assert claim["status"]["lease"]["expired"] is True
        assert claim_condition(claim, "Lease")["reason"] == "LeaseExpired"
        # The verdict goes with the lease: nothing is left on the namespace to hold.
        eventually(
            lambda: (
                '"claims":{}'
                in (rack.api("admin", "Namespace", "v1").get(name=namespace).metadata.annotations or {}).get(
                    "tenancy.metalclaim.io/expiry-approvals", ""
                )
            ),
            timeout=REACTION,
            message="verdict dropped",
        )
    except BaseException:
        print(controller.output())
        raise
    finally:
        controller.stop()


def test_after_the_grace_the_host_is_released_anyway(devenv, clients, server, tenancy_side, tenants, rack, tmp_path):
    name = tenants()
    rack.host("h1")
    server.answers["/gate"] = (503, b"never", {})
    gate = {"name": "gate", "url": server.url("/gate"), "blockingCall": True, "eventTypes": ["CLAIM_EXPIRED"]}
    controller = tenants_side(devenv, tmp_path / "controller", rack.namespace)
    try:
        body = manifest(name, [gate], hostPools=[{"namespace": rack.namespace}], leaseExpiryGrace="8s")
        api(clients, "Tenant", TENANCY).create(body=body)
        eventually(lambda: deployed(clients, name), timeout=60, message="Deployed")
        namespace = f"{name}-work"
        rack.claim("c1", namespace=namespace, identity="admin", lease={"duration": "15s"})
        eventually(lambda: association(rack, "c1", namespace)[0] == "True", timeout=REACTION, message="bound")
        end = lease_end(rack, "c1", namespace)
        released = released_at(rack, "h1", timeout=end - time.time() + 8 + REACTION)
        print(f"\nlease end -> host released past a refusing hook: {released - end:+.1f} s (grace 8 s)")
        assert released >= end + 8 - 1, released - end  # server times are whole seconds
        assert released <= end + 8 + 10, released - end  # the grace, then a run; 10.7 s seen quiet, 14.2 s in CI
        assert server.events("/gate")  # it was asked, and refused all along
        claim = rack.read_claim("c1", namespace=namespace)
        eventually(lambda: lease_reason(rack, "c1", namespace) == "LeaseExpired", timeout=REACTION, message="expired")
        assert claim["status"]["lease"]["end"]
    except BaseException:
        print(controller.output())
        raise
    finally:
        controller.stop()
