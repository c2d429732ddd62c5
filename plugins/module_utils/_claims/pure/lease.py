# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A claim's lease: when it ends, whether a policy's cap allows it, what to say and when to look again. Pure.

A claim asks for a lease with ``spec.lease.duration`` (a Go-style duration: ``90m``, ``2h30m``, counted from
the binding) or ``spec.lease.end`` (an RFC 3339 time), exactly one. Once bound, ``status.lease`` records
``start`` (the binding time) and ``end`` (the effective end); at the end the host is released as a deleted
claim's is, ``status.lease.expired`` is set and the claim is never bound again.

With ``spec.lease.start`` too, the lease is a booking ahead (_claims/pure/booking.py): the claim binds at that
start, and a duration counts from it, not from the binding.

A HostDeployPolicy's ``spec.maxLeaseDuration`` caps the leases of the namespaces it admits, for the hosts of its
own infra namespace (several policies of one namespace: the largest cap; one without a cap: no cap), and makes
a lease required there. Over the cap, an unbound claim is not bound there; a bound claim's extension is refused
and its lease keeps its end. Lowering a cap shortens no lease already running. A Tenant's ``spec.maxLeaseDuration``
(written on each of its namespaces by the tenants side: tenancy.MAX_LEASE_DURATION_LABEL) caps the leases of its
namespaces on every host, and requires one, the same way: the smaller of the two caps applies.

Every decision takes the run's timestamp (``now``): no clock here. A warning starts ``WARNING_FRACTION`` of the
lease's length before its end, at most ``WARNING_MAX`` seconds before it.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import tenancy
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import admitting

LEASE = "Lease"  # the condition type
# Reasons (the tenant guide lists them).
LEASE_ACTIVE = "LeaseActive"
LEASE_ENDING = "LeaseEnding"
LEASE_EXPIRED = "LeaseExpired"
LEASE_OVER_CAP = "LeaseOverCap"
LEASE_REQUIRED = "LeaseRequired"
LEASE_INVALID = "LeaseInvalid"
LEASE_HOST_BOOKED = "LeaseHostBooked"  # an extension past the start of another claim's booking of its host
LEASE_EXPIRY_HELD = tenancy.LEASE_EXPIRY_HELD_REASON  # past its end, held by the tenant's blocking CLAIM_EXPIRED hooks

WARNING_FRACTION = 0.1
WARNING_MAX = 900  # seconds: 15 minutes
DURATION_PATTERN = re.compile(r"^(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?$")

# A decision's state.
NONE = "none"  # no lease (or a bound claim's lease refused before it ever started)
UNBOUND = "unbound"  # a lease asked, not started: the bind step checks it against the caps
ACTIVE = "active"
ENDING = "ending"  # within the warning window
EXPIRED = "expired"
HELD = "held"  # past its end, its host kept while the tenant's blocking CLAIM_EXPIRED hooks hold it (a grace at most)


class LeaseError(ValueError):
    """A lease field that cannot be read (the CRD refuses it first; kept for objects older than its schema)."""


def parse_duration(text) -> int:
    """Seconds of a Go-style duration made of hours, minutes and seconds (``1h30m``, ``45s``), more than zero."""
    match = DURATION_PATTERN.match(text) if isinstance(text, str) and text else None
    if match is None or not any(match.groups()):
        raise LeaseError(f"{text!r} is not a duration such as 90m or 2h30m")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise LeaseError(f"{text!r} is not longer than zero")
    return total


def format_duration(seconds: float) -> str:
    """Go's spelling of a whole number of seconds: 2h30m0s, 15m0s, 45s."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{minutes}m{seconds}s"
    return f"{seconds}s"


def parse_time(text) -> datetime.datetime:
    """An RFC 3339 time (``Z`` or an offset), as an aware UTC datetime."""
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except (AttributeError, TypeError, ValueError):
        raise LeaseError(f"{text!r} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise LeaseError(f"{text!r} has no time zone")
    return parsed.astimezone(datetime.timezone.utc)


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime(cond.TIMESTAMP_FORMAT)


@dataclass(frozen=True)
class Asked:
    """What spec.lease asks: a duration (seconds) or an end."""

    duration: int | None = None
    end: datetime.datetime | None = None
    start: datetime.datetime | None = None  # a booking's start (spec.lease.start, _claims/pure/booking.py)

    def end_from(self, start: datetime.datetime) -> datetime.datetime:
        """The end of a lease bound at `start`: a booking's duration counts from its booked start, not the binding."""
        if self.end is not None:
            return self.end
        return (self.start or start) + datetime.timedelta(seconds=self.duration)

    def spelled(self) -> str:
        return f"duration {format_duration(self.duration)}" if self.end is None else f"end {format_time(self.end)}"


def asked(claim: dict) -> Asked | None:
    """The claim's spec.lease, or None when it has none. Raises LeaseError when it cannot be read."""
    lease = (claim.get("spec") or {}).get("lease")
    if not lease:
        return None
    if not isinstance(lease, dict) or ("duration" in lease) == ("end" in lease):
        if isinstance(lease, dict) and "start" in lease and "duration" not in lease and "end" not in lease:
            raise LeaseError("spec.lease.start needs spec.lease.duration or spec.lease.end")
        raise LeaseError("spec.lease needs exactly one of duration and end")
    start = parse_time(lease["start"]) if "start" in lease else None
    if "duration" in lease:
        return Asked(duration=parse_duration(lease["duration"]), start=start)
    return Asked(end=parse_time(lease["end"]), start=start)


def policy_cap(policy: dict) -> int | None:
    """A policy's spec.maxLeaseDuration in seconds (None: no cap). One that cannot be read caps at 0: every lease
    is over it (fail closed)."""
    text = (policy.get("spec") or {}).get("maxLeaseDuration")
    if text is None:
        return None
    try:
        return parse_duration(text)
    except LeaseError:
        return 0


def tenant_cap(namespace_labels: dict | None) -> int | None:
    """The cap of the namespace's Tenant in seconds (None: none). One that cannot be read caps at 0 (fail closed)."""
    text = tenancy.max_lease_duration(namespace_labels)
    if text is None:
        return None
    try:
        return parse_duration(text)
    except LeaseError:
        return 0


def smaller(cap, other: int | None):
    """The smaller of two caps, None being no cap (`cap` False, no policy admitting any more, stays False)."""
    if cap is False or other is None:
        return cap
    return other if cap is None else min(cap, other)


def with_tenant_cap(found: dict, namespace_labels: dict | None) -> dict:
    """caps() with the namespace's Tenant cap applied to each infra namespace: the smaller of the two."""
    cap = tenant_cap(namespace_labels)
    if cap is None:
        return found
    return {namespace: smaller(value, cap) for namespace, value in found.items()}


def _whose(cap: int, tenant: int | None, where: str) -> str:
    """Who sets the cap the tenant is told of: their Tenant when its cap is that one, else the policies."""
    return "this namespace's Tenant" if tenant is not None and tenant == cap else f"the HostDeployPolicies {where}"


def caps(policies: list[dict], decisions) -> dict:
    """{infra namespace: its cap in seconds, or None for no cap} over the namespaces the policies admit (decisions:
    _common/pure/policy.py evaluate_policies' second value). A namespace is uncapped when any policy of it that
    admits the claim's namespace has no cap; else its cap is the largest."""
    found: dict = {}
    for namespace, policy in admitting(policies, decisions):
        cap = policy_cap(policy)
        if namespace in found and (found[namespace] is None or cap is None):
            found[namespace] = None
        elif namespace in found:
            found[namespace] = max(found[namespace], cap)
        else:
            found[namespace] = cap
    return found


def seconds_between(start: datetime.datetime, end: datetime.datetime) -> float:
    return (end - start).total_seconds()


def fits(wanted: Asked | None, cap: int | None, now: datetime.datetime) -> bool:
    """Whether a claim asking `wanted`, bound now, may take a host whose namespace's cap is `cap`."""
    if cap is None:
        return True
    return wanted is not None and seconds_between(now, wanted.end_from(now)) <= cap


def refusal(
    wanted: Asked | None, caps_of_allowed: list, now: datetime.datetime, tenant: int | None = None
) -> tuple[str, str]:
    """(Association reason, message) for an unbound claim no admitted namespace's cap lets bind (caps_of_allowed:
    with the Tenant cap `tenant` applied). The tenant reads it: the largest cap that would apply, never which
    namespace or policy has it; their Tenant named when its cap is that one."""
    largest = max(cap for cap in caps_of_allowed if cap is not None)
    who = _whose(largest, tenant, "admitting this namespace")
    if wanted is None:
        return LEASE_REQUIRED, (
            f"{who} require{'s' if who.startswith('this') else ''} a lease: set spec.lease (a duration or an end, "
            f"at most {format_duration(largest)} from the binding)"
        )
    length = seconds_between(now, wanted.end_from(now))
    return LEASE_OVER_CAP, (
        f"spec.lease asks for {wanted.spelled()} ({format_duration(length)} from now); {who} "
        f"allow{'s' if who.startswith('this') else ''} at most {format_duration(largest)}"
    )


@dataclass
class Decision:
    """What the lease of one claim is at `now`, and what the run does about it."""

    state: str
    start: datetime.datetime | None = None
    end: datetime.datetime | None = None
    warning: datetime.datetime | None = None  # when the warning starts
    conditions: list = field(default_factory=list)  # [(type, status, reason, message)]
    lease_status: dict | None = None  # status.lease as it must be (None: no field)
    after: float | None = None  # seconds from now to the next deadline (warning start or end)
    newly: str = ""  # LEASE_ENDING or LEASE_EXPIRED when the claim enters that state in this run: one Event

    @property
    def expired(self) -> bool:
        return self.state == EXPIRED


def warning_start(start: datetime.datetime, end: datetime.datetime) -> datetime.datetime:
    """When the warning starts: a tenth of the lease before its end, at most 15 minutes, in whole seconds (rounded
    up: a 12 s lease is warned 2 s before its end)."""
    lead = min(WARNING_MAX, -int(-(WARNING_FRACTION * max(0.0, seconds_between(start, end))) // 1))
    return end - datetime.timedelta(seconds=lead)


def _recorded(claim: dict) -> dict:
    return (claim.get("status") or {}).get("lease") or {}


def _previous_reason(claim: dict) -> str:
    previous = cond.find((claim.get("status") or {}).get("conditions"), LEASE) or {}
    return previous.get("reason", "")


def _bound_since(claim: dict, now: datetime.datetime) -> datetime.datetime:
    """When the claim was bound: its recorded lease start, else when Association last became True, else now."""
    association = cond.find((claim.get("status") or {}).get("conditions"), cond.ASSOCIATION) or {}
    since = association.get("lastTransitionTime") if association.get("status") == "True" else None
    for text in (_recorded(claim).get("start"), since):
        if text:
            try:
                return parse_time(text)
            except LeaseError:
                continue
    return now


def expired_conditions(end: datetime.datetime, released: bool, was_bound: bool = True) -> list:
    """The conditions of a claim whose lease ended at `end`: its host released (or being released), or never
    bound (`was_bound` False)."""
    ended = format_time(end)
    if not was_bound:
        holds = "no host was bound before it"
    elif released:
        holds = "its host was released"
    else:
        holds = "its host is being released (powered off, deprovisioned, cleaned)"
    lease_message = f"the lease ended at {ended}: {holds}; the claim is never bound again: delete it"
    return [
        (LEASE, "False", LEASE_EXPIRED, lease_message),
        (cond.ASSOCIATION, "False", LEASE_EXPIRED, f"the lease ended at {ended}: the claim holds no host"),
        (cond.PROVISIONED, "False", LEASE_EXPIRED, f"the lease ended at {ended}"),
    ]


def decide(
    claim: dict,
    bound: bool,
    cap,
    now: datetime.datetime,
    tenant: int | None = None,
    booked_from: datetime.datetime | None = None,
) -> Decision:
    """The lease of `claim` at `now`. `bound`: the claim holds a host (its binding committed); `cap`: the cap of that
    host's infra namespace (seconds, None for none, or False when no policy admits the claim's namespace there any
    more: the lease may then not be extended), the Tenant's cap `tenant` applied (smaller). `booked_from`: the start
    of the earliest booking another claim holds on that host (_claims/pure/booking.py): the lease may not be extended
    past it, nor lose its end (issue 40: an extension voided an accepted booking)."""
    recorded = _recorded(claim)
    try:
        wanted = asked(claim)
        invalid = ""
    except LeaseError as error:
        wanted, invalid = None, str(error)
    if recorded.get("expired"):
        end = parse_time(recorded["end"]) if recorded.get("end") else now
        start = parse_time(recorded["start"]) if recorded.get("start") else None
        return _expired(claim, start, end, bound)
    if not bound:
        fixed = wanted is not None and (wanted.end is not None or wanted.start is not None)  # an end in time
        if fixed and wanted.end_from(now) <= now:
            # Its end passed before any host was bound: it never will be.
            return _expired(claim, None, wanted.end_from(now), False)
        if wanted is None:
            return Decision(NONE)
        after = seconds_between(now, wanted.end_from(now)) if fixed else None
        return Decision(UNBOUND, after=after)
    if wanted is None and not recorded.get("end") and not invalid:
        return Decision(NONE)

    start = _bound_since(claim, now)
    recorded_end = parse_time(recorded["end"]) if recorded.get("end") else None
    refused = None  # (reason, message) of a spec.lease not applied
    if invalid:
        end, refused = recorded_end, (LEASE_INVALID, f"spec.lease: {invalid}")
    elif wanted is None:
        if cap is None:
            end = None  # removed, and no cap asks for one
        else:
            who = _whose(cap, tenant, "of this host")
            requires = "requires" if who.startswith("this") else "require"
            end, refused = recorded_end, (LEASE_REQUIRED, f"{who} {requires} a lease")
    else:
        end = wanted.end_from(start)
        length = seconds_between(start, end)
        if cap is False:
            end, refused = (
                recorded_end,
                (LEASE_OVER_CAP, "no HostDeployPolicy admits this namespace any more: the lease cannot change"),
            )
        elif cap is not None and length > cap:
            end, refused = (
                recorded_end,
                (
                    LEASE_OVER_CAP,
                    f"spec.lease asks for {wanted.spelled()}, {format_duration(length)} after the binding; "
                    f"{_whose(cap, tenant, 'of this host')} "
                    f"allow{'s' if tenant == cap else ''} at most {format_duration(cap)}",
                ),
            )
    if refused is None and recorded_end is not None and _past_booking(end, recorded_end, booked_from):
        asks = "keeps the host with no end" if end is None else f"asks to keep the host to {format_time(end)}"
        end, refused = (
            recorded_end,
            (
                LEASE_HOST_BOOKED,
                f"spec.lease {asks}; another claim has booked the host from {format_time(booked_from)}: the "
                f"lease may end then at the latest",
            ),
        )
    if end is None:
        if refused is None:
            return Decision(NONE, conditions=[(LEASE, None, "", "")], lease_status=None)
        reason, message = refused
        return Decision(NONE, conditions=[(LEASE, "False", reason, f"{message}: the claim has no lease")])
    if end <= now:
        return _expired(claim, start, end, True)
    warning = warning_start(start, end)
    lease_status = {"start": format_time(start), "end": format_time(end)}
    if now >= warning:
        state, reason, after = ENDING, LEASE_ENDING, seconds_between(now, end)
        message = (
            f"the lease ends at {format_time(end)}: {format_duration(seconds_between(warning, end))} left at "
            f"{format_time(warning)}; extend spec.lease (within the cap) to keep the host"
        )
    else:
        state, reason, after = ACTIVE, LEASE_ACTIVE, seconds_between(now, warning)
        message = f"the lease ends at {format_time(end)} (warned from {format_time(warning)})"
    status = "True"
    if refused is not None:
        status, reason, message = "False", refused[0], f"{refused[1]}: the lease still ends at {format_time(end)}"
    newly = LEASE_ENDING if state == ENDING and _previous_reason(claim) != LEASE_ENDING else ""
    return Decision(
        state,
        start,
        end,
        warning,
        [(LEASE, status, reason, message)],
        lease_status,
        after,
        newly,
    )


def _past_booking(end, recorded_end: datetime.datetime, booked_from: datetime.datetime | None) -> bool:
    """Whether a lease's new end (None: none) extends it past the start of another claim's booking of its host."""
    if booked_from is None:
        return False
    return end is None or (end > booked_from and end > recorded_end)


def _expired(claim: dict, start: datetime.datetime | None, end: datetime.datetime, holding: bool) -> Decision:
    newly = "" if _recorded(claim).get("expired") else LEASE_EXPIRED
    lease_status = {"end": format_time(end), "expired": True}
    if start is not None:
        lease_status["start"] = format_time(start)
    return Decision(
        EXPIRED,
        start,
        end,
        conditions=expired_conditions(end, released=not holding, was_bound=start is not None),
        lease_status=lease_status,
        newly=newly,
    )


def started(claim: dict, now: datetime.datetime) -> Decision | None:
    """The lease of a claim this run binds now (None: it asks for none, or one that cannot be read)."""
    try:
        wanted = asked(claim)
    except LeaseError:
        return None
    if wanted is None:
        return None
    end = wanted.end_from(now)
    warning = warning_start(now, end)
    message = f"the lease ends at {format_time(end)} (warned from {format_time(warning)})"
    return Decision(
        ACTIVE,
        now,
        end,
        warning,
        [(LEASE, "True", LEASE_ACTIVE, message)],
        {"start": format_time(now), "end": format_time(end)},
        seconds_between(now, warning),
    )


def held(claim: dict, found: Decision, verdict: tuple[int, str] | None, now: datetime.datetime) -> Decision:
    """`found` once the tenant's blocking CLAIM_EXPIRED hooks had their say (verdict: _common/pure/tenancy.py
    expiry_verdict for the lease's end; None: nothing holds it). A lease that ends in this run, its claim bound, is
    held while the hooks have not allowed that end and the grace after it has not passed: its host stays, the claim
    says why and until when, and the run comes back at the grace's end (the hooks' answer wakes it before)."""
    if verdict is None or found.state != EXPIRED or not found.newly or found.start is None:
        return found
    grace, why = verdict
    until = found.end + datetime.timedelta(seconds=grace)
    if now >= until:
        return found
    message = (
        f"the lease ended at {format_time(found.end)}; the tenant's blocking CLAIM_EXPIRED hook(s) hold its host until "
        f"{format_time(until)} at the latest: {why}"
    )
    newly = LEASE_EXPIRY_HELD if _previous_reason(claim) != LEASE_EXPIRY_HELD else ""
    return Decision(
        HELD,
        found.start,
        found.end,
        found.warning,
        [(LEASE, "True", LEASE_EXPIRY_HELD, message)],
        {"start": format_time(found.start), "end": format_time(found.end)},
        seconds_between(now, until),
        newly,
    )
