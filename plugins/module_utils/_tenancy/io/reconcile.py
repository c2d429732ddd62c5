# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tenant_reconcile: bring Tenants' objects to what their specs ask. The I/O edge over _tenancy.pure.tenant.

One list per kind for the whole batch (Tenants, Namespaces, the tenant-labelled RoleBindings and
ResourceQuotas, HostDeployPolicies, BareMetalHosts); each Tenant is checked in full before anything of
its is written (a refused spec writes nothing but its status); then only what differs is written, and
the status once, only when it changed. A settled run writes nothing.

A TenantRun is the run kernel (_common/io/run.py): its snapshot holds the batch's lists, kept current with the
run's writes, and with `--diff` each write is recorded (hooks are called, not written: they are not in it).

Tenants are reconciled side by side (TENANTS_AT_ONCE at a time), so one tenant's slow hooks never delay another's
onboarding or deliveries (issue 22); one at a time in check and diff mode. Their Kubernetes work does not
interleave: each tenant works under the run's lock, which its thread lets go only while one of its hooks is being
called (Deliverer.send). So the run's snapshot, the Deliverer's caches and the client's counts are only ever
touched by one thread at a time, and a tenant's own reads, writes and deliveries keep their order; what another
tenant wrote while a blocking hook was being asked is checked again before the change it allowed is written.
"""

from __future__ import annotations

import copy
import threading

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import Run
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.claimsets import SET_KIND
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import status_patch
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    BINDING_APPROVALS_ANNOTATION,
    EXPIRY_APPROVALS_ANNOTATION,
    TENANT_LABEL,
    annotation_value,
    binding_approvals,
    expiry_approvals,
    reserved_for,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.io.hooks import Deliverer
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks as hook_plan
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import tenant as plan
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure.outcomes import tenant_outcomes

# Tenants reconciled at once in a run: as many tenants' hooks may be waited for together before another waits too.
TENANTS_AT_ONCE = 8


# What the batch's Tenants are checked against: (api_version, kind, label selector), each listed once per run.
BATCH_KINDS = (
    ("v1", "Namespace", None),
    (plan.RBAC_VERSION, "RoleBinding", TENANT_LABEL),
    ("v1", "ResourceQuota", TENANT_LABEL),
    (metal3.API_VERSION, "HostDeployPolicy", None),
    (metal3.API_VERSION, "BareMetalHost", None),
)


class Batch:
    """The run's snapshot of BATCH_KINDS as the Tenants see it: object_key -> object. All listed at once when the
    batch has Tenants; the objects are the snapshot's own, read and never changed here. Used under the run's lock
    only (TenantRun.lock)."""

    def __init__(self, snapshot):
        self._snapshot = snapshot
        for api_version, kind, selector in BATCH_KINDS:
            snapshot.held(api_version, kind, label_selector=selector)

    @property
    def objects(self) -> dict[tuple[str, str, str], dict]:
        return {
            plan.object_key(item): item
            for api_version, kind, selector in BATCH_KINDS
            for item in self._snapshot.held(api_version, kind, label_selector=selector)
        }

    @property
    def hosts(self) -> dict[tuple[str, str], dict]:
        hosts = self._snapshot.held(metal3.API_VERSION, "BareMetalHost")
        return {(h["metadata"]["namespace"], h["metadata"]["name"]): h for h in hosts}

    def namespaces(self) -> set[str]:
        return {item["metadata"]["name"] for item in self._snapshot.held("v1", "Namespace")}

    def claims_in(self, namespaces: list[str]) -> list[dict]:
        """The HostClaims of those namespaces (listed once per batch, only when a tenant's hooks want claim events)."""
        wanted = set(namespaces)
        claims = self._snapshot.held(metal3.API_VERSION, "HostClaim")
        return [c for c in claims if c["metadata"].get("namespace") in wanted]

    def owned_by(self, tenant: str) -> list[dict]:
        """Every object labelled as the tenant's (hosts excepted: a reservation is an annotation)."""
        return [o for k, o in self.objects.items() if k[0] != "BareMetalHost" and plan.owner(o) == tenant]


class TenantRun(Run):
    def __init__(
        self, kube, check_mode: bool, required_prefix: str, claim_side_subjects: list[dict], diff: bool = False
    ):
        super().__init__(kube, cond.now(), check_mode, diff=diff, workers=TENANTS_AT_ONCE, thread_name="tenant")
        self.required_prefix = required_prefix or ""
        self.claim_side_subjects = claim_side_subjects or []
        # Held by the tenant being worked on; its thread lets it go only while calling one of its hooks.
        self.lock = threading.Lock()
        self.deliverer = Deliverer(kube, lock=self.lock)

    def each(self, function, items: list[dict]) -> list:
        """Run.each over Tenants, each under the run's lock: while one waits for a hook, the others go on."""

        def locked(tenant: dict):
            with self.lock:
                return function(tenant)

        return super().each(locked, items)


def reconcile_tenants(run: TenantRun, names: list[str] | None) -> dict:
    tenants = run.kube.list(plan.API_VERSION, plan.KIND)
    wanted = [t for t in tenants if names is None or plan.name(t) in names]
    found = {plan.name(t) for t in wanted}
    gone = [n for n in names or [] if n not in found]
    results = [{"name": n, "state": "absent", "changed": False, "requeue": False} for n in gone]
    snapshot = Batch(run.kube) if wanted else None

    def one(tenant: dict) -> dict:
        tenant.setdefault("kind", plan.KIND)
        tenant.setdefault("apiVersion", plan.API_VERSION)
        if tenant["metadata"].get("deletionTimestamp"):
            return _delete(run, snapshot, tenant)
        return _apply(run, snapshot, tenant, tenants)

    results += run.each(one, sorted(wanted, key=plan.name))
    results.sort(key=lambda r: r["name"])
    return run.finish(
        {
            "changed": any(r["changed"] for r in results),
            "tenants": results,
            "requeue": sorted(r["name"] for r in results if r["requeue"]),
            "outcomes": tenant_outcomes(results),
            "hook_requests": run.deliverer.sent,
            "writes": run.api.writes(),
        }
    )


def _result(tenant: dict, **fields) -> dict:
    return {"name": plan.name(tenant), "changed": False, "requeue": False, "writes": [], **fields}


def _checked(run: TenantRun, snapshot: Batch, tenant: dict, tenants: list[dict]) -> tuple[list, list]:
    """(the objects the spec asks for, why it cannot be applied as the batch stands now)."""
    problems = plan.validate(tenant, run.required_prefix)
    if problems:
        return [], problems
    desired = plan.desired_objects(tenant, run.claim_side_subjects)
    problems = (
        plan.ownership_problems(tenant, desired, snapshot.objects)
        + plan.pool_problems(tenant, snapshot.namespaces())
        + plan.exclusive_problems(tenant, snapshot.hosts, tenants)
    )
    return desired, problems


def _refused_spec(run: TenantRun, tenant: dict, problems: list) -> dict:
    """Nothing is written for a refused spec but its status; what was applied for an earlier one stays as it was."""
    status = tenant.get("status") or {}
    generation = tenant["metadata"].get("generation", 0)
    reason, message = plan.refusal(problems)
    conditions = cond.set_condition(
        status.get("conditions") or [], plan.ACCEPTED, "False", reason, message, generation, run.timestamp
    )
    new_status = {
        "state": status.get("state") or plan.NEW,
        "observedGeneration": generation,
        "conditions": cond.with_ready(conditions, generation, run.timestamp),
    }
    result = _result(tenant, state=new_status["state"], reason=reason, message=message)
    _write_status(run, tenant, new_status, result)
    return result


def _apply(run: TenantRun, snapshot: Batch, tenant: dict, tenants: list[dict]) -> dict:
    status = tenant.get("status") or {}
    generation = tenant["metadata"].get("generation", 0)
    conditions = status.get("conditions") or []
    desired, problems = _checked(run, snapshot, tenant, tenants)
    if problems:
        return _refused_spec(run, tenant, problems)
    conditions = cond.set_condition(
        conditions, plan.ACCEPTED, "True", plan.SPEC_ACCEPTED, "", generation, run.timestamp
    )

    result = _result(tenant)
    hook_state = hook_plan.hook_status(tenant)
    event = hook_plan.tenant_event_due(tenant)
    if event:
        # The blocking hooks first: a refusal stops the change before anything of it is written.
        state = status.get("state") or plan.NEW
        refusal = _ask_blocking(run, tenant, event, state, result)
        if refusal:
            return _refused_by_hook(run, tenant, hook_state, conditions, refusal, result, state, event)
        # Other tenants went on while the hooks were asked: what they wrote may stand in the way now (a namespace
        # of the same name, say). Then the spec is refused as it would have been had they written it before.
        desired, problems = _checked(run, snapshot, tenant, tenants)
        if problems:
            return _refused_spec(run, tenant, problems)
        hook_state = hook_plan.allowed(hook_state)
        hook_state["announcedGeneration"] = generation
        hook_state["pending"] = hook_plan.queued(hook_state.get("pending") or [], tenant, event, run.timestamp)
    hook_state = _with_claim_events(run, snapshot, tenant, hook_state)

    owned = snapshot.owned_by(plan.tenant_name(tenant))
    writes = plan.planned_writes(snapshot.objects, owned, snapshot.hosts, tenant, desired)
    if writes or plan.FINALIZER not in (tenant["metadata"].get("finalizers") or []):
        tenant = _with_finalizer(run, tenant, result)
        if writes and status.get("state") != plan.DEPLOYING:
            # Watchers see the change under way (and a run killed midway leaves Deploying, not Deployed).
            deploying = {"state": plan.DEPLOYING, "observedGeneration": generation, "conditions": conditions}
            tenant = _write_status(run, tenant, deploying, result)
    failures: dict[str, list[str]] = {}
    for step, action, obj, current in writes:
        try:
            # The run's snapshot follows the write: the binding verdicts below see the namespace as it is now.
            _write(run, action, obj, result, current)
        except KubeError as error:
            failures.setdefault(step, []).append(str(error))
    for error in _binding_verdicts(run, snapshot, tenant, status.get("state") or plan.NEW, result):
        failures.setdefault(plan.NAMESPACES, []).append(error)
    for step in plan.STEPS:
        if step in failures:
            conditions = cond.set_condition(
                conditions, step, "False", plan.APPLY_FAILED, "; ".join(failures[step]), generation, run.timestamp
            )
        else:
            conditions = cond.set_condition(conditions, step, "True", plan.APPLIED, "", generation, run.timestamp)
    objects = [plan.reference(o) for o in desired]
    objects += [plan.host_reference(key) for key in plan.exclusive_hosts(tenant)]
    new_status = {
        "state": plan.DEPLOYING if failures else plan.DEPLOYED,
        "observedGeneration": generation,
        "childNamespaces": plan.child_namespaces(tenant),
        "objects": objects,
        "conditions": _with_hooks_condition(tenant, conditions, hook_state, "", [], generation, run.timestamp),
        "hooks": hook_state,
    }
    result.update(state=new_status["state"], requeue=bool(failures))
    reask = result.pop("binding_reask_after", None)
    if reask is not None:  # a refused binding is asked about again after its backoff
        result.update(requeue=True, requeue_after=min(reask, result.get("requeue_after", reask)))
    # The change is in the status before any non-blocking hook is told of it: they never delay it.
    tenant = _write_status(run, tenant, new_status, result)
    _deliver_due(run, snapshot, tenant, new_status, result)
    if failures:
        result.pop("requeue_after", None)  # a failed write is retried soon (the caller's requeue), hooks with it
    return result


def _ask_blocking(run: TenantRun, tenant: dict, event: str, state: str, result: dict) -> str:
    """Ask each blocking hook of the event, in order: the first refusal's message, or "" when all answer 200.

    Within the backoff after a refusal of this very change, nobody is asked: the refusal stands (and the run
    is requeued for when they may be asked).
    """
    if run.check_mode:
        return ""  # check mode sends nothing: it reports the writes the change would make once allowed
    generation = tenant["metadata"].get("generation", 0)
    hook_state = hook_plan.hook_status(tenant)
    wait = hook_plan.refused_wait(hook_state, event, generation, hook_plan.parse_time(run.timestamp))
    if wait is not None:
        previous = cond.find((tenant.get("status") or {}).get("conditions"), hook_plan.HOOKS) or {}
        result["requeue_after"] = wait
        return previous.get("message") or hook_plan.refusal_message_pending(event)
    body = hook_plan.payload(event, tenant, state)
    for hook in hook_plan.subscribed(tenant, event, blocking=True):
        detail = run.deliverer.send(hook, body)
        if detail:
            return hook_plan.refusal_message(hook, event, detail)
    return ""


def _refused_by_hook(run, tenant, hook_state, conditions, refusal, result, state, event) -> dict:
    """A blocking hook refused the change: nothing of it is written but the status; asked again after a backoff."""
    generation = tenant["metadata"].get("generation", 0)
    now = hook_plan.parse_time(cond.now())  # the backoff counts from the refusal, not the run's start
    if "requeue_after" not in result:  # asked this run (not within the backoff of an earlier refusal)
        hook_state = hook_plan.with_refusal(hook_state, event, generation, now)
        result["requeue_after"] = hook_plan.backoff(hook_state["refusedAttempts"])
    if state == plan.DELETING:
        conditions = cond.set_condition(
            conditions, plan.DELETION, "False", hook_plan.HOOK_REFUSED, refusal, generation, run.timestamp
        )
    new_status = {
        "state": state,
        "observedGeneration": generation,
        "conditions": _with_hooks_condition(tenant, conditions, hook_state, refusal, [], generation, run.timestamp),
        "hooks": hook_state,
    }
    result.update(state=state, reason=hook_plan.HOOK_REFUSED, message=refusal, requeue=True)
    _write_status(run, tenant, new_status, result)
    return result


def _with_claim_events(run: TenantRun, snapshot: Batch, tenant: dict, hook_state: dict) -> dict:
    """hook_state with a delivery queued for each change of a claim of the tenant's namespaces since the last."""
    if not hook_plan.wants_claim_events(tenant):
        hook_state.pop("claims", None)
        return hook_state
    claims = snapshot.claims_in(_namespaces_of(snapshot, tenant))
    events, record = hook_plan.claim_events(hook_state.get("claims") or [], claims)
    pending = hook_state.get("pending") or []
    for event, facts in events:
        # Claim events are notifications: every subscribed hook is told, none can stop a binding from here.
        pending = hook_plan.queued(pending, tenant, event, run.timestamp, claim=facts)
    return {**hook_state, "pending": pending, "claims": record}


def _binding_verdicts(run: TenantRun, snapshot: Batch, tenant: dict, state: str, result: dict) -> list[str]:
    """Ask the blocking CLAIM_BOUND hooks about each unbound claim of the tenant's namespaces not yet allowed
    (a refused one after its backoff) and write the verdicts on its namespace, where the bind step reads them; the
    annotation goes when no hook asks any more. The blocking CLAIM_EXPIRED hooks likewise about each lease in its
    warning (or held past its end), for that end, with the grace. Sets result["binding_reask_after"]; returns the
    write errors."""
    asks = hook_plan.asks_before_binding(tenant)
    asks_expiry = hook_plan.asks_before_expiry(tenant)
    namespaces = _namespaces_of(snapshot, tenant)
    claims = snapshot.claims_in(namespaces) if asks or asks_expiry else []
    errors, waits = [], []
    objects = snapshot.objects
    for namespace_name in namespaces:
        namespace = objects.get(("Namespace", "", namespace_name))
        if (
            namespace is None
            or namespace["metadata"].get("deletionTimestamp")
            or plan.owner(namespace) != plan.tenant_name(tenant)
        ):
            continue
        annotations = dict(namespace["metadata"].get("annotations") or {})
        if asks:
            mine = [c for c in claims if c["metadata"].get("namespace") == namespace_name]
            verdicts = _asked(run, tenant, state, binding_approvals(annotations) or {}, mine, result)
            waits.append(hook_plan.seconds_until_reask(verdicts, hook_plan.parse_time(cond.now())))
            annotations[BINDING_APPROVALS_ANNOTATION] = annotation_value(verdicts)
        else:
            annotations.pop(BINDING_APPROVALS_ANNOTATION, None)
        if asks_expiry:
            mine = [c for c in claims if c["metadata"].get("namespace") == namespace_name]
            previous = (expiry_approvals(annotations) or {}).get("claims") or {}
            verdicts = _asked_expiry(run, tenant, state, previous, mine, result)
            waits.append(hook_plan.seconds_until_reask(verdicts, hook_plan.parse_time(cond.now())))
            value = {"graceSeconds": hook_plan.expiry_grace(tenant), "claims": verdicts}
            annotations[EXPIRY_APPROVALS_ANNOTATION] = annotation_value(value)
        else:
            annotations.pop(EXPIRY_APPROVALS_ANNOTATION, None)
        if annotations == (namespace["metadata"].get("annotations") or {}):
            continue
        updated = copy.deepcopy(namespace)
        updated["metadata"]["annotations"] = annotations
        try:
            _write(run, "replace", updated, result, namespace)
        except KubeError as error:
            errors.append(f"binding verdicts on namespace {namespace_name}: {error}")
    waits = [w for w in waits if w is not None]
    if waits:
        result["binding_reask_after"] = min(waits)
    return errors


def _asked(run: TenantRun, tenant: dict, state: str, verdicts: dict, claims: list[dict], result: dict) -> dict:
    """The verdicts of a namespace's claims after asking about those due (nobody is asked in check mode)."""
    verdicts = hook_plan.verdicts_kept(verdicts, claims)
    due = [] if run.check_mode else hook_plan.claims_to_ask(verdicts, claims, hook_plan.parse_time(run.timestamp))
    for claim in due:
        uid = claim["metadata"].get("uid", "")
        refusal = _ask_about_binding(run, tenant, state, claim)
        # The backoff counts from the answer (a hook may have used its whole timeout), not the run's start.
        answered = hook_plan.parse_time(cond.now())
        verdicts[uid] = hook_plan.verdict_after(verdicts.get(uid), claim, refusal, answered)
        counts = result.setdefault("binding_hooks_asked", {"allowed": 0, "refused": 0})
        counts["refused" if refusal else "allowed"] += 1
    return verdicts


def _asked_expiry(run: TenantRun, tenant: dict, state: str, verdicts: dict, claims: list[dict], result: dict) -> dict:
    """The expiry verdicts of a namespace's claims after asking about those due (nobody is asked in check mode)."""
    verdicts = hook_plan.expiry_verdicts_kept(verdicts, claims)
    now = hook_plan.parse_time(run.timestamp)
    due = [] if run.check_mode else hook_plan.expiries_to_ask(verdicts, claims, now)
    for claim in due:
        uid = claim["metadata"].get("uid", "")
        refusal = _ask_blocking_claim_event(run, tenant, state, claim, hook_plan.CLAIM_EXPIRED)
        answered = hook_plan.parse_time(cond.now())
        verdicts[uid] = hook_plan.expiry_verdict_after(verdicts.get(uid), claim, refusal, answered)
        counts = result.setdefault("expiry_hooks_asked", {"allowed": 0, "refused": 0})
        counts["refused" if refusal else "allowed"] += 1
    return verdicts


def _ask_about_binding(run: TenantRun, tenant: dict, state: str, claim: dict) -> str:
    """The first blocking CLAIM_BOUND hook's refusal of binding this claim ("" when all answer 200)."""
    return _ask_blocking_claim_event(run, tenant, state, claim, hook_plan.CLAIM_BOUND)


def _ask_blocking_claim_event(run: TenantRun, tenant: dict, state: str, claim: dict, event: str) -> str:
    """The first blocking hook's refusal of this claim's event (CLAIM_BOUND, CLAIM_EXPIRED; "" when all answer 200)."""
    facts = hook_plan.claim_facts(claim)
    conditions = (claim.get("status") or {}).get("conditions")
    body = hook_plan.payload(event, tenant, state, claim=facts, conditions=conditions)
    for hook in hook_plan.subscribed(tenant, event, blocking=True):
        detail = run.deliverer.send(hook, body)
        if detail:
            return hook_plan.refusal_message(hook, event, detail)
    return ""


def _namespaces_of(snapshot: Batch, tenant: dict) -> list[str]:
    """The tenant's namespaces: those labelled as its own. Not its spec's child names: one of them may be another
    tenant's namespace (tenant "b" with child "x-y" and tenant "b-x" with child "y" both name "b-x-y"), whose claims
    this tenant's hooks must never hear of. A child not created yet holds no claim."""
    mine = plan.tenant_name(tenant)
    return sorted(o["metadata"]["name"] for o in snapshot.owned_by(mine) if o["kind"] == "Namespace")


def _with_hooks_condition(tenant, conditions, hook_state, refusal, abandoned, generation, timestamp) -> list[dict]:
    """Conditions with Hooks set (only for a tenant with hooks, or one that had them), Ready recomputed."""
    if hook_plan.hooks(tenant) or cond.find(conditions, hook_plan.HOOKS):
        status, reason, message = hook_plan.condition_of(hook_state.get("pending") or [], refusal, abandoned)
        conditions = cond.set_condition(conditions, hook_plan.HOOKS, status, reason, message, generation, timestamp)
    return cond.with_ready(conditions, generation, timestamp)


def _deliver_due(run: TenantRun, snapshot: Batch, tenant: dict, written: dict, result: dict, final=False) -> None:
    """Tell the non-blocking hooks what is due (all that is pending when `final`), record what failed, requeue."""
    hook_state = dict(written.get("hooks") or {})
    pending = hook_state.get("pending") or []
    now = hook_plan.parse_time(run.timestamp)
    if run.check_mode or not pending:
        return
    by_name = {h.name: h for h in hook_plan.hooks(tenant)}
    state = written.get("state") or plan.NEW
    claims = {}
    if any(e.get("claim") for e in pending) and not final:
        for claim in snapshot.claims_in(_namespaces_of(snapshot, tenant)):
            claims[(claim["metadata"]["namespace"], claim["metadata"]["name"])] = claim
    remaining, abandoned = [], []
    # A hook that failed once this run is not called again in it: its other deliveries wait for its retry (attempts
    # not counted), so a hanging hook costs one timeout per run, however much it is owed.
    failed_until: dict[str, str] = {}
    for entry in pending:
        hook = by_name.get(entry["hook"])
        if hook is None or entry["eventType"] not in hook.event_types:
            continue  # the hook (or its subscription) was removed from the spec: nothing to tell it
        if not final and entry not in hook_plan.due(pending, now):
            remaining.append(entry)
            continue
        if hook.name in failed_until:
            if final:
                abandoned.append(f"hook {hook.name!r} {entry['eventType']} not tried: the hook failed just before")
            else:
                remaining.append({**entry, "nextAttemptAt": failed_until[hook.name]})
            continue
        claim = entry.get("claim")
        current = claims.get((claim["namespace"], claim["name"])) if claim else None
        conditions = ((current or {}).get("status") or {}).get("conditions") if current else None
        body = hook_plan.payload(entry["eventType"], tenant, state, claim=claim, conditions=conditions)
        detail = run.deliverer.send(hook, body)
        result.setdefault("deliveries", []).append(
            {"hook": hook.name, "eventType": entry["eventType"], "delivered": not detail, "error": detail}
        )
        if not detail:
            continue
        # The backoff counts from the failure (a hook may have used its whole timeout), not the run's start.
        retry = hook_plan.after_failure(entry, detail, hook_plan.parse_time(cond.now()))
        failed_until[hook.name] = retry["nextAttemptAt"] if retry else run.timestamp
        if retry is None or final:
            tries = entry.get("attempts", 0) + 1
            abandoned.append(f"hook {hook.name!r} {entry['eventType']} given up after {tries} attempt(s): {detail}")
        else:
            remaining.append(retry)
    hook_state["pending"] = remaining
    if final:
        result["abandoned"] = abandoned
        return
    generation = tenant["metadata"].get("generation", 0)
    refusal = ""
    updated = {
        **written,
        "conditions": _with_hooks_condition(
            tenant, written.get("conditions") or [], hook_state, refusal, abandoned, generation, run.timestamp
        ),
        "hooks": hook_state,
    }
    _write_status(run, tenant, updated, result)
    wait = hook_plan.seconds_until_next(remaining, hook_plan.parse_time(cond.now()))
    if wait is not None:
        result["requeue"] = True
        result["requeue_after"] = min(wait, result.get("requeue_after", wait))


def _write(run: TenantRun, action: str, obj: dict, result: dict, before: dict | None = None) -> dict | None:
    """Create, replace, recreate or delete `obj` (`before`: as it is now, for the diff); the object as the API server
    holds it now (None: deleted, check mode)."""
    kind, namespace, name = plan.object_key(obj)
    result["writes"].append({"action": action, "kind": kind, "namespace": namespace, "name": name})
    result["changed"] = True
    written = None
    if action == "delete":
        # Past the snapshot: it keeps the object as read, as later steps of the run expect (a namespace or claim
        # being deleted is still there, its finalizers holding it, and its hooks are told of it as it was).
        if not run.check_mode:
            run.api.delete(obj["apiVersion"], kind, name, namespace or None, uid=obj["metadata"].get("uid", ""))
        run.record(kind, obj, None)
        return None
    if not run.check_mode:
        written = _written(run, action, obj)
    run.record(kind, before, obj)
    return written


def _written(run: TenantRun, action: str, obj: dict) -> dict:
    kind, namespace, name = plan.object_key(obj)
    if action == "replace":
        return run.kube.replace(obj)
    if action == "recreate":
        run.api.delete(obj["apiVersion"], kind, name, namespace or None)  # the create replaces it in the snapshot
        return run.kube.create(obj)
    try:
        return run.kube.create(obj)
    except AlreadyExistsError as error:
        # Made since the batch listed it (by hand: a labelled one would have been listed).
        raise KubeError(f"{kind} {namespace}/{name} exists and is not this tenant's: {error}") from error


def _with_finalizer(run: TenantRun, tenant: dict, result: dict) -> dict:
    finalizers = tenant["metadata"].get("finalizers") or []
    if plan.FINALIZER in finalizers:
        return tenant
    updated = copy.deepcopy(tenant)
    updated["metadata"]["finalizers"] = [*finalizers, plan.FINALIZER]
    result["changed"] = True
    result["writes"].append({"action": "replace", "kind": plan.KIND, "namespace": "", "name": plan.name(tenant)})
    written = updated if run.check_mode else run.kube.replace(_without_status(updated))
    run.record(plan.KIND, _without_status(tenant), _without_status(updated))
    return written


def _without_status(tenant: dict) -> dict:
    body = copy.deepcopy(tenant)
    body.pop("status", None)
    return body


def _write_status(run: TenantRun, tenant: dict, new_status: dict, result: dict) -> dict:
    """Patch the status when it says something new; return the Tenant as written."""
    old = tenant.get("status") or {}
    fields = ("state", "observedGeneration", "childNamespaces", "objects", "hooks")
    if all(old.get(f) == new_status.get(f) for f in fields if f in new_status) and cond.same(
        old.get("conditions"), new_status.get("conditions")
    ):
        return tenant
    result["changed"] = True
    result["status_writes"] = result.get("status_writes", 0) + 1
    changes = status_patch(tenant, {**old, **new_status}) or {}
    if run.check_mode:
        run.record_status(plan.KIND, tenant, changes)
        return {**tenant, "status": {**old, **new_status}}
    try:
        written = run.kube.patch_status(tenant, new_status)
    except ConflictError:
        # The Tenant changed under us (a spec edit): its next reconcile computes the status afresh.
        result["requeue"] = True
        return tenant
    run.record_status(plan.KIND, tenant, changes)
    return written


def _delete(run: TenantRun, snapshot: Batch, tenant: dict) -> dict:
    """Deletion in order: the claims (and HostClaimSets) of its namespaces (their hosts released by the claim
    layer), the namespaces, then its pool entries and reservations; the finalizer last. One stage per run."""
    result = _result(tenant, state=plan.DELETING)
    if plan.FINALIZER not in (tenant["metadata"].get("finalizers") or []):
        return result
    mine = plan.tenant_name(tenant)
    generation = tenant["metadata"].get("generation", 0)
    conditions = (tenant.get("status") or {}).get("conditions") or []
    hook_state = hook_plan.hook_status(tenant)
    if hook_plan.tenant_event_due(tenant) == hook_plan.DELETE:
        # Nothing is removed while a blocking DELETE hook refuses.
        refusal = _ask_blocking(run, tenant, hook_plan.DELETE, plan.DELETING, result)
        if refusal:
            return _refused_by_hook(
                run, tenant, hook_state, conditions, refusal, result, plan.DELETING, hook_plan.DELETE
            )
        hook_state = hook_plan.allowed(hook_state)
        hook_state["deleteAnnounced"] = True
        hook_state["pending"] = hook_plan.queued(
            hook_state.get("pending") or [], tenant, hook_plan.DELETE, run.timestamp
        )
    hook_state = _with_claim_events(run, snapshot, tenant, hook_state)
    owned = snapshot.owned_by(mine)
    namespaces = [o for o in owned if o["kind"] == "Namespace"]
    stage, message = None, ""
    claims, sets = [], []
    for namespace in namespaces:
        claims += run.kube.list(metal3.API_VERSION, "HostClaim", namespace=plan.object_key(namespace)[2])
        # Its HostClaimSets first, in the same pass: a set would make its claims again as they go.
        sets += run.kube.list(metal3.API_VERSION, SET_KIND, namespace=plan.object_key(namespace)[2])
    if claims or sets:
        for obj in [*sets, *claims]:
            if not obj["metadata"].get("deletionTimestamp"):
                _write(run, "delete", obj, result)
        stage = plan.RELEASING_CLAIMS
        message = f"{len(claims)} HostClaim(s) releasing their hosts"
        if sets:
            message += f", {len(sets)} HostClaimSet(s) deleted"
    elif namespaces:
        for namespace in namespaces:
            if not namespace["metadata"].get("deletionTimestamp"):
                _write(run, "delete", namespace, result)
        stage = plan.DELETING_NAMESPACES
        message = "namespace(s) " + ", ".join(plan.object_key(n)[2] for n in namespaces) + " being deleted"
    if stage:
        conditions = cond.set_condition(conditions, plan.DELETION, "False", stage, message, generation, run.timestamp)
        new_status = {
            "state": plan.DELETING,
            "observedGeneration": generation,
            "conditions": _with_hooks_condition(tenant, conditions, hook_state, "", [], generation, run.timestamp),
            "hooks": hook_state,
        }
        result.update(requeue=True, reason=stage, message=message)
        tenant = _write_status(run, tenant, new_status, result)
        _deliver_due(run, snapshot, tenant, new_status, result)
        result.pop("requeue_after", None)  # the stage is looked at again soon (the caller's requeue), hooks with it
        return result
    # Last: the pool entries and reservations (until now the tenant's claims could still be released).
    try:
        for obj in owned:
            _write(run, "delete", obj, result)
        for host in snapshot.hosts.values():
            if mine in reserved_for(host):
                _write(run, "replace", plan.with_reservation(host, mine, False), result, host)
    except KubeError as error:
        conditions = cond.set_condition(
            conditions, plan.DELETION, "False", plan.DELETION_FAILED, str(error), generation, run.timestamp
        )
        result.update(requeue=True, reason=plan.DELETION_FAILED, message=str(error))
        _write_status(run, tenant, {"state": plan.DELETING, "conditions": conditions}, result)
        return result
    # The Tenant goes with this write: what is still pending for non-blocking hooks is tried once more, then
    # dropped (they never hold a deletion up).
    _deliver_due(run, snapshot, tenant, {"state": plan.DELETING, "hooks": hook_state}, result, final=True)
    updated = copy.deepcopy(tenant)
    updated["metadata"]["finalizers"] = [f for f in tenant["metadata"]["finalizers"] if f != plan.FINALIZER]
    _write(run, "replace", _without_status(updated), result, _without_status(tenant))
    return result
