# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node reuse: a released claim's host kept for the next claim of the same namespace with the same reuse key. Pure.

A claim asks with ``spec.nodeReuse.key`` (a DNS label: what its successors carry too, e.g. a MachineDeployment's
name). A HostDeployPolicy offers it with ``spec.nodeReuse`` (``maxHoldDuration``: how long a host is held;
``clean``: whether its disks are wiped before the hold, default true) for the hosts of its own namespace and the
claim namespaces it admits; several policies of one namespace that admit the claim's: the longest hold, and
the disks wiped when any of them says so. A namespace whose policies offer nothing binds such a claim normally:
its NodeReuse condition says reuse is not offered, and its host returns to the pool at release.

When such a claim is released (deleted, or its lease ended), its host goes through the release path (scrubbed,
powered off, deprovisioned; cleaned only when the policy says ``clean``, and then marked held uncleaned in the
scrub's write already) and, in the write that clears its consumerRef, is marked held (HOLD_ANNOTATION: the
claim's namespace, key and name, the hold's end, whether it was cleaned). While held, only a claim of that
namespace with that key binds it, before any other host; at the hold's end the mark goes: a cleaned host is free
at once, one not cleaned is marked in use (metal3.IN_USE_ANNOTATION) so that its provisioner deprovisions it with
cleaning before anyone binds it.

Holds and the namespace object (issue 40): a hold names the namespace's uid as well as its name, so a namespace
deleted and created again under that name (or another tenant's child namespace of the same name) never inherits the
host. A host released uncleaned also carries metal3.UNCLEANED_ANNOTATION, which the claim side may add but never
change or remove and which only a cleaning takes off: however the hold ends (its time, its mark removed or broken by
hand), the host is cleaned before any claim but the hold's own binds it.

Every decision takes the run's time (``now``): no clock here.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from dataclasses import dataclass

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import lease
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import admitting

HOLD_ANNOTATION = "metalclaim.io/reuse-hold"
NODE_REUSE = "NodeReuse"  # the condition type
# Reasons (the tenant guide lists them).
REUSE_OFFERED = "NodeReuseOffered"
REUSE_NOT_OFFERED = "NodeReuseNotOffered"
REUSED_HOST = "ReusedHost"
REUSE_INVALID = "NodeReuseInvalid"

_KEY = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ReuseError(ValueError):
    """A nodeReuse field that cannot be read (the CRD refuses it first)."""


def reuse_key(claim: dict) -> str | None:
    """The claim's spec.nodeReuse.key, or None when it asks for no reuse. Raises ReuseError when unreadable."""
    asked = (claim.get("spec") or {}).get("nodeReuse")
    if not asked:
        return None
    text = asked.get("key") if isinstance(asked, dict) else None
    if not isinstance(text, str) or not _KEY.match(text):
        raise ReuseError(f"spec.nodeReuse.key {text!r} is not a DNS label (a-z, 0-9, '-', at most 63)")
    return text


@dataclass(frozen=True)
class Offer:
    """What the policies of one infra namespace offer a claim namespace: a hold's length, and whether to clean."""

    hold: int  # seconds
    clean: bool


def policy_offer(policy: dict) -> Offer | None:
    """A policy's spec.nodeReuse, or None when it offers none (or one that cannot be read: fail closed)."""
    spec = (policy.get("spec") or {}).get("nodeReuse")
    if not isinstance(spec, dict):
        return None
    try:
        hold = lease.parse_duration(spec.get("maxHoldDuration"))
    except lease.LeaseError:
        return None
    return Offer(hold, spec.get("clean") is not False)


def offers(policies: list[dict], decisions) -> dict:
    """{infra namespace: Offer} over the namespaces whose admitting policies offer node reuse (decisions:
    policy.evaluate_policies' second value): the longest hold; clean when any of them cleans."""
    found: dict = {}
    for namespace, policy in admitting(policies, decisions):
        offer = policy_offer(policy)
        if offer is None:
            continue
        before = found.get(namespace)
        if before is not None:
            offer = Offer(max(before.hold, offer.hold), before.clean or offer.clean)
        found[namespace] = offer
    return found


@dataclass(frozen=True)
class Hold:
    """A host's hold: for claims of `namespace` carrying `key`, until `until`; `claim` the released claim's name."""

    namespace: str
    key: str
    claim: str
    until: datetime.datetime
    cleaned: bool
    namespace_uid: str = ""  # the namespace object's: "" (a mark without one) matches no namespace

    def encoded(self) -> str:
        return json.dumps(
            {
                "namespace": self.namespace,
                "namespaceUID": self.namespace_uid,
                "key": self.key,
                "claim": self.claim,
                "until": lease.format_time(self.until),
                "cleaned": self.cleaned,
            },
            sort_keys=True,
        )

    def seconds_left(self, now: datetime.datetime) -> float:
        return max(0.0, lease.seconds_between(now, self.until))

    def ended(self, now: datetime.datetime) -> bool:
        return now >= self.until


def hold_of(host: dict) -> Hold | None:
    """The host's hold, or None. A mark that cannot be read is a hold that ended (for nobody, not cleaned): the
    host goes back to the pool through cleaning, never to a claim that forged or broke it."""
    text = ((host.get("metadata") or {}).get("annotations") or {}).get(HOLD_ANNOTATION)
    if text is None:
        return None
    try:
        data = json.loads(text)
        return Hold(
            str(data["namespace"]),
            str(data["key"]),
            str(data.get("claim", "")),
            lease.parse_time(data["until"]),
            data.get("cleaned") is True,
            str(data.get("namespaceUID") or ""),
        )
    except (ValueError, TypeError, KeyError, AttributeError, lease.LeaseError):
        return Hold("", "", "", datetime.datetime.min.replace(tzinfo=datetime.timezone.utc), False)


@dataclass(frozen=True)
class Uncleaned:
    """A host's uncleaned mark: released with its disks kept for the claims of one namespace object."""

    namespace: str
    namespace_uid: str
    claim: str
    since: str

    def encoded(self) -> str:
        return json.dumps(
            {"namespace": self.namespace, "namespaceUID": self.namespace_uid, "claim": self.claim, "since": self.since},
            sort_keys=True,
        )


def uncleaned_of(host: dict) -> Uncleaned | None:
    """The host's uncleaned mark, or None. One that cannot be read is a mark for nobody (fail closed)."""
    text = ((host.get("metadata") or {}).get("annotations") or {}).get(metal3.UNCLEANED_ANNOTATION)
    if text is None:
        return None
    try:
        data = json.loads(text)
        return Uncleaned(
            str(data["namespace"]), str(data["namespaceUID"]), str(data.get("claim", "")), str(data.get("since", ""))
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return Uncleaned("", "", "", "")


def to_hold(claim: dict, offer: Offer | None) -> Offer | None:
    """The offer that applies to the claim's release (None: its host returns to the pool): the claim asks with a
    readable key and its host's namespace offers reuse to its namespace."""
    try:
        key = reuse_key(claim)
    except ReuseError:
        return None
    return offer if key is not None else None


def scrubbed(host: dict, offer: Offer | None, claim: dict, now: datetime.datetime, namespace_uid: str) -> dict:
    """The release scrub (release.scrubbed_spec's result) for a host to be held: no cleaning when the offer says so.
    Not cleaned, it is marked held uncleaned for the claim in the same write (the mark held() then writes at the
    give-back, its end counted from there), and marked uncleaned for the claim's namespace object (a mark already
    there, for it, is kept as it is: the claim side never changes one): the host-fields guard lets the claim side
    disable cleaning only so, and every way a hold ends cleans a host so marked (ended()). Marks already saying so
    for the claim are kept: the next run writes nothing. `namespace_uid`: the claim's namespace's."""
    if offer is None or offer.clean:
        return host
    held = copy.deepcopy(host)
    held["spec"]["automatedCleaningMode"] = "disabled"
    meta = claim["metadata"]
    mine = (meta["namespace"], reuse_key(claim), meta["name"])
    mark = hold_of(host)
    annotations = dict(held["metadata"].get("annotations") or {})
    if (
        mark is None
        or mark.cleaned
        or (mark.namespace, mark.key, mark.claim, mark.namespace_uid)
        != (
            *mine,
            namespace_uid,
        )
    ):
        mark = Hold(*mine, now + datetime.timedelta(seconds=offer.hold), False, namespace_uid)
        annotations[HOLD_ANNOTATION] = mark.encoded()
    if metal3.UNCLEANED_ANNOTATION not in annotations:
        since = lease.format_time(now)
        annotations[metal3.UNCLEANED_ANNOTATION] = Uncleaned(
            meta["namespace"], namespace_uid, meta["name"], since
        ).encoded()
    held["metadata"]["annotations"] = annotations
    return held


def held(released: dict, claim: dict, offer: Offer, now: datetime.datetime, namespace_uid: str) -> tuple[dict, Hold]:
    """The released host (consumerRef cleared) marked held for the claim's namespace (its uid) and key from `now`."""
    meta = claim["metadata"]
    cleaned = (released.get("spec") or {}).get("automatedCleaningMode") != "disabled" and uncleaned_of(released) is None
    hold = Hold(
        meta["namespace"],
        reuse_key(claim),
        meta["name"],
        now + datetime.timedelta(seconds=offer.hold),
        cleaned,
        namespace_uid,
    )
    marked = copy.deepcopy(released)
    marked["metadata"].setdefault("annotations", {})
    marked["metadata"]["annotations"] = {**(marked["metadata"]["annotations"] or {}), HOLD_ANNOTATION: hold.encoded()}
    return marked, hold


def may_take(host: dict, claim: dict, now: datetime.datetime, namespace_uid: str) -> bool:
    """Whether the claim may bind the host as far as holds go: a host held (its hold not yet ended) only by a claim
    of the hold's namespace object (name and uid: `namespace_uid` is the claim's namespace's) with its key; a host
    whose hold ended by nobody until the mark is gone; a host marked uncleaned by nobody but such a claim of the
    mark's namespace object, and by nobody at all once its hold is gone (it is cleaned first: ended())."""
    hold = hold_of(host)
    mark = uncleaned_of(host)
    if hold is None:
        return mark is None
    if hold.ended(now):
        return False
    try:
        key = reuse_key(claim)
    except ReuseError:
        return False
    if key is None or (claim["metadata"].get("namespace"), key) != (hold.namespace, hold.key):
        return False
    if not hold.namespace_uid or hold.namespace_uid != namespace_uid:
        return False
    return mark is None or mark.namespace_uid == namespace_uid


def preferred(host: dict, claim: dict, now: datetime.datetime, namespace_uid: str) -> bool:
    """Whether the host is held for this claim (the binder tries it before any other)."""
    return hold_of(host) is not None and may_take(host, claim, now, namespace_uid)


def taken(host: dict) -> dict:
    """The host as its binding writes it: without its hold mark (the claim it was held for takes it)."""
    if hold_of(host) is None:
        return host
    updated = copy.deepcopy(host)
    del updated["metadata"]["annotations"][HOLD_ANNOTATION]
    return updated


def ended(host: dict, now: datetime.datetime) -> dict | None:
    """The host as the end of its hold writes it, or None while it holds (or has no mark, or is already so). Its
    hold mark goes; not cleaned before the hold (the hold says so, or the host is marked uncleaned: say, its hold
    mark was removed by hand), it is marked in use (as its provisioner marks a host that ran a consumer's OS) with
    cleaning asked, so it is deprovisioned and cleaned before anyone binds it. Not for a consumed host."""
    hold = hold_of(host)
    mark = uncleaned_of(host)
    if (hold is None and mark is None) or (hold is not None and not hold.ended(now)):
        return None
    updated = copy.deepcopy(host)
    annotations = updated["metadata"]["annotations"]
    annotations.pop(HOLD_ANNOTATION, None)
    if mark is not None or (hold is not None and not hold.cleaned):
        updated["spec"]["automatedCleaningMode"] = "metadata"
        annotations.setdefault(
            metal3.IN_USE_ANNOTATION,
            json.dumps({"consumer": "", "since": lease.format_time(now), "why": "node reuse hold ended"}),
        )
    return None if updated == host else updated


def under_lease_cap(offer: Offer | None, cap: int | None) -> Offer | None:
    """The offer where leases are capped for the claim's namespace (cap: lease.with_tenant_cap's, None: no cap):
    none. Issue 40: a lease ending into a hold, taken by the next leased claim with the key, and so on, kept one
    host past maxLeaseDuration for ever; where leases are capped, a released host returns to the pool."""
    return None if cap is not None else offer


def condition(claim: dict, offer: Offer | None, reused: bool, capped: bool = False) -> tuple[str, str, str, str] | None:
    """A bound claim's NodeReuse condition (None: it asks for no reuse). `offer`: what its host's namespace offers
    its namespace; `reused`: its host was held for it; `capped`: leases are capped for its namespace there (so no
    reuse is offered). Tenants read it: never a host's name or namespace."""
    try:
        key = reuse_key(claim)
    except ReuseError as error:
        return (NODE_REUSE, "False", REUSE_INVALID, f"{error}: the host returns to the pool at release")
    if key is None:
        return None
    if offer is None and capped:
        return (
            NODE_REUSE,
            "False",
            REUSE_NOT_OFFERED,
            "leases are capped for this namespace on this claim's host (maxLeaseDuration): node reuse is not offered "
            "where they are, and the host returns to the pool at release",
        )
    if offer is None:
        return (
            NODE_REUSE,
            "False",
            REUSE_NOT_OFFERED,
            "no HostDeployPolicy of this claim's host offers node reuse to this namespace: the host returns to the "
            "pool at release",
        )
    cleaning = "wiped" if offer.clean else "not wiped"
    kept = (
        f"at release, the host is kept for the next claim of this namespace with spec.nodeReuse.key {key!r} for "
        f"{lease.format_duration(offer.hold)} (its disks {cleaning})"
    )
    if reused:
        return (NODE_REUSE, "True", REUSED_HOST, f"bound to the host a claim with key {key!r} left; {kept}")
    return (NODE_REUSE, "True", REUSE_OFFERED, kept)
