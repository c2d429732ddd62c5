# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_reconcile's action plugin: the standby run, and the controller's runs in process.

Given `standby` or `in_process` by the controller, it reconciles the claims here, in the playbook's worker
process, with the module's own code (plugin_utils/standby.py says how and why); without either
(reconcile.yml run by hand) the module runs as usual.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.module import CLAIMS_ARG_SPEC, claim_step
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.reconcile import reconcile_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.plugin_utils.standby import InProcessStep


class ActionModule(InProcessStep):
    MODULE = "metalclaim.hostclaim.hostclaim_reconcile"
    ARG_SPEC = CLAIMS_ARG_SPEC
    OBJECTS = "claims"
    # What a reconcile reads and writes: resolved before the standby says it is ready.
    KINDS = (
        (API_VERSION, "HostClaim"),
        (API_VERSION, "BareMetalHost"),
        (API_VERSION, "HostDeployPolicy"),
        ("v1", "Namespace"),
        ("v1", "Secret"),
        ("v1", "Event"),
    )

    def step(self, kube, objects, params, check_mode, diff):
        return claim_step(reconcile_claims, kube, objects, check_mode, diff)
