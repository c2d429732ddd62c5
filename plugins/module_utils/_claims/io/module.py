# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every claim-layer step module shares: its arguments and how it runs its step."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AUTH_ARG_SPEC,
    KUBERNETES_IMPORT_ERROR,
    Kube,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import now

CLAIMS_ARG_SPEC = {
    "claims": {
        "type": "list",
        "elements": "dict",
        "options": {"namespace": {"type": "str", "required": True}, "name": {"type": "str", "required": True}},
    },
}


def run_claim_step(step) -> None:
    """Run step(ClaimRun) -> result dict as an Ansible module (statuses written once, at the end), and exit."""
    module = AnsibleModule(argument_spec={**CLAIMS_ARG_SPEC, **AUTH_ARG_SPEC}, supports_check_mode=True)
    if KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    try:
        run = ClaimRun(Kube(module.params), module.params["claims"], now(), module.check_mode)
        result = run.finish(step(run))
    except KubeError as error:
        module.fail_json(msg=str(error))
    module.exit_json(**result)
