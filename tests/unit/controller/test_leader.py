"""Lease times, records and expiry; one elector's tries against an in-memory Lease with a fake clock."""

from __future__ import annotations

import datetime
import json
import threading
from types import SimpleNamespace

import pytest
from kubernetes import client

from metalclaim.controller.leader import (
    BUSY,
    ERROR,
    HELD,
    TAKEN,
    LeaderElector,
    LeaseRecord,
    format_micro_time,
    lease_expired,
    micro_now,
    next_record,
    own_client,
    parse_micro_time,
    released_record,
)

UTC = datetime.UTC
T0 = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


# -- times ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-06T07:08:09.123456Z", T0),
        ("2024-05-06T07:08:09.123456+00:00", T0),
        ("2024-05-06T09:08:09.123456+02:00", T0),
        ("2024-05-06T07:08:09.1234567Z", T0),  # more digits than Python keeps
        ("2024-05-06T07:08:09.12Z", T0.replace(microsecond=120000)),
        ("2024-05-06T07:08:09Z", T0.replace(microsecond=0)),  # metav1.Time, no fraction
        ("2024-05-06T07:08:09.123456", T0),  # no zone: UTC
    ],
)
def test_parse_micro_time(text, expected):
    parsed = parse_micro_time(text)
    assert parsed == expected
    assert parsed.tzinfo is not None


def test_parse_micro_time_of_nothing_and_of_datetimes():
    assert parse_micro_time(None) is None
    assert parse_micro_time("") is None
    assert parse_micro_time(T0) is T0
    assert parse_micro_time(T0.replace(tzinfo=None)) == T0


def test_format_micro_time_is_rfc3339_with_six_digits_in_utc():
    assert format_micro_time(T0) == "2024-05-06T07:08:09.123456Z"
    assert format_micro_time(T0.replace(microsecond=0)) == "2024-05-06T07:08:09.000000Z"
    plus_two = T0.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    assert format_micro_time(plus_two) == "2024-05-06T07:08:09.123456Z"
    assert parse_micro_time(format_micro_time(T0)) == T0


def test_micro_now_never_has_a_zero_fraction():
    # The client serializes with isoformat(), which drops a zero fraction the API server would refuse.
    whole = T0.replace(microsecond=0)
    assert micro_now(whole) == whole.replace(microsecond=1)
    assert micro_now(whole).isoformat() == "2024-05-06T07:08:09.000001+00:00"
    assert micro_now(T0) == T0
    assert micro_now().tzinfo is not None


def test_a_lease_expires_by_the_local_clock_from_when_it_was_seen():
    assert not lease_expired(100.0, 15, 100.0)
    assert not lease_expired(100.0, 15, 114.999)
    assert lease_expired(100.0, 15, 115.0)
    assert lease_expired(100.0, 0, 100.0)  # no term: free
    assert lease_expired(100.0, None, 100.0)


# -- records --------------------------------------------------------------------------------------


def test_record_from_a_lease_and_back():
    lease = {
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2024-05-06T07:08:09.123456Z",
            "renewTime": "2024-05-06T07:08:10.000000Z",
            "leaseTransitions": 3,
        }
    }
    record = LeaseRecord.from_lease(lease)
    assert record == LeaseRecord("a", 15, T0, T0.replace(second=10, microsecond=0), 3)
    spec = record.spec()
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 3
    assert spec["renewTime"].microsecond == 1  # written with a fraction
    assert LeaseRecord.from_lease({}) == LeaseRecord()
    assert LeaseRecord.from_lease({"spec": {"holderIdentity": None}}).holder == ""


def test_next_record_renews_takes_over_and_creates():
    later = T0 + datetime.timedelta(seconds=5)
    created = next_record(None, "me", 15, T0)
    assert created == LeaseRecord("me", 15, T0, T0, 0)
    renewed = next_record(created, "me", 15, later)
    assert renewed == LeaseRecord("me", 15, T0, later, 0)  # acquireTime kept, no transition
    taken = next_record(LeaseRecord("other", 15, T0, T0, 2), "me", 15, later)
    assert taken == LeaseRecord("me", 15, later, later, 3)
    after_release = next_record(released_record(taken, later), "you", 15, later)
    assert after_release.transitions == 4 and after_release.holder == "you"


def test_released_record_frees_the_lease_at_once():
    released = released_record(LeaseRecord("me", 15, T0, T0, 7), T0)
    assert released == LeaseRecord("", 1, T0, T0, 7)


# -- construction ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"identity": ""}, "identity"),
        ({"lease_duration": 10.0, "renew_deadline": 10.0}, "lease_duration"),
        ({"retry_period": 10.0}, "retry_period"),
        ({"retry_period": 0}, "retry_period"),
    ],
)
def test_inconsistent_settings_are_refused(kwargs, message):
    settings = {"namespace": "ns", "name": "lease", "identity": "me", **kwargs}
    with pytest.raises(ValueError, match=message):
        LeaderElector(client.ApiClient(), **settings)


def test_the_elector_has_its_own_client_without_retries():
    shared = client.ApiClient(client.Configuration(host="https://api.example:6443"))
    mine = own_client(shared)
    assert mine is not shared
    assert mine.configuration.host == "https://api.example:6443"
    assert mine.configuration.retries == 0
    assert shared.configuration.retries is None  # the caller's client is untouched
    elector = LeaderElector(
        shared, namespace="ns", name="l", identity="me", lease_duration=2, renew_deadline=1.5, retry_period=0.3
    )
    assert elector.request_timeout == 1.5  # a request never outlives the renew deadline
    assert elector.duration_seconds == 2


# -- tries against an in-memory Lease -------------------------------------------------------------


class FakeLeases:
    """read/create/replace of one Lease, with resourceVersion conflicts, as CoordinationV1Api answers."""

    def __init__(self):
        self.lease: dict | None = None
        self.version = 0
        self.fail: int | None = None  # answer every call with this status

    def _answer(self, lease):
        return SimpleNamespace(data=json.dumps(lease).encode())

    def _check(self):
        if self.fail is not None:
            raise client.ApiException(status=self.fail, reason="fake")

    def _store(self, body: client.V1Lease) -> dict:
        self.version += 1
        lease = client.ApiClient().sanitize_for_serialization(body)
        lease["metadata"]["resourceVersion"] = str(self.version)
        self.lease = lease
        return self._answer(lease)

    def read_namespaced_lease(self, name, namespace, **kwargs):
        self._check()
        assert kwargs["_request_timeout"] > 0
        if self.lease is None:
            raise client.ApiException(status=404, reason="Not Found")
        return self._answer(self.lease)

    def create_namespaced_lease(self, namespace, body, **kwargs):
        self._check()
        if self.lease is not None:
            raise client.ApiException(status=409, reason="AlreadyExists")
        return self._store(body)

    def replace_namespaced_lease(self, name, namespace, body, **kwargs):
        self._check()
        if body.metadata.resource_version != self.lease["metadata"]["resourceVersion"]:
            raise client.ApiException(status=409, reason="Conflict")
        return self._store(body)

    def overwrite(self, **spec):
        self.version += 1
        self.lease = {
            "metadata": {"name": "l", "namespace": "ns", "resourceVersion": str(self.version)},
            "spec": {**(self.lease or {}).get("spec", {}), **spec},
        }


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def elector(leases: FakeLeases, clock: Clock, identity: str, events: list | None = None) -> LeaderElector:
    made = LeaderElector(
        client.ApiClient(),
        namespace="ns",
        name="l",
        identity=identity,
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        clock=clock,
        log=lambda event, **fields: (events if events is not None else []).append((event, fields)),
    )
    made.api = leases
    return made


def test_a_follower_waits_out_a_stale_lease_by_its_own_clock():
    leases, clock = FakeLeases(), Clock()
    # Renewed "long ago" by the wall clock: irrelevant, only when we saw the record change counts.
    leases.overwrite(holderIdentity="crashed", leaseDurationSeconds=15, renewTime="2000-01-01T00:00:00.000001Z")
    me = elector(leases, clock, "me")
    assert me._try(leading=False, deadline=None) == BUSY
    clock.now += 14.9
    assert me._try(leading=False, deadline=None) == BUSY
    clock.now += 0.1
    assert me._try(leading=False, deadline=None) == HELD
    assert leases.lease["spec"]["holderIdentity"] == "me"
    assert leases.lease["spec"]["leaseTransitions"] == 1


def test_a_renewal_seen_restarts_the_followers_count():
    leases, clock = FakeLeases(), Clock()
    leases.overwrite(holderIdentity="alive", leaseDurationSeconds=15, renewTime="2030-01-01T00:00:00.000001Z")
    me = elector(leases, clock, "me")
    assert me._try(leading=False, deadline=None) == BUSY
    clock.now += 10
    leases.overwrite(renewTime="2030-01-01T00:00:10.000001Z")  # the holder renewed (its clock may be off)
    assert me._try(leading=False, deadline=None) == BUSY
    clock.now += 10  # 20 s since first seen, but only 10 s since the renewal was seen
    assert me._try(leading=False, deadline=None) == BUSY
    clock.now += 5
    assert me._try(leading=False, deadline=None) == HELD


def test_a_released_lease_is_taken_at_once():
    leases, clock = FakeLeases(), Clock()
    leases.overwrite(holderIdentity="", leaseDurationSeconds=1, leaseTransitions=2)
    assert elector(leases, clock, "me")._try(leading=False, deadline=None) == HELD
    assert leases.lease["spec"]["leaseTransitions"] == 3


def test_of_two_racing_followers_one_wins_and_the_other_gets_a_conflict():
    leases, clock = FakeLeases(), Clock()
    events: list = []
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b", events)
    leases.overwrite(holderIdentity="", leaseDurationSeconds=1)
    stale = leases.lease
    assert a._try(leading=False, deadline=None) == HELD
    # b read the released Lease before a wrote: its replace carries the old resourceVersion.
    b._get = lambda timeout: stale
    assert b._try(leading=False, deadline=None) == BUSY
    assert leases.lease["spec"]["holderIdentity"] == "a"
    assert [e for e, _fields in events] == ["lease_conflict"]


def test_the_first_elector_creates_the_lease_and_a_second_create_conflicts():
    leases, clock = FakeLeases(), Clock()
    first = elector(leases, clock, "first")
    assert first._try(leading=False, deadline=None) == HELD
    spec = leases.lease["spec"]
    assert spec["holderIdentity"] == "first" and spec["leaseDurationSeconds"] == 15
    assert spec["renewTime"].endswith("+00:00") and "." in spec["renewTime"]
    second = elector(leases, clock, "second")
    second._get = lambda timeout: None  # it saw no Lease, then lost the race to create it
    assert second._try(leading=False, deadline=None) == BUSY


def test_a_leader_that_sees_another_holder_is_told_at_once():
    leases, clock = FakeLeases(), Clock()
    me = elector(leases, clock, "me")
    assert me._try(leading=False, deadline=None) == HELD
    assert me._try(leading=True, deadline=clock.now + 10) == HELD
    leases.overwrite(holderIdentity="usurper")
    assert me._try(leading=True, deadline=clock.now + 10) == TAKEN


def test_api_errors_are_logged_not_raised():
    leases, clock = FakeLeases(), Clock()
    events: list = []
    me = elector(leases, clock, "me", events)
    leases.fail = 500
    assert me._try(leading=False, deadline=None) == ERROR
    assert events == [("lease_api_error", {"lease": "ns/l", "leading": False, "status": 500, "reason": "fake"})]

    def unreachable(timeout):
        raise ConnectionRefusedError("no API server")

    me._get = unreachable
    assert me._try(leading=False, deadline=None) == ERROR
    assert events[-1] == ("lease_api_error", {"lease": "ns/l", "leading": False, "error": "ConnectionRefusedError"})


def test_run_returns_on_stop_while_following_without_stopped_callback():
    leases, clock = FakeLeases(), Clock()
    leases.overwrite(holderIdentity="other", leaseDurationSeconds=15)
    stopped: list = []
    me = elector(leases, clock, "me")
    me.on_stopped_leading = lambda: stopped.append(1)
    stop = threading.Event()
    stop.set()
    me.run(stop)
    assert not me.is_leader and stopped == []


def test_run_releases_on_stop_and_survives_a_failing_callback():
    leases, clock = FakeLeases(), Clock()
    events: list = []
    me = elector(leases, clock, "me", events)
    stop = threading.Event()
    stopped: list = []

    def started():
        stop.set()
        raise RuntimeError("boom")

    me.on_started_leading = started
    me.on_stopped_leading = lambda: stopped.append(me.is_leader)
    me.run(stop)
    assert stopped == [False]  # is_leader is already false when the callback runs
    assert leases.lease["spec"]["holderIdentity"] == ""
    assert leases.lease["spec"]["leaseDurationSeconds"] == 1
    names = [e for e, _fields in events]
    assert names == [
        "leader_election_started",
        "leadership_acquired",
        "leader_callback_error",
        "lease_released",
    ]
