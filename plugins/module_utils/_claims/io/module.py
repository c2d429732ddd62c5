# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every claim-layer step module shares: its arguments and how it runs its step."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import run_module
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import now

CLAIMS_ARG_SPEC = {
    "claims": {
        "type": "list",
        "elements": "dict",
        "options": {"namespace": {"type": "str", "required": True}, "name": {"type": "str", "required": True}},
    },
}


def run_claim_step(step) -> None:
    """Run step(ClaimRun) -> result dict as an Ansible module (statuses written once, at the end; a `diff`
    with --diff), and exit."""

    def claim_run(module, kube) -> dict:
        run = ClaimRun(kube, module.params["claims"], now(), module.check_mode, diff=module._diff)
        return run.finish(step(run))

    run_module(CLAIMS_ARG_SPEC, claim_run)
