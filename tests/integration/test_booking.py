"""Bookings ahead through two controllers on the real API server: 50 bookings over 10 hosts with overlapping windows,
created concurrently; no host is booked twice for overlapping windows, a booking is refused only when every host
is booked across its window, and every accepted booking binds at its start (within a second) to its booked host.

Clock-independent: the windows are placed from the API server's time (a fresh object's creationTimestamp), and the
binding times are those the API server wrote (the Bound Events' creationTimestamp). Both controllers run without
leader election while the bookings are decided, so their runs race on every booking. Nothing polls the claims to
make them bind: the controller wakes a booked claim at its start (the outcome's `after`), with a resync period of an
hour.
"""

from __future__ import annotations

import datetime
import itertools
import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import booking

from metalclaim_dev.claimlayer import TENANT_A, Rack, parse_time, stamp
from metalclaim_dev.controllerproc import ControllerProcess, claim_side
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration

HOSTS = 10
BOOKINGS = 50
LEAD = 30  # seconds from the server's time to the first possible start: the creates and the decisions
# Starts and ends on a grid of STEP seconds: the claims due at one instant (starting, and ending on the hosts they
# take) are woken together, in one run of each controller (a run, with ansible-runner's standby process, takes
# seconds on a loaded machine: one run per second would not keep up).
STEP = 10
STARTS = 2  # starts at LEAD, LEAD + STEP
LENGTHS = (3, 4)  # windows of 3 or 4 STEPs: longer than a run on a loaded machine
# Seconds from a start to its Bound Event: the target is 1 s (a run is ~1-2 s on a quiet machine); on a
# 2-core machine shared by several test sessions a run takes 6-15 s, so the bound asserted is the REACTION of the
# other controller tests, and the figures are printed (the report quotes them).
LATENCY = 20


@pytest.fixture(scope="module")
def fleet(devenv, clients, tmp_path_factory):
    """A rack of 10 hosts, a policy, and two claim-side controllers serving it (no leader election)."""
    rack = Rack(clients)
    rack.policy(maxBookingsPerNamespace=BOOKINGS)  # one namespace's 50: the race, not the limit, decides
    for index in range(HOSTS):
        rack.host(f"h{index}")
    base = tmp_path_factory.mktemp("booking")
    controllers = [
        ControllerProcess(devenv, base / name, *claim_side(rack), "--standby=true") for name in ("one", "two")
    ]
    yield rack, controllers
    for controller in controllers:
        controller.stop()
    rack.cleanup()


def lease_reason(claim: dict) -> str:
    conditions = (claim.get("status") or {}).get("conditions") or []
    return next((c["reason"] for c in conditions if c["type"] == "Lease"), "")


def test_fifty_bookings_over_ten_hosts_never_double_book_and_bind_at_their_start(fleet):
    rack, controllers = fleet
    t0 = rack.server_now()
    chance = random.Random(26)
    windows = {}
    for index in range(BOOKINGS):
        start = t0 + datetime.timedelta(seconds=LEAD + STEP * chance.randrange(STARTS))
        windows[f"b{index:02d}"] = (start, start + datetime.timedelta(seconds=STEP * chance.choice(LENGTHS)))
    bound_seen: dict = {}  # claim -> wall time a watch saw it bound (informational: the test's clock)
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for event in rack.api("admin", "HostClaim").watch(namespace=TENANT_A, timeout=5):
                obj = event["raw_object"]
                conditions = (obj.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Association" and c["status"] == "True" for c in conditions):
                    bound_seen.setdefault(obj["metadata"]["name"], time.time())
                if stop.is_set():
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def create(name: str) -> None:
        start, end = windows[name]
        rack.claim(name, lease={"start": stamp(start), "end": stamp(end)})

    with ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(create, sorted(windows)))
    claims = rack.api("admin", "HostClaim")

    def decided() -> list | None:
        items = [c for c in claims.get(namespace=TENANT_A).to_dict()["items"] if c["metadata"]["name"] in windows]
        reasons = [lease_reason(c) for c in items]
        return items if all(r in (booking.BOOKED, booking.BOOKING_CONFLICT) for r in reasons) else None

    items = eventually(decided, timeout=LEAD, interval=0.2, message=f"every booking decided\n{controllers[0].output()}")
    decided_at = time.time()
    hosts = rack.api("admin", "BareMetalHost").get(namespace=rack.namespace).to_dict()["items"]
    booked_on = {}  # claim -> host, from the hosts themselves
    for host in hosts:
        listed = json.loads((host["metadata"].get("annotations") or {}).get(booking.ANNOTATION) or "[]")
        spans = sorted((parse_time(e["start"]), parse_time(e["end"]), e["name"]) for e in listed)
        for (_s, end, first), (start, _e, second) in itertools.pairwise(spans):
            assert end <= start, f"{host['metadata']['name']} booked twice: {first} and {second}"
        for entry in listed:
            assert entry["name"] not in booked_on, f"{entry['name']} booked on two hosts"
            booked_on[entry["name"]] = host["metadata"]["name"]
            assert (parse_time(entry["start"]), parse_time(entry["end"])) == windows[entry["name"]]
    accepted = {c["metadata"]["name"] for c in items if lease_reason(c) == booking.BOOKED}
    assert accepted == set(booked_on)
    assert 0 < len(accepted) < BOOKINGS  # the windows overlap: some fit, some do not
    spans_of = {
        h: [windows[n] for n, on in booked_on.items() if on == h] for h in {h["metadata"]["name"] for h in hosts}
    }
    for claim in items:
        name = claim["metadata"]["name"]
        start, end = windows[name]
        if name in accepted:
            assert claim["status"]["booking"] == {"start": stamp(start), "end": stamp(end)}
        else:  # refused only when every host is booked across some part of its window
            assert all(any(s < end and start < e for s, e in spans) for spans in spans_of.values()), name
        seen = json.dumps(claim["status"])
        assert rack.namespace not in seen and '"h' not in seen, seen

    # The race is decided; the bindings are timed with one controller (two would each run every wake, doubling the
    # load of a 2-core machine; a binding race is test_bind's).
    controllers[1].stop()
    uids = {c["metadata"]["name"]: c["metadata"]["uid"] for c in items if c["metadata"]["name"] in accepted}
    last_start = max(windows[name][0] for name in accepted)
    bound: dict = {}

    def all_bound() -> bool:
        events = rack.api("admin", "Event", "v1").get(namespace=TENANT_A, field_selector="reason=Bound")
        for event in events.items:
            if uids.get(event.involvedObject.name) == event.involvedObject.uid:  # this claim's, not a namesake's
                bound[event.involvedObject.name] = (parse_time(event.metadata.creationTimestamp), event.message)
        return accepted <= set(bound)

    wait = (last_start - t0).total_seconds() - (decided_at - t0.timestamp()) + 15
    try:
        eventually(all_bound, timeout=max(wait, 15), interval=0.5, message="every accepted booking bound")
    except AssertionError:
        for name in sorted(accepted - set(bound)):
            status = claims.get(name=name, namespace=TENANT_A).to_dict().get("status") or {}
            print(name, windows[name][0], [(c["type"], c["reason"]) for c in status.get("conditions") or []])
        raise
    stop.set()
    lateness, woken = {}, {}
    for name in sorted(accepted):
        when, message = bound[name]
        lateness[name] = (when - windows[name][0]).total_seconds()
        assert message.endswith(f"/{booked_on[name]}"), (name, message, booked_on[name])
        lease = claims.get(name=name, namespace=TENANT_A).to_dict()["status"]["lease"]
        woken[name] = (parse_time(lease["start"]) - windows[name][0]).total_seconds()
    wall = sorted(bound_seen[n] - windows[n][0].timestamp() for n in accepted if n in bound_seen)
    print(
        f"\n{len(accepted)} of {BOOKINGS} bookings accepted over {HOSTS} hosts"
        f"\nbooking start -> the binding run's time (status.lease.start): {sorted(woken.values())}"
        f"\nbooking start -> Bound Event (API server, whole seconds): {sorted(lateness.values())}"
    )
    if wall:
        median = wall[len(wall) // 2]
        print(f"booking start -> bound seen by a watch (test clock): median {median:.2f} s, max {wall[-1]:.2f} s")
    assert {n: s for n, s in lateness.items() if s < 0} == {}  # never bound before its start (API server's times)
    assert {n: s for n, s in woken.items() if s < 0} == {}  # nor by a run that began before it
    assert {n: s for n, s in lateness.items() if s > LATENCY} == {}
