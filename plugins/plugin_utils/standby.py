# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The base of an action plugin that runs its module's step in the playbook's own process: the standby run, and
the controller's runs in process.

A cold run pays for an interpreter, Ansible's imports, the playbook, a module process and the
`kubernetes` import before its first API request (about twice the floor F of a one-task
playbook). Given `standby` by the controller, such a plugin pays all of that ahead: it has imported
the step's code, builds the client and resolves the kinds it uses, then tells the controller's socket
it is ready and waits there for one batch, which it runs here, in the playbook's worker
process, with the module's own code. Given `in_process` (the controller's cold runs, whose
localhost interpreter is ansible-playbook's own), it runs its objects here too, without a
module process. Without either (the playbook run by hand) the module runs as usual.

The protocol is one JSON line each way: {"ready": token, "pid": n} from here; then
{"claims": [{namespace, name}, ...]} or {"recycle": reason} (or the socket closed) from the controller
(controller/metalclaim/controller/standby.py is the other end).
"""

from __future__ import annotations

import json
import os
import socket

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.module import STANDBY_ARG_SPEC
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AUTH_ARG_SPEC,
    KUBERNETES_IMPORT_ERROR,
    Kube,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import step_result

MAX_LINE = 16 * 1024 * 1024  # a batch of 1000 claims is ~100 KB


class InProcessStep(ActionBase):
    """An action plugin whose module's step may run here. A subclass names the module (MODULE), its arguments
    besides the connection's and the controller's (ARG_SPEC, with the objects' list under OBJECTS), the kinds a
    standby run resolves before it says it is ready (KINDS), and the step itself (step)."""

    MODULE = ""
    ARG_SPEC: dict = {}
    OBJECTS = "claims"
    KINDS: tuple = ()
    _supports_check_mode = True
    _supports_async = False

    def step(self, kube: Kube, objects: list[dict], check_mode: bool, diff: bool) -> dict:
        """The module's step over `objects` ({namespace, name}): its result dict."""
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if not args.get("standby") and not boolean(args.get("in_process", False), strict=False):
            args.pop("standby", None)
            args.pop("in_process", None)
            return self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars)
        validated = ArgumentSpecValidator({**self.ARG_SPEC, **STANDBY_ARG_SPEC, **AUTH_ARG_SPEC}).validate(args)
        if validated.error_messages:
            return {**result, "failed": True, "msg": "; ".join(validated.error_messages)}
        if KUBERNETES_IMPORT_ERROR:
            return {**result, "failed": True, "msg": "the kubernetes Python package is required to run in process"}
        params = validated.validated_parameters
        standby = params["standby"]
        try:
            kube = Kube(params)
            if standby:
                kube.discover(self.KINDS)
        except KubeError as error:
            return {**result, "failed": True, "msg": str(error)}
        objects = params[self.OBJECTS]
        if standby:
            try:
                batch = wait_for_batch(standby["socket"], standby["token"])
            except (OSError, ValueError) as error:
                message = f"standby: the controller's socket {standby['socket']}: {error}"
                return {**result, "failed": True, "msg": message}
            if "claims" not in batch:
                message = f"standby recycled: {batch.get('recycle')}"
                return {**result, "skipped": True, "changed": False, "msg": message}
            objects = [{"namespace": c["namespace"], "name": c["name"]} for c in batch["claims"]]
        check_mode, diff = bool(self._play_context.check_mode), bool(self._task.diff)
        return {**result, **step_result(lambda: self.step(kube, objects, check_mode, diff))}


def wait_for_batch(path: str, token: str) -> dict:
    """Say ready on the controller's socket, then block until it sends the batch (or recycles this standby)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(json.dumps({"ready": token, "pid": os.getpid()}).encode() + b"\n")
        received = b""
        while not received.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:  # closed without a batch: the controller stopped or recycled this standby
                return {"recycle": "the controller closed the socket"}
            received += chunk
            if len(received) > MAX_LINE:
                raise ValueError(f"a message longer than {MAX_LINE} bytes")
    return json.loads(received)
