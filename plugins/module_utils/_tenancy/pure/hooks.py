# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tenant hooks (TAPMS's tenanthooks): which events are due, their payloads, credentials, backoff. Pure.

A hook is POSTed a JSON payload for the event types it subscribes to. A blocking hook is asked before a tenant
change (CREATE, UPDATE, DELETE), a claim's binding (CLAIM_BOUND) or a lease's end (CLAIM_EXPIRED) and anything but
200 stops (or holds, for a lease's end: a grace at most) that change; a non-blocking hook is told after the change,
never delays it, and a failed delivery is retried with backoff.
What was asked and delivered lives in the Tenant's status.hooks, so every run starts from current state (no run
sleeps waiting for a hook):

  status.hooks.announcedGeneration  the generation whose CREATE/UPDATE the blocking hooks allowed
  status.hooks.deleteAnnounced      the blocking hooks allowed the deletion
  status.hooks.refusedAttempts      how many times in a row a blocking hook refused (the backoff)
  status.hooks.refused              the change refused (eventType, generation) and when to ask again
  status.hooks.pending              non-blocking deliveries not yet accepted: hook, eventType, (claim),
                                    attempts, nextAttemptAt, lastError
  status.hooks.claims               each claim of the tenant's namespaces as last delivered: bound, provisioned,
                                    its lease's end, expiring (in its warning), expired

The blocking CLAIM_BOUND hooks' verdicts live on the tenant's namespaces (tenancy.BINDING_APPROVALS_ANNOTATION),
where the bind step reads them: claim uid -> allowed, or refused with the message and when to ask again. The blocking
CLAIM_EXPIRED hooks' verdicts likewise (tenancy.EXPIRY_APPROVALS_ANNOTATION), for the lease's end they were asked
about, with the grace: the claim layer releases a lease's host once they allow its end, or a grace after it.

Never in a payload, the status or a message: Secret data (credentials are redacted from whatever a hook
answers) and BMC data (a claim is described by namespace, name, host name and its conditions only).

A delivery is bounded as a whole: timeoutSeconds is its deadline (connection, request and answer together, so a
hook trickling its answer a byte at a time is cut off there), a hook that could not be reached or answered too
late is not called again in the same run, and a tenant's hooks get TENANT_RUN_BUDGET_SECONDS per run between
them, which bounds what they add to a run. The tenants side reconciles tenants side by side, so one tenant's slow
hooks delay neither another tenant's change nor its deliveries (_tenancy/io/reconcile.py).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import TIMESTAMP_FORMAT
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    EXPIRY_GRACE_MAX_SECONDS,
    LEASE_CONDITION,
    LEASE_ENDING_REASON,
    LEASE_EXPIRY_HELD_REASON,
    TENANT_LABEL,
)

UTC = timezone.utc  # datetime.UTC is Python 3.11+; modules run on 3.10 too (tests/config.yml)

CREATE = "CREATE"
UPDATE = "UPDATE"
DELETE = "DELETE"
CLAIM_BOUND = "CLAIM_BOUND"
CLAIM_PROVISIONED = "CLAIM_PROVISIONED"
CLAIM_RELEASED = "CLAIM_RELEASED"
CLAIM_EXPIRING = "CLAIM_EXPIRING"  # a claim's lease entered its warning window (told; cannot be stopped)
CLAIM_EXPIRED = "CLAIM_EXPIRED"  # its lease ended (a blocking hook is asked before: it may hold the end, a grace)
TENANT_EVENTS = (CREATE, UPDATE, DELETE)
CLAIM_EVENTS = (CLAIM_BOUND, CLAIM_PROVISIONED, CLAIM_RELEASED, CLAIM_EXPIRING, CLAIM_EXPIRED)
EVENT_TYPES = TENANT_EVENTS + CLAIM_EVENTS

# Tenants are cluster-scoped, so credentials Secrets live in one namespace of their own: the tenancy identity
# may `get` Secrets there by name (config/rbac/tenancy_hooks_role.yaml) and nowhere else, and only Secrets of
# this type are used (another Secret of that namespace named in a ref is refused unread: a Tenant author cannot
# have the controller send an arbitrary Secret to a URL of theirs). Each belongs to one tenant, named by its
# label TENANT_LABEL: a Secret without it, or labelled for another tenant, is refused before its data is read
# (a Tenant author cannot have another tenant's token sent to a URL of theirs either).
CREDENTIALS_NAMESPACE = "metalclaim-hooks"
CREDENTIALS_TYPE = "tenancy.metalclaim.io/hook-credentials"
TOKEN_KEY = "token"
USERNAME_KEY = "username"
PASSWORD_KEY = "password"

DEFAULT_TIMEOUT_SECONDS = 5
# What one tenant's hooks may take of a run, all deliveries together (the CRD's largest timeoutSeconds): past it,
# its remaining deliveries wait for the next run (a blocking one counts as refused, a notification as failed).
TENANT_RUN_BUDGET_SECONDS = 30.0
BACKOFF_BASE_SECONDS = 2.0
BACKOFF_CAP_SECONDS = 300.0
# A non-blocking delivery is dropped after this many failed attempts (the condition says so).
MAX_ATTEMPTS = 10
# How much of a refusing hook's answer is kept in the status.
ANSWER_EXCERPT = 200
URL = re.compile(r"https?://[^\s/?#]+[^\s]*")

# The condition and its reasons.
HOOKS = "Hooks"
HOOKS_DELIVERED = "HooksDelivered"
DELIVERY_RETRYING = "DeliveryRetrying"
DELIVERY_ABANDONED = "DeliveryAbandoned"
HOOK_REFUSED = "HookRefused"
REDACTED = "[redacted]"


@dataclass(frozen=True)
class Hook:
    name: str
    url: str
    blocking: bool
    event_types: tuple[str, ...]
    credentials: str  # the Secret's name in CREDENTIALS_NAMESPACE ("" for none)
    timeout: float  # the whole delivery's deadline, in seconds
    tenant: str = ""  # the tenant whose spec lists it (spec.tenantName): the only one whose credentials it gets
    field: str = ""  # where it is in that spec, e.g. spec.hooks[0]


def hooks(tenant: dict) -> list[Hook]:
    spec = tenant.get("spec") or {}
    owner = spec.get("tenantName") or (tenant.get("metadata") or {}).get("name") or ""
    found = []
    for index, entry in enumerate(spec.get("hooks") or []):
        found.append(
            Hook(
                name=entry.get("name", ""),
                url=entry.get("url", ""),
                blocking=bool(entry.get("blockingCall")),
                event_types=tuple(entry.get("eventTypes") or ()),
                credentials=(entry.get("credentialsSecretRef") or {}).get("name", ""),
                timeout=float(entry.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS),
                tenant=owner,
                field=f"spec.hooks[{index}]",
            )
        )
    return found


def subscribed(tenant: dict, event_type: str, blocking: bool) -> list[Hook]:
    return [h for h in hooks(tenant) if event_type in h.event_types and h.blocking == blocking]


def wants_claim_events(tenant: dict) -> bool:
    return any(set(h.event_types) & set(CLAIM_EVENTS) for h in hooks(tenant))


def validate(tenant: dict) -> list[tuple[str, str]]:
    """(field, message) for each hook the CRD would refuse too (this holds without the CRD)."""
    problems = []
    seen = set()
    for index, entry in enumerate((tenant.get("spec") or {}).get("hooks") or []):
        field = f"spec.hooks[{index}]"
        name = entry.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name or ""):
            problems.append((f"{field}.name", f"{field}.name {name!r} is not a DNS label"))
        elif name in seen:
            problems.append((f"{field}.name", f"{field}.name {name!r} is listed twice"))
        seen.add(name)
        url = entry.get("url")
        if not isinstance(url, str) or not URL.fullmatch(url):
            problems.append((f"{field}.url", f"{field}.url {url!r} is not an http(s) URL"))
        events = entry.get("eventTypes") or []
        unknown = [e for e in events if e not in EVENT_TYPES]
        if not events or unknown:
            problems.append(
                (f"{field}.eventTypes", f"{field}.eventTypes must list some of {', '.join(EVENT_TYPES)}: {unknown}")
            )
    return problems


# -- which tenant event is due --------------------------------------------------------------------------------


def hook_status(tenant: dict) -> dict:
    return dict((tenant.get("status") or {}).get("hooks") or {})


def tenant_event_due(tenant: dict) -> str | None:
    """CREATE (never announced), UPDATE (a newer generation), DELETE (being deleted), or None."""
    recorded = hook_status(tenant)
    if (tenant.get("metadata") or {}).get("deletionTimestamp"):
        return None if recorded.get("deleteAnnounced") else DELETE
    announced = recorded.get("announcedGeneration")
    if announced is None:
        # A tenant deployed before it had hooks state (an upgrade) is not created again.
        return UPDATE if (tenant.get("status") or {}).get("state") == "Deployed" else CREATE
    if (tenant.get("metadata") or {}).get("generation", 0) > announced:
        return UPDATE
    return None


# -- claim events --------------------------------------------------------------------------------------------


def claim_facts(claim: dict) -> dict:
    """What a claim's events are computed from; never its host's BMC or hardware data. `leaseEnd` is
    status.lease.end ("" without a lease), `expiring` the Lease condition's warning (LeaseEnding, or its end held
    by a blocking hook), `expired` status.lease.expired."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    host = (status.get("hardwareData") or {}).get("name") or ""
    conditions = status.get("conditions") or []
    provisioned = any(c.get("type") == "Provisioned" and c.get("status") == "True" for c in conditions)
    lease = status.get("lease") or {}
    expired = lease.get("expired") is True
    expiring = not expired and any(
        c.get("type") == LEASE_CONDITION and c.get("reason") in (LEASE_ENDING_REASON, LEASE_EXPIRY_HELD_REASON)
        for c in conditions
    )
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "hostName": host,
        "bound": bool(host),
        "provisioned": bool(host) and provisioned,
        "leaseEnd": str(lease.get("end") or ""),
        "expiring": bool(host) and expiring,
        "expired": expired,
    }


def event_fingerprint(claim: dict | None) -> tuple:
    """What of a claim its tenant's claim events are computed from (the controller's mapper compares it: a claim
    change that alters none of it tells no hook anything). A claim absent is an unbound one."""
    found = claim_facts(claim or {})
    return found["hostName"], found["provisioned"], found["leaseEnd"], found["expiring"], found["expired"]


def claim_events(recorded: list[dict], claims: list[dict]) -> tuple[list[tuple[str, dict]], list[dict]]:
    """(event type, claim facts) for each change since `recorded` (what was last delivered), and the new record.

    Unbound claims that never were bound are not recorded (the record is of claims with something to tell), but
    for an expired lease's (its end is told once). CLAIM_EXPIRING is told once per lease end (an extended lease
    entering its new warning is told again); CLAIM_EXPIRED before the CLAIM_RELEASED of the same claim.
    """
    before = {(r["namespace"], r["name"]): r for r in recorded or []}
    events: list[tuple[str, dict]] = []
    record = []
    seen = set()
    for claim in sorted(claims, key=lambda c: (c["metadata"].get("namespace"), c["metadata"].get("name"))):
        facts = claim_facts(claim)
        key = (facts["namespace"], facts["name"])
        seen.add(key)
        old = before.get(key) or {"bound": False, "provisioned": False, "hostName": ""}
        if facts["expiring"] and not (old.get("expiring") and old.get("leaseEnd") == facts["leaseEnd"]):
            events.append((CLAIM_EXPIRING, facts))
        if facts["expired"] and not old.get("expired"):
            events.append((CLAIM_EXPIRED, {**facts, "hostName": facts["hostName"] or old.get("hostName", "")}))
        if old["bound"] and (not facts["bound"] or old["hostName"] != facts["hostName"]):
            events.append((CLAIM_RELEASED, {**facts, "hostName": old["hostName"]}))
            old = {"bound": False, "provisioned": False}
        if facts["bound"] and not old["bound"]:
            events.append((CLAIM_BOUND, facts))
        if facts["provisioned"] and not old["provisioned"]:
            events.append((CLAIM_PROVISIONED, facts))
        if facts["bound"] or facts["expired"]:
            record.append(facts)
    for key, old in sorted(before.items()):
        if key not in seen and old.get("bound"):
            events.append((CLAIM_RELEASED, {**old, "bound": False, "provisioned": False}))
    return events, record


# -- payloads ------------------------------------------------------------------------------------------------


def tenant_spec(tenant: dict, state: str) -> dict:
    """TAPMS's tenantspec: the spec with the tenant's state; each hook's credentials by Secret name only."""
    spec = tenant.get("spec") or {}
    shown = {key: value for key, value in spec.items() if key != "hooks"}
    shown["state"] = state
    shown["hooks"] = [
        {
            "name": h.name,
            "url": h.url,
            "blockingCall": h.blocking,
            "eventTypes": list(h.event_types),
            **({"credentialsSecretRef": {"name": h.credentials}} if h.credentials else {}),
        }
        for h in hooks(tenant)
    ]
    return shown


def payload(event_type: str, tenant: dict, state: str, claim: dict | None = None, conditions=None) -> dict:
    body = {"eventType": event_type, "tenantSpec": tenant_spec(tenant, state)}
    if claim is not None:
        body["claim"] = {
            "namespace": claim["namespace"],
            "name": claim["name"],
            "hostName": claim.get("hostName", ""),
            **({"leaseEnd": claim["leaseEnd"]} if claim.get("leaseEnd") else {}),
            "conditions": [
                {k: c.get(k, "") for k in ("type", "status", "reason", "message")} for c in conditions or []
            ],
        }
    return body


# -- credentials ---------------------------------------------------------------------------------------------


def credentials_where(hook: Hook) -> str:
    """How a problem with a hook's credentials starts: the field, then the Secret."""
    field = f"{hook.field}.credentialsSecretRef: " if hook.field else ""
    return f"{field}credentials Secret {CREDENTIALS_NAMESPACE}/{hook.credentials}"


def authorization(secret: dict | None, hook: Hook) -> tuple[str, list[str], str]:
    """(Authorization header value, the secret values to redact, problem) from a hook's credentials Secret.

    Only a Secret of CREDENTIALS_TYPE labelled TENANT_LABEL=<the hook's tenant> is used: its type and label are
    checked before its data is read. A token is sent as a bearer token, username and password as basic auth;
    anything else is a problem and nothing is sent. The problem names the field and never quotes the data.
    """
    where = credentials_where(hook)
    if secret is None:
        return "", [], f"{where} not found"
    if secret.get("type") != CREDENTIALS_TYPE:
        return "", [], f"{where} is not of type {CREDENTIALS_TYPE} (not used)"
    owner = ((secret.get("metadata") or {}).get("labels") or {}).get(TENANT_LABEL)
    if not owner:
        return "", [], f"{where} has no label {TENANT_LABEL} (it must name the tenant it belongs to; not used)"
    if not hook.tenant or owner != hook.tenant:
        return "", [], f"{where} is not labelled {TENANT_LABEL}={hook.tenant}: it is another tenant's (not used)"
    data = {}
    try:
        for key, value in (secret.get("data") or {}).items():
            data[key] = base64.b64decode(value, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return "", [], f"{where}: data is not base64 of UTF-8 text"
    values = [v for v in data.values() if v]
    token, user, password = data.get(TOKEN_KEY), data.get(USERNAME_KEY), data.get(PASSWORD_KEY)
    if token and not (user or password):
        header = f"Bearer {token}"
    elif user and password and not token:
        header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    else:
        return "", values, f"{where} must hold either {TOKEN_KEY} or {USERNAME_KEY} and {PASSWORD_KEY}"
    if any(ch in header for ch in "\r\n"):
        return "", values, f"{where}: a value holds a line break"
    return header, [*values, header, header.split(" ", 1)[1]], ""


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every secret value (and its base64) replaced; the longest first so none leaks in part."""
    forms = set()
    for value in secrets:
        if value:
            forms.add(value)
            forms.add(base64.b64encode(value.encode()).decode())
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text


def excerpt(answer: bytes) -> str:
    """The start of a hook's answer, printable, for a status message."""
    text = answer[: ANSWER_EXCERPT * 4].decode("utf-8", errors="replace")
    text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return text[:ANSWER_EXCERPT] + ("..." if len(text) > ANSWER_EXCERPT else "")


# -- backoff and pending deliveries --------------------------------------------------------------------------


def backoff(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones: 2, 4, 8 ... capped at 5 minutes."""
    if attempts <= 0:
        return 0.0
    return min(BACKOFF_BASE_SECONDS * 2 ** (attempts - 1), BACKOFF_CAP_SECONDS)


def parse_time(value: str) -> datetime:
    return datetime.strptime(value, TIMESTAMP_FORMAT).replace(tzinfo=UTC)


def format_time(value: datetime) -> str:
    return value.strftime(TIMESTAMP_FORMAT)


def delivery_key(entry: dict) -> tuple:
    claim = entry.get("claim") or {}
    return entry["hook"], entry["eventType"], claim.get("namespace", ""), claim.get("name", "")


def queued(pending: list[dict], tenant: dict, event_type: str, now: str, claim: dict | None = None) -> list[dict]:
    """`pending` with a delivery of the event to each hook told of it (notified; due now; one per key)."""
    result = list(pending)
    keys = {delivery_key(e) for e in result}
    for hook in notified(tenant, event_type):
        entry = {"hook": hook.name, "eventType": event_type, "attempts": 0, "nextAttemptAt": now, "lastError": ""}
        if claim is not None:
            entry["claim"] = {k: claim.get(k, "") for k in ("namespace", "name", "hostName")}
            if claim.get("leaseEnd"):
                entry["claim"]["leaseEnd"] = claim["leaseEnd"]
        if delivery_key(entry) not in keys:
            keys.add(delivery_key(entry))
            result.append(entry)
    return result


def due(pending: list[dict], now: datetime) -> list[dict]:
    return [e for e in pending if parse_time(e["nextAttemptAt"]) <= now]


def after_failure(entry: dict, error: str, now: datetime) -> dict | None:
    """The entry after a failed attempt, due again after the backoff; None when it is given up."""
    attempts = entry.get("attempts", 0) + 1
    if attempts >= MAX_ATTEMPTS:
        return None
    return {
        **entry,
        "attempts": attempts,
        "nextAttemptAt": format_time(now + timedelta(seconds=backoff(attempts))),
        "lastError": error[:1000],
    }


def seconds_until_next(pending: list[dict], now: datetime) -> float | None:
    if not pending:
        return None
    soonest = min(parse_time(e["nextAttemptAt"]) for e in pending)
    return max(0.0, (soonest - now).total_seconds())


def refused_wait(hook_state: dict, event: str, generation: int, now: datetime) -> float | None:
    """Seconds until the blocking hooks that refused this very change may be asked again (None: ask now).

    A new generation (the spec edited) or another event is asked at once.
    """
    refused = hook_state.get("refused") or {}
    if refused.get("eventType") != event or refused.get("generation") != generation:
        return None
    wait = (parse_time(refused["nextAskAt"]) - now).total_seconds()
    return wait if wait > 0 else None


def with_refusal(hook_state: dict, event: str, generation: int, now: datetime) -> dict:
    """hook_state after a blocking hook refused `event` once more: asked again after the backoff."""
    attempts = hook_state.get("refusedAttempts", 0) + 1
    next_ask = format_time(now + timedelta(seconds=backoff(attempts)))
    return {
        **hook_state,
        "refusedAttempts": attempts,
        "refused": {"eventType": event, "generation": generation, "nextAskAt": next_ask},
    }


def allowed(hook_state: dict) -> dict:
    """hook_state once the blocking hooks allowed the change: no refusal left."""
    return {k: v for k, v in hook_state.items() if k not in ("refused", "refusedAttempts")}


def condition_of(pending: list[dict], refusal: str, abandoned: list[str]) -> tuple[str, str, str]:
    """(status, reason, message) of the Hooks condition."""
    if refusal:
        return "False", HOOK_REFUSED, refusal
    if pending:
        lines = [
            f"hook {e['hook']!r} {e['eventType']}"
            + (f" {e['claim']['namespace']}/{e['claim']['name']}" if e.get("claim") else "")
            + f": attempt {e['attempts']} failed ({e['lastError']}), next at {e['nextAttemptAt']}"
            for e in pending
            if e.get("attempts")
        ]
        if lines:
            return "True", DELIVERY_RETRYING, "; ".join(lines)
    if abandoned:
        return "True", DELIVERY_ABANDONED, "; ".join(abandoned)
    return "True", HOOKS_DELIVERED, ""


def refusal_message(hook: Hook, event_type: str, detail: str) -> str:
    return f"blocking hook {hook.name!r} refused {event_type}: {detail}"


def refusal_message_pending(event_type: str) -> str:
    return f"a blocking hook refused {event_type}; asked again after the backoff"


# -- blocking CLAIM_BOUND hooks: a claim binds once they allow it --------------------------------------------


def asks_before_binding(tenant: dict) -> bool:
    return bool(subscribed(tenant, CLAIM_BOUND, blocking=True))


def notified(tenant: dict, event_type: str) -> list[Hook]:
    """The hooks told of an event after it happened: the non-blocking ones, and for the claim events that cannot
    be stopped (CLAIM_PROVISIONED, CLAIM_RELEASED) the blocking ones too (a blocking CLAIM_BOUND hook was asked
    before the binding: that was its delivery)."""
    if event_type in CLAIM_EVENTS and event_type != CLAIM_BOUND:
        return [h for h in hooks(tenant) if event_type in h.event_types]
    return subscribed(tenant, event_type, blocking=False)


def claims_to_ask(verdicts: dict, claims: list[dict], now: datetime) -> list[dict]:
    """The claims whose binding the blocking hooks must be asked about now: unbound, not being deleted, never
    asked, or refused and due again."""
    due_now = []
    for claim in sorted(claims, key=lambda c: (c["metadata"].get("namespace"), c["metadata"].get("name"))):
        meta = claim["metadata"]
        if meta.get("deletionTimestamp") or claim_facts(claim)["bound"]:
            continue
        verdict = verdicts.get(meta.get("uid", ""))
        never_asked = not isinstance(verdict, dict)
        if never_asked or (verdict.get("allowed") is not True and _ask_again_by(verdict) <= now):
            due_now.append(claim)
    return due_now


def _ask_again_by(verdict: dict) -> datetime:
    try:
        return parse_time(verdict["nextAskAt"])
    except (KeyError, TypeError, ValueError):
        return datetime.min.replace(tzinfo=UTC)  # a verdict without a valid time is asked again now


def verdict_after(previous: dict | None, claim: dict, refusal: str, now: datetime) -> dict:
    """A claim's verdict after asking: allowed, or refused with the message and when to ask again (backoff)."""
    name = claim["metadata"].get("name", "")
    if not refusal:
        return {"name": name, "allowed": True}
    attempts = (previous or {}).get("attempts", 0) + 1
    next_ask = format_time(now + timedelta(seconds=backoff(attempts)))
    return {"name": name, "allowed": False, "message": refusal, "attempts": attempts, "nextAskAt": next_ask}


def verdicts_kept(verdicts: dict, claims: list[dict]) -> dict:
    """The verdicts of claims that still exist (a claim made again under the same name has a new uid)."""
    present = {c["metadata"].get("uid", "") for c in claims}
    return {uid: verdict for uid, verdict in verdicts.items() if uid in present}


def seconds_until_reask(verdicts: dict, now: datetime) -> float | None:
    times = [_ask_again_by(v) for v in verdicts.values() if isinstance(v, dict) and v.get("allowed") is not True]
    if not times:
        return None
    return max(0.0, (min(times) - now).total_seconds())


# -- blocking CLAIM_EXPIRED hooks: a lease ends once they allow its end (or a grace after it) -------------------


def asks_before_expiry(tenant: dict) -> bool:
    return bool(subscribed(tenant, CLAIM_EXPIRED, blocking=True))


def expiry_grace(tenant: dict) -> int:
    """Seconds a blocking CLAIM_EXPIRED hook may hold a lease's end: spec.leaseExpiryGrace, at most (and by default)
    EXPIRY_GRACE_MAX_SECONDS. A value that cannot be read is the default."""
    text = (tenant.get("spec") or {}).get("leaseExpiryGrace")
    match = (
        re.fullmatch(r"(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?", text) if isinstance(text, str) and text else None
    )
    if match is None or not any(match.groups()):
        return EXPIRY_GRACE_MAX_SECONDS
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return min(EXPIRY_GRACE_MAX_SECONDS, hours * 3600 + minutes * 60 + seconds)


def expiries_to_ask(verdicts: dict, claims: list[dict], now: datetime) -> list[dict]:
    """The claims whose lease's end the blocking hooks must be asked about now: bound, not being deleted, in their
    warning (or held past their end), and never asked about this end, or refused and due again."""
    due_now = []
    for claim in sorted(claims, key=lambda c: (c["metadata"].get("namespace"), c["metadata"].get("name"))):
        meta, facts = claim["metadata"], claim_facts(claim)
        if meta.get("deletionTimestamp") or not facts["expiring"]:
            continue
        verdict = verdicts.get(meta.get("uid", ""))
        fresh = not isinstance(verdict, dict) or verdict.get("end") != facts["leaseEnd"]
        if fresh or (verdict.get("allowed") is not True and _ask_again_by(verdict) <= now):
            due_now.append(claim)
    return due_now


def expiry_verdict_after(previous: dict | None, claim: dict, refusal: str, now: datetime) -> dict:
    """A claim's expiry verdict after asking, for the lease's end it was asked about (a new end: attempts anew)."""
    end = claim_facts(claim)["leaseEnd"]
    same_end = isinstance(previous, dict) and previous.get("end") == end
    verdict = verdict_after(previous if same_end else None, claim, refusal, now)
    return {**verdict, "end": end}


def expiry_verdicts_kept(verdicts: dict, claims: list[dict]) -> dict:
    """The verdicts of claims in their lease's warning or held past its end: once the lease ended, or was extended
    out of its warning, nothing is left to hold (nor to ask again)."""
    live = {c["metadata"].get("uid", "") for c in claims if claim_facts(c)["expiring"]}
    return {uid: verdict for uid, verdict in verdicts.items() if uid in live}
