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
learned something new (a copy that failed, say).
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.bind import bind_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.booking import book_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.bound import SECRETS, SYNC, sync_bound
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.lease import lease_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.release import release_claims


def reconcile_claims(run) -> dict:
    """The steps' results and a summary; the run's finish() then writes the statuses."""
    steps = {
        "release": release_claims(run),
        "lease": lease_claims(run),
        "booking": book_claims(run),
        "bind": bind_claims(run),
        "bound": sync_bound(run, (SECRETS, SYNC)),
    }
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
