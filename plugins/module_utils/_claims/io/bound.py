# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_secrets and hostclaim_sync: keep a bound claim and its host in step. I/O edge.

For each bound claim: read what the plans need (the tenant Secrets it references, once
per run, in the claim's own namespace; never a Secret beside the host: what was copied there
is recorded on the host), plan with the pure _claims/pure/secrets and sync code, then write
the copies that differ and at most one host update (its data refs and the record of the
copies with them) and one claim metadata update. The claim's status goes to the run's StatusBook.

`parts` says which half runs: "secrets" (copies, the host's data refs, the Synchronization
condition) and/or "sync" (online, image, reboot requests, copied metadata, poweredOn,
hardware, the Provisioned condition). hostclaim_reconcile runs both in one pass.

A request that fails for one claim (its Secret unreadable, its host write refused) is that claim's
failure: Synchronization False, ReconcileError, and the others go on (run.failed). A claim's reboot
requests reach its host only within _claims/pure/limits.py's bounds, so they cannot overflow it.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io import leases
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import (
    bound_claims,
    namespace_labels,
    reread_bound,
    step_each,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.writes import ERROR
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, firmware, limits
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.metadata import copy_rules
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.secrets import (
    SYNCED,
    annotations_with_records,
    name_taken,
    plan_copies,
    refused_as_no_copy,
    wanted_source,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.sync import (
    AUTHORIZATION_REVOKED,
    plan_sync,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
    RefusedError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import firmware_policy
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metadata import CopyRules
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    API_VERSION,
    DATA_ROLES,
    FIRMWARE_SETTINGS_KIND,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies

SECRETS = "secrets"
SYNC = "sync"


def sync_secrets(run) -> dict:
    """hostclaim_secrets: the copies and the Synchronization condition."""
    return sync_bound(run, (SECRETS,))


def sync_claims(run) -> dict:
    """hostclaim_sync: the host's power, image and reboot requests; the claim's Provisioned and host facts."""
    return sync_bound(run, (SYNC,))


def sync_bound(run, parts: tuple[str, ...]) -> dict:
    # A claim whose lease ended is the lease step's: its host is being released, never powered or imaged again.
    pairs = [(claim, host) for claim, host in bound_claims(run) if not leases.expired(run, claim)]
    kube = run.kube
    policies = kube.list(API_VERSION, "HostDeployPolicy") if pairs else []
    labels = namespace_labels(kube) if pairs else {}
    outcome = step_each(
        pairs,
        lambda claim, host: _sync_one(run, claim, host, parts, policies, labels),
        reread_bound(run),
        run.each,
        on_error=lambda claim, error: run.failed(claim, error, "sync" if SYNC in parts else "secrets"),
    )
    problems = sorted({p for r in outcome["claims"] for p in r.get("metadata_copy_problems", [])})
    if problems:
        outcome["warnings"] = problems
    return outcome


def _sync_one(run, claim: dict, host: dict, parts, policies: list, labels: dict) -> dict:
    namespace, name = binding.key(claim)
    host_ns, host_name = binding.key(host)
    result = {"namespace": namespace, "name": name, "host": f"{host_ns}/{host_name}", "changed": False}
    authorized_namespaces, decisions = evaluate_policies(policies, namespace, labels.get(namespace, {}))
    authorized = host_ns in authorized_namespaces
    rules = copy_rules(policies, host_ns, namespace, labels.get(namespace, {})) if SYNC in parts else CopyRules()
    sync = _plan_sync(claim, host, authorized, rules)
    hfs_write = (
        _firmware(run, claim, host, sync, firmware_policy.allowances(policies, decisions)) if SYNC in parts else None
    )
    copies_plan = None
    if SECRETS in parts:
        copies_plan = plan_copies(claim, host, _sources(run, claim))

    # Status first: for a claim this run just bound, the status write commits the binding
    # (or gives the host back), so nothing of the tenant's reaches a host before it.
    conditions, updates = _status(run, claim, sync, copies_plan, parts, result)
    run.book.note(claim, conditions, updates, result=result)
    if run.book.is_committing(claim) and run.book.flush(only=binding.key(claim)).get(binding.key(claim)) in (
        "conflict",
        ERROR,
    ):
        return result

    if hfs_write is not None:  # before the host's image and online: its provisioner finds them when it starts
        before, after = hfs_write
        result["changed"] = True
        if not run.check_mode:
            if before is None:
                run.kube.create(after)
            else:
                run.kube.replace(after)
        run.record(FIRMWARE_SETTINGS_KIND, before, after)
    new_host = copy.deepcopy(host)
    if SYNC in parts:
        new_host["spec"] = sync.host_spec
        if sync.host_annotations is not None:
            new_host["metadata"]["annotations"] = sync.host_annotations
    if copies_plan is not None:
        taken = _write_copies(run, copies_plan, host, result)
        if taken:
            # Known only from the write: the claim's status says so (a second status write for a claim
            # this run just bound, whose status had to be written before anything was copied).
            copies_plan.failures.extend(taken)
            run.book.amend(claim, [_synchronization(run, claim, sync, copies_plan, result)])
        result["copies"] = copies_plan.copies
        for role in DATA_ROLES:
            if role in copies_plan.host_spec:
                new_host["spec"][role] = copies_plan.host_spec[role]
            else:
                new_host["spec"].pop(role, None)
        annotations = new_host["metadata"].get("annotations") or {}
        recorded = annotations_with_records(annotations, copies_plan.records)
        if recorded != annotations:
            new_host["metadata"]["annotations"] = recorded
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


def _firmware(run, claim: dict, host: dict, sync, allowances: dict) -> tuple[dict | None, dict] | None:
    """The claim's firmware settings for its host: (HostFirmwareSettings before, after) to write, or None; what the
    provisioner read back goes into the claim's status (sync.updates). Settings the host's policies no longer allow
    are left out, and said (sync.failures). A claim that never asked costs no request, but when its host is about
    to get its image: settings left in the host's HostFirmwareSettings by someone else are emptied then (issue 40:
    the provisioner applies only what the claim asks, and would refuse to provision with them)."""
    if not firmware.involved(claim):
        if not firmware.image_coming(host, sync.host_spec):
            return None
        host_ns, host_name = binding.key(host)
        hfs = run.kube.get(API_VERSION, FIRMWARE_SETTINGS_KIND, host_name, host_ns)
        after = firmware.desired(hfs, host, {})
        return None if after is None else (hfs, after)
    host_ns, host_name = binding.key(host)
    settings = firmware.asked(claim)
    allowed = allowances.get(host_ns) or {}
    kept = {name: value for name, value in settings.items() if value in allowed.get(name, ())}
    for name in sorted(set(settings) - set(kept)):
        message = f"spec.firmware.settings: {name}={settings[name]!r} is no longer allowed on this host"
        sync.failures.append((firmware.NOT_ALLOWED, message))
    hfs = run.kube.get(API_VERSION, FIRMWARE_SETTINGS_KIND, host_name, host_ns)
    sync.updates["firmware"] = {"settings": firmware.read_back(hfs, kept)} if settings else None
    after = firmware.desired(hfs, host, kept)
    return None if after is None else (hfs, after)


def _plan_sync(claim: dict, host: dict, authorized: bool, rules: CopyRules):
    """plan_sync, with the claim's reboot requests held back from the host when they are over the limits."""
    annotations = claim["metadata"].get("annotations") or {}
    too_large = limits.reboot_requests_problem(annotations)
    if too_large is None:
        return plan_sync(claim, host, authorized, rules)
    held = copy.deepcopy(claim)
    held["metadata"]["annotations"] = limits.held_requests(annotations, host["metadata"].get("annotations"))
    sync = plan_sync(held, host, authorized, rules)
    sync.failures.append(too_large)
    if sync.claim_annotations is not None:  # copied host metadata changed: the claim keeps its own requests
        restored = limits.restored(sync.claim_annotations, annotations)
        sync.claim_annotations = None if restored == annotations else restored
    return sync


def _sources(run, claim: dict) -> dict:
    """role -> the tenant Secret the claim references for it (None when absent), read in the claim's namespace."""
    namespace = claim["metadata"]["namespace"]
    sources = {}
    for role in DATA_ROLES:
        source_name = wanted_source(claim, role)
        if source_name is not None:
            sources[role] = run.secret(namespace, source_name)
    return sources


def _write_copies(run, plan, host: dict, result: dict) -> list[tuple[str, str]]:
    """Write the plan's copies and deletes, filling in plan.records; the failures of copies whose name is taken.

    A copy whose name is taken is dropped from the plan (no record, no host ref, not in plan.copies).
    """
    host_ns, host_name = binding.key(host)
    taken = []
    for write in plan.writes:
        name = write.secret["metadata"]["name"]
        if not run.check_mode:
            written = _write_copy(run, write.secret, recorded=write.recorded is not None)
            if written is None:
                taken.append(name_taken(write.role, host_name))
                del plan.records[write.role]
                plan.copies.remove(f"{host_ns}/{name}")
                if (plan.host_spec.get(write.role) or {}).get("name") == name:
                    del plan.host_spec[write.role]
                continue
            plan.records[write.role]["uid"] = written["metadata"]["uid"]
        result["changed"] = True
        # Never read, so never shown: what was there is known only by the digest recorded on the host.
        before = None if write.recorded is None else {**_shown(write.secret), "digest": write.recorded["digest"]}
        after = {**write.secret, "digest": plan.records[write.role]["digest"]} if before else write.secret
        run.record("Secret", before, after, secret=True)
    for name, uid in plan.delete:
        result["changed"] = True
        if not run.check_mode:
            try:
                run.kube.delete("v1", "Secret", name, host_ns, uid=uid)  # not ours any more (other uid): left alone
            except RefusedError as error:
                if not refused_as_no_copy(error.server_message):
                    raise
        run.record("Secret", {"metadata": {"name": name, "namespace": host_ns, "uid": uid}}, None, secret=True)
    return taken


def _write_copy(run, secret: dict, recorded: bool) -> dict | None:
    """Create or replace one copy; what the server stored, or None when the name is held by a Secret
    metalclaim did not make (the admission policies refuse to turn it into a copy)."""
    try:
        if not recorded:
            try:
                return run.kube.create(secret)
            except AlreadyExistsError:
                pass  # our copy, written by a run stopped before its host write, or somebody else's: PUT decides
        try:
            return run.kube.replace(secret)  # no resourceVersion, no uid: whatever holds the name
        except ConflictError:
            pass  # recorded but deleted since (by hand): copy it again
        try:
            return run.kube.create(secret)
        except AlreadyExistsError as error:
            # Created since (a concurrent run): read the claim and host again and decide on what is there.
            raise ConflictError(str(error)) from error
    except RefusedError as error:
        if refused_as_no_copy(error.server_message):
            return None
        raise


def _shown(secret: dict) -> dict:
    """A copy without its values, for the before side of a diff."""
    return {key: value for key, value in secret.items() if key != "data"}


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
        conditions.append(_synchronization(run, claim, sync, copies_plan, result))
    elif sync.failures:
        result["message"] = "; ".join(message for _reason, message in sync.failures)
    return conditions, updates


def _synchronization(run, claim: dict, sync, copies_plan, result: dict) -> tuple[str, str, str, str]:
    """The Synchronization condition; a Warning Event when its failure is new."""
    # Synchronization covers the claim's whole spec: its data, and what the host cannot take now.
    # A lost authorization first: it explains the rest.
    revoked = [f for f in sync.failures if f[0] == AUTHORIZATION_REVOKED]
    failures = [*revoked, *copies_plan.failures, *(f for f in sync.failures if f not in revoked)]
    if failures:
        sync_condition = (
            cond.SYNCHRONIZATION,
            "False",
            failures[0][0],
            # As the condition will hold it (a Secret's name, say, is the tenant's to make long), so a settled
            # run compares equal below and records no Event.
            cond.truncated("; ".join(message for _reason, message in failures)),
        )
    else:
        sync_condition = (cond.SYNCHRONIZATION, "True", SYNCED, "")
    previous = cond.find((claim.get("status") or {}).get("conditions"), cond.SYNCHRONIZATION) or {}
    if failures and (previous.get("reason"), previous.get("message")) != sync_condition[2:]:
        run.event(claim, "Warning", sync_condition[2], sync_condition[3])
    result["synchronized"] = not failures
    if failures:
        result["message"] = sync_condition[3]
    return sync_condition
