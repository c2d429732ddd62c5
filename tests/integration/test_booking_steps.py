"""Bookings ahead, run by run on the real API server: first come, first served; a second run writes nothing; a booked
claim binds at its start to its booked host and not before; hosts held without a lease block a window; concurrent runs
never book a host twice and agree with the order; the tenant never reads a host's name or namespace; the CRD refuses a
start without a window.

Runs call hostclaim_reconcile's code in this process as the controller identity, each with a timestamp taken from
the API server's own times (a claim's creationTimestamp, plus offsets): no assertion reads the test's clock.
"""

from __future__ import annotations

import datetime
import itertools
import json
import threading
import time

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.reconcile import reconcile_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import booking
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A, condition, parse_time, stamp

pytestmark = pytest.mark.integration

WRITES = ("create", "replace", "patch", "delete")


def reconcile(devenv, rack, at: datetime.datetime, claims: list | None = None) -> dict:
    """One hostclaim_reconcile run over `claims` (default: the rack's) whose time is `at`."""
    wanted = claims if claims is not None else rack.claim_args()
    run = ClaimRun(Kube({"kubeconfig": devenv.kubeconfig("controller")}), wanted, stamp(at), False)
    return run.finish(reconcile_claims(run))


def writes(result: dict) -> int:
    return sum(n for verb, n in result["api_calls"].items() if verb in WRITES)


def book(rack, name: str, start: datetime.datetime, seconds: int, **spec) -> None:
    rack.claim(name, lease={"start": stamp(start), "duration": f"{seconds}s"}, **spec)


def bookings(rack) -> dict:
    """host name -> its bookings [(claim name, start, end)]."""
    found = {}
    for host in rack.api("admin", "BareMetalHost").get(namespace=rack.namespace).to_dict()["items"]:
        text = (host["metadata"].get("annotations") or {}).get(booking.ANNOTATION)
        found[host["metadata"]["name"]] = [(e["name"], e["start"], e["end"]) for e in json.loads(text or "[]")]
    return found


def lease_reason(rack, name: str) -> str:
    return condition(rack.read_claim(name), "Lease")["reason"]


def tenant_visible(rack, name: str) -> str:
    """Everything of the claim and its Events the tenant can read, as text."""
    claim = rack.api("tenant-a", "HostClaim").get(name=name, namespace=TENANT_A).to_dict()
    events = rack.api("tenant-a", "Event", "v1").get(namespace=TENANT_A, field_selector=f"involvedObject.name={name}")
    uid = claim["metadata"]["uid"]  # this claim's Events, not those of an earlier claim of that name
    messages = [e.message for e in events.items if e.involvedObject.uid == uid]
    return json.dumps(claim.get("status")) + json.dumps(messages)


def test_first_come_first_served_then_idempotent_then_bound_at_the_start(devenv, rack):
    rack.policy()
    rack.host("h1")
    rack.host("h2")
    t0 = rack.server_now()
    at = t0 + datetime.timedelta(seconds=100)
    book(rack, "a", at, 100)  # [100, 200)
    time.sleep(1.05)  # three creation seconds: the order is the API server's, not the uids'
    book(rack, "b", at + datetime.timedelta(seconds=50), 100)  # [150, 250)
    time.sleep(1.05)
    book(rack, "c", at + datetime.timedelta(seconds=20), 60)  # [120, 180): overlaps both
    first = reconcile(devenv, rack, t0)
    assert first["booking"]["host_writes"] >= 2, first["booking"]  # the run books every claim it sees: others' too
    found = bookings(rack)
    assert [e[0] for e in found["h1"]] == ["a"] and [e[0] for e in found["h2"]] == ["b"], found
    for name, reason in (("a", "Booked"), ("b", "Booked"), ("c", "BookingConflict")):
        assert lease_reason(rack, name) == reason, rack.read_claim(name)["status"]
        assert condition(rack.read_claim(name), "Association")["reason"] == reason
    assert rack.read_claim("a")["status"]["booking"] == {"start": stamp(at), "end": stamp(at + (at - t0))}
    assert "booking" not in rack.read_claim("c")["status"]
    for name in ("a", "b", "c"):
        seen = tenant_visible(rack, name)
        assert rack.namespace not in seen and "h1" not in seen and "h2" not in seen, seen
    outcomes = {o["name"]: o for o in first["outcomes"]}
    assert outcomes["a"]["after"] == pytest.approx(100, abs=3)  # woken at its start, whatever else happens

    again = reconcile(devenv, rack, t0)
    assert writes(again) == 0, again["api_calls"]
    assert rack.read_host("h1")["spec"].get("consumerRef") is None

    # b gives up its booking: the next run books c on the host b left, the older claim a untouched.
    rack.api("tenant-a", "HostClaim").delete(name="b", namespace=TENANT_A)
    reconcile(devenv, rack, t0 + datetime.timedelta(seconds=1))
    assert {h: [e[0] for e in found] for h, found in bookings(rack).items()} == {"h1": ["a"], "h2": ["c"]}
    assert lease_reason(rack, "c") == "Booked"

    # A second before a's start: not bound; at it: bound to its booked host, the lease ending with the window.
    reconcile(devenv, rack, at - datetime.timedelta(seconds=1))
    assert rack.read_host("h1")["spec"].get("consumerRef") is None
    reconcile(devenv, rack, at)
    assert rack.read_host("h1")["spec"]["consumerRef"]["name"] == "a"
    status = rack.read_claim("a")["status"]
    assert condition(rack.read_claim("a"), "Association")["status"] == "True"
    assert status["lease"] == {"start": stamp(at), "end": stamp(at + datetime.timedelta(seconds=100))}


def test_claims_without_a_lease_block_a_window_and_never_take_a_booked_host(devenv, rack):
    rack.policy()
    rack.host("h1")
    rack.host("h2")
    t0 = rack.server_now()
    book(rack, "ahead", t0 + datetime.timedelta(seconds=300), 60)
    reconcile(devenv, rack, t0)
    booked = next(h for h, found in bookings(rack).items() if found)
    other = "h2" if booked == "h1" else "h1"
    rack.claim("forever")  # no lease: it would hold a host for ever
    rack.claim("short", lease={"duration": "60s"})  # ends before the booking starts: may use a booked host
    reconcile(devenv, rack, t0)
    assert rack.read_host(other)["spec"]["consumerRef"]["name"] == "forever"
    assert rack.read_host(booked)["spec"]["consumerRef"]["name"] == "short"
    # Both hosts held now: one for ever, one until its lease's end. A booking after that end fits; one across it
    # does not, and the host held for ever blocks every window.
    book(rack, "after", t0 + datetime.timedelta(seconds=120), 60)
    book(rack, "across", t0 + datetime.timedelta(seconds=30), 60)
    reconcile(devenv, rack, t0)
    assert lease_reason(rack, "after") == "Booked"
    assert lease_reason(rack, "across") == "BookingConflict"
    assert [e[0] for e in bookings(rack)[other]] == []
    message = condition(rack.read_claim("across"), "Lease")["message"]
    assert "spec.hostSelector" in message and rack.namespace not in message


def test_concurrent_runs_never_book_twice_and_agree_with_the_order(devenv, rack):
    rack.policy(maxBookingsPerNamespace=24)  # one namespace's 24: the race, not the limit, decides
    for index in range(3):
        rack.host(f"h{index}")
    t0 = rack.server_now()
    names = [f"b{index:02d}" for index in range(24)]
    for index, name in enumerate(names):  # windows of 40 s, starts 10 s apart: each overlaps three others
        book(rack, name, t0 + datetime.timedelta(seconds=100 + 10 * (index % 12)), 40)
    everyone = rack.claim_args()
    errors: list = []

    def one(part: list) -> None:
        try:
            reconcile(devenv, rack, t0, part)
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=one, args=(everyone[index::4],)) for index in range(4)]
    threads += [threading.Thread(target=one, args=(everyone,))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    found = bookings(rack)
    entries = [(host, *entry) for host, listed in found.items() for entry in listed]
    assert len({e[1] for e in entries}) == len(entries), "a claim booked twice"
    for host, listed in found.items():
        windows = sorted((parse_time(s), parse_time(e)) for _n, s, e in listed)
        for (_s1, end), (start, _e2) in itertools.pairwise(windows):
            assert end <= start, f"{host}: overlapping bookings {listed}"
    # The same decisions as one run deciding them all in order (every claim existed before the runs).
    claims = [rack.read_claim(name) for name in names]
    bare = [{"metadata": {"namespace": rack.namespace, "name": h}, "spec": {}, "status": {}} for h in sorted(found)]
    expected = booking.plan(
        claims, bare, lambda claim: [(rack.namespace, h) for h in found], t0, allowed={rack.namespace: 24}
    )
    decided = {d.claim["metadata"]["name"]: d.host[1] if d.host else None for d in expected.decisions}
    actual = {name: next((e[0] for e in entries if e[1] == name), None) for name in names}
    assert actual == decided
    settled = reconcile(devenv, rack, t0)
    assert settled["booking"]["host_writes"] == 0
    for name in names:
        assert lease_reason(rack, name) == ("Booked" if decided[name] else "BookingConflict")


def test_the_api_server_refuses_a_start_without_a_window(rack):
    for lease in (
        {"start": "2030-01-01T00:00:00Z"},
        {"start": "2030-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
        {"start": "2030-01-01T01:00:00Z", "end": "2030-01-01T00:00:00Z"},
        {"start": "tomorrow", "duration": "1h"},
    ):
        with pytest.raises(ApiException) as refused:
            rack.claim("bad", lease=lease)
        assert refused.value.status == 422, lease
        assert "spec.lease" in refused.value.body


def test_a_tenant_can_neither_forge_a_booking_nor_read_where_it_is(devenv, rack):
    rack.policy()
    rack.host("h1")
    t0 = rack.server_now()
    book(rack, "mine", t0 + datetime.timedelta(seconds=300), 60)
    reconcile(devenv, rack, t0)
    assert lease_reason(rack, "mine") == "Booked"
    forged = {booking.ANNOTATION: json.dumps([{"uid": "x", "namespace": TENANT_A, "name": "mine"}])}
    attempts = {
        "write status.booking": lambda: rack.api("tenant-a", "HostClaim").status.patch(
            body={"status": {"booking": {"start": stamp(t0), "end": stamp(t0)}}},
            name="mine",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        ),
        "read the host": lambda: rack.api("tenant-a", "BareMetalHost").get(name="h1", namespace=rack.namespace),
        "list hosts": lambda: rack.api("tenant-a", "BareMetalHost").get(namespace=rack.namespace),
        "annotate the host": lambda: rack.api("tenant-a", "BareMetalHost").patch(
            body={"metadata": {"annotations": forged}},
            name="h1",
            namespace=rack.namespace,
            content_type="application/merge-patch+json",
        ),
    }
    refused = {}
    for what, attempt in attempts.items():
        with pytest.raises(ApiException) as error:
            attempt()
        refused[what] = error.value.status
    assert set(refused.values()) == {403}, refused
    assert [e[0] for e in bookings(rack)["h1"]] == ["mine"]
