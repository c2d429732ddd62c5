# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_secrets and hostclaim_sync: keep a bound claim and its host in step. I/O edge.

For each bound claim: read what the plans need (the tenant Secrets it references, once
per run; the copies beside its host, one list per infra namespace), plan with the pure
_claim_secrets / _claim_sync code, then write at most one host update, one claim metadata
update and the copies that differ. The claim's status goes to the run's StatusBook.

`parts` says which half runs: "secrets" (copies, the host's data refs, the Synchronization
condition) and/or "sync" (online, image, reboot requests, copied metadata, poweredOn,
hardware, the Provisioned condition). hostclaim_reconcile runs both in one pass.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import (
    bound_claims,
    namespace_labels,
    reread_bound,
    step_each,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.metadata import CopyRules, copy_rules
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.policy import evaluate_policies
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.secrets import (
    COPY_OF_LABEL,
    SYNCED,
    copied_secret_name,
    plan_copies,
    wanted_source,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.sync import (
    AUTHORIZATION_REVOKED,
    plan_sync,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION, DATA_ROLES

SECRETS = "secrets"
SYNC = "sync"


def sync_secrets(run) -> dict:
    """hostclaim_secrets: the copies and the Synchronization condition."""
    return sync_bound(run, (SECRETS,))


def sync_claims(run) -> dict:
    """hostclaim_sync: the host's power, image and reboot requests; the claim's Provisioned and host facts."""
    return sync_bound(run, (SYNC,))


def sync_bound(run, parts: tuple[str, ...]) -> dict:
    pairs = bound_claims(run)
    kube = run.kube
    policies = kube.list(API_VERSION, "HostDeployPolicy") if pairs else []
    labels = namespace_labels(kube) if pairs else {}
    copies: dict = {}
    if SECRETS in parts:
        # Our copies, one list call per infra namespace; tenant Secrets are only ever read by name
        # (those the claim references, in the claim's own namespace).
        for namespace in sorted({binding.key(host)[0] for _claim, host in pairs}):
            for secret in kube.list("v1", "Secret", namespace, label_selector=COPY_OF_LABEL):
                copies[binding.key(secret)] = secret
    outcome = step_each(
        pairs,
        lambda claim, host: _sync_one(run, claim, host, parts, policies, labels, copies),
        reread_bound(run),
    )
    problems = sorted({p for r in outcome["claims"] for p in r.get("metadata_copy_problems", [])})
    if problems:
        outcome["warnings"] = problems
    return outcome


def _sync_one(run, claim: dict, host: dict, parts, policies: list, labels: dict, copies: dict) -> dict:
    namespace, name = binding.key(claim)
    host_ns, host_name = binding.key(host)
    result = {"namespace": namespace, "name": name, "host": f"{host_ns}/{host_name}", "changed": False}
    authorized_namespaces, _decisions = evaluate_policies(policies, namespace, labels.get(namespace, {}))
    authorized = host_ns in authorized_namespaces
    rules = copy_rules(policies, host_ns, namespace, labels.get(namespace, {})) if SYNC in parts else CopyRules()
    sync = plan_sync(claim, host, authorized, rules)
    copies_plan = None
    if SECRETS in parts:
        copies_plan = plan_copies(claim, host, *_observe_copies(run, claim, host, copies))

    # Status first: for a claim this run just bound, the status write commits the binding
    # (or gives the host back), so nothing of the tenant's reaches a host before it.
    conditions, updates = _status(run, claim, sync, copies_plan, parts, result)
    run.book.note(claim, conditions, updates, result=result)
    if run.book.is_committing(claim) and run.book.flush(only=binding.key(claim)).get(binding.key(claim)) == "conflict":
        return result

    new_host = copy.deepcopy(host)
    if SYNC in parts:
        new_host["spec"] = sync.host_spec
        if sync.host_annotations is not None:
            new_host["metadata"]["annotations"] = sync.host_annotations
    if copies_plan is not None:
        result["copies"] = copies_plan.copies
        _write_copies(run, copies_plan, host_ns, copies, result)
        for role in DATA_ROLES:
            if role in copies_plan.host_spec:
                new_host["spec"][role] = copies_plan.host_spec[role]
            else:
                new_host["spec"].pop(role, None)
    if new_host != host:
        result["changed"] = True
        if not run.check_mode:
            run.kube.replace(new_host)
        run.record("BareMetalHost", host, new_host)
    if SYNC in parts and (sync.claim_labels is not None or sync.claim_annotations is not None):
        # The one-shot reboot reached the host (take it off the claim), or copied host metadata changed.
        result["changed"] = True
        updated = copy.deepcopy(claim)
        if sync.claim_labels is not None:
            updated["metadata"]["labels"] = sync.claim_labels
        if sync.claim_annotations is not None:
            updated["metadata"]["annotations"] = sync.claim_annotations
        if not run.check_mode:
            run.book.wrote(run.kube.replace(updated))
        run.record("HostClaim", claim, updated)
    if rules.problems:
        result["metadata_copy_problems"] = rules.problems
    return result


def _observe_copies(run, claim: dict, host: dict, copies: dict) -> tuple[dict, dict]:
    """(tenant Secrets by role, Secrets of the copies' names by role) for plan_copies."""
    namespace = claim["metadata"]["namespace"]
    host_ns, host_name = binding.key(host)
    sources, existing = {}, {}
    for role in DATA_ROLES:
        copy_name = copied_secret_name(host_name, role)
        existing[role] = copies.get((host_ns, copy_name))
        source_name = wanted_source(claim, role)
        if source_name is None:
            continue
        sources[role] = run.secret(namespace, source_name)
        if existing[role] is None and sources[role] is not None:
            # Not one of our copies: before creating it, see whether someone else's Secret has its name.
            existing[role] = run.kube.get("v1", "Secret", copy_name, host_ns)
    return sources, existing


def _write_copies(run, plan, host_ns: str, copies: dict, result: dict) -> None:
    if plan.create or plan.replace or plan.delete:
        result["changed"] = True
    for secret in plan.create:
        if not run.check_mode:
            try:
                written = run.kube.create(secret)
            except AlreadyExistsError as error:
                # Created since we looked (a concurrent run): read again and decide on what is there.
                raise ConflictError(str(error)) from error
            copies[binding.key(written)] = written
        run.record("Secret", None, secret, secret=True)
    for secret in plan.replace:
        before = copies.get(binding.key(secret))
        if not run.check_mode:
            copies[binding.key(secret)] = run.kube.replace(secret)
        run.record("Secret", before, secret, secret=True)
    for name in plan.delete:
        before = copies.get((host_ns, name))
        if not run.check_mode:
            run.kube.delete("v1", "Secret", name, host_ns)
            copies.pop((host_ns, name), None)
        if before is not None:
            run.record("Secret", before, None, secret=True)


def _status(run, claim: dict, sync, copies_plan, parts, result: dict) -> tuple[list, dict]:
    """The claim's conditions and status fields from this pass; Events for what changed."""
    conditions, updates = [], {}
    status_conditions = (claim.get("status") or {}).get("conditions")
    if SYNC in parts:
        conditions.append(sync.provisioned)
        updates.update(sync.updates)
        result["provisioned"] = sync.provisioned[2]
        before = cond.find(status_conditions, cond.PROVISIONED) or {}
        if sync.provisioned[1] == "True" and before.get("status") != "True":
            run.event(claim, "Normal", "Provisioned", f"BareMetalHost {result['host']} is {sync.provisioned[2]}")
    if SECRETS in parts:
        # Synchronization covers the claim's whole spec: its data, and what the host cannot take now.
        # A lost authorization first: it explains the rest.
        revoked = [f for f in sync.failures if f[0] == AUTHORIZATION_REVOKED]
        failures = [*revoked, *copies_plan.failures, *(f for f in sync.failures if f not in revoked)]
        if failures:
            sync_condition = (
                cond.SYNCHRONIZATION,
                "False",
                failures[0][0],
                "; ".join(message for _reason, message in failures),
            )
        else:
            sync_condition = (cond.SYNCHRONIZATION, "True", SYNCED, "")
        conditions.append(sync_condition)
        previous = cond.find(status_conditions, cond.SYNCHRONIZATION) or {}
        if failures and (previous.get("reason"), previous.get("message")) != sync_condition[2:]:
            run.event(claim, "Warning", sync_condition[2], sync_condition[3])
        result["synchronized"] = not failures
        if failures:
            result["message"] = sync_condition[3]
    elif sync.failures:
        result["message"] = "; ".join(message for _reason, message in sync.failures)
    return conditions, updates
