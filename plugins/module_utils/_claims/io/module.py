# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every claim-layer step module shares: its arguments and how it runs its step."""

from __future__ import annotations

import datetime
import time

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.outcomes import from_run_end
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import run_module
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import TIMESTAMP_FORMAT, now

CLAIMS_ARG_SPEC = {
    "claims": {
        "type": "list",
        "elements": "dict",
        "options": {"namespace": {"type": "str", "required": True}, "name": {"type": "str", "required": True}},
    },
}


def claim_step(step, kube, claims, check_mode: bool, diff: bool) -> dict:
    """step(ClaimRun) -> result dict, statuses written at the end (a new binding's at once: it commits it), a `diff`
    with --diff: what a claim-layer module runs, and what the standby run of hostclaim_reconcile runs in its own
    process."""
    run = ClaimRun(kube, claims, now(), check_mode, diff=diff)
    result = run.finish(step(run))
    # The outcomes' `after` count from the run's timestamp (a lease's deadline); the controller counts from when it
    # reads them, at the run's end: take the run's time off, so a deadline is not missed by the run's length.
    elapsed = (
        time.time()
        - datetime.datetime.strptime(run.timestamp, TIMESTAMP_FORMAT).replace(tzinfo=datetime.timezone.utc).timestamp()
    )
    result["outcomes"] = from_run_end(result.get("outcomes") or [], elapsed)
    return result


def run_claim_step(step, extra_spec=None) -> None:
    """Run a claim step as an Ansible module, and exit."""

    def claim_run(module, kube) -> dict:
        return claim_step(step, kube, module.params["claims"], module.check_mode, module._diff)

    run_module({**CLAIMS_ARG_SPEC, **(extra_spec or {})}, claim_run)
