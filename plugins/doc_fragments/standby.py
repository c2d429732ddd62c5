# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's options of a module whose action plugin can run its step in process and as a standby run
(plugins/plugin_utils/standby.py): hostclaim_reconcile, bmh_redfish."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  in_process:
    description:
      - Set by the controller, not by hand. The task's action plugin steps the objects it is given in the playbook's
        own process, with the same code as this module, instead of starting a module process. Only right where
        localhost's Python is ansible-playbook's own (the controller's runs); the module itself ignores it.
    type: bool
    default: false
  standby:
    description:
      - Set by the controller (C(--standby)), not by hand. The task's action plugin builds the Kubernetes client
        first, then connects to O(standby.socket), says it is ready, and waits there for a batch of objects to
        step, which it steps in its own process with the same code as this module (the module's own list of
        objects is ignored), answers on the socket with the result, and waits for the next batch. When the
        controller recycles it (or closes the socket), the task is skipped.
      - Without it (running the playbook by hand), the module runs as usual.
    type: dict
    suboptions:
      socket:
        description: The controller's Unix socket, in a directory only the controller's user can enter.
        type: path
        required: true
      token:
        description: Which standby run this is, so the controller knows it from a stale one.
        type: str
        required: true
"""
