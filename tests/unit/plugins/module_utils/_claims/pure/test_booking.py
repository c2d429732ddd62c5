# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import datetime
import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, booking, lease, reuse
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.outcomes import claim_outcomes

T0 = datetime.datetime(2030, 1, 1, 10, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return lease.format_time(at(seconds))


def claim(name, start=None, duration=None, end=None, created=0, uid=None, status=None, **spec):
    spec_lease = {}
    if start is not None:
        spec_lease["start"] = stamp(start)
    if duration is not None:
        spec_lease["duration"] = f"{duration}s"
    if end is not None:
        spec_lease["end"] = stamp(end)
    if spec_lease:
        spec["lease"] = spec_lease
    meta = {"namespace": "t", "name": name, "uid": uid or f"u-{name}", "creationTimestamp": stamp(created)}
    return {"metadata": meta, "spec": spec, "status": status or {}}


def host(name, entries=(), consumer=None, **meta):
    annotations = dict(meta.pop("annotations", {}))
    if entries:
        annotations[booking.ANNOTATION] = booking.encoded(list(entries))
    spec = {"consumerRef": consumer} if consumer else {}
    return {
        "metadata": {"namespace": "infra", "name": name, "uid": f"h-{name}", "annotations": annotations, **meta},
        "spec": spec,
        "status": {"provisioning": {"state": "available"}, "poweredOn": False},
    }


def entry(of: dict, start: float, end: float) -> booking.Entry:
    return booking.Entry(of["metadata"]["uid"], "t", of["metadata"]["name"], booking.Window(at(start), at(end)))


def every(hosts):
    return lambda _claim: [binding.key(h) for h in hosts]


def where(planned: booking.Plan) -> dict:
    return {d.claim["metadata"]["name"]: (d.state, d.host[1] if d.host else None) for d in planned.decisions}


def test_a_window_is_start_to_end_or_start_plus_duration():
    assert booking.requested(claim("c", start=100, duration=60)) == booking.Window(at(100), at(160))
    assert booking.requested(claim("c", start=100, end=400)) == booking.Window(at(100), at(400))
    assert booking.requested(claim("c", duration=60)) is None
    with pytest.raises(lease.LeaseError, match=r"spec\.lease\.start needs"):
        booking.requested({"metadata": {}, "spec": {"lease": {"start": stamp(0)}}})
    with pytest.raises(lease.LeaseError, match=r"after spec\.lease\.start"):
        booking.requested(claim("c", start=100, end=100))


def test_a_bookings_duration_counts_from_its_start_not_the_binding():
    wanted = lease.asked(claim("c", start=100, duration=60))
    assert wanted.end_from(at(101)) == at(160)  # bound a second late: the window's end still
    started = lease.started(claim("c", start=100, duration=60), at(101))
    assert started.lease_status == {"start": stamp(101), "end": stamp(160)}


def test_an_unbound_booking_whose_window_passed_expires():
    found = lease.decide(claim("c", start=100, duration=60), False, None, at(160))
    assert found.state == lease.EXPIRED
    pending = lease.decide(claim("c", start=100, duration=60), False, None, at(50))
    assert pending.state == lease.UNBOUND and pending.after == 110


def test_first_come_first_served_by_creation_then_uid():
    hosts = [host("h1")]
    late = claim("late", start=100, duration=100, created=5)
    early = claim("early", start=150, duration=100, created=1)
    planned = booking.plan([late, early], hosts, every(hosts), T0)
    assert where(planned) == {"early": ("booked", "h1"), "late": ("conflict", None)}
    tie_a = claim("x", start=100, duration=10, created=1, uid="a")
    tie_b = claim("y", start=100, duration=10, created=1, uid="b")
    assert where(booking.plan([tie_b, tie_a], hosts, every(hosts), T0))["x"] == ("booked", "h1")


def test_windows_that_touch_do_not_overlap_and_the_first_host_by_name_is_taken():
    hosts = [host("h2"), host("h1")]
    first = claim("first", start=100, duration=100, created=1)
    second = claim("second", start=200, duration=100, created=2)
    third = claim("third", start=150, duration=10, created=3)
    planned = booking.plan([first, second, third], hosts, every(hosts), T0)
    assert where(planned) == {"first": ("booked", "h1"), "second": ("booked", "h1"), "third": ("booked", "h2")}
    written = json.loads(planned.writes[("infra", "h1")])
    assert [e["name"] for e in written] == ["first", "second"]
    assert written[0] == {"uid": "u-first", "namespace": "t", "name": "first", "start": stamp(100), "end": stamp(200)}


def test_a_plan_is_stable_a_second_plan_writes_nothing():
    hosts = [host("h1"), host("h2")]
    claims = [claim(f"c{i}", start=100 + 10 * i, duration=35, created=i) for i in range(8)]
    planned = booking.plan(claims, hosts, every(hosts), T0)
    applied = [
        host(h["metadata"]["name"], annotations={booking.ANNOTATION: planned.writes[binding.key(h)]})
        if binding.key(h) in planned.writes
        else h
        for h in hosts
    ]
    again = booking.plan(claims, applied, every(applied), T0)
    assert again.writes == {}
    assert where(again) == {k: v for k, v in where(planned).items()}
    assert not any(d.newly for d in again.decisions)


def test_a_host_held_without_a_lease_blocks_every_window_one_with_a_lease_until_its_end():
    forever = claim("forever")
    leased = claim("leased", status={"lease": {"start": stamp(0), "end": stamp(300)}})
    hosts = [
        host("h1", consumer={"kind": "HostClaim", "namespace": "t", "name": "forever"}),
        host("h2", consumer={"kind": "HostClaim", "namespace": "t", "name": "leased"}),
    ]
    before = claim("before", start=200, duration=200, created=1)
    after = claim("after", start=300, duration=100, created=2)
    planned = booking.plan([forever, leased, before, after], hosts, every(hosts), T0)
    assert where(planned) == {"before": ("conflict", None), "after": ("booked", "h2")}
    message = next(d.message for d in planned.decisions if d.state == "conflict")
    assert "h1" not in message and "infra" not in message and "spec.hostSelector" in message


def test_bookings_of_gone_changed_passed_or_doubled_claims_are_dropped():
    kept = claim("kept", start=100, duration=100, created=1)
    moved = claim("moved", start=500, duration=100, created=2)
    gone = claim("gone", start=300, duration=10)
    deleting = claim("deleting", start=320, duration=10)
    deleting["metadata"]["deletionTimestamp"] = stamp(0)
    done = claim("done", start=-100, duration=50)
    h1 = host(
        "h1",
        [entry(kept, 100, 200), entry(moved, 200, 300), entry(gone, 300, 310), entry(deleting, 320, 330)],
    )
    h2 = host("h2", [entry(kept, 100, 200), entry(done, -100, -50)])
    unsure = booking.plan([kept, moved, deleting, done], [h1, h2], every([h1, h2]), T0)
    assert unsure.unknown == {("u-gone", "t", "gone")}  # not in the list: maybe newer than it, kept until read
    assert "gone" in [e["name"] for e in json.loads(unsure.writes[("infra", "h1")])]
    planned = booking.plan([kept, moved, deleting, done], [h1, h2], every([h1, h2]), T0, gone={"u-gone"})
    after_h1 = [e["name"] for e in json.loads(planned.writes[("infra", "h1")])]
    assert after_h1 == ["kept", "moved"]  # moved: re-booked on the first free host, h1 again
    assert json.loads(planned.writes[("infra", "h1")])[1]["start"] == stamp(500)
    assert planned.writes[("infra", "h2")] is None  # the doubled booking and the passed one gone
    assert where(planned)["kept"] == ("booked", "h1")


def test_only_candidates_bookable_and_readable_hosts_are_booked():
    c = claim("c", start=100, duration=10)
    paused = host("h1", annotations={"baremetalhost.metal3.io/paused": ""})
    broken = host("h2", annotations={booking.ANNOTATION: "not json"})
    elsewhere = host("h3")
    fine = host("h4")
    hosts = [paused, broken, elsewhere, fine]
    planned = booking.plan([c], hosts, lambda _c: [("infra", "h1"), ("infra", "h2"), ("infra", "h4")], T0)
    assert where(planned) == {"c": ("booked", "h4")}
    assert ("infra", "h2") not in planned.writes  # an unreadable annotation is never rewritten
    with pytest.raises(booking.Unreadable):
        booking.entries(broken)
    assert not booking.may_take(claim("other"), T0)(broken)


def test_a_started_booking_not_booked_is_an_ordinary_claim_and_invalid_ones_are_said():
    started = claim("started", start=-10, duration=100)
    bad = claim("bad")
    bad["spec"]["lease"] = {"start": "tomorrow", "duration": "1h"}
    planned = booking.plan([started, bad], [host("h1")], every([host("h1")]), T0)
    states = where(planned)
    assert states == {"started": ("started", None), "bad": ("invalid", None)}
    invalid = next(d for d in planned.decisions if d.state == "invalid")
    assert invalid.conditions()[0][:3] == ("Lease", "False", lease.LEASE_INVALID)
    assert "spec.lease" in invalid.conditions()[0][3]


def test_may_take_keeps_booked_hosts_for_their_bookings():
    ahead = claim("ahead", start=100, duration=100)
    h1 = host("h1", [entry(ahead, 100, 200)])
    assert booking.may_take(ahead, at(100))(h1)
    assert not booking.may_take(claim("forever"), T0)(h1)  # would hold it across the booking
    assert not booking.may_take(claim("long", duration=101), T0)(h1)
    assert booking.may_take(claim("short", duration=100), T0)(h1)  # ends as the booking starts
    assert booking.may_take(claim("later", start=200, duration=10), at(200))(h1)
    assert booking.may_take(claim("anything"), T0)(host("h2"))


def test_binding_plan_holds_a_booking_until_its_start_then_takes_only_its_host():
    ahead = claim("ahead", start=100, duration=100, hostSelector={})
    h1 = host("h1", [entry(ahead, 100, 200)])
    h2 = host("h2")
    before = binding.plan(ahead, [h2, h1], ["infra"], now=at(99))
    assert (before.action, before.reason) == ("refuse", booking.BOOKED)
    assert "h1" not in before.message and "infra" not in before.message
    at_start = binding.plan(ahead, [h2, h1], ["infra"], now=at(100))
    assert at_start.action == "bind" and [binding.key(h) for h in at_start.candidates] == [("infra", "h1")]
    unbooked = claim("unbooked", start=100, duration=100, hostSelector={})
    refused = binding.plan(unbooked, [h2, h1], ["infra"], now=at(50))
    assert (refused.action, refused.reason) == ("refuse", booking.BOOKING_CONFLICT)
    plain = binding.plan(claim("plain", hostSelector={}), [h1, h2], ["infra"], now=T0)
    assert [binding.key(h) for h in plain.candidates] == [("infra", "h2")]


def test_the_booking_steps_after_wakes_the_claim_at_its_start():
    result = {
        "booking": {"claims": [{"namespace": "t", "name": "c", "booking": "booked", "after": 42.0, "changed": True}]},
        "bind": {"claims": [{"namespace": "t", "name": "c", "action": "refuse", "host": None, "reason": "Booked"}]},
    }
    (outcome,) = claim_outcomes(result)
    assert outcome["result"] == "wait" and outcome["after"] == 42.0


def test_a_passed_window_alone_is_no_reason_to_write_a_host():
    done = claim("done", start=-100, duration=50)
    later = claim("later", start=100, duration=50)
    h1 = host("h1", [entry(done, -100, -50), entry(later, 100, 150)])
    assert booking.plan([done, later], [h1], every([h1]), T0).writes == {}
    gone = host("h1", [entry(done, -100, -50), entry(claim("gone"), 100, 150)])
    assert booking.plan([done], [gone], every([gone]), T0, gone={"u-gone"}).writes == {("infra", "h1"): None}


def test_a_host_held_for_node_reuse_is_booked_only_by_the_holds_own_claims_while_it_lasts():
    released = claim("released", created=0, nodeReuse={"key": "md-0"})
    held = reuse.held(host("h1"), released, reuse.Offer(600, True), T0, "ns-uid-t")[0]  # until at(600), t/md-0
    other = claim("other", start=100, duration=100, created=1)
    planned = booking.plan([other], [held], every([held]), T0)
    assert where(planned) == {"other": ("conflict", None)}  # its window overlaps the hold: never the held host
    after_hold = claim("after", start=700, duration=100, created=2)
    assert where(booking.plan([after_hold], [held], every([held]), T0)) == {"after": ("booked", "h1")}
    same_key = claim("next", start=100, duration=100, created=3, nodeReuse={"key": "md-0"})
    assert where(booking.plan([same_key], [held], every([held]), T0)) == {"next": ("booked", "h1")}


DAY = 24 * 3600


def test_a_booking_beyond_the_horizon_is_not_accepted_and_the_host_stays_free():
    """Issue 40: a booking starting in 2099 took the pool's only host from every claim without a lease (whose
    holding blocks every window) for ever. Past its host's horizon a booking is not accepted; it is decided again
    when its start comes within reach, and meanwhile another claim binds the host."""
    far = claim("far", start=70 * 365 * DAY, duration=3600)
    pool = [host("h1")]
    planned = booking.plan([far], pool, every(pool), T0)
    (decision,) = planned.decisions
    assert decision.state == "too_far" and planned.writes == {}
    assert decision.retry_at == at(70 * 365 * DAY - booking.DEFAULT_AHEAD)
    assert decision.conditions() == [(lease.LEASE, "False", booking.BOOKING_TOO_FAR, decision.message)]
    assert "more than 168h0m0s ahead" in decision.message and "infra" not in decision.message
    assert booking.may_take(claim("b"), T0)(pool[0])  # nothing booked: a claim without a lease may take it
    near = booking.plan([far], pool, every(pool), at(70 * 365 * DAY - booking.DEFAULT_AHEAD))
    assert where(near) == {"far": ("booked", "h1")}  # within reach: booked, first come as ever


def test_the_horizon_is_the_largest_of_the_hosts_policies_and_one_unreadable_takes_none():
    policies = [
        {"metadata": {"namespace": "infra"}, "spec": {"maxBookingAhead": "1h"}},
        {"metadata": {"namespace": "infra"}, "spec": {"maxBookingAhead": "2h"}},
        {"metadata": {"namespace": "other"}, "spec": {}},
        {"metadata": {"namespace": "broken"}, "spec": {"maxBookingAhead": "soon"}},
    ]
    assert booking.horizons(policies) == {"infra": 7200, "other": booking.DEFAULT_AHEAD, "broken": 0}
    reach = {"infra": 7200}
    pool = [host("h1")]
    inside, outside = claim("inside", start=7200, duration=60), claim("outside", start=7201, duration=60, created=1)
    planned = booking.plan([inside, outside], pool, every(pool), T0, reach=reach)
    assert where(planned) == {"inside": ("booked", "h1"), "outside": ("too_far", None)}


def test_an_accepted_booking_beyond_its_hosts_horizon_is_dropped():
    """One accepted before the horizon (or the policy lowered since) gives the host back to everyone."""
    far = claim("far", start=30 * DAY, duration=3600)
    pool = [host("h1", entries=[entry(far, 30 * DAY, 30 * DAY + 3600)])]
    planned = booking.plan([far], pool, every(pool), T0)
    assert where(planned) == {"far": ("too_far", None)}
    assert planned.writes == {("infra", "h1"): None}


def test_booked_from_is_the_earliest_other_booking_still_to_come():
    holder, b, c = claim("a", duration=3600), claim("b", start=7200, duration=600), claim("c", start=3600, duration=60)
    found = host("h0", [entry(b, 7200, 7800), entry(c, 3600, 3660), entry(holder, 0, 3600)])
    assert booking.booked_from(found, holder, at(0)) == at(3600)
    assert booking.booked_from(found, holder, at(3700)) == at(7200)  # c's window has passed
    assert booking.booked_from(host("h1"), holder, at(0)) is None
    torn = host("h2", annotations={booking.ANNOTATION: "{not json"})
    assert booking.booked_from(torn, holder, at(5)) == at(5)


def test_one_namespace_holds_at_most_its_limit_of_bookings_and_the_rest_wait_their_turn():
    """Issue 40: 673 bookings of one tenant pushed a host's annotation past the API server's 256 KiB and failed every
    run. A namespace holds at most its limit of bookings still to start on one infra namespace's hosts; the next
    ones say BookingLimitReached (tenant-safe) and are decided again, first come, once one has started."""
    wanted = [claim(f"c{i:02}", start=3600 * (i + 1), duration=600, created=i) for i in range(12)]
    pool = [host("h1")]
    planned = booking.plan(wanted, pool, every(pool), T0)
    states = [d.state for d in sorted(planned.decisions, key=lambda d: d.claim["metadata"]["name"])]
    assert states == ["booked"] * booking.DEFAULT_PER_NAMESPACE + ["limit"] * 2
    limited = next(d for d in planned.decisions if d.state == "limit")
    assert limited.conditions() == [(lease.LEASE, "False", booking.BOOKING_LIMIT, limited.message)]
    assert "(10)" in limited.message and "infra" not in limited.message and "h1" not in limited.message
    assert len(json.loads(planned.writes[("infra", "h1")])) == booking.DEFAULT_PER_NAMESPACE
    # The first booking has started: the eleventh claim takes its place, the twelfth still waits.
    pool = [host("h1", annotations={booking.ANNOTATION: planned.writes[("infra", "h1")]})]
    later = booking.plan(wanted, pool, every(pool), at(3600))
    assert where(later)["c10"] == ("booked", "h1") and where(later)["c11"] == ("limit", None)
    # Another namespace is not counted against it.
    other = claim("o", start=3600 * 20, duration=600, created=20)
    other["metadata"]["namespace"] = "u"
    assert where(booking.plan([*wanted, other], pool, every(pool), at(3600)))["o"] == ("booked", "h1")


def test_the_limit_is_the_largest_of_the_hosts_policies_and_one_host_carries_at_most_max_per_host():
    policies = [
        {"metadata": {"namespace": "infra"}, "spec": {"maxBookingsPerNamespace": 2}},
        {"metadata": {"namespace": "infra"}, "spec": {"maxBookingsPerNamespace": 100}},
        {"metadata": {"namespace": "other"}, "spec": {}},
        {"metadata": {"namespace": "broken"}, "spec": {"maxBookingsPerNamespace": "many"}},
        {"metadata": {"namespace": "none"}, "spec": {"maxBookingsPerNamespace": 0}},
    ]
    assert booking.limits(policies) == {"infra": 100, "other": booking.DEFAULT_PER_NAMESPACE, "broken": 0, "none": 0}
    wanted = [claim(f"c{i:02}", start=60 * (i + 1), duration=30, created=i) for i in range(booking.MAX_PER_HOST + 2)]
    pool = [host("h1"), host("h2")]
    planned = booking.plan(wanted, pool, every(pool), T0, allowed={"infra": 100})
    assert len(json.loads(planned.writes[("infra", "h1")])) == booking.MAX_PER_HOST  # full: the next go to h2
    assert len(json.loads(planned.writes[("infra", "h2")])) == 2
    nothing = booking.plan(wanted[:1], pool, every(pool), T0, allowed={"infra": 0})
    assert where(nothing) == {"c00": ("limit", None)} and nothing.writes == {}


def test_a_host_the_api_server_refused_takes_no_new_booking_and_is_not_written():
    first, second = claim("a", start=3600, duration=60), claim("b", start=7200, duration=60, created=1)
    pool = [host("h1"), host("h2")]
    planned = booking.plan([first, second], pool, every(pool), T0, closed={("infra", "h1")})
    assert where(planned) == {"a": ("booked", "h2"), "b": ("booked", "h2")}
    assert set(planned.writes) == {("infra", "h2")}
    kept = [host("h1", entries=[entry(first, 3600, 3660)])]
    assert booking.plan([first], kept, every(kept), T0, closed={("infra", "h1")}).writes == {}
    assert where(booking.plan([first], kept, every(kept), T0, closed={("infra", "h1")})) == {"a": ("booked", "h1")}


def test_an_accepted_booking_over_a_lowered_limit_is_kept():
    wanted = [claim(f"c{i}", start=3600 * (i + 1), duration=60, created=i) for i in range(3)]
    pool = [host("h1", entries=[entry(c, 3600 * (i + 1), 3600 * (i + 1) + 60) for i, c in enumerate(wanted)])]
    planned = booking.plan(wanted, pool, every(pool), T0, allowed={"infra": 1})
    assert [d.state for d in planned.decisions] == ["booked"] * 3 and planned.writes == {}


def test_a_tenants_namespaces_share_its_limit():
    """A Tenant's child namespaces count together: ten namespaces of one tenant do not get ten limits."""
    labels = {"t": {"tenancy.metalclaim.io/tenant": "blue"}, "u": {"tenancy.metalclaim.io/tenant": "blue"}}
    assert booking.booker("t", labels["t"]) == booking.booker("u", labels["u"]) == ("tenant", "blue")
    assert booking.booker("v", {}) == ("namespace", "v")
    wanted = []
    for i in range(12):
        made = claim(f"c{i:02}", start=3600 * (i + 1), duration=600, created=i)
        made["metadata"]["namespace"] = "t" if i % 2 else "u"
        wanted.append(made)
    pool = [host("h1")]

    def owner(namespace):
        return booking.booker(namespace, labels.get(namespace))

    shared = booking.plan(wanted, pool, every(pool), T0, allowed={"infra": 4}, owner_of=owner)
    assert sum(d.state == "booked" for d in shared.decisions) == 4
    alone = booking.plan(wanted, pool, every(pool), T0, allowed={"infra": 4})
    assert sum(d.state == "booked" for d in alone.decisions) == 8  # each namespace its own 4
