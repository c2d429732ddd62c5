"""Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection package does it.

Only the Lease holder dispatches playbook runs; followers keep their caches warm and poll the Lease.

* Expiry is judged with the local monotonic clock from the moment this process last SAW the Lease
  record change (holder, duration, acquire/renew time, transitions), never by comparing our wall
  clock with the holder's renewTime: clocks of different machines need not agree.
* Every write is optimistic: a replace carries the resourceVersion that was read, so of two
  followers racing for an expired Lease exactly one wins and the other gets 409 Conflict.
* The leader renews every retry_period. If it has not renewed successfully for renew_deadline
  (< lease_duration) it steps down before any follower can consider the Lease expired. If it sees
  another holder in the Lease it steps down at once.
* On a clean stop the leader releases the Lease (empty holder, leaseDurationSeconds=1, client-go's
  ReleaseOnCancel), so a follower takes over within about one retry_period.
"""

from __future__ import annotations

import copy
import datetime
import json
import logging
import math
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client

LOG = logging.getLogger("metalclaim.controller.leader")

# Outcomes of one try to acquire or renew.
HELD = "held"  # we hold the Lease (created, taken over or renewed)
BUSY = "busy"  # another holder's Lease is still valid, or another writer won the race (409)
TAKEN = "taken"  # we were leading and the Lease names another holder
ERROR = "error"  # the API server could not be asked (logged)

MAX_REQUEST_TIMEOUT = 5.0


def default_log(event: str, **fields) -> None:
    """One JSON line per event on stderr (through the std logging module)."""
    if not LOG.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)
        LOG.propagate = False
    LOG.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))


# -- pure helpers -------------------------------------------------------------------------------


def micro_now(now: datetime.datetime | None = None) -> datetime.datetime:
    """Now (UTC), as a MicroTime the Python client serializes with its microseconds.

    The client writes datetimes with isoformat(), which drops the fraction when it is 0; the API
    server parses MicroTime as RFC3339 with exactly six fractional digits. One microsecond later is
    as good a renewTime.
    """
    now = (now or datetime.datetime.now(datetime.UTC)).astimezone(datetime.UTC)
    return now.replace(microsecond=1) if now.microsecond == 0 else now


def format_micro_time(value: datetime.datetime) -> str:
    """RFC3339 with microseconds in UTC, as metav1.MicroTime marshals: 2006-01-02T15:04:05.000000Z."""
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: str | datetime.datetime | None) -> datetime.datetime | None:
    """A Lease time (RFC3339, any number of fractional digits, Z or an offset) as an aware datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    if "." in text:
        head, _dot, rest = text.partition(".")
        cut = next((i for i, ch in enumerate(rest) if not ch.isdigit()), len(rest))
        digits, zone = rest[:cut], rest[cut:]
        text = f"{head}.{(digits + '000000')[:6]}{zone}"  # fromisoformat wants at most 6 digits
    parsed = datetime.datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def lease_expired(observed_at: float, duration_seconds: int | float | None, now: float) -> bool:
    """Whether a Lease record first seen at monotonic `observed_at` has expired at monotonic `now`.

    A record without a duration (or 0) never had a valid holder term: it counts as expired.
    """
    if not duration_seconds or duration_seconds <= 0:
        return True
    return now >= observed_at + duration_seconds


@dataclass(frozen=True)
class LeaseRecord:
    """The leader-election fields of a Lease's spec (what client-go calls a LeaderElectionRecord)."""

    holder: str = ""
    duration: int = 0
    acquire_time: datetime.datetime | None = None
    renew_time: datetime.datetime | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: dict) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=parse_micro_time(spec.get("acquireTime")),
            renew_time=parse_micro_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "acquireTime": micro_now(self.acquire_time) if self.acquire_time else None,
            "renewTime": micro_now(self.renew_time) if self.renew_time else None,
            "leaseTransitions": self.transitions,
        }


def next_record(old: LeaseRecord | None, identity: str, duration: int, now: datetime.datetime) -> LeaseRecord:
    """The record `identity` writes to hold the Lease: a renewal keeps acquireTime, a takeover counts a transition."""
    if old is None:
        return LeaseRecord(identity, duration, now, now, 0)
    if old.holder == identity:
        return LeaseRecord(identity, duration, old.acquire_time or now, now, old.transitions)
    return LeaseRecord(identity, duration, now, now, old.transitions + 1)


def released_record(old: LeaseRecord, now: datetime.datetime) -> LeaseRecord:
    """client-go's release: no holder, a one-second term, transitions kept."""
    return LeaseRecord("", 1, now, now, old.transitions)


def own_client(api_client) -> client.ApiClient:
    """The elector's own client (and connection pool) for the same cluster and credentials, without retries.

    urllib3 retries a timed-out request (three times by default) and the client may wait out a
    Retry-After: either would multiply the per-request timeout past renew_deadline, and a leader
    hanging on a dead API server must notice in time that it can no longer renew.
    """
    configuration = copy.copy(api_client.configuration)
    configuration.retries = 0
    configuration.client_go_retries = False
    return client.ApiClient(configuration)


# -- the elector ---------------------------------------------------------------------------------


class LeaderElector:
    def __init__(
        self,
        api_client,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[..., None] | None = None,
    ):
        if not identity:
            raise ValueError("identity must not be empty: it names the Lease holder")
        if not lease_duration > renew_deadline > 0:
            raise ValueError("lease_duration must be greater than renew_deadline, and renew_deadline positive")
        if not 0 < retry_period < renew_deadline:
            raise ValueError("retry_period must be positive and less than renew_deadline")
        self.api = client.CoordinationV1Api(own_client(api_client))
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.duration_seconds = max(1, math.ceil(lease_duration))  # leaseDurationSeconds is an integer
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.request_timeout = min(MAX_REQUEST_TIMEOUT, renew_deadline)
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.clock = clock
        self.log = log or default_log
        self._leading = threading.Event()
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0  # monotonic time the observed record was first seen
        self._held_since = 0.0  # monotonic start of the last successful write

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def wait_for_leadership(self, timeout: float | None) -> bool:
        return self._leading.wait(timeout)

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Block until `stop` is set, or until leadership is lost after having been held."""
        fields = {"lease": f"{self.namespace}/{self.name}", "identity": self.identity}
        led = False
        try:
            self.log("leader_election_started", **fields)
            while not stop.is_set():
                if self._try(leading=False, deadline=None) == HELD:
                    break
                stop.wait(self.retry_period * random.uniform(1.0, 1.2))  # jitter: followers do not poll in step
            else:
                return
            led = True
            self._leading.set()
            self.log("leadership_acquired", transitions=self._observed.transitions if self._observed else 0, **fields)
            self._callback(self.on_started_leading, "on_started_leading")
            lost = self._renew_until_lost(stop)
            self._leading.clear()
            if not lost:
                self._release()
        except Exception as error:  # never let the elector thread die with leadership believed held
            self._leading.clear()
            self.log("leader_election_error", error=type(error).__name__, **fields)
        finally:
            self._leading.clear()
            if led:
                self._callback(self.on_stopped_leading, "on_stopped_leading")

    def _renew_until_lost(self, stop: threading.Event) -> bool:
        """Renew every retry_period; True when leadership is lost, False when `stop` was set."""
        renewed = self._held_since
        while True:
            deadline = renewed + self.renew_deadline
            wait = self.retry_period
            while True:
                if stop.wait(max(0.0, min(wait, deadline - self.clock()))):
                    return False
                if self.clock() >= deadline:
                    self.log("leadership_lost", reason="renew_deadline", lease=f"{self.namespace}/{self.name}")
                    return True
                started = self.clock()
                outcome = self._try(leading=True, deadline=deadline)
                if outcome == HELD:
                    renewed = started
                    break
                if outcome == TAKEN:
                    self.log(
                        "leadership_lost",
                        reason="lease_taken",
                        holder=self._observed.holder if self._observed else "",
                        lease=f"{self.namespace}/{self.name}",
                    )
                    return True
                wait = self.retry_period

    # -- one try --------------------------------------------------------------------------------

    def _timeout(self, deadline: float | None) -> float:
        if deadline is None:
            return self.request_timeout
        return max(0.05, min(self.request_timeout, deadline - self.clock()))

    def _try(self, *, leading: bool, deadline: float | None) -> str:
        """One get-then-create-or-replace; logs API errors instead of raising them."""
        started = self.clock()
        try:
            lease = self._get(self._timeout(deadline))
            if lease is None:
                record = next_record(None, self.identity, self.duration_seconds, micro_now())
                written = self._write(None, record, self._timeout(deadline))
            else:
                record_seen = LeaseRecord.from_lease(lease)
                if record_seen != self._observed:
                    self._observed, self._observed_at = record_seen, self.clock()
                if record_seen.holder and record_seen.holder != self.identity:
                    if leading:
                        return TAKEN
                    if not lease_expired(self._observed_at, record_seen.duration, self.clock()):
                        return BUSY
                record = next_record(record_seen, self.identity, self.duration_seconds, micro_now())
                written = self._write(lease, record, self._timeout(deadline))
        except client.ApiException as error:
            if error.status == 409:  # AlreadyExists on create, Conflict on replace: someone else wrote first
                self.log("lease_conflict", lease=f"{self.namespace}/{self.name}", leading=leading)
                return BUSY
            self.log(
                "lease_api_error",
                lease=f"{self.namespace}/{self.name}",
                leading=leading,
                status=error.status,
                reason=error.reason,
            )
            return ERROR
        except Exception as error:  # connection refused, timeouts, TLS: the API server is not reachable
            self.log(
                "lease_api_error", lease=f"{self.namespace}/{self.name}", leading=leading, error=type(error).__name__
            )
            return ERROR
        self._observed = LeaseRecord.from_lease(written)
        self._observed_at = started
        self._held_since = started
        return HELD

    def _release(self) -> None:
        """Give the Lease up (client-go's ReleaseOnCancel), unless someone else holds it by now."""
        fields = {"lease": f"{self.namespace}/{self.name}", "identity": self.identity}
        for _attempt in range(2):
            try:
                lease = self._get(self.request_timeout)
                if lease is None or LeaseRecord.from_lease(lease).holder != self.identity:
                    self.log("lease_release_skipped", reason="not_holder", **fields)
                    return
                self._write(lease, released_record(LeaseRecord.from_lease(lease), micro_now()), self.request_timeout)
                self.log("lease_released", **fields)
                return
            except client.ApiException as error:
                if error.status == 409:
                    continue  # written meanwhile: look again
                self.log("lease_release_failed", status=error.status, reason=error.reason, **fields)
                return
            except Exception as error:
                self.log("lease_release_failed", error=type(error).__name__, **fields)
                return

    def _callback(self, callback: Callable[[], None] | None, name: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception as error:
            self.log("leader_callback_error", callback=name, error=type(error).__name__)

    # -- API ------------------------------------------------------------------------------------

    def _get(self, timeout: float) -> dict | None:
        try:
            response = self.api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=timeout
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return json.loads(response.data)

    def _write(self, lease: dict | None, record: LeaseRecord, timeout: float) -> dict:
        """Create the Lease (lease None) or replace the one read, with its resourceVersion."""
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.spec(),
            }
            response = self.api.create_namespaced_lease(
                self.namespace, client.V1Lease.model_validate(body), _preload_content=False, _request_timeout=timeout
            )
        else:
            metadata = lease["metadata"]
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "resourceVersion": metadata["resourceVersion"],
                    **{key: metadata[key] for key in ("labels", "annotations") if metadata.get(key)},
                },
                # Fields this elector does not manage (strategy, preferredHolder) are kept.
                "spec": {**(lease.get("spec") or {}), **record.spec()},
            }
            response = self.api.replace_namespaced_lease(
                self.name,
                self.namespace,
                client.V1Lease.model_validate(body),
                _preload_content=False,
                _request_timeout=timeout,
            )
        return json.loads(response.data)
