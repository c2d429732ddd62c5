# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_bind: bind a batch of claims to hosts, race-free.

Reads every claim, host, policy and namespace once (one list call per kind), plans
each claim with the pure _binding/_policy code, then commits in two phases: the
host's consumerRef first, guarded by its resourceVersion (a concurrent binder that
took the host makes this fail with a conflict, and we move on to the next
candidate), then the claim's status.
"""

from __future__ import annotations

import contextlib
import copy
import random

from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _binding as binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_status import (
    BINDING_ANNOTATION,
    desired_status,
    event,
    lock_for_binding,
    with_finalizer,
    write_status,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._kube import METAL3, ConflictError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._policy import evaluate_policies


def select_claims(claims: list[dict], wanted: list[dict] | None) -> list[dict]:
    """The claims named in `wanted` ({namespace, name}), or all; oldest first so earlier requests win."""
    if wanted:
        keys = {(w["namespace"], w["name"]) for w in wanted}
        claims = [c for c in claims if binding.key(c) in keys]
    return sorted(claims, key=lambda c: (c["metadata"].get("creationTimestamp") or "", binding.key(c)))


def bound_claims(kube, wanted: list[dict] | None) -> list[tuple[dict, dict]]:
    """(claim, its host) for each live claim of ours that a host's consumerRef names: one list call per kind."""
    claims = select_claims(kube.list(METAL3, "HostClaim"), wanted)
    claims = [
        c
        for c in claims
        if not c["metadata"].get("deletionTimestamp") and binding.claim_kind(c) == binding.DEFAULT_CLAIM_KIND
    ]
    hosts = kube.list(METAL3, "BareMetalHost") if claims else []
    pairs = []
    for claim in claims:
        own = sorted((h for h in hosts if binding.consumed_by(h, claim)), key=binding.key)
        if own:
            pairs.append((claim, own[0]))
    return pairs


def namespace_labels(kube) -> dict:
    """namespace name -> its labels (what hasLabels in a policy is checked against), in one list call."""
    return {ns["metadata"]["name"]: ns["metadata"].get("labels") or {} for ns in kube.list("v1", "Namespace")}


def step_each(pairs: list[tuple[dict, object]], step, refresh=None) -> dict:
    """Run step(claim, what it needs) -> result for each pair; a conflict on one claim does not stop the others.

    On a conflict, refresh(claim, what) may read both again (None: nothing left to do) for one
    more try: steps are idempotent, and the object most often changed under us because a
    concurrent run wrote what we were about to write.
    """
    results = []
    for claim, needed in pairs:
        try:
            results.append(step(claim, needed))
            continue
        except ConflictError as error:
            conflict = error
        fresh = refresh(claim, needed) if refresh else None
        if fresh is not None:
            try:
                results.append(step(*fresh))
                continue
            except ConflictError as error:
                conflict = error
        namespace, name = binding.key(claim)
        results.append(
            {"namespace": namespace, "name": name, "state": "conflict", "message": str(conflict), "changed": False}
        )
    return {"changed": any(r["changed"] for r in results), "claims": results}


def reread_bound(kube):
    """A step_each refresh for (claim, host) pairs: both read again, None when they are no longer bound."""

    def reread(claim: dict, host: dict):
        namespace, name = binding.key(claim)
        fresh_claim = kube.get(METAL3, "HostClaim", name, namespace)
        fresh_host = kube.get(METAL3, "BareMetalHost", binding.key(host)[1], binding.key(host)[0])
        if fresh_claim is None or fresh_host is None or fresh_claim["metadata"].get("deletionTimestamp"):
            return None
        return (fresh_claim, fresh_host) if binding.consumed_by(fresh_host, fresh_claim) else None

    return reread


def bind_claims(kube, wanted: list[dict] | None, timestamp: str, check_mode: bool) -> dict:
    """Bind the claims oldest first, in one pass; see _next_after_conflict for concurrent binders."""
    claims = select_claims(kube.list(METAL3, "HostClaim"), wanted)
    order = {binding.key(c): index for index, c in enumerate(claims)}
    hosts = kube.list(METAL3, "BareMetalHost")
    policies = kube.list(METAL3, "HostDeployPolicy")
    labels_of = namespace_labels(kube)
    hosts_by_key = {binding.key(h): h for h in hosts}
    results = []
    pending = list(claims)
    while pending:
        claim = pending.pop(0)
        if _locked_by_another(claim, timestamp):
            namespace, name = binding.key(claim)
            skipped = {"namespace": namespace, "name": name, "action": "skip", "host": None, "changed": False}
            skipped.update(reason="BindingElsewhere", message="another binder is working on this claim")
            results.append(skipped)
            continue
        namespace = claim["metadata"]["namespace"]
        authorized, _decisions = evaluate_policies(policies, namespace, labels_of.get(namespace, {}))
        plan = binding.plan(claim, list(hosts_by_key.values()), authorized)
        results.append(_commit(kube, plan, hosts_by_key, timestamp, check_mode))
        if results[-1]["action"] == "conflict" and pending:
            pending, hosts_by_key = _next_after_conflict(kube, pending)
    results.sort(key=lambda r: order[(r["namespace"], r["name"])])
    return {
        "changed": any(r["changed"] for r in results),
        "claims": results,
        "bound": sum(1 for r in results if r["host"]),
        "unbound": sum(1 for r in results if r["action"] in ("refuse", "bind") and not r["host"]),
        "conflicts": sum(1 for r in results if r["action"] == "conflict"),
    }


def _locked_by_another(claim: dict, started: str) -> bool:
    """Whether another binder stamped the claim since this run started (this run stamps each claim once)."""
    stamp = (claim["metadata"].get("annotations") or {}).get(BINDING_ANNOTATION, "")
    return stamp >= started


def _next_after_conflict(kube, pending: list[dict]) -> tuple[list[dict], dict]:
    """(claims still to do, hosts by key) after a claim conflict: another binder is walking the same claims.

    Concurrent binders listed the same claims and walk them in the same order, so after one
    collision they would keep colliding on every claim. Re-read what the others did (their
    stamps make us skip claims they hold), then jump to a random point of what is left: the
    binders spread over the list and meet again only where their parts join.
    """
    relist = getattr(kube, "relist", kube.list)  # a caching client must go to the server here
    fresh = {binding.key(c): c for c in relist(METAL3, "HostClaim")}
    hosts_by_key = {binding.key(h): h for h in relist(METAL3, "BareMetalHost")}
    pending = [fresh[binding.key(c)] for c in pending if binding.key(c) in fresh]
    start = random.randrange(len(pending)) if pending else 0
    return pending[start:] + pending[:start], hosts_by_key


def _commit(kube, plan: binding.Plan, hosts_by_key: dict, timestamp: str, check_mode: bool) -> dict:
    claim = plan.claim
    namespace, name = binding.key(claim)
    result = {"namespace": namespace, "name": name, "action": plan.action, "host": None, "changed": False}
    if plan.action == "skip":
        result["reason"] = plan.reason
        return result
    try:
        return _commit_claim(kube, plan, hosts_by_key, timestamp, check_mode, result)
    except ConflictError as error:
        # Another reconcile is working on this claim right now; it will be seen again.
        result.update(action="conflict", reason="Conflict", message=str(error), changed=True)
        return result


def _commit_claim(kube, plan: binding.Plan, hosts_by_key: dict, timestamp: str, check_mode: bool, result: dict) -> dict:
    claim = plan.claim
    host = plan.host
    newly_bound = False
    if plan.action == "keep":
        claim, result["changed"] = with_finalizer(kube, claim, check_mode)
        for extra in plan.extra_hosts:
            _give_back(kube, extra, check_mode)
            result["changed"] = True
    if plan.action == "bind":
        claim = lock_for_binding(kube, claim, timestamp, check_mode)
        result["changed"] = True
        if plan.reason == binding.MISSING_HOST:
            event(kube, claim, "Warning", binding.MISSING_HOST, plan.message, timestamp, check_mode)
        host = _take_first_free(kube, claim, plan.candidates, hosts_by_key, check_mode)
        newly_bound = host is not None
    if host is not None:
        host_key = binding.key(host)
        updates = {"hardwareData": {"name": host_key[1], "namespace": host_key[0]}, "hostUID": host["metadata"]["uid"]}
        association = (cond.ASSOCIATION, "True", binding.ASSOCIATED, "")
        result["host"] = f"{host_key[0]}/{host_key[1]}"
    else:
        reason, message = plan.reason, plan.message
        if plan.action == "bind":  # every candidate went to another claim (of this batch or a concurrent run)
            reason, message = binding.NO_HOST, plan.no_host_message(plan.namespaces)
        updates = {"hardwareData": None, "hostUID": None} if plan.stale_status else {}
        association = (cond.ASSOCIATION, "False", reason, message)
        result["reason"], result["message"] = reason, message
    desired = desired_status(claim, updates, [association], timestamp)
    previous = cond.find((claim.get("status") or {}).get("conditions"), cond.ASSOCIATION) or {}
    try:
        wrote = write_status(kube, claim, desired, timestamp, check_mode)
    except ConflictError:
        if newly_bound:
            # A concurrent binder wrote the claim after our lock: it may hold another host
            # for it. Give ours back so the claim never owns two.
            _give_back(kube, host, check_mode)
        raise
    result["changed"] = result["changed"] or newly_bound or wrote
    # One Event per change of outcome, not one per reconcile.
    if newly_bound:
        event(kube, claim, "Normal", "Bound", f"bound to BareMetalHost {result['host']}", timestamp, check_mode)
    elif host is None and previous.get("reason") != association[2]:
        event(kube, claim, "Warning", association[2], association[3], timestamp, check_mode)
    return result


def _give_back(kube, host: dict, check_mode: bool) -> None:
    """Clear a consumerRef we wrote, under the host's resourceVersion (a newer writer wins)."""
    if check_mode:
        return
    updated = copy.deepcopy(host)
    updated["spec"].pop("consumerRef", None)
    # A conflict means it changed since: the next reconcile of its consumer sees the current state.
    with contextlib.suppress(ConflictError):
        kube.replace(updated)


def _take_first_free(kube, claim: dict, candidates: list[dict], hosts_by_key: dict, check_mode: bool) -> dict | None:
    for candidate in candidates:
        current = hosts_by_key[binding.key(candidate)]
        if binding.why_not_free(current) is not None:  # bound earlier in this batch
            continue
        updated = copy.deepcopy(current)
        updated["spec"]["consumerRef"] = binding.claim_ref(claim)
        if check_mode:
            hosts_by_key[binding.key(candidate)] = updated
            return updated
        try:
            written = kube.replace(updated)
        except ConflictError:
            # Someone changed the host since we listed it (most likely bound it): leave it
            # for this batch and try the next one.
            hosts_by_key[binding.key(candidate)] = _changed_elsewhere(current)
            continue
        hosts_by_key[binding.key(candidate)] = written
        return written
    return None


def _changed_elsewhere(host: dict) -> dict:
    marked = copy.deepcopy(host)
    marked["spec"]["consumerRef"] = {"kind": "Unknown", "name": "changed concurrently"}
    return marked
