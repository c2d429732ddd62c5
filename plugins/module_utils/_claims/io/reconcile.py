# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_reconcile: release, leases, bookings, bind, then secrets and sync, in one process, each kind listed once.

Every step task of a playbook costs a process and an Ansible round trip (~0.75 s). Run
here in one process, the steps share one ClaimRun: each list is read once (later steps
get it from memory, kept current with what this run writes), each tenant Secret is read
once, each bound claim's host is written at most once, and each claim's status is
written at the end, only when it changed: once, except for a claim this run binds, whose
status is written as soon as its host is taken (that write commits the binding, before
anything of the tenant's reaches the host) and once more at the end only if a later step
learned something new (a copy that failed, say). Binding and syncing go VISIBLE_CHUNK claims
at a time, oldest first, each chunk's statuses written as it ends: in a storm the first claims
are Associated within a second, not when the last is.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.bind import bind_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.booking import book_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.bound import SECRETS, SYNC, sync_bound
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.lease import lease_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.release import release_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION

# Claims bound and synchronized between two flushes of their statuses: a tenant sees its claim Associated once its
# chunk is done, not at the end of a batch of a thousand (a status is still written once per run).
VISIBLE_CHUNK = 100


def reconcile_claims(run) -> dict:
    """The steps' results and a summary; the run's finish() then writes what is left of the statuses."""
    # The lists every run reads, two at a time (an idle claim's run waited for four lists in turn before its first
    # write): the claims and hosts (release reads them first), then the policies and namespaces binding reads.
    run.kube.prefetch([(API_VERSION, "HostClaim"), (API_VERSION, "BareMetalHost")], run.workers)
    steps = {"release": release_claims(run), "lease": lease_claims(run), "booking": book_claims(run)}
    binds, bounds = [], []
    claims = run.claims()
    if claims:
        run.kube.prefetch([(API_VERSION, "HostDeployPolicy"), ("v1", "Namespace")], run.workers)
    for start in range(0, len(claims), VISIBLE_CHUNK):
        chunk = claims[start : start + VISIBLE_CHUNK]
        with run.narrowed(chunk):
            binds.append(bind_claims(run))
            bounds.append(sync_bound(run, (SECRETS, SYNC)))
        run.book.flush(keys=[binding.key(c) for c in chunk])
    if not claims:  # the steps' results all the same, empty
        binds.append(bind_claims(run))
        bounds.append(sync_bound(run, (SECRETS, SYNC)))
    steps["bind"] = _merged(binds)
    steps["bound"] = _merged(bounds)
    result = dict(steps)
    result["changed"] = any(step["changed"] for step in steps.values())
    bound = steps["bound"]["claims"]
    result["summary"] = {
        "bound": steps["bind"]["bound"],
        "waiting_for_host": steps["bind"]["unbound"],
        "releases_pending": steps["release"]["pending"],
        "leases_expired": steps["lease"]["expired"],
        "orphans_released": sum(1 for r in steps["release"]["orphans"] if r["state"] == "released"),
        "not_synchronized": sum(1 for c in bound if not c.get("synchronized", True)),
        "conflicts": sum(
            1 for step in steps.values() for c in step["claims"] if "conflict" in (c.get("action"), c.get("state"))
        ),
        "list_calls": run.kube.reads,
    }
    warnings = steps["bound"].get("warnings")
    if warnings:
        result["warnings"] = warnings
    return result


def _merged(parts: list[dict]) -> dict:
    """One step's results over the chunks, as if it had run once: claims in order, counts added, warnings once."""
    merged: dict = {"changed": any(part["changed"] for part in parts), "claims": []}
    for part in parts:
        merged["claims"] += part["claims"]
        for name, value in part.items():
            if name in ("changed", "claims"):
                continue
            if name == "warnings":
                merged["warnings"] = sorted({*merged.get("warnings", []), *value})
            else:
                merged[name] = merged.get(name, 0) + value
    return merged
