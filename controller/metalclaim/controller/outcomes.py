"""Per-key outcomes of a playbook run, from the module results in its events. Pure.

DONE: forget the key (reset its backoff). RETRY: temporary (a conflict with another writer,
a failed run): back off and try again. REQUEUE: due again after `delay` seconds (a host's
next provisioning step). WAIT: nothing to do until something changes (no free host, a
missing Secret, an invalid spec): an event brings the key back, never a timer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .mapper import CLAIM, HOST, REMOTE, TENANT

# A tenant waiting on a deletion stage (its claims' release, its namespaces' removal) is looked at again this soon.
TENANT_REQUEUE_SECONDS = 2.0
# What an outcome's reason keeps of a claim's error message (the retry's log line).
ERROR_REASON_LIMIT = 300

DONE, RETRY, REQUEUE, WAIT = "done", "retry", "requeue", "wait"


@dataclass(frozen=True)
class Outcome:
    result: str
    delay: float = 0.0
    reason: str = ""


def failed_run(keys, reason: str) -> dict:
    """Every key of a run that failed as a whole (a task failed, the run was cancelled or timed out) backs off."""
    return {key: Outcome(RETRY, reason=reason) for key in keys}


def claim_outcomes(keys, reconcile: dict) -> dict:
    """Outcomes of the claim keys of a reconcile.yml run, from hostclaim_reconcile's result.

    A claim that failed alone (`errors`, or a step's entry in state `error`: an API error other than a conflict,
    its status refused) backs off and is tried again by itself; the rest of its batch is settled as usual.
    """
    outcomes = {key: Outcome(DONE) for key in keys}

    def note(namespace: str, name: str, outcome: Outcome) -> None:
        key = (CLAIM, namespace, name)
        if key in outcomes and outcomes[key].result != RETRY:  # the most urgent wins
            outcomes[key] = outcome

    for entry in (reconcile.get("release") or {}).get("claims") or []:
        if entry.get("state") == "conflict":
            note(entry["namespace"], entry["name"], Outcome(RETRY, reason="conflict"))
        elif entry.get("state") == "waiting":
            # Its host is being deprovisioned: the host's state change brings the claim back.
            note(entry["namespace"], entry["name"], Outcome(WAIT, reason="release waiting for the host"))
    for entry in (reconcile.get("bind") or {}).get("claims") or []:
        if entry.get("action") == "conflict":
            note(entry["namespace"], entry["name"], Outcome(RETRY, reason="conflict"))
        elif entry.get("host") is None and entry.get("action") in ("refuse", "skip"):
            note(entry["namespace"], entry["name"], Outcome(WAIT, reason=entry.get("reason") or "unbound"))
    for entry in (reconcile.get("bound") or {}).get("claims") or []:
        if "conflict" in (entry.get("action"), entry.get("state")):
            note(entry["namespace"], entry["name"], Outcome(RETRY, reason="conflict"))
    for entry in reconcile.get("errors") or []:
        # The reason is logged with the retry: what failed, for the infrastructure team.
        message = (entry.get("message") or "")[:ERROR_REASON_LIMIT]
        note(entry["namespace"], entry["name"], Outcome(RETRY, reason=f"error in {entry.get('step')}: {message}"))
    for step in ("release", "bind", "bound"):  # the errors of a step that reports them in its entries only
        for entry in (reconcile.get(step) or {}).get("claims") or []:
            if "error" in (entry.get("action"), entry.get("state")):
                note(entry["namespace"], entry["name"], Outcome(RETRY, reason=f"error in {step}"))
    return outcomes


def host_outcomes(keys, provision: dict) -> dict:
    """Outcomes of the host keys of a provision.yml run, from bmh_redfish's result: each host due again when it says,
    a settled one when its power should be read again (poll_after)."""
    outcomes = {key: Outcome(DONE) for key in keys}
    for entry in provision.get("hosts") or []:
        key = (HOST, entry["namespace"], entry["name"])
        if key not in outcomes:
            continue
        delay = entry.get("requeue_after")
        if delay is not None:
            outcomes[key] = Outcome(REQUEUE, delay=max(0.0, float(delay)), reason=entry.get("state") or "")
        elif entry.get("poll_after") is not None:
            outcomes[key] = Outcome(REQUEUE, delay=max(0.0, float(entry["poll_after"])), reason="poll")
    return outcomes


def tenant_outcomes(keys, reconcile: dict) -> dict:
    """Outcomes of the tenant keys of a tenant.yml run: those waiting on a stage (or a failed write) come back soon,
    those waiting on a hook (a blocking hook's backoff, a delivery's next retry) when the module says."""
    outcomes = {key: Outcome(DONE) for key in keys}
    for entry in reconcile.get("tenants") or []:
        key = (TENANT, "", entry["name"])
        if key in outcomes and entry.get("requeue"):
            delay = entry.get("requeue_after")
            delay = TENANT_REQUEUE_SECONDS if delay is None else max(0.0, float(delay))
            outcomes[key] = Outcome(REQUEUE, delay=delay, reason=entry.get("reason") or "requeue")
    return outcomes


def remote_outcomes(keys, mirror: dict) -> dict:
    """Outcomes of the remote keys of a remote.yml run, from hostclaim_remote's result: the hardware cluster is
    polled (each claim due again when the module says), a conflict or a local API error backs off, and a refused
    claim waits for a local change (its claim or Secret)."""
    outcomes = {key: Outcome(DONE) for key in keys}
    for entry in mirror.get("claims") or []:
        key = (REMOTE, entry["namespace"], entry["name"])
        if key not in outcomes:
            continue
        if entry.get("state") in ("conflict", "error"):
            outcomes[key] = Outcome(RETRY, reason=entry["state"])
        elif entry.get("requeue_after") is not None:
            outcomes[key] = Outcome(REQUEUE, delay=max(0.0, float(entry["requeue_after"])), reason=entry["state"])
        elif entry.get("state") == "refused":
            outcomes[key] = Outcome(WAIT, reason=entry.get("reason") or "refused")
    return outcomes
