# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way every module in this collection runs: its argument spec plus kubernetes.core's
connection options, missing libraries named, a Kubernetes client, check and diff mode passed on,
and failures turned into fail_json with a message that names the action and the object."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AUTH_ARG_SPEC,
    KUBERNETES_IMPORT_ERROR,
    Kube,
    KubeError,
)

# Set by the controller; read by the action plugins of hostclaim_reconcile and bmh_redfish (their base:
# plugins/plugin_utils/standby.py). Each module declares them so that its arguments validate, and ignores them.
STANDBY_ARG_SPEC = {
    "in_process": {"type": "bool", "default": False},
    "standby": {
        "type": "dict",
        "options": {
            "socket": {"type": "path", "required": True},
            "token": {"type": "str", "required": True, "no_log": True},
        },
    },
}


class StepFailure(Exception):
    """A module failure its step saw coming: `message` for the user, `result` returned beside it."""

    def __init__(self, message: str, **result):
        super().__init__(message)
        self.result = result


def run_module(argument_spec: dict, step, libraries=None, validate=None) -> None:
    """Run step(module, kube) -> result dict as an Ansible module, and exit.

    libraries(params) -> {name: import traceback or None}: the Python packages this run needs
    besides kubernetes (some only for some options, e.g. pycdlib for a deploy ISO).
    validate(params) -> message or None: what the argument spec cannot say, checked before connecting.
    """
    module = AnsibleModule(argument_spec={**argument_spec, **AUTH_ARG_SPEC}, supports_check_mode=True)
    needed = {"kubernetes": KUBERNETES_IMPORT_ERROR, **(libraries(module.params) if libraries else {})}
    for name, import_error in needed.items():
        if import_error:
            module.fail_json(msg=missing_required_lib(name), exception=import_error)
    problem = validate(module.params) if validate else None
    if problem:
        module.fail_json(msg=problem)
    result = step_result(lambda: step(module, Kube(module.params)))
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


def step_result(step) -> dict:
    """step() -> result dict, or the failure it saw coming as {"failed": True, "msg": ...}: the one way a
    module and an action plugin (which runs the same steps in process) turn failures into a task result."""
    try:
        return step()
    except StepFailure as failure:
        return {"failed": True, "msg": str(failure), **failure.result}
    except KubeError as error:
        return {"failed": True, "msg": str(error)}
