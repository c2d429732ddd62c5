# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The booking step of hostclaim_reconcile: every pending booking ahead decided first come, first served, and the
hosts' bookings annotations written. I/O edge over _claims/pure/booking.py.

The step plans over every live claim the run can see, not only the run's own: whichever run (of whichever
controller) comes first decides the older bookings first, so the order never depends on which keys a batch holds.
Each host's annotation is written under its resourceVersion (a replace of the host as read): a run that lost a race
to another reads claims and hosts again and plans again, the winner's bookings then in its way; a run writes nothing
when the hosts already say what it planned (a second run writes nothing).

The run's own claims get their Lease condition (Booked, BookingConflict or LeaseInvalid) and status.booking (the
window, never a host), and an entry carrying `after` (seconds to the start): the controller wakes the claim at its
start without polling, and the bind step binds it there.
"""

from __future__ import annotations

import copy
import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io import leases
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import namespace_metadata
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, booking, lease
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import ConflictError, RefusedError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.selectors import (
    SelectorError,
    matches,
    validate,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import may_bind

ATTEMPTS = 8  # plans after lost races before the step gives up for this run (the claims are retried)


def _booking_claims(claims: list[dict]) -> bool:
    return any("start" in ((c.get("spec") or {}).get("lease") or {}) for c in claims)


def book_claims(run) -> dict:
    """Decide the pending bookings and tidy the hosts' bookings; note the run's own booking claims."""
    kube = run.kube
    held = getattr(kube, "held", kube.list)  # read only here (a host is copied before it is written): no copies
    claims = [c for c in held(API_VERSION, "HostClaim") if binding.claim_kind(c) == binding.DEFAULT_CLAIM_KIND]
    wanted = {(w["namespace"], w["name"]) for w in run.wanted} if run.wanted else None
    mine = {binding.key(c) for c in claims if wanted is None or binding.key(c) in wanted}  # the run's own claims
    hosts = held(API_VERSION, "BareMetalHost")
    result = {"changed": False, "claims": [], "host_writes": 0, "conflicts": 0}
    if not _booking_claims(claims) and not any(booking.ANNOTATION in _annotations(h) for h in hosts):
        return result  # nothing booked, nothing to tidy: no more reads
    policies = kube.list(API_VERSION, "HostDeployPolicy")
    metadata_of = namespace_metadata(kube)
    now = leases.now_of(run)
    relist = getattr(kube, "relist", kube.list)  # a caching client must go to the server after a lost race
    gone: set = set()
    reach = booking.horizons(policies)  # how far ahead each infra namespace's hosts take bookings
    allowed = booking.limits(policies)  # how many bookings each claim namespace may hold there
    closed: set = set()  # hosts the API server refused to write in this run: they take no new booking

    def owner_of(namespace: str) -> tuple[str, str]:  # a Tenant's namespaces share its bookings limit
        return booking.booker(namespace, (metadata_of.get(namespace) or {}).get("labels"))

    for _attempt in range(ATTEMPTS):
        candidates = _candidates(hosts, policies, metadata_of)
        planned = booking.plan(claims, hosts, candidates, now, gone, reach, allowed, closed, owner_of)
        if planned.unknown - _checked(kube, planned.unknown, gone):
            planned = booking.plan(claims, hosts, candidates, now, gone, reach, allowed, closed, owner_of)
        written = _write_hosts(run, planned, hosts, result)
        if written is True:
            break
        if written is False:
            result["conflicts"] += 1
        else:  # refused: planned again without it; only the claims that wanted that host wait
            closed.add(written)
            continue
        claims = [c for c in relist(API_VERSION, "HostClaim") if binding.claim_kind(c) == binding.DEFAULT_CLAIM_KIND]
        hosts = relist(API_VERSION, "BareMetalHost")
    else:
        planned = booking.Plan()  # every attempt lost: the claims wait for the next run (the hosts changed: a wake)
        for key in sorted(mine):
            result["claims"].append({"namespace": key[0], "name": key[1], "state": "conflict", "changed": False})
    for decision in planned.decisions:
        if decision.newly:
            window = decision.window
            run.event(decision.claim, "Normal", booking.BOOKED, booking.booked_message(window))
        if binding.key(decision.claim) in mine:
            result["claims"].append(_note(run, decision, now))
    result["changed"] = result["host_writes"] > 0 or any(r["changed"] for r in result["claims"])
    return result


def _checked(kube, unknown: set, gone: set) -> set:
    """Read the claims of bookings the run's list does not hold (from the server): their uids added to `gone` when
    deleted, being deleted or replaced by another claim of that name. The entries still there (claims created since
    the list, booked by another run) are returned."""
    alive = set()
    for uid, namespace, name in sorted(unknown):
        if uid in gone:
            continue
        fresh = kube.get(API_VERSION, "HostClaim", name, namespace)
        meta = (fresh or {}).get("metadata") or {}
        if fresh is None or meta.get("uid") != uid or meta.get("deletionTimestamp"):
            gone.add(uid)
        else:
            alive.add((uid, namespace, name))
    return alive


def _annotations(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _candidates(hosts: list[dict], policies: list[dict], metadata_of: dict):
    """candidates(claim) -> the keys of the hosts a booking claim may use: the namespaces its policies admit (and
    spec.hostSelector.inNamespace), its selector, its namespace's host pools and Tenant reservations, and the lease
    caps there (the window's length)."""

    found: dict = {}  # (namespace, selector, window length) -> the keys: claims alike share them

    def candidates(claim: dict) -> list:
        window = booking.requested_or_none(claim)
        selector = (claim.get("spec") or {}).get("hostSelector") or {}
        alike = (binding.key(claim)[0], json.dumps(selector, sort_keys=True), window.end - window.start)
        if alike not in found:
            found[alike] = _keys(claim, window)
        return found[alike]

    def _keys(claim: dict, window) -> list:
        namespace = binding.key(claim)[0]
        labels = (metadata_of.get(namespace) or {}).get("labels") or {}
        annotations = (metadata_of.get(namespace) or {}).get("annotations")
        selector = (claim.get("spec") or {}).get("hostSelector") or {}
        try:
            validate(selector)
        except SelectorError:
            return []
        authorized, decisions = evaluate_policies(policies, namespace, labels)
        in_namespace = selector.get("inNamespace")
        allowed = {ns for ns in authorized if not in_namespace or ns == in_namespace}
        caps = lease.with_tenant_cap(lease.caps(policies, decisions), labels)
        wanted = lease.asked(claim)
        allowed = {ns for ns in allowed if lease.fits(wanted, caps.get(ns), window.start)}
        pools = binding.host_pools(annotations)
        return [
            binding.key(h)
            for h in hosts
            if binding.key(h)[0] in allowed
            and matches(selector, (h.get("metadata") or {}).get("labels"))
            and may_bind(h, labels)
            and binding.in_host_pool(h, pools)
        ]

    return candidates


def _write_hosts(run, planned: booking.Plan, hosts: list[dict], result: dict):
    """Write each host's new bookings under its resourceVersion: True when all are written, False at the first lost
    race, the host's key when the API server refused its write (a 422: say, its annotations too large; logged for
    the infra team, never told a tenant). The writes before either stand: each is whole and right on its own."""
    by_key = {binding.key(h): h for h in hosts}
    for host_key in sorted(planned.writes):
        current = by_key[host_key]
        updated = copy.deepcopy(current)
        annotations = updated["metadata"].setdefault("annotations", {}) or {}
        updated["metadata"]["annotations"] = annotations
        if planned.writes[host_key] is None:
            annotations.pop(booking.ANNOTATION, None)
        else:
            annotations[booking.ANNOTATION] = planned.writes[host_key]
        if not run.check_mode:
            try:
                run.kube.replace(updated)
            except ConflictError:
                return False
            except RefusedError as error:
                run.warn(f"BareMetalHost {host_key[0]}/{host_key[1]}: its bookings were not written: {error}")
                return host_key
        run.record("BareMetalHost", current, updated)
        result["host_writes"] += 1
    return True


def _note(run, decision: booking.Decision, now) -> dict:
    claim = copy.deepcopy(decision.claim)  # the run's list holds it: the book gets its own
    namespace, name = binding.key(claim)
    result = {"namespace": namespace, "name": name, "booking": decision.state, "changed": False}
    window = decision.window
    if decision.state == "too_far":
        result["after"] = lease.seconds_between(now, decision.retry_at)  # within reach then: decided again
    elif window is not None and window.start > now:
        result["after"] = lease.seconds_between(now, window.start)  # the start: the bind step binds it then
    if decision.state == "started" or (window is not None and window.start <= now):
        return result  # the lease and bind steps say the rest; status.booking stays as the record of the booking
    updates = {"booking": booking.status_of(window) if decision.state == "booked" else None}
    conditions = decision.conditions()
    previous = cond.find((claim.get("status") or {}).get("conditions"), lease.LEASE) or {}
    if decision.state != "booked" and previous.get("reason") != conditions[0][2]:
        run.event(claim, "Warning", conditions[0][2], conditions[0][3])
    run.book.note(claim, conditions, updates, result=result)
    return result
