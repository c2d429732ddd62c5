# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HostClaimSet: N HostClaims as one object, as a ReplicaSet is N pods. Pure: the caller reads, this decides.

A set's members are the HostClaims of its namespace whose controller owner reference is the set (its uid): claims it
did not make are never counted, changed or deleted, whatever their labels. Members are named `<set>-<n>`, n the
smallest numbers no HostClaim of the namespace has: two runs at once choose the same names, and the second create
finds the name taken, so a set never gets more claims than it asks.

Scale-down deletes the members the rule below picks first (SCALE_DOWN_ORDER): those the claim layer has not looked at
yet, then those waiting for a host, then bound ones not Ready, then Ready ones; within each, the newest first (then
the highest n). A member being deleted is no longer counted: its host is being released.

Template changes apply to the claims made afterwards (as a ReplicaSet's do); existing members are left as they are.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.claimsets import (
    SET_KIND,
    SET_LABEL,
    SPREAD_ANNOTATION,
    owner_set,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import (
    DONE,
    WAIT,
    Outcomes,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.selectors import (
    SelectorError,
    key_problem,
    matches,
    validate,
)

API_VERSION = metal3.API_VERSION
KIND = SET_KIND
CLAIM_KIND = "HostClaim"
# Members made for one set in one run; the rest in the next run, at once (as a ReplicaSet's burst).
CREATE_BURST = 100
# A set whose member the API server refused (its namespace's quota, say) is tried again this much later.
REFUSED_RETRY_SECONDS = 30.0
# A set with more members to make than CREATE_BURST is run again this soon.
BURST_RETRY_SECONDS = 1.0

# Conditions and their reasons (the tenant guide lists each).
SCALED = "Scaled"
BOUND = "Bound"
READY = cond.READY
SCALED_TO_REPLICAS = "ScaledToReplicas"
SCALING_UP = "ScalingUp"
SCALING_DOWN = "ScalingDown"
CREATE_REFUSED = "CreateRefused"
INVALID_SPEC = "InvalidSpec"
ALL_BOUND = "AllBound"
HOSTS_WAITING = "HostsWaiting"
REPLICAS_READY = "ReplicasReady"
REPLICAS_NOT_READY = "ReplicasNotReady"
# Events on the set.
CLAIMS_CREATED = "ClaimsCreated"
CLAIMS_DELETED = "ClaimsDeleted"

# Member stages, in the order scale-down deletes them.
NEW, WAITING, NOT_READY, MEMBER_READY = 0, 1, 2, 3
SCALE_DOWN_ORDER = ("new (no Association yet)", "waiting for a host", "bound, not Ready", "bound and Ready")


def key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def deleting(obj: dict) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def members(claim_set: dict, claims: list[dict]) -> list[dict]:
    """The claims of the set's namespace whose controller owner reference is the set (by uid)."""
    namespace, _name = key(claim_set)
    uid = claim_set["metadata"].get("uid")
    return [c for c in claims if key(c)[0] == namespace and (owner_set(c) or {}).get("uid") == uid and uid]


def stage(claim: dict) -> int:
    """Where a member stands: NEW, WAITING, NOT_READY or MEMBER_READY (its Association and Ready conditions)."""
    conditions = (claim.get("status") or {}).get("conditions")
    association = (cond.find(conditions, cond.ASSOCIATION) or {}).get("status")
    if association not in ("True", "False"):
        return NEW
    if association != "True":
        return WAITING
    return MEMBER_READY if (cond.find(conditions, READY) or {}).get("status") == "True" else NOT_READY


def ordinal(set_name: str, claim_name: str) -> int:
    """n of a member named `<set>-<n>` (-1 for another name)."""
    match = re.fullmatch(re.escape(set_name) + r"-(\d+)", claim_name)
    return int(match.group(1)) if match else -1


def scale_down(set_name: str, live: list[dict], count: int) -> list[dict]:
    """The `count` live members the rule deletes: lowest stage first, within one the newest (then highest n)."""
    newest_first = sorted(
        live,
        key=lambda c: ((c["metadata"].get("creationTimestamp") or ""), ordinal(set_name, key(c)[1]), key(c)[1]),
        reverse=True,
    )
    return sorted(newest_first, key=stage)[: max(0, count)]


def new_names(set_name: str, taken: set[str], count: int) -> list[str]:
    """`count` names `<set>-<n>`, n the smallest numbers whose name no claim of the namespace has."""
    names, n = [], 0
    while len(names) < count:
        name = f"{set_name}-{n}"
        if name not in taken:
            names.append(name)
        n += 1
    return names


def problems(claim_set: dict) -> list[str]:
    """What makes the set's spec unusable (the CRD refuses most of it; an older object may still have it)."""
    spec = claim_set.get("spec") or {}
    namespace = key(claim_set)[0]
    found = []
    selector = spec.get("selector") or {}
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    try:
        validate(selector, "spec.selector")
    except SelectorError as error:
        found.append(str(error))
    else:
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            found.append("spec.selector selects nothing: give matchLabels or matchExpressions")
        elif not matches(selector, labels):
            found.append("spec.selector does not match spec.template.metadata.labels")
    claim_spec = template.get("spec") or {}
    references = [(role, claim_spec.get(role)) for role in metal3.DATA_ROLES]
    references.append(("remote.kubeconfigSecretRef", (claim_spec.get("remote") or {}).get("kubeconfigSecretRef")))
    for field_name, ref in references:
        if isinstance(ref, dict) and ref.get("namespace") not in (None, "", namespace):
            found.append(f"spec.template.spec.{field_name}.namespace: a set's claims are made in {namespace!r} only")
    spread = spec.get("spreadBy")
    if spread:
        problem = key_problem(spread)
        if problem:
            found.append(f"spec.spreadBy: {problem}")
    return found


def member_body(claim_set: dict, name: str) -> dict:
    """A new member from the set's template: in the set's namespace, controlled by the set."""
    spec = claim_set.get("spec") or {}
    template = spec.get("template") or {}
    template_meta = template.get("metadata") or {}
    namespace, set_name = key(claim_set)
    annotations = {k: v for k, v in (template_meta.get("annotations") or {}).items() if k != SPREAD_ANNOTATION}
    if spec.get("spreadBy"):
        annotations[SPREAD_ANNOTATION] = spec["spreadBy"]
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": {**(template_meta.get("labels") or {}), SET_LABEL: set_name},
        "ownerReferences": [
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": set_name,
                "uid": claim_set["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": API_VERSION,
        "kind": CLAIM_KIND,
        "metadata": metadata,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


@dataclass
class Plan:
    """What one run does for one set."""

    claim_set: dict
    live: list[dict] = field(default_factory=list)  # members not being deleted
    releasing: int = 0  # members being deleted
    create: list[dict] = field(default_factory=list)  # bodies, in name order
    delete: list[dict] = field(default_factory=list)  # members, in the rule's order
    more_later: int = 0  # members still to make after this run's burst
    problems: list[str] = field(default_factory=list)


def desired_replicas(claim_set: dict) -> int:
    replicas = (claim_set.get("spec") or {}).get("replicas")
    return 1 if replicas is None else max(0, int(replicas))


def plan(claim_set: dict, claims: list[dict]) -> Plan:
    """One set's creates and deletes, given every HostClaim of its namespace."""
    own = members(claim_set, claims)
    result = Plan(claim_set, live=[c for c in own if not deleting(c)], releasing=sum(1 for c in own if deleting(c)))
    if deleting(claim_set):
        return result  # the garbage collector deletes the members
    result.problems = problems(claim_set)
    if result.problems:
        return result
    wanted = desired_replicas(claim_set)
    missing = wanted - len(result.live)
    if missing > 0:
        taken = {key(c)[1] for c in claims if key(c)[0] == key(claim_set)[0]}
        names = new_names(key(claim_set)[1], taken, min(missing, CREATE_BURST))
        result.create = [member_body(claim_set, name) for name in names]
        result.more_later = missing - len(names)
    elif missing < 0:
        result.delete = scale_down(key(claim_set)[1], result.live, -missing)
    return result


def selector_string(selector: dict | None) -> str:
    """spec.selector as the scale subresource's status.selector wants it (a label selector's string form)."""
    selector = selector or {}
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        operator, label = expression.get("operator"), expression.get("key")
        values = ",".join(sorted(expression.get("values") or []))
        if operator in ("In", "in", "=", "=="):
            parts.append(f"{label} in ({values})")
        elif operator in ("NotIn", "notin", "!="):
            parts.append(f"{label} notin ({values})")
        elif operator in ("Exists", "exists"):
            parts.append(label)
        elif operator in ("DoesNotExist", "!"):
            parts.append(f"!{label}")
    return ",".join(parts)


def _waiting_reasons(waiting: list[dict]) -> str:
    """'NoBareMetalHost 2, TenantHostLimit 1': the Association reasons of waiting members, as they show them."""
    counts: dict[str, int] = {}
    for claim in waiting:
        found = cond.find((claim.get("status") or {}).get("conditions"), cond.ASSOCIATION) or {}
        reason = found.get("reason") if found.get("status") == "False" else "NotYetLookedAt"
        counts[reason or "NotYetLookedAt"] = counts.get(reason or "NotYetLookedAt", 0) + 1
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def desired_status(
    claim_set: dict,
    live: list[dict],
    releasing: int,
    problems_found: list[str],
    refused: str,
    more_later: int,
    timestamp: str,
) -> dict:
    """The set's whole status after this run: `live` its members not being deleted (those it made included, those it
    deleted left out), `refused` the API server's answer to a create it refused ("" if none)."""
    generation = claim_set["metadata"].get("generation", 0)
    previous = (claim_set.get("status") or {}).get("conditions") or []
    wanted = desired_replicas(claim_set)
    bound = [c for c in live if stage(c) >= NOT_READY]
    ready = [c for c in live if stage(c) == MEMBER_READY]
    waiting = [c for c in live if stage(c) < NOT_READY]
    if problems_found:
        scaled = ("False", INVALID_SPEC, "; ".join(problems_found) + "; no claim is made or deleted until it is fixed")
    elif refused:
        scaled = (
            "False",
            CREATE_REFUSED,
            f"{len(live)} of {wanted} claims made; the API server refused the next: "
            f"{refused}; tried again in {int(REFUSED_RETRY_SECONDS)} s",
        )
    elif len(live) < wanted:
        scaled = ("False", SCALING_UP, f"{len(live)} of {wanted} claims made, {more_later} more in the next run")
    elif len(live) > wanted:
        scaled = ("False", SCALING_DOWN, f"{len(live)} claims for {wanted} replicas; the surplus is being deleted")
    else:
        scaled = ("True", SCALED_TO_REPLICAS, f"{wanted} claims")
    if len(bound) >= wanted:
        bound_condition = ("True", ALL_BOUND, f"{len(bound)} of {wanted} claims hold a host")
    else:
        message = f"{len(bound)} of {wanted} claims hold a host"
        if waiting:
            message += f"; {len(waiting)} wait ({_waiting_reasons(waiting)}): each binds as soon as a host is free"
        bound_condition = ("False", HOSTS_WAITING, message)
    conditions = previous
    for type_, (status, reason, message) in ((SCALED, scaled), (BOUND, bound_condition)):
        conditions = cond.set_condition(conditions, type_, status, reason, message, generation, timestamp)
    if len(ready) >= wanted and scaled[0] == "True":
        ready_condition = ("True", REPLICAS_READY, f"{len(ready)} of {wanted} claims Ready")
    else:
        lines = [f"{len(ready)} of {wanted} claims Ready"]
        lines += [f"* {t}: {m}" for t, (s, _r, m) in ((SCALED, scaled), (BOUND, bound_condition)) if s != "True"]
        ready_condition = ("False", REPLICAS_NOT_READY, "\n".join(lines))
    conditions = cond.set_condition(conditions, READY, *ready_condition, generation, timestamp)
    return {
        "observedGeneration": generation,
        "replicas": len(live),
        "boundReplicas": len(bound),
        "readyReplicas": len(ready),
        "waitingReplicas": len(waiting),
        "releasingReplicas": releasing,
        "selector": selector_string((claim_set.get("spec") or {}).get("selector")),
        "conditions": conditions,
    }


def set_outcomes(results: list[dict]) -> list[dict]:
    """Each set's outcome: a refused create is looked at again later (a quota freed by a claim of another owner
    brings no event), a burst's rest soon; an error backs off; the others are done (their members' events bring
    them back)."""
    found = Outcomes()
    for entry in results:
        namespace, name = entry["namespace"], entry["name"]
        if entry.get("result") in ("retry", "error"):
            found.note(namespace, name, entry["result"], reason=entry.get("reason") or "")
        elif entry.get("refused"):
            found.note(namespace, name, WAIT, REFUSED_RETRY_SECONDS, CREATE_REFUSED)
        elif entry.get("more_later"):
            found.note(namespace, name, DONE, BURST_RETRY_SECONDS, SCALING_UP)
        else:
            found.note(namespace, name, DONE, reason=entry.get("state") or "")
    return found.listed()
