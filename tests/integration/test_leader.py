"""Leader election on the devenv's API server: one holder at a time, hand-over on stop, stepping down
when the Lease cannot be renewed, and the RBAC that confines the controller to its own Lease."""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import socket
import threading
import time
import uuid

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from metalclaim.controller.leader import LeaderElector

NAMESPACE = "metalclaim-system"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 2.0, 1.5, 0.3
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def api_client(devenv, identity: str):
    return kube_config.new_client_from_config(config_file=devenv.kubeconfig(identity))


@pytest.fixture
def admin_leases(devenv):
    return client.CoordinationV1Api(api_client(devenv, "admin"))


@pytest.fixture
def lease_name(admin_leases):
    name = f"test-leader-{uuid.uuid4().hex[:8]}"
    yield name
    with contextlib.suppress(client.ApiException):
        admin_leases.delete_namespaced_lease(name, NAMESPACE)


class Candidate:
    """One elector on its own thread, recording its callbacks and log events."""

    def __init__(self, devenv, lease: str, identity: str, *, as_user: str = "controller", namespace: str = NAMESPACE):
        self.identity = identity
        self.api_client = api_client(devenv, as_user)
        self.started: list[float] = []
        self.stopped: list[float] = []
        self.events: list[tuple[str, dict]] = []
        self.elector = LeaderElector(
            self.api_client,
            namespace=namespace,
            name=lease,
            identity=identity,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
            on_started_leading=lambda: self.started.append(time.monotonic()),
            on_stopped_leading=lambda: self.stopped.append(time.monotonic()),
            log=lambda event, **fields: self.events.append((event, fields)),
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.elector.run, args=(self.stop,), name=identity, daemon=True)

    def start(self) -> Candidate:
        self.thread.start()
        return self

    def halt(self, timeout: float = 10.0) -> None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.identity}'s elector did not return"

    def event_names(self) -> list[str]:
        return [event for event, _fields in self.events]


@pytest.fixture
def candidates():
    started: list[Candidate] = []
    yield started
    for candidate in started:
        candidate.stop.set()
    for candidate in started:
        candidate.thread.join(10)


def start(candidates: list, *args, **kwargs) -> Candidate:
    candidate = Candidate(*args, **kwargs).start()
    candidates.append(candidate)
    return candidate


def spec(admin_leases, name: str) -> client.V1LeaseSpec:
    return admin_leases.read_namespaced_lease(name, NAMESPACE).spec


def raw_spec(admin_leases, name: str) -> dict:
    response = admin_leases.read_namespaced_lease(name, NAMESPACE, _preload_content=False)
    return json.loads(response.data)["spec"]


def wait_until(check, timeout: float, interval: float = 0.02) -> float | None:
    """Seconds until check() held, or None."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if check():
            return time.monotonic() - began
        time.sleep(interval)
    return None


# -- acquiring, renewing, releasing ---------------------------------------------------------------


def test_one_elector_creates_renews_and_releases_the_lease(devenv, admin_leases, lease_name, candidates):
    alone = start(candidates, devenv, lease_name, "alone")
    assert alone.elector.wait_for_leadership(5), alone.events
    assert alone.elector.is_leader and len(alone.started) == 1

    first = raw_spec(admin_leases, lease_name)
    assert first["holderIdentity"] == "alone"
    assert first["leaseDurationSeconds"] == 2
    assert first.get("leaseTransitions", 0) == 0
    assert MICRO_TIME.match(first["renewTime"]) and MICRO_TIME.match(first["acquireTime"])

    time.sleep(3 * RETRY_PERIOD)
    renewed = raw_spec(admin_leases, lease_name)
    assert renewed["renewTime"] > first["renewTime"]  # same format and zone: string order is time order
    assert renewed["acquireTime"] == first["acquireTime"]
    assert renewed["holderIdentity"] == "alone"

    alone.halt()
    assert not alone.elector.is_leader
    assert len(alone.stopped) == 1
    released = raw_spec(admin_leases, lease_name)
    assert not released.get("holderIdentity")
    assert released["leaseDurationSeconds"] == 1
    assert "lease_released" in alone.event_names()


def test_two_electors_never_lead_at_once(devenv, admin_leases, lease_name, candidates):
    a = start(candidates, devenv, lease_name, "elector-a")
    b = start(candidates, devenv, lease_name, "elector-b")
    assert wait_until(lambda: a.elector.is_leader or b.elector.is_leader, 5) is not None
    samples = []
    began = time.monotonic()
    while time.monotonic() - began < 4 * LEASE_DURATION:  # long enough for any wrongful takeover
        samples.append((a.elector.is_leader, b.elector.is_leader))
        time.sleep(0.01)
    assert all(x + y == 1 for x, y in samples), "exactly one leader at every sample"
    leader = a if a.elector.is_leader else b
    follower = b if leader is a else a
    assert set(samples) == {(leader is a, leader is b)}, "leadership did not change hands while the leader renewed"
    assert spec(admin_leases, lease_name).holder_identity == leader.identity
    assert follower.started == [] and follower.stopped == []


def test_a_stopped_leader_hands_over_within_a_retry_period(devenv, admin_leases, lease_name, candidates):
    a = start(candidates, devenv, lease_name, "first")
    assert a.elector.wait_for_leadership(5)
    b = start(candidates, devenv, lease_name, "second")
    time.sleep(2 * RETRY_PERIOD)  # b has seen the Lease held
    assert not b.elector.is_leader

    a.halt()
    released = time.monotonic()
    assert len(a.stopped) == 1 and not a.elector.is_leader
    assert b.elector.wait_for_leadership(5)
    took = b.started[0] - released
    # One (jittered, at most 1.2x) retry period plus a request: far less than the lease duration.
    assert took < 1.2 * RETRY_PERIOD + 0.5, took
    after = spec(admin_leases, lease_name)
    assert after.holder_identity == "second"
    assert after.lease_transitions == 1
    assert after.lease_duration_seconds == 2


def test_a_follower_takes_an_abandoned_lease_only_after_its_duration(devenv, admin_leases, lease_name, candidates):
    # A holder that died without releasing: renewTime far in the past by the wall clock. The follower judges
    # expiry by its own clock from when it first saw this record, so it still waits one lease duration.
    stale = datetime.datetime(2000, 1, 1, 0, 0, 0, 123456, tzinfo=datetime.UTC)
    admin_leases.create_namespaced_lease(
        NAMESPACE,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=lease_name),
            spec=client.V1LeaseSpec(
                holder_identity="crashed",
                lease_duration_seconds=2,
                acquire_time=stale,
                renew_time=stale,
                lease_transitions=4,
            ),
        ),
    )
    began = time.monotonic()
    heir = start(candidates, devenv, lease_name, "heir")
    assert heir.elector.wait_for_leadership(10)
    waited = heir.started[0] - began
    assert LEASE_DURATION <= waited < LEASE_DURATION + 1.2 * RETRY_PERIOD + 0.5, waited
    assert spec(admin_leases, lease_name).lease_transitions == 5


# -- losing leadership ----------------------------------------------------------------------------


def test_a_leader_whose_lease_was_taken_steps_down(devenv, admin_leases, lease_name, candidates):
    leader = start(candidates, devenv, lease_name, "ousted")
    assert leader.elector.wait_for_leadership(5)
    lease = admin_leases.read_namespaced_lease(lease_name, NAMESPACE)
    lease.spec.holder_identity = "usurper"
    lease.spec.renew_time = datetime.datetime.now(datetime.UTC).replace(microsecond=500000)
    admin_leases.replace_namespaced_lease(lease_name, NAMESPACE, lease)
    overwritten = time.monotonic()

    leader.thread.join(5)
    assert not leader.thread.is_alive(), "run() returns once leadership is lost"
    assert not leader.elector.is_leader
    assert len(leader.stopped) == 1
    assert leader.stopped[0] - overwritten < 1.2 * RETRY_PERIOD + 0.5
    assert ("leadership_lost", "lease_taken") in [(e, f.get("reason")) for e, f in leader.events]
    # It does not release (or otherwise write) a Lease it no longer holds.
    assert spec(admin_leases, lease_name).holder_identity == "usurper"
    assert "lease_released" not in leader.event_names()


@contextlib.contextmanager
def black_hole():
    """A TCP port that accepts connections and never answers: an API server that hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield f"https://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def test_a_leader_that_cannot_renew_steps_down_before_the_lease_expires(devenv, admin_leases, lease_name, candidates):
    leader = start(candidates, devenv, lease_name, "cut-off")
    assert leader.elector.wait_for_leadership(5)
    heir = start(candidates, devenv, lease_name, "heir")
    with black_hole() as hung:
        # Renewals now hang in the TLS handshake: only the bounded request timeout ends them.
        last_renewal = raw_spec(admin_leases, lease_name)["renewTime"]
        leader.elector.api.api_client.configuration.host = hung  # the elector's own client
        cut = time.monotonic()
        leader.thread.join(5)
        assert not leader.thread.is_alive()
    assert leader.stopped and not leader.elector.is_leader
    stepped_down = leader.stopped[0] - cut
    # The last good renewal was at most one retry period before the cut: the leader gives up within
    # renew_deadline of it, before the heir (judging from when it saw that renewal) may take over.
    assert stepped_down < RENEW_DEADLINE + 0.2, stepped_down
    assert ("leadership_lost", "renew_deadline") in [(e, f.get("reason")) for e, f in leader.events]
    assert heir.elector.wait_for_leadership(5)
    assert heir.started[0] > leader.stopped[0], "never two leaders"
    assert raw_spec(admin_leases, lease_name)["renewTime"] > last_renewal


# -- RBAC: who may touch Leases -------------------------------------------------------------------


def test_a_tenant_cannot_take_the_controller_lease(devenv, admin_leases, lease_name, candidates):
    tenant = client.CoordinationV1Api(api_client(devenv, "tenant-a"))
    body = client.V1Lease(
        metadata=client.V1ObjectMeta(name=lease_name),
        spec=client.V1LeaseSpec(holder_identity="tenant-a", lease_duration_seconds=3600),
    )
    with pytest.raises(client.ApiException) as created:
        tenant.create_namespaced_lease(NAMESPACE, body)
    assert created.value.status == 403

    controller = start(candidates, devenv, lease_name, "controller-0")
    assert controller.elector.wait_for_leadership(5)
    for call in (
        lambda: tenant.read_namespaced_lease(lease_name, NAMESPACE),
        lambda: tenant.replace_namespaced_lease(lease_name, NAMESPACE, body),
        lambda: tenant.patch_namespaced_lease(lease_name, NAMESPACE, {"spec": {"holderIdentity": "tenant-a"}}),
        lambda: tenant.delete_namespaced_lease(lease_name, NAMESPACE),
    ):
        with pytest.raises(client.ApiException) as refused:
            call()
        assert refused.value.status == 403

    # A tenant running the elector itself gets nowhere and does not disturb the leader.
    intruder = start(candidates, devenv, lease_name, "tenant-a", as_user="tenant-a")
    assert not intruder.elector.wait_for_leadership(4 * RETRY_PERIOD)
    assert controller.elector.is_leader
    assert spec(admin_leases, lease_name).holder_identity == "controller-0"
    statuses = {f.get("status") for e, f in intruder.events if e == "lease_api_error"}
    assert statuses == {403}
    intruder.halt()
    assert intruder.stopped == []  # never led: nothing to stop


def test_the_controller_has_only_get_create_update_on_its_leases(devenv, admin_leases, lease_name, candidates):
    controller = client.CoordinationV1Api(api_client(devenv, "controller"))
    leader = start(candidates, devenv, lease_name, "controller-0")
    assert leader.elector.wait_for_leadership(5)
    for call in (
        lambda: controller.list_namespaced_lease(NAMESPACE),
        lambda: controller.delete_namespaced_lease(lease_name, NAMESPACE),
    ):
        with pytest.raises(client.ApiException) as refused:
            call()
        assert refused.value.status == 403


def test_the_controller_cannot_touch_leases_outside_its_namespace(devenv, admin_leases):
    controller = client.CoordinationV1Api(api_client(devenv, "controller"))
    name = f"test-leader-{uuid.uuid4().hex[:8]}"
    body = client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=client.V1LeaseSpec(holder_identity="x"))
    tenant_ns = devenv.state["namespaces"]["tenants"]["tenant-a"]
    try:
        for call in (
            lambda: controller.create_namespaced_lease(tenant_ns, body),
            lambda: controller.create_namespaced_lease("kube-node-lease", body),
            lambda: controller.read_namespaced_lease("kube-controller-manager", "kube-system"),
        ):
            with pytest.raises(client.ApiException) as refused:
                call()
            assert refused.value.status == 403
        # Nor can its elector be pointed elsewhere.
        elector = Candidate(devenv, name, "controller-x", namespace=tenant_ns).start()
        try:
            assert not elector.elector.wait_for_leadership(4 * RETRY_PERIOD)
        finally:
            elector.halt()
    finally:
        for ns in (tenant_ns, "kube-node-lease"):
            with contextlib.suppress(client.ApiException):
                admin_leases.delete_namespaced_lease(name, ns)
