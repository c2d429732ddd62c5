# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaimset_reconcile: bring each HostClaimSet's member claims to its replicas. The I/O edge over
_claimsets/pure/plan.py.

A ClaimSetRun is the run kernel (_common/io/run.py): the sets listed once, the HostClaims of each set's namespace
listed once (kept current with the run's writes), each write recorded for `--diff`. Per set: the members the plan
makes (a name taken meanwhile, by a concurrent run of ours or anybody, is left for the next run; a create the API
server refuses, its quota say, stops the set's creates for this run), the members it deletes (each by uid: a claim
made since under the same name is never deleted), then its status, once, only when it changed. The sets themselves
are never written but for their status; a claim whose controller is not the set is never touched.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claimsets.pure import plan as sets
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
    KubeError,
    RefusedError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import Run
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import ERROR, RETRY
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import status_patch

# Names listed in an Event's message at most (the count is always given).
EVENT_NAMES = 10


class ClaimSetRun(Run):
    """A Run of the claim sets' step."""

    def __init__(self, kube, check_mode: bool, diff: bool = False):
        super().__init__(kube, cond.now(), check_mode, diff=diff, thread_name="claimset")


def reconcile_claimsets(run: ClaimSetRun, wanted: list[dict] | None) -> dict:
    found = run.kube.list(sets.API_VERSION, sets.KIND)
    keys = {(w["namespace"], w["name"]) for w in wanted or []}
    chosen = sorted((s for s in found if wanted is None or sets.key(s) in keys), key=sets.key)
    present = {sets.key(s) for s in chosen}
    results = [
        {"namespace": ns, "name": name, "state": "absent", "changed": False} for ns, name in sorted(keys - present)
    ]
    results += run.each(lambda claim_set: _reconcile(run, claim_set), chosen)
    results.sort(key=lambda r: (r["namespace"], r["name"]))
    return run.finish(
        {
            "changed": any(r["changed"] for r in results),
            "claimsets": results,
            "outcomes": sets.set_outcomes(results),
            "writes": run.api.writes(),
        }
    )


def _reconcile(run: ClaimSetRun, claim_set: dict) -> dict:
    namespace, name = sets.key(claim_set)
    result = {"namespace": namespace, "name": name, "changed": False, "created": [], "deleted": []}
    try:
        return _apply(run, claim_set, result)
    except ConflictError as error:  # the set changed under us (a scale, say): its event brings it back
        result.update(result=RETRY, state="Conflict", reason=str(error))
    except KubeError as error:
        result.update(result=ERROR, state="Error", reason=str(error))
    return result


def _apply(run: ClaimSetRun, claim_set: dict, result: dict) -> dict:
    namespace = sets.key(claim_set)[0]
    claim_set.setdefault("apiVersion", sets.API_VERSION)
    claim_set.setdefault("kind", sets.KIND)
    claims = run.kube.list(sets.API_VERSION, sets.CLAIM_KIND, namespace)
    planned = sets.plan(claim_set, claims)
    if sets.deleting(claim_set):
        result.update(state="Deleting", replicas=len(planned.live))
        return result
    live = list(planned.live)
    refused, more_later = "", planned.more_later
    for index, body in enumerate(planned.create):
        try:
            made = body if run.check_mode else run.kube.create(body)
        except AlreadyExistsError:
            more_later += len(planned.create) - index  # its name was taken meanwhile: the next run picks another
            break
        except RefusedError as error:
            refused = cond.truncated(error.server_message or str(error), 2048)
            break
        run.record(sets.CLAIM_KIND, None, made)
        live.append(made)
        result["created"].append(body["metadata"]["name"])
    for member in planned.delete:
        member_name = sets.key(member)[1]
        uid = member["metadata"].get("uid", "")
        if not run.check_mode and not run.kube.delete(sets.API_VERSION, sets.CLAIM_KIND, member_name, namespace, uid):
            continue  # gone already, or another claim has the name now
        run.record(sets.CLAIM_KIND, member, None)
        live.remove(member)
        result["deleted"].append(member_name)
    releasing = planned.releasing + len(result["deleted"])
    status = sets.desired_status(claim_set, live, releasing, planned.problems, refused, more_later, run.timestamp)
    _events(run, claim_set, result, refused)
    patch = status_patch(claim_set, status)
    if patch:
        if not run.check_mode:
            run.kube.patch_status(claim_set, patch)
        run.record_status(sets.KIND, claim_set, patch)
    result.update(
        changed=bool(patch or result["created"] or result["deleted"]),
        state=cond.find(status["conditions"], sets.SCALED)["reason"],
        replicas=status["replicas"],
        bound=status["boundReplicas"],
        ready=status["readyReplicas"],
        waiting=status["waitingReplicas"],
        refused=refused,
        more_later=more_later,
    )
    return result


def _events(run: ClaimSetRun, claim_set: dict, result: dict, refused: str) -> None:
    def names(listed: list[str]) -> str:
        shown = ", ".join(listed[:EVENT_NAMES])
        return shown + (f" and {len(listed) - EVENT_NAMES} more" if len(listed) > EVENT_NAMES else "")

    if result["created"]:
        created = result["created"]
        run.event(claim_set, "Normal", sets.CLAIMS_CREATED, f"created {len(created)} claims: {names(created)}")
    if result["deleted"]:
        deleted = result["deleted"]
        message = f"scaled down: deleted {len(deleted)} claims (their hosts are released): {names(deleted)}"
        run.event(claim_set, "Normal", sets.CLAIMS_DELETED, message)
    previous = cond.find((claim_set.get("status") or {}).get("conditions"), sets.SCALED) or {}
    if refused and previous.get("reason") != sets.CREATE_REFUSED:
        run.event(claim_set, "Warning", sets.CREATE_REFUSED, f"the API server refused a claim: {refused}")
