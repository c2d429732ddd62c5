# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each Tenant's outcome from a tenants run's per-tenant results. Pure. Tenants are cluster-scoped: no namespace.

A Tenant waiting on a stage of its own (its claims' release, its namespaces' removal) or whose write failed is
looked at again soon (STAGE_SECONDS); one waiting on a hook (a blocking hook's backoff, a delivery's next retry)
when the result says; the others are done.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import DONE, WAIT, Outcomes

# A Tenant waiting on a deletion stage (its claims' release, its namespaces' removal) is looked at again this soon.
STAGE_SECONDS = 2.0


def tenant_outcomes(tenants: list[dict]) -> list[dict]:
    found = Outcomes()
    for entry in tenants:
        if not entry.get("requeue"):
            found.note("", entry["name"], DONE, reason=entry.get("state") or "")
            continue
        after = entry.get("requeue_after")
        found.note("", entry["name"], WAIT, STAGE_SECONDS if after is None else after, entry.get("reason") or "requeue")
    return found.listed()
