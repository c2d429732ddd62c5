"""Leases through the controller on the real API server: a leased claim's host is released at the lease's end
(as a deleted claim's: powered off, deprovisioned, cleaned), the claim stays with LeaseExpired and is never bound
again; a controller stopped before the end and started after it releases at once; policies cap leases.

Nobody runs a playbook and nothing polls: the controller wakes the claim at its lease's deadlines (the outcome's
`after`), with a resync period of an hour.
"""

from __future__ import annotations

import datetime
import time

import pytest

from metalclaim_dev.claimlayer import TENANT_A
from metalclaim_dev.controllerproc import ControllerProcess, associated, association, claim_side
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration
REACTION = 20  # seconds: a run is ~1-2 s of ansible-runner
LATENCY = 5.0  # seconds from a lease's end to its host released: 1.0-1.3 s measured, the rest is CI load


def options(rack) -> list[str]:
    """The claim side as config/manager deploys it: standby runs (a run starts in ~0.2 s, not ~1.3 s)."""
    return [*claim_side(rack), "--standby=true"]


@pytest.fixture
def controller(devenv, rack, tmp_path):
    process = ControllerProcess(devenv, tmp_path / "first", *options(rack))
    try:
        # Its standby run warm first: these tests time the claim layer's reactions, not the process's start (which a
        # loaded CI machine once stretched past REACTION).
        eventually(
            lambda: process.metric("metalclaim_standby_ready") == 1,
            timeout=90,
            message=f"the standby run ready\n{process.output()}",
        )
        yield process
    finally:
        process.stop()


def capped_policy(rack, cap: str) -> None:
    rack.api("admin", "HostDeployPolicy").create(
        body={
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostDeployPolicy",
            "metadata": {"name": "policy", "namespace": rack.namespace},
            "spec": {"hostclaimNamespaces": {}, "maxLeaseDuration": cap},
        }
    )


def condition(rack, name: str, type_: str) -> dict:
    status = rack.read_claim(name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def end_of(rack, name: str) -> float:
    text = rack.read_claim(name)["status"]["lease"]["end"]
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def consumer(rack, host: str):
    return rack.read_host(host)["spec"].get("consumerRef")


def events_of(rack, name: str) -> dict:
    """This claim's Events by reason: by its uid, since another test's claim of that name leaves its own Events."""
    uid = rack.read_claim(name)["metadata"]["uid"]
    found = rack.api("admin", "Event", "v1").get(namespace=TENANT_A, field_selector=f"involvedObject.uid={uid}")
    counts: dict = {}
    for event in found.items:
        counts[event.reason] = counts.get(event.reason, 0) + (event.count or 1)
    return counts


def wait_released(rack, host: str, timeout: float) -> float:
    """Poll the host until its consumerRef is gone; the wall time it was seen gone."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if consumer(rack, host) is None:
            return time.time()
        time.sleep(0.05)
    raise AssertionError(f"{host} not released within {timeout}s")


def test_a_leased_claim_is_released_at_its_end_and_stays_expired(controller, rack):
    rack.policy()
    rack.host("h1")
    rack.claim("c1", lease={"duration": "12s"})
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 bound\n{controller.output()}")
    lease = rack.read_claim("c1")["status"]["lease"]
    assert set(lease) == {"start", "end"}
    assert condition(rack, "c1", "Lease")["reason"] == "LeaseActive"
    end = end_of(rack, "c1")
    assert consumer(rack, "h1") is not None
    released = wait_released(rack, "h1", timeout=end - time.time() + REACTION)
    latency = released - end
    print(f"\nlease end -> host released: {latency:+.2f} s")
    assert 0 <= latency <= LATENCY, controller.output()

    host = rack.read_host("h1")
    assert host["spec"]["online"] is False and "image" not in host["spec"]
    assert host["spec"]["automatedCleaningMode"] == "metadata"

    def expired() -> bool:
        return condition(rack, "c1", "Lease").get("reason") == "LeaseExpired"

    eventually(expired, timeout=REACTION, message="LeaseExpired on c1")
    claim = rack.read_claim("c1")
    assert claim["status"]["lease"]["expired"] is True
    assert "hardwareData" not in claim["status"]
    assert association(rack, "c1") == "False"
    assert condition(rack, "c1", "Association")["reason"] == "LeaseExpired"
    assert "metal3.io/hostclaim" in claim["metadata"]["finalizers"]  # the claim stays
    eventually(lambda: events_of(rack, "c1").get("LeaseExpired") == 1, timeout=REACTION, message="one event")
    counts = events_of(rack, "c1")
    assert counts.get("LeaseEnding") == 1, counts
    assert counts.get("Released") == 1, counts

    # Never bound again, even extended and with the host free.
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": {"lease": {"duration": "1h"}}},
        name="c1",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    rack.claim("c2")  # a run that sees the free host
    eventually(lambda: associated(rack, "c2"), timeout=REACTION, message="c2 bound to the released host")
    assert condition(rack, "c1", "Lease")["reason"] == "LeaseExpired"


def test_a_controller_restarted_across_the_end_releases_at_once(devenv, rack, tmp_path):
    rack.policy()
    rack.host("h1")
    first = ControllerProcess(devenv, tmp_path / "first", *options(rack))
    try:
        rack.claim("c1", lease={"duration": "6s"})
        eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 bound\n{first.output()}")
    finally:
        first.stop()
    end = end_of(rack, "c1")
    time.sleep(max(0.0, end - time.time()) + 2)
    assert consumer(rack, "h1") is not None  # nobody released it while no controller ran
    second = ControllerProcess(devenv, tmp_path / "second", *options(rack))
    try:
        started = time.time()
        released = wait_released(rack, "h1", timeout=REACTION)
        print(
            f"\ncontroller ready -> host released: {released - started:.2f} s"
            f" (lease ended {started - end:.1f} s before)"
        )
        assert released - started <= 10, second.output()
        eventually(
            lambda: condition(rack, "c1", "Lease").get("reason") == "LeaseExpired",
            timeout=REACTION,
            message=second.output(),
        )
    finally:
        second.stop()


def test_an_extension_within_the_cap_moves_the_end_and_one_over_it_is_refused(controller, rack):
    capped_policy(rack, "1h")
    rack.host("h1")
    rack.claim("c1", lease={"duration": "30m"})
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 bound\n{controller.output()}")
    first_end = end_of(rack, "c1")
    claims = rack.api("tenant-a", "HostClaim")
    claims.patch(
        body={"spec": {"lease": {"duration": "50m"}}},
        name="c1",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    eventually(lambda: end_of(rack, "c1") == first_end + 20 * 60, timeout=REACTION, message="extended")
    claims.patch(
        body={"spec": {"lease": {"duration": "2h"}}},
        name="c1",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    eventually(
        lambda: condition(rack, "c1", "Lease").get("reason") == "LeaseOverCap",
        timeout=REACTION,
        message=controller.output(),
    )
    message = condition(rack, "c1", "Lease")["message"]
    assert "at most 1h0m0s" in message and rack.namespace not in message
    assert end_of(rack, "c1") == first_end + 20 * 60  # the end stays
    assert consumer(rack, "h1") is not None


def test_a_claim_over_the_cap_or_without_a_lease_is_not_bound(controller, rack):
    capped_policy(rack, "1h")
    rack.host("h1")
    rack.claim("long", lease={"duration": "2h"})
    rack.claim("none")
    for name, reason in (("long", "LeaseOverCap"), ("none", "LeaseRequired")):
        eventually(
            lambda name=name, reason=reason: condition(rack, name, "Association").get("reason") == reason,
            timeout=REACTION,
            message=f"{name}: {reason}\n{controller.output()}",
        )
        message = condition(rack, name, "Association")["message"]
        assert rack.namespace not in message and "h1" not in message
    assert consumer(rack, "h1") is None


def test_the_api_server_refuses_a_malformed_lease(rack):
    from kubernetes.client.exceptions import ApiException

    for lease in ({"duration": "1d"}, {"duration": "0s"}, {"duration": "1h", "end": "2030-01-01T00:00:00Z"}, {}):
        with pytest.raises(ApiException) as refused:
            rack.claim("bad", lease=lease)
        assert refused.value.status == 422, lease
