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

The protocol is JSON lines: {"ready": token, "pid": n} from here; then, from the controller, a batch
{"objects": [{namespace, name}, ...]} (the claims or hosts to step), answered here with {"result": the step's
result}, and the next batch, until {"recycle": reason} (or the socket closed) ends the run, its task skipped. A
standby run serves many batches, keeping what it built across them (its client; the provisioner's BMC
connections). controller/metalclaim/controller/standby.py is the other end.
"""

from __future__ import annotations

import json
import os
import socket

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AUTH_ARG_SPEC,
    KUBERNETES_IMPORT_ERROR,
    Kube,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import (
    STANDBY_ARG_SPEC,
    step_result,
)

MAX_LINE = 16 * 1024 * 1024  # a batch of 1000 claims is ~100 KB


class InProcessStep(ActionBase):
    """An action plugin whose module's step may run here. A subclass names the module (MODULE), its arguments
    besides the connection's and the controller's (ARG_SPEC, with the objects' list under OBJECTS), the kinds a
    standby run resolves before it says it is ready (KINDS), the step itself (step), and, as its module does, the
    libraries its arguments need and what the spec cannot check (libraries, validate)."""

    MODULE = ""
    ARG_SPEC: dict = {}
    OBJECTS = "claims"
    KINDS: tuple = ()
    _supports_check_mode = True
    _supports_async = False

    def step(self, kube: Kube, objects: list[dict], params: dict, check_mode: bool, diff: bool) -> dict:
        """The module's step over `objects` ({namespace, name}), its other arguments in `params`: its result dict."""
        raise NotImplementedError

    def libraries(self, params: dict) -> dict:
        """{name: import traceback or None}: the Python packages the step needs besides kubernetes."""
        return {}

    def validate(self, params: dict) -> str | None:
        """What the argument spec cannot say (a message), checked before connecting."""
        return None

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
        params = validated.validated_parameters
        needed = {"kubernetes": KUBERNETES_IMPORT_ERROR, **self.libraries(params)}
        missing = sorted(name for name, import_error in needed.items() if import_error)
        if missing:
            return {**result, "failed": True, "msg": f"the Python packages {', '.join(missing)} are required"}
        problem = self.validate(params)
        if problem:
            return {**result, "failed": True, "msg": problem}
        standby = params["standby"]
        try:
            kube = Kube(params)
            if standby:
                kube.discover(self.KINDS)
        except KubeError as error:
            return {**result, "failed": True, "msg": str(error)}
        check_mode, diff = bool(self._play_context.check_mode), bool(self._task.diff)
        try:
            if not standby:
                objects = params[self.OBJECTS]
                return {**result, **step_result(lambda: self.step(kube, objects, params, check_mode, diff))}
            return {**result, **self._serve(standby, kube, params, check_mode, diff)}
        finally:
            self.close()

    def close(self) -> None:
        """The run is over: let go of what the steps kept across batches."""

    def _serve(self, standby: dict, kube: Kube, params: dict, check_mode: bool, diff: bool) -> dict:
        """Wait on the controller's socket and step each batch it sends, answering there, until it recycles this
        standby (the task skipped)."""
        served = 0
        try:
            with ControllerSocket(standby["socket"], standby["token"]) as channel:
                while True:
                    batch = channel.receive()
                    if "objects" not in batch:
                        after = f" after {served} batches" if served else ""
                        message = f"standby recycled{after}: {batch.get('recycle')}"
                        return {"skipped": True, "changed": False, "msg": message}
                    objects = [{"namespace": o["namespace"], "name": o["name"]} for o in batch["objects"]]
                    kube.reset_counts()
                    outcome = step_result(lambda objects=objects: self.step(kube, objects, params, check_mode, diff))
                    channel.answer(outcome)
                    served += 1
        except (OSError, ValueError) as error:
            message = f"standby: the controller's socket {standby['socket']}: {error}"
            return {"failed": True, "msg": message}


class ControllerSocket:
    """A standby's connection to the controller's socket: it says ready, then receives batches and answers each."""

    def __init__(self, path: str, token: str):
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._received = b""
        try:
            self._conn.connect(path)
            self._conn.sendall(json.dumps({"ready": token, "pid": os.getpid()}).encode() + b"\n")
        except OSError:
            self._conn.close()
            raise

    def receive(self) -> dict:
        """Block until the controller's next message; the socket closed is a recycle."""
        while b"\n" not in self._received:
            chunk = self._conn.recv(65536)
            if not chunk:  # closed without a batch: the controller stopped or recycled this standby
                return {"recycle": "the controller closed the socket"}
            self._received += chunk
            if len(self._received) > MAX_LINE:
                raise ValueError(f"a message longer than {MAX_LINE} bytes")
        line, self._received = self._received.split(b"\n", 1)
        return json.loads(line)

    def answer(self, result: dict) -> None:
        self._conn.sendall(json.dumps({"result": result}, default=str).encode() + b"\n")

    def __enter__(self) -> ControllerSocket:
        return self

    def __exit__(self, *exc_info) -> None:
        self._conn.close()
