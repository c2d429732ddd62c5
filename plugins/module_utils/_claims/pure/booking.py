# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bookings ahead: a claim whose lease starts later (``spec.lease.start``) books a host for its window. Pure.

A booking's window is ``[start, end)``, its end ``spec.lease.end`` or ``start + spec.lease.duration``. The host is
the one truth about bookings, as its ``consumerRef`` is about bindings: an accepted booking is an entry of the host's
``metalclaim.io/bookings`` annotation (a JSON list of ``{uid, namespace, name, start, end}``), written under the
host's resourceVersion, so two concurrent runs cannot both book one window (the second one's write conflicts: it
reads again and plans again). The claim's status only mirrors it (``status.booking``: start and end, never a host).

A host is free for a window when no other booking on it overlaps the window and its current consumer holds it no
later than the window's start: a consumer with a lease holds it until the lease's end (``status.lease.end``), one
without a lease (or not a HostClaim) for ever, until it is released. Pending bookings are decided first come, first
served: oldest first by (creationTimestamp, uid), each on the first free host by name among those it may use, in
every run and by every controller the same way. A booking refused (BookingConflict) is tried again in each later run,
in its place in that order, until its start; once its start has passed it is an ordinary leased claim: it binds if a
host is free for the rest of its window. Decisions are never taken back: an accepted booking is never moved or
dropped for an older claim seen later.

A booked claim binds at its start to the host holding its booking and to no other; any other claim binds a host only
when no booking on it overlaps the time it would hold the host (until its lease's end, or for ever without a lease).

The booking horizon (issue 40): a booking is accepted on a host only when its start is at most that host's horizon
ahead: the largest ``spec.maxBookingAhead`` of the HostDeployPolicies of the host's namespace (``DEFAULT_AHEAD``, 7
days, for a policy without one). Without it one booking far ahead (2099) took a host from everyone without a lease,
whose holding blocks every window, for ever. A booking further ahead is not refused for good: its Lease condition
says ``BookingTooFarAhead`` and it is decided again, in its first-come place, once its start is within reach. An
accepted booking beyond its host's horizon (accepted before the horizon, or the policy lowered since) is dropped.

Bounded bookings (issue 40): one tenant's 673 bookings on one host pushed its annotation past the API server's
256 KiB, and the refused write failed every run of every tenant. A host takes at most ``MAX_PER_HOST`` bookings (its
annotation stays a few KiB), and one claim namespace (all the namespaces of one Tenant together: booker()) holds at
most ``maxBookingsPerNamespace`` bookings still to start on the hosts of one infra namespace
(``DEFAULT_PER_NAMESPACE`` where no policy says it; the largest of the namespace's policies). A booking over its
limit on every host it may use is not accepted: its Lease condition says ``BookingLimitReached`` and it is decided
again, in its first-come place, as those bookings start or go. Accepted bookings over a limit lowered since are
kept. A host the API server refuses to write (a 422, not a conflict) takes no new booking in that run (``plan``'s
``closed``): only the claims that wanted it wait.

Every decision takes the run's timestamp (``now``): no clock here.
"""

from __future__ import annotations

import datetime
import functools
import json
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import lease, reuse
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import tenant_of

ANNOTATION = "metalclaim.io/bookings"  # on a BareMetalHost: its accepted bookings
# Lease condition and Association reasons (the tenant guide lists them).
BOOKED = "Booked"
BOOKING_CONFLICT = "BookingConflict"
BOOKING_INVALID = lease.LEASE_INVALID
BOOKING_TOO_FAR = "BookingTooFarAhead"
BOOKING_LIMIT = "BookingLimitReached"
# The bind step's Association reasons for a booking ahead.
REASONS = (BOOKED, BOOKING_CONFLICT, BOOKING_TOO_FAR, BOOKING_LIMIT)
DEFAULT_AHEAD = 7 * 24 * 3600  # seconds: how far ahead a booking may start where no policy says maxBookingAhead
# One entry is at most ~450 bytes (a uid, a 63-character namespace, a 253-character name, two times): 32 keep a host's
# annotation under 15 KiB, far from the 256 KiB the API server allows all of an object's annotations together.
MAX_PER_HOST = 32
DEFAULT_PER_NAMESPACE = 10  # bookings still to start one claim namespace may hold on one infra namespace's hosts
FOREVER = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class Window:
    """[start, end): the time a booking, or a holding, keeps a host."""

    start: datetime.datetime
    end: datetime.datetime

    def overlaps(self, other: Window) -> bool:
        return self.start < other.end and other.start < self.end

    def spelled(self) -> str:
        end = "until released" if self.end == FOREVER else f"to {lease.format_time(self.end)}"
        return f"from {lease.format_time(self.start)} {end}"


@dataclass(frozen=True)
class Entry:
    """One accepted booking on a host."""

    uid: str
    namespace: str
    name: str
    window: Window

    def as_dict(self) -> dict:
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "start": lease.format_time(self.window.start),
            "end": lease.format_time(self.window.end),
        }


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _key(obj: dict) -> tuple[str, str]:
    return _meta(obj).get("namespace", ""), _meta(obj).get("name", "")


def requested(claim: dict) -> Window | None:
    """The window spec.lease.start asks for (None: no start, not a booking). Raises lease.LeaseError when the lease
    cannot be read, or its end is not after its start."""
    spec_lease = (claim.get("spec") or {}).get("lease")
    if not isinstance(spec_lease, dict) or "start" not in spec_lease:
        return None
    wanted = lease.asked(claim)
    if wanted is None or wanted.start is None:
        raise lease.LeaseError("spec.lease.start needs spec.lease.duration or spec.lease.end")
    end = wanted.end_from(wanted.start)
    if end <= wanted.start:
        raise lease.LeaseError("spec.lease.end must be after spec.lease.start")
    return Window(wanted.start, end)


def requested_or_none(claim: dict) -> Window | None:
    """requested(), None for a lease that cannot be read."""
    try:
        return requested(claim)
    except lease.LeaseError:
        return None


def ahead(claim: dict, now: datetime.datetime | None) -> Window | None:
    """The claim's booked window when its start is still to come (it must not bind yet); else None."""
    if now is None:
        return None
    window = requested_or_none(claim)
    return window if window is not None and now < window.start else None


class Unreadable(ValueError):
    """A host's bookings annotation that cannot be read: nothing is booked on that host, nor bound to it (fail
    closed) until the infra team fixes or removes it."""


def entries(host: dict) -> list[Entry]:
    """The host's accepted bookings. Raises Unreadable."""
    text = (_meta(host).get("annotations") or {}).get(ANNOTATION)
    if not text:
        return []
    return list(_parsed(text))


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> tuple[Entry, ...]:
    # A run reads each host's annotation once per claim it plans: parsed once per text (entries are frozen).
    try:
        return tuple(
            Entry(
                str(item["uid"]),
                str(item["namespace"]),
                str(item["name"]),
                Window(lease.parse_time(item["start"]), lease.parse_time(item["end"])),
            )
            for item in json.loads(text)
        )
    except (ValueError, TypeError, KeyError, lease.LeaseError) as error:
        raise Unreadable(f"annotation {ANNOTATION}: {error}") from None


def encoded(found: list[Entry]) -> str | None:
    """The annotation's value for `found` (None: remove it), sorted by start, compact: one host may carry many."""
    if not found:
        return None
    ordered = sorted(found, key=lambda e: (e.window.start, e.window.end, e.uid))
    return json.dumps([e.as_dict() for e in ordered], separators=(",", ":"))


def _uid(claim: dict) -> str:
    return _meta(claim).get("uid", "")


def order_key(claim: dict) -> tuple[str, str]:
    """First come, first served: creationTimestamp (the API server's), then uid to break ties deterministically."""
    return _meta(claim).get("creationTimestamp") or "", _uid(claim)


def holding(host: dict, claims_by_key: dict, now: datetime.datetime) -> Window | None:
    """When the host's current consumer holds it: [now, its lease's end), or [now, FOREVER) without a lease (or for a
    consumer that is not a HostClaim, or a claim whose lease end cannot be read). None: no consumer."""
    ref = (host.get("spec") or {}).get("consumerRef")
    if not ref:
        return None
    if ref.get("kind") != "HostClaim":
        return Window(now, FOREVER)
    claim = claims_by_key.get((ref.get("namespace", ""), ref.get("name", "")))
    if claim is None:  # deleted: its host is being released
        return Window(now, now)
    recorded = (claim.get("status") or {}).get("lease") or {}
    if recorded.get("expired"):
        return Window(now, now)
    text = recorded.get("end")
    if not text:
        try:
            window = requested(claim)
        except lease.LeaseError:
            window = None
        if window is None:
            return Window(now, FOREVER)
        text = lease.format_time(window.end)
    try:
        end = lease.parse_time(text)
    except lease.LeaseError:
        return Window(now, FOREVER)
    return Window(now, max(now, end))


def booked_from(host: dict, claim: dict, now: datetime.datetime) -> datetime.datetime | None:
    """The start of the earliest booking of the host that is not `claim`'s and has not ended: how long the claim's
    lease may keep the host (lease.decide). A bookings annotation that cannot be read: now (no extension at all:
    nobody can tell what it would void)."""
    try:
        found = entries(host)
    except Unreadable:
        return now
    starts = [e.window.start for e in found if e.uid != _uid(claim) and e.window.end > now]
    return min(starts, default=None)


def bookable(host: dict) -> bool:
    """Whether a booking may go on the host at all: not being deleted, not paused, not in error."""
    meta = _meta(host)
    return not (
        meta.get("deletionTimestamp")
        or "baremetalhost.metal3.io/paused" in (meta.get("annotations") or {})
        or (host.get("status") or {}).get("errorType")
    )


def held_for_reuse(host: dict, claim: dict | None, now: datetime.datetime) -> Window | None:
    """When a node-reuse hold (_claims/pure/reuse.py) keeps the host from `claim`: [now, the hold's end), unless the
    claim is one the hold waits for (its namespace and key). None: no hold, or the claim's own. A booking never takes
    a held host whose uncleaned disks are kept for a namespace object: which one the claim's namespace is, is the
    bind step's to check (reuse.may_take), not this one's."""
    hold = reuse.hold_of(host)
    if hold is None:
        return None
    if claim is not None and reuse.uncleaned_of(host) is None and reuse.may_take(host, claim, now, hold.namespace_uid):
        return None
    return Window(now, max(now, hold.until))


def free_for(
    window: Window, host: dict, found: list[Entry], claims_by_key: dict, now, uid: str = "", claim: dict | None = None
) -> bool:
    """Whether `host` (its bookings `found`) is free for `window`, bookings of claim `uid` aside: not held by its
    consumer, nor by a node-reuse hold for others than `claim`, while the window runs."""
    for held in (holding(host, claims_by_key, now), held_for_reuse(host, claim, now)):
        if held is not None and held.overlaps(window):
            return False
    return not any(e.window.overlaps(window) for e in found if e.uid != uid)


def booked_on(hosts: list[dict], claim: dict) -> dict | None:
    """The host holding the claim's booking (the first by key when a crash left two), or None."""
    uid = _uid(claim)
    for host in sorted(hosts, key=_key):
        try:
            if any(e.uid == uid for e in entries(host)):
                return host
        except Unreadable:
            continue
    return None


def may_take(claim: dict, now: datetime.datetime | None):
    """host -> whether the claim may bind it now as far as bookings go: a booked claim only its booked host; any
    other claim only a host no other booking overlaps while it would hold it (until its lease's end, or for ever).
    What depends on the claim alone is worked out once, for the many hosts a binder asks about."""
    if now is None:
        return lambda host: True
    uid = _uid(claim)
    try:
        wanted = lease.asked(claim)
    except lease.LeaseError:
        wanted = None
        unreadable_lease = True
    else:
        unreadable_lease = False
    end = wanted.end_from(now) if wanted is not None else FOREVER
    mine = Window(now, max(now, end))

    def takes(host: dict) -> bool:
        try:
            found = entries(host)
        except Unreadable:
            return False
        if any(e.uid == uid for e in found):
            return True
        if unreadable_lease:
            return False
        return not any(e.window.overlaps(mine) for e in found if e.uid != uid)

    return takes


def _largest_per_namespace(policies: list[dict], value_of) -> dict:
    """{infra namespace: the largest value_of(policy spec) of its policies}; a namespace without a policy is not in
    it (nobody may bind there anyway)."""
    found: dict = {}
    for policy in policies:
        namespace = _meta(policy).get("namespace", "")
        found[namespace] = max(found.get(namespace, 0), value_of(policy.get("spec") or {}))
    return found


def horizons(policies: list[dict]) -> dict:
    """{infra namespace: how far ahead a booking on its hosts may start, in seconds}: the largest spec.maxBookingAhead
    of its policies, DEFAULT_AHEAD for a policy without one, 0 for one that cannot be read (fail closed: no booking
    ahead there)."""

    def ahead(spec: dict) -> int:
        text = spec.get("maxBookingAhead")
        try:
            return DEFAULT_AHEAD if text is None else lease.parse_duration(text)
        except lease.LeaseError:
            return 0

    return _largest_per_namespace(policies, ahead)


def limits(policies: list[dict]) -> dict:
    """{infra namespace: how many bookings still to start one claim namespace may hold on its hosts}: the largest
    spec.maxBookingsPerNamespace of its policies, DEFAULT_PER_NAMESPACE for a policy without one, 0 for one that
    cannot be read (fail closed)."""

    def most(spec: dict) -> int:
        value = spec.get("maxBookingsPerNamespace", DEFAULT_PER_NAMESPACE)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return _largest_per_namespace(policies, most)


def booker(namespace: str, namespace_labels: dict | None) -> tuple[str, str]:
    """Who a namespace's bookings count for against maxBookingsPerNamespace: its Tenant (all its namespaces
    together), or the namespace itself when no Tenant owns it."""
    tenant = tenant_of(namespace_labels)
    return ("tenant", tenant) if tenant else ("namespace", namespace)


def within_reach(window: Window, horizon: int, now: datetime.datetime) -> bool:
    """Whether a booking of `window` may be accepted now on a host whose horizon is `horizon` seconds."""
    return lease.seconds_between(now, window.start) <= horizon


def status_of(window: Window) -> dict:
    """status.booking: the window, never a host."""
    return {"start": lease.format_time(window.start), "end": lease.format_time(window.end)}


def booked_message(window: Window) -> str:
    return f"booked {window.spelled()}: a host is kept for the claim, bound at the start"


def conflict_message(window: Window) -> str:
    # Tenants read this: no host name, no namespace, no other tenant's booking.
    return (
        f"no host matching spec.hostSelector among those this namespace may use is free {window.spelled()}: "
        "the booking is tried again as hosts and bookings change, and until its start"
    )


def limit_message(window: Window, limit: int) -> str:
    # Tenants read this: their own namespace's count and the limit, no host, no other tenant.
    return (
        f"this namespace (with its tenant's other namespaces) holds as many bookings still to start as the hosts it "
        f"may use take ({limit}): the booking "
        f"{window.spelled()} is decided again as those start or are removed"
    )


def too_far_message(window: Window, horizon: int) -> str:
    # Tenants read this: how far ahead bookings go (the largest horizon among the hosts it may use), nothing else.
    return (
        f"spec.lease.start is more than {lease.format_duration(horizon)} ahead, as far as the hosts this namespace "
        f"may use take bookings: the booking is decided {window.spelled()} once its start is within "
        f"{lease.format_duration(horizon)}"
    )


@dataclass
class Decision:
    """What the run decided for one booking claim."""

    claim: dict
    # booked | conflict | too_far (beyond every candidate host's horizon: decided at retry_at) | limit (its namespace
    # holds as many bookings as every host in reach takes) | invalid | started (its start passed, not booked: an
    # ordinary leased claim)
    state: str
    window: Window | None = None
    message: str = ""
    host: tuple[str, str] | None = None  # booked: where (infrastructure only, never written on the claim)
    newly: bool = False  # booked by this run
    retry_at: datetime.datetime | None = None  # too_far: when its start comes within reach of a host it may use

    def conditions(self) -> list:
        """The Lease condition the claim gets before its start (the bind step says why it is not bound yet in
        Association); [] once started: the lease step says the rest."""
        if self.state == "booked":
            return [(lease.LEASE, "False", BOOKED, booked_message(self.window))]
        if self.state == "conflict":
            return [(lease.LEASE, "False", BOOKING_CONFLICT, self.message)]
        if self.state == "too_far":
            return [(lease.LEASE, "False", BOOKING_TOO_FAR, self.message)]
        if self.state == "limit":
            return [(lease.LEASE, "False", BOOKING_LIMIT, self.message)]
        if self.state == "invalid":
            return [(lease.LEASE, "False", BOOKING_INVALID, self.message)]
        return []


@dataclass
class Plan:
    """Every booking decision of a run, and the hosts' new bookings annotations."""

    decisions: list[Decision] = field(default_factory=list)
    writes: dict = field(default_factory=dict)  # host key -> new annotation value (None: remove it)
    # (uid, namespace, name) of bookings whose claim is not in the run's list (created since, or gone): kept until
    # the caller reads the claim and says it is gone (plan's `gone`)
    unknown: set = field(default_factory=set)


def plan(
    claims: list[dict],
    hosts: list[dict],
    candidates,
    now: datetime.datetime,
    gone: set | frozenset = frozenset(),
    reach: dict | None = None,
    allowed: dict | None = None,
    closed: set | frozenset = frozenset(),
    owner_of=None,
) -> Plan:
    """Decide every booking claim in `claims` (all the live claims: those without a start are read for the hosts
    they hold), first come, first served, and tidy every host's bookings: an entry whose claim is gone, is being
    deleted, asks another window now or is booked twice (the first host by key keeps it) is dropped, and one whose
    window has passed too, but only when the host is written for another reason. candidates(claim) -> the keys of
    the hosts the claim may use (its policies, selector, host pools, Tenant reservation and lease caps: the caller
    knows them), in any order. A booking whose claim is not in `claims` is dropped only when its uid is in `gone`
    (the caller read it: deleted, or another claim by that name now); else it stays, in Plan.unknown: a claim
    created after `claims` was read may have been booked by another run. reach: horizons() of the policies (None:
    DEFAULT_AHEAD everywhere; a namespace not in it: DEFAULT_AHEAD): a booking goes only on a host whose horizon its
    start is within, and an entry beyond its host's is dropped. allowed: limits() of the policies (None:
    DEFAULT_PER_NAMESPACE everywhere): a booking goes only where its namespace holds fewer bookings still to start
    in that host's namespace, and only on a host carrying fewer than MAX_PER_HOST. closed: keys of hosts the API
    server refused to write: no new booking there, and no write. owner_of(namespace) -> who a namespace's bookings
    count for (booker(); None: each namespace for itself): a Tenant's namespaces share its limit."""

    def horizon(host_key: tuple[str, str]) -> int:
        return (reach or {}).get(host_key[0], DEFAULT_AHEAD)

    def limit(host_key: tuple[str, str]) -> int:
        return (allowed or {}).get(host_key[0], DEFAULT_PER_NAMESPACE)

    claims_by_key = {_key(c): c for c in claims}
    live = {_uid(c): c for c in claims if not _meta(c).get("deletionTimestamp")}
    all_uids = {_uid(c) for c in claims}
    by_key = {_key(h): h for h in hosts}
    current: dict = {}
    for host_key in sorted(by_key):
        try:
            current[host_key] = entries(by_key[host_key])
        except Unreadable:
            current[host_key] = None  # untouched, never booked
    windows: dict = {}
    result = Plan()
    for claim in sorted(live.values(), key=order_key):
        try:
            window = requested(claim)
        except lease.LeaseError as error:
            result.decisions.append(Decision(claim, "invalid", message=f"spec.lease: {error}"))
            continue
        if window is not None:
            windows[_uid(claim)] = window
    kept: dict = {}
    passed: dict = {}  # host key -> its entries whose window has passed: dropped only when the host is written anyway
    seen: set = set()
    for host_key, found in current.items():
        if found is None:
            continue
        keep = []
        passed[host_key] = [e for e in found if e.window.end <= now]
        for entry in found:
            if entry.window.end <= now or entry.uid in seen:
                continue
            if entry.uid not in all_uids and entry.uid not in gone:  # not in the list: maybe newer than it
                result.unknown.add((entry.uid, entry.namespace, entry.name))
                seen.add(entry.uid)
                keep.append(entry)
                continue
            window = windows.get(entry.uid)
            if window is None or window != entry.window or _key(live[entry.uid]) != (entry.namespace, entry.name):
                continue
            if not within_reach(entry.window, horizon(host_key), now):  # beyond the host's horizon: given up
                continue
            seen.add(entry.uid)
            keep.append(entry)
        kept[host_key] = keep
    booked = {e.uid: host_key for host_key, found in kept.items() for e in found}

    def owner(namespace: str):
        return owner_of(namespace) if owner_of is not None else ("namespace", namespace)

    to_start: dict = {}  # (who books, infra namespace) -> its bookings still to start there
    for host_key, found in kept.items():
        for e in found:
            if e.window.start > now:
                to_start[(owner(e.namespace), host_key[0])] = to_start.get((owner(e.namespace), host_key[0]), 0) + 1
    for claim in sorted((live[uid] for uid in windows), key=order_key):
        uid = _uid(claim)
        window = windows[uid]
        if uid in booked:
            result.decisions.append(Decision(claim, "booked", window, host=booked[uid]))
            continue
        if window.start <= now:
            result.decisions.append(Decision(claim, "started", window))
            continue
        chosen = None
        usable = sorted(candidates(claim))
        near = [host_key for host_key in usable if within_reach(window, horizon(host_key), now)]
        if usable and not near:
            furthest = max(horizon(host_key) for host_key in usable)
            retry_at = window.start - datetime.timedelta(seconds=furthest)
            message = too_far_message(window, furthest)
            result.decisions.append(Decision(claim, "too_far", window, message, retry_at=retry_at))
            continue
        namespace, name = _key(claim)
        booker = owner(namespace)
        room = [host_key for host_key in near if to_start.get((booker, host_key[0]), 0) < limit(host_key)]
        if near and not room:
            most = max(limit(host_key) for host_key in near)
            result.decisions.append(Decision(claim, "limit", window, limit_message(window, most)))
            continue
        for host_key in room:
            host = by_key.get(host_key)
            if host is None or kept.get(host_key) is None or host_key in closed or not bookable(host):
                continue
            if len(kept[host_key]) >= MAX_PER_HOST:
                continue
            if free_for(window, host, kept[host_key], claims_by_key, now, uid, claim):
                chosen = host_key
                break
        if chosen is None:
            result.decisions.append(Decision(claim, "conflict", window, conflict_message(window)))
            continue
        kept[chosen] = [*kept[chosen], Entry(uid, namespace, name, window)]
        booked[uid] = chosen
        to_start[(booker, chosen[0])] = to_start.get((booker, chosen[0]), 0) + 1
        result.decisions.append(Decision(claim, "booked", window, host=chosen, newly=True))
    for host_key, found in kept.items():
        if host_key in closed:
            continue
        written = (_meta(by_key[host_key]).get("annotations") or {}).get(ANNOTATION)
        # A window that passed overlaps nothing to come: no write (and no wake of every waiting claim) just for it.
        if encoded(found) != written and encoded(found + passed[host_key]) != written:
            result.writes[host_key] = encoded(found)
    return result
