"""A booking far ahead starves nobody (issue 40), as the two tenants through the controller on the real API server.

Tenant A books the pool's only host for a window in 2099; tenant B's claim without a lease, created afterwards,
must get that host at once. Before the booking horizon it never did (`NoBareMetalHost`): a holder without a lease
blocks every window, so the booking kept the host from everyone for ever. Now a booking further ahead than the
host's policies take (`maxBookingAhead`) is not accepted: its claim says so, and the host stays in the pool.

An extension voids no booking (issue 40): tenant A, holding the host under a lease, extended it across tenant B's
accepted booking, and B's claim was never bound at its start. Now the extension is refused (`LeaseHostBooked`) and
A's lease keeps its end, before B's start.

Bounded bookings (issue 40): 673 bookings of tenant A on one host pushed its bookings annotation past the API
server's 256 KiB; the 422 failed every claim-side run, so tenant B's claim on a pool A cannot use was never bound.
Now one namespace holds at most `maxBookingsPerNamespace` (10 unless a policy says) on one infra namespace's hosts,
and a host whose write the API server refuses takes no booking in that run: only the claims that wanted it wait.
"""

from __future__ import annotations

import datetime
import time

import pytest

from metalclaim_dev.claimlayer import METAL3, TENANT_A, TENANT_B, stamp
from metalclaim_dev.controllerproc import ControllerProcess, associated, claim_side
from metalclaim_dev.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.minutes(3)]
REACTION = 60  # seconds: a run took ~10 s on a loaded 2-core machine


@pytest.fixture
def controller(devenv, rack, tmp_path):
    process = ControllerProcess(devenv, tmp_path, *claim_side(rack))
    yield process
    process.stop()


def condition(claim: dict, type_: str) -> dict:
    conditions = (claim.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def open_policy(rack, **spec) -> None:
    """The infra team's policy admitting every namespace to the rack's hosts, `spec` beside."""
    rack.api("admin", "HostDeployPolicy").create(
        body={
            "apiVersion": METAL3,
            "kind": "HostDeployPolicy",
            "metadata": {"name": "policy", "namespace": rack.namespace},
            "spec": {"hostclaimNamespaces": {}, **spec},
        }
    )


def lease_says(rack, controller, name: str, reason: str, namespace: str = TENANT_A) -> None:
    """Wait until the claim's Lease condition has `reason`."""
    eventually(
        lambda: condition(rack.read_claim(name, namespace), "Lease").get("reason") == reason,
        timeout=REACTION,
        message=f"{name}: {reason}\n{controller.output()}",
    )


def test_a_booking_in_2099_is_refused_and_another_tenant_gets_the_host(controller, rack):
    open_policy(rack, maxBookingAhead="48h")  # the field the CRD takes
    rack.host("only")
    rack.claim("far", lease={"start": "2099-01-01T00:00:00Z", "duration": "1h"})  # tenant A, as tenant-a
    lease_says(rack, controller, "far", "BookingTooFarAhead")
    far = rack.read_claim("far")
    lease = condition(far, "Lease")
    assert lease["status"] == "False"
    assert lease["message"].startswith("spec.lease.start is more than 48h0m0s ahead")
    assert rack.namespace not in lease["message"] and "only" not in lease["message"]  # tenant-safe
    assert condition(far, "Association")["reason"] == "BookingTooFarAhead"
    assert "booking" not in (far.get("status") or {})
    assert "metalclaim.io/bookings" not in (rack.read_host("only")["metadata"].get("annotations") or {})

    created = time.monotonic()
    rack.claim("now", namespace=TENANT_B, identity="tenant-b")  # tenant B, no lease
    eventually(
        lambda: condition(rack.read_claim("now", TENANT_B), "Association").get("status") == "True",
        timeout=REACTION,
        message=f"now: bound\n{controller.output()}",
    )
    print(f"\ntenant B's claim: create -> Association=True in {time.monotonic() - created:.2f} s")
    assert rack.read_host("only")["spec"]["consumerRef"]["namespace"] == TENANT_B
    assert not associated(rack, "far") and rack.read_claim("far")["metadata"]["namespace"] == TENANT_A


def test_an_extension_across_another_tenants_booking_is_refused(controller, rack):
    open_policy(rack)
    rack.host("only")
    rack.claim("holder", lease={"duration": "1h"})  # tenant A: bound now, until an hour from now
    eventually(lambda: associated(rack, "holder"), timeout=REACTION, message=f"holder bound\n{controller.output()}")
    end = rack.read_claim("holder")["status"]["lease"]["end"]
    start = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(hours=2)
    rack.claim(
        "booked",
        namespace=TENANT_B,
        identity="tenant-b",
        lease={"start": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "duration": "1h"},
    )
    lease_says(rack, controller, "booked", "Booked", TENANT_B)

    # Tenant A, as tenant-a, keeps the host for 5 hours: across B's window.
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": {"lease": {"duration": "5h"}}},
        name="holder",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    lease_says(rack, controller, "holder", "LeaseHostBooked")
    holder = rack.read_claim("holder")
    lease = condition(holder, "Lease")
    assert lease["status"] == "False" and f"still ends at {end}" in lease["message"], lease
    assert (
        rack.namespace not in lease["message"] and "only" not in lease["message"] and TENANT_B not in lease["message"]
    )
    assert holder["status"]["lease"]["end"] == end  # before B's start: the host is free for B's window
    assert associated(rack, "holder")  # the holder keeps its host until its end
    bookings = rack.read_host("only")["metadata"]["annotations"]["metalclaim.io/bookings"]
    assert rack.read_claim("booked", TENANT_B)["metadata"]["uid"] in bookings
    assert condition(rack.read_claim("booked", TENANT_B), "Lease").get("reason") == "Booked"


def annotations_size(host: dict) -> int:
    return sum(len(k) + len(v) for k, v in (host["metadata"].get("annotations") or {}).items())


def test_one_tenants_bookings_are_bounded_and_a_refused_host_fails_no_other_claim(controller, rack):
    open_policy(rack)  # no maxBookingsPerNamespace: 10
    rack.host("full", labels={"pool": "a"})
    rack.host("mine", labels={"pool": "a"})
    rack.host("other", labels={"pool": "b"})
    # The infra team's own notes fill "full" up to a few bytes below the API server's 256 KiB: any booking written
    # there is refused (422), as 673 bookings made it.
    room = 262144 - 60 - annotations_size(rack.read_host("full")) - len("infra.example/notes")
    rack.api("admin", "BareMetalHost").patch(
        body={"metadata": {"annotations": {"infra.example/notes": "x" * room}}},
        name="full",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    t0 = rack.server_now()
    pool_a = {"matchLabels": {"infra-kind": rack.kind, "pool": "a"}}
    names = [f"bk{index:02d}" for index in range(12)]  # tenant A, one window after another: every one fits a host
    for index, name in enumerate(names):
        start = t0 + datetime.timedelta(hours=1 + index)
        rack.claim(name, hostSelector=pool_a, lease={"start": stamp(start), "duration": "30m"})
    created = time.monotonic()
    rack.claim("now", namespace=TENANT_B, identity="tenant-b", hostSelector={"matchLabels": {"pool": "b"}})
    eventually(
        lambda: condition(rack.read_claim("now", TENANT_B), "Association").get("status") == "True",
        timeout=REACTION,
        message=f"now: bound\n{controller.output()}",
    )
    print(f"\ntenant B's claim beside a refused host: create -> Association=True in {time.monotonic() - created:.2f} s")

    def reasons() -> list:
        return [condition(rack.read_claim(name), "Lease").get("reason") for name in names]

    eventually(
        lambda: "" not in reasons() and None not in reasons(),
        timeout=REACTION,
        message=f"{reasons()}\n{controller.output()}",
    )
    by_reason: dict = {}
    for claim in map(rack.read_claim, names):
        by_reason.setdefault(condition(claim, "Lease")["reason"], []).append(claim)
    assert sorted((r, len(c)) for r, c in by_reason.items()) == [("Booked", 10), ("BookingLimitReached", 2)]

    def order(claim: dict) -> tuple:  # first come, first served: creation, then uid
        return claim["metadata"]["creationTimestamp"], claim["metadata"]["uid"]

    assert max(map(order, by_reason["Booked"])) < min(map(order, by_reason["BookingLimitReached"]))
    limited = by_reason["BookingLimitReached"][0]
    lease = condition(limited, "Lease")
    assert lease["status"] == "False" and "(10)" in lease["message"], lease
    assert rack.namespace not in lease["message"] and "mine" not in lease["message"]  # tenant-safe
    assert condition(limited, "Association")["reason"] == "BookingLimitReached"
    assert "metalclaim.io/bookings" not in rack.read_host("full")["metadata"]["annotations"]
    assert rack.read_host("mine")["metadata"]["annotations"]["metalclaim.io/bookings"].count('"uid"') == 10
