# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lease step of hostclaim_reconcile: each leased claim's status.lease and Lease condition, its warning Event,
and at its end the release of its host through the path a deleted claim's host takes (giveback.give_back_all).
I/O edge over _claims/pure/lease.py, with the run's decisions (leases.py).

A claim whose lease ended keeps its finalizer: it stays, with LeaseExpired, until its tenant deletes it, and is
never bound again. The step's entries carry `after`, the next deadline (the warning's start, then the end): the
controller requeues the claim then.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.giveback import give_back_all
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.leases import lease_decisions
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import step_each
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, lease

# What a released host leaves nothing of in its claim's status.
_HOST_FIELDS = ("hardwareData", "hostUID", "poweredOn", "hardware")


def lease_claims(run) -> dict:
    """Note every leased claim's lease; release the hosts of those whose lease ended."""
    decisions = lease_decisions(run)
    claims = {binding.key(c): c for c in run.claims()}
    pairs = [(claims[key], entry) for key, entry in sorted(decisions.items()) if key in claims]
    outcome = step_each(
        pairs,
        lambda claim, entry: _one(run, claim, *entry),
        on_error=lambda claim, error: run.failed(claim, error, "lease", lease.LEASE),
    )
    outcome["expired"] = sum(1 for r in outcome["claims"] if r.get("lease") == lease.EXPIRED)
    return outcome


def _one(run, claim: dict, found: lease.Decision, own: list[dict]) -> dict:
    namespace, name = binding.key(claim)
    result = {"namespace": namespace, "name": name, "lease": found.state, "changed": False, "after": found.after}
    if found.state == lease.UNBOUND:
        return result  # the bind step decides (and says) whether it may bind
    conditions, updates = list(found.conditions), {"lease": found.lease_status}
    if found.expired:
        result["state"] = "released"
        if give_back_all(run, own, claim, result):
            conditions = lease.expired_conditions(found.end, released=True, was_bound=found.start is not None)
            updates.update(dict.fromkeys(_HOST_FIELDS))
            if own:
                run.event(claim, "Normal", "Released", f"BareMetalHost {result['host']} released: the lease ended")
        else:
            conditions = lease.expired_conditions(found.end, released=False)
    if found.newly:
        message = next(m for t, _s, r, m in conditions if t == lease.LEASE)
        run.event(claim, "Warning", found.newly, message)
    run.book.note(claim, conditions, updates, result=result)
    return result
