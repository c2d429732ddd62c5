# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""bmh_redfish's action plugin: the standby run, and the controller's runs in process.

Given `standby` or `in_process` by the controller, it steps the hosts here, in the playbook's worker process,
with the module's own code (plugin_utils/standby.py says how and why): a host's step then costs its API and
Redfish requests, not a playbook's and a module process's start. A standby run serves the controller's batches
until it is recycled, and keeps the hosts' BMC connections across them. Without either (provision.yml run by hand)
the module runs as usual.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    API_VERSION,
    FIRMWARE_SETTINGS_KIND,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.provisioner import (
    BMH_REDFISH_ARG_SPEC,
    Connections,
    libraries,
    options_from,
    provision_step,
    validate,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.host_diff import (
    HARDWARE_DATA,
    HOST,
)
from ansible_collections.metalclaim.hostclaim.plugins.plugin_utils.standby import InProcessStep


class ActionModule(InProcessStep):
    MODULE = "metalclaim.hostclaim.bmh_redfish"
    ARG_SPEC = BMH_REDFISH_ARG_SPEC
    OBJECTS = "hosts"
    # What a step reads and writes: resolved before the standby says it is ready.
    KINDS = (
        (API_VERSION, HOST),
        (API_VERSION, HARDWARE_DATA),
        (API_VERSION, FIRMWARE_SETTINGS_KIND),
        ("v1", "Namespace"),
        ("v1", "Secret"),
        ("v1", "Event"),
    )

    _connections: Connections | None = None

    def step(self, kube, objects, params, check_mode, diff):
        # A standby serving many batches keeps each host's BMC connection (the service root, the login) from one batch
        # to the next, as the module's `wait` loop does from one step to the next; its Secret is read again at each
        # batch (Connections.begin_run), and a new version connects afresh.
        if self._connections is None:
            self._connections = Connections(options_from(params))
        return provision_step(kube, {**params, "hosts": objects}, check_mode, diff, self._connections)

    def close(self):
        if self._connections is not None:
            self._connections.close()
            self._connections = None

    def libraries(self, params):
        return libraries(params)

    def validate(self, params):
        return validate(params)
