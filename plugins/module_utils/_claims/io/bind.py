# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_bind: bind a batch of claims to hosts, race-free. I/O edge over _binding's plans.

Reads every claim, host, policy and namespace once (one list call per kind), plans each
claim with the pure binding/policy code, then commits in two writes: the host's consumerRef
(under the host's resourceVersion: a concurrent binder that took the host makes this fail and
we move on to the next candidate), then the claim's status naming the host, under the claim's
resourceVersion, written before anything of the tenant's reaches the host (by the sync step's
flush(only=...), or at the end of the run): the commit point. Of two binders that took two hosts
for one claim, the first status write wins and the other gives its host back (writes.py
_still_ours). The claim carries our finalizer before any host is taken: from its creation where
the MutatingAdmissionPolicy of config/admission-create is installed, else written here first.
"""

from __future__ import annotations

import copy
import random

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io import leases
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io import reuse as reuse_io
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import namespace_metadata
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.writes import (
    api_status,
    error_detail,
    with_finalizer,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import (
    binding,
    booking,
    failures,
    lease,
    reuse,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.booking import REASONS as BOOKED
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.status import (
    locked_claim,
    recorded_host,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import ConflictError, KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import firmware_policy
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    hosts_held,
    max_bound_hosts,
    tenant_of,
)

# A concurrent binder took a host for the claim first: this run leaves the claim to it (outcome: wait).
BINDING_ELSEWHERE = "BindingElsewhere"


def bind_claims(run) -> dict:
    """Bind the claims oldest first: plan each in order against the hosts as the claims before it left them (a host
    planned for one is reserved in memory), commit the plans in waves of a few at once, then go one at a time (see
    _next_after_conflict) through what another binder got in the way of: the claims whose planned host it took, and
    those left after the wave that met it."""
    kube = run.kube
    claims = run.claims()
    order = {binding.key(c): index for index, c in enumerate(claims)}
    index = binding.HostIndex(kube.held(API_VERSION, "BareMetalHost"))
    context = _Context(run)
    results = []
    planned = []
    # Another binder in the middle of these claims (a host names one whose status does not name the host yet): one
    # claim at a time, as below, so that each plan sees what that binder took just before.
    alone = not _binder_in_flight(claims, index)
    for claim in claims if alone else []:
        plan = context.plan(claim, index)
        if isinstance(plan, dict):
            results.append(plan)
            continue
        reserved = None
        if plan.action == "bind" and plan.candidates:
            reserved = plan.candidates[0]
            taken = copy.deepcopy(reserved)
            taken["spec"]["consumerRef"] = binding.claim_ref(claim)
            index.put(taken)  # the next claims plan without it
        planned.append((plan, reserved))
    retry = []  # claims whose planned host another binder took: planned again
    met = []  # another binder was seen (list.append: safe from the wave's threads)

    def commit(item) -> None:
        plan, reserved = item
        try:
            results.append(_commit(run, plan, index, reserved))
        except _TakenMeanwhile:
            retry.append(plan.claim)
            met.append(True)
            return
        if _collided(results[-1]):
            met.append(True)

    # Waves of a few commits at once: after a wave that met another binder (it walks the same claims in the same
    # order, and would collide on every one), what is left goes one at a time from a random point instead.
    wave = max(run.workers, 1) * 2
    while planned and not met:
        run.each(commit, planned[:wave])
        planned = planned[wave:]
    pending = [] if alone else list(claims)
    if retry or planned:  # another binder is walking the same claims: from a fresh read, one at a time
        left = retry + [plan.claim for plan, _reserved in planned]
        pending, index = _next_after_conflict(kube, sorted(left, key=lambda c: order[binding.key(c)]))
    while pending:
        claim = pending.pop(0)
        plan = context.plan(claim, index)
        results.append(plan if isinstance(plan, dict) else _commit(run, plan, index))
        if _collided(results[-1]) and pending:
            pending, index = _next_after_conflict(kube, pending)
    results.sort(key=lambda r: order[(r["namespace"], r["name"])])
    return {
        "changed": any(r["changed"] for r in results),
        "claims": results,
        "bound": sum(1 for r in results if r["host"]),
        "unbound": sum(1 for r in results if r["action"] in ("refuse", "bind") and not r["host"]),
        "conflicts": sum(1 for r in results if r["action"] == "conflict"),
    }


def _binder_in_flight(claims: list[dict], index: binding.HostIndex) -> bool:
    """Whether a host names one of the claims that does not name it back: a binding not committed yet."""
    for claim in claims:
        own = index.owned_by(claim)
        if own and not binding.committed(claim, own[0]):
            return True
    return False


def _collided(result: dict) -> bool:
    """Whether another binder was at the claim too (a conflict on it, or the host it took for it first)."""
    return result["action"] == "conflict" or result.get("reason") == BINDING_ELSEWHERE


class _Context:
    """What planning a claim reads besides the hosts, read once per run."""

    def __init__(self, run):
        self.run = run
        self.policies = run.kube.list(API_VERSION, "HostDeployPolicy")
        self.metadata_of = namespace_metadata(run.kube)
        self.labels_of = {name: meta.get("labels") or {} for name, meta in self.metadata_of.items()}

    def plan(self, claim: dict, index: binding.HostIndex):
        """The claim's binding.Plan, or the result of a claim this step leaves alone (its lease ended)."""
        run = self.run
        if leases.expired(run, claim):  # the lease step released it: never bound again
            namespace, name = binding.key(claim)
            skipped = {"namespace": namespace, "name": name, "action": "skip", "host": None, "changed": False}
            skipped.update(reason=lease.LEASE_EXPIRED, message="the claim's lease ended")
            return skipped
        namespace = claim["metadata"]["namespace"]
        labels = self.labels_of.get(namespace, {})
        authorized, decisions = evaluate_policies(self.policies, namespace, labels)
        held = 0
        if max_bound_hosts(labels) is not None:
            consumers = [ref for ref in map(binding.consumer, index.all()) if ref]
            held = hosts_held(tenant_of(labels), consumers, self.labels_of)
        annotations = (self.metadata_of.get(namespace) or {}).get("annotations")
        caps = lease.caps(self.policies, decisions)
        spread = None
        if binding.spread_key(claim):  # a set's members
            spread = binding.spread_counts(claim, index.all(), run.kube.held(API_VERSION, "HostClaim"))
        now = leases.now_of(run)
        allowed = firmware_policy.allowances(self.policies, decisions)
        namespace_uid = (self.metadata_of.get(namespace) or {}).get("uid", "")
        plan = binding.plan(
            claim,
            index,
            authorized,
            labels,
            held,
            annotations,
            caps,
            now,
            spread,
            firmware_allowed=allowed,
            namespace_uid=namespace_uid,
        )
        noted = run.book.condition(claim, lease.LEASE)  # the booking step's: too far ahead, or over the limit
        if (
            plan.reason == booking.BOOKING_CONFLICT
            and noted
            and noted[1] in (booking.BOOKING_TOO_FAR, booking.BOOKING_LIMIT)
        ):
            plan.reason, plan.message = noted[1], noted[2]
        return plan


def _next_after_conflict(kube, pending: list[dict]) -> tuple[list[dict], binding.HostIndex]:
    """(claims still to do, hosts by key) after a collision (a claim conflict, or a host another binder took for the
    same claim): another binder is walking the same claims.

    Concurrent binders listed the same claims and walk them in the same order, so after one
    collision they would keep colliding on every claim. Re-read what the others did (the hosts
    they took name their claims: those are skipped), then jump to a random point of what is left:
    the binders spread over the list and meet again only where their parts join.
    """
    relist = getattr(kube, "relist", kube.list)  # a caching client must go to the server here
    fresh = {binding.key(c): c for c in relist(API_VERSION, "HostClaim")}
    index = binding.HostIndex(relist(API_VERSION, "BareMetalHost"))
    pending = [fresh[binding.key(c)] for c in pending if binding.key(c) in fresh]
    start = random.randrange(len(pending)) if pending else 0
    return pending[start:] + pending[:start], index


def _commit(run, plan: binding.Plan, index: binding.HostIndex, reserved: dict | None = None) -> dict:
    claim = plan.claim
    namespace, name = binding.key(claim)
    result = {"namespace": namespace, "name": name, "action": plan.action, "host": None, "changed": False}
    if plan.action == "skip":
        result["reason"] = plan.reason
        return result
    try:
        return _commit_claim(run, plan, index, result, reserved)
    except ConflictError as error:
        # Another reconcile is working on this claim right now; it will be seen again.
        result.update(action="conflict", reason="Conflict", message=str(error), changed=False)
        return result
    except KubeError as error:
        # This claim's alone (the batch goes on). Its condition names no candidate host: the tenant may not learn
        # the name or namespace of a host it does not hold; the module's result (infrastructure only) has it all.
        hidden = BindingFailed(f"binding failed on the API server (HTTP {api_status(error) or 'no answer'})")
        failed = run.failed(claim, hidden, "bind", cond.ASSOCIATION)
        result.update(action="error", reason=failed["state"], message=failed["message"], changed=False)
        result["detail"] = failures.shown(error_detail(error), failures.REPORTED_LIMIT)
        return result


class BindingFailed(Exception):
    """A binding write the API server refused, as the claim's tenant may read it."""


def _commit_claim(run, plan: binding.Plan, index: binding.HostIndex, result: dict, reserved: dict | None) -> dict:
    kube, check_mode = run.kube, run.check_mode
    claim = plan.claim
    host = plan.host
    newly_bound = False
    if plan.action == "keep":
        before = claim
        claim, result["changed"] = with_finalizer(kube, claim, check_mode)
        if result["changed"]:
            run.record("HostClaim", before, locked_claim(before))
        for extra in plan.extra_hosts:
            _give_back(run, extra)
            result["changed"] = True
    if plan.action == "bind":
        # The finalizer first (MutatingAdmissionPolicy config/admission-create puts it there at creation on
        # Kubernetes >= 1.36: then nothing is written here), so the claim cannot vanish holding a host.
        before = claim
        claim, wrote_finalizer = with_finalizer(kube, claim, check_mode)
        if wrote_finalizer:
            run.record("HostClaim", before, locked_claim(before))
        result["changed"] = True
        if plan.reason == binding.MISSING_HOST:
            run.event(claim, "Warning", binding.MISSING_HOST, plan.message)
        try:
            if reserved is not None:  # planned for it alone: another binder took it, or it is the claim's
                host = _take(run, claim, reserved, index)
            else:
                host = _take_first_free(run, claim, plan.candidates, index)
        except BindingElsewhere as elsewhere:
            result.update(action="skip", reason=BINDING_ELSEWHERE, message=str(elsewhere))
            return result
        newly_bound = host is not None
    if host is not None:
        host_key = binding.key(host)
        updates = {"hardwareData": {"name": host_key[1], "namespace": host_key[0]}, "hostUID": host["metadata"]["uid"]}
        association = (cond.ASSOCIATION, "True", binding.ASSOCIATED, "")
        result["host"] = f"{host_key[0]}/{host_key[1]}"
        started = lease.started(claim, leases.now_of(run)) if newly_bound else None
        if started is not None:  # the lease starts with the binding, written with it
            updates["lease"] = started.lease_status
            result["after"] = started.after
        # As planned (its hold mark goes with the take): the host taken is among the first candidates, look no further.
        planned = next((c for c in plan.candidates if binding.key(c) == host_key), None) if newly_bound else None
        took_held = planned is not None and reuse.hold_of(planned) is not None
        reuse_condition = reuse_io.condition(run, claim, host, took_held)  # node reuse: what release will do
        if took_held:
            result["reused"] = True
    else:
        started, reuse_condition = None, None
        reason, message = plan.reason, plan.message
        if plan.action == "bind":  # every candidate went to another claim (of this batch or a concurrent run)
            reason, message = binding.NO_HOST, plan.no_host_message()
        updates = {"hardwareData": None, "hostUID": None} if plan.stale_status else {}
        association = (cond.ASSOCIATION, "False", reason, message)
        result["reason"], result["message"] = reason, message
    previous = cond.find((claim.get("status") or {}).get("conditions"), cond.ASSOCIATION) or {}
    noted = [association, *(started.conditions if started else []), *([reuse_condition] if reuse_condition else [])]
    run.book.note(claim, noted, updates, result=result)
    result["changed"] = result["changed"] or newly_bound
    if newly_bound:
        bound_to = result["host"]
        run.book.committing(
            claim,
            give_back=lambda: _give_back(run, host),
            on_commit=lambda: run.event(claim, "Normal", "Bound", f"bound to BareMetalHost {bound_to}"),
            replacing=recorded_host(claim) if plan.stale_status else None,  # its host vanished, say: not a binder's
        )
    elif host is None and previous.get("reason") != association[2] and association[2] not in BOOKED:
        # One Event per change of outcome, not one per reconcile (a booking's: the booking step's).
        run.event(claim, "Warning", association[2], association[3])
    return result


def _give_back(run, host: dict) -> None:
    """Clear a consumerRef we wrote, as long as the host still names the same claim."""
    kube = run.kube
    if run.check_mode:
        updated = copy.deepcopy(host)
        updated["spec"].pop("consumerRef", None)
        run.record("BareMetalHost", host, updated)
        return
    ref = binding.consumer(host)
    for _attempt in range(3):
        updated = copy.deepcopy(host)
        updated["spec"].pop("consumerRef", None)
        try:
            kube.replace(updated)
            run.record("BareMetalHost", host, updated)
            return
        except ConflictError:
            # Changed since (its provisioner wrote its status, say): read it again. If it names
            # another consumer now, it is no longer ours to give back.
            host = kube.get(API_VERSION, "BareMetalHost", binding.key(host)[1], binding.key(host)[0])
            if host is None or binding.consumer(host) != ref:
                return


def _take_first_free(run, claim: dict, candidates: list[dict], index: binding.HostIndex) -> dict | None:
    for candidate in candidates:
        current = index.get(binding.key(candidate))
        if binding.why_not_free(current) is not None:  # bound earlier in this batch
            continue
        try:
            return _take(run, claim, current, index)
        except _TakenMeanwhile:
            continue
    return None


def _take(run, claim: dict, current: dict, index: binding.HostIndex) -> dict:
    """Write the claim into the host's consumerRef, under the resourceVersion `current` was read at."""
    kube = run.kube
    updated = reuse.taken(copy.deepcopy(current))  # a held host's mark goes as the claim it waits for takes it
    updated["spec"]["consumerRef"] = binding.claim_ref(claim)
    if run.check_mode:
        index.put(updated)
        run.record("BareMetalHost", current, updated)
        return updated
    try:
        written = kube.replace(updated)
    except ConflictError:
        # Someone changed the host since we listed it (most likely bound it): leave it for this batch. Bound to
        # this very claim, by a concurrent binder: that one is binding the claim, this run leaves it alone.
        namespace, name = binding.key(current)
        fresh = kube.get(API_VERSION, "BareMetalHost", name, namespace)
        if fresh is not None and binding.consumed_by(fresh, claim):
            raise BindingElsewhere(f"another binder took BareMetalHost {namespace}/{name}") from None
        index.put(_changed_elsewhere(current))
        raise _TakenMeanwhile() from None
    index.put(written)
    run.record("BareMetalHost", current, updated)
    return written


class _TakenMeanwhile(Exception):
    """Another binder changed the host planned for a claim since this run read it."""


class BindingElsewhere(Exception):
    """A concurrent binder is binding this claim (it took a host for it first)."""


def _changed_elsewhere(host: dict) -> dict:
    marked = copy.deepcopy(host)
    marked["spec"]["consumerRef"] = {"kind": "Unknown", "name": "changed concurrently"}
    return marked
