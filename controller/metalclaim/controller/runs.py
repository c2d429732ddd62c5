"""Playbook runs through ansible-runner, in a dedicated single-threaded child process.

ansible-runner is not thread-safe and forks with pexpect; the controller's process has watch
threads, so it never calls ansible-runner itself. A child started with the `spawn` method (a
fresh interpreter: no inherited threads or locks) serves one request at a time over a pipe.
The controller cancels a run by sending "cancel" on the same pipe: the child's
cancel_callback polls it (every pexpect_timeout), so ansible-runner never takes over the
controller's signals. Artifacts live in one private data dir and are rotated: at most
`keep_artifacts` run directories exist at any time.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

CANCEL = "cancel"


@dataclass
class RunReport:
    status: str  # ansible-runner's: successful, failed, timeout, canceled; "error" when the child failed
    rc: int | None
    seconds: float
    results: dict = field(default_factory=dict)  # module results by module (resolved FQCN; the last one per module)
    failures: list = field(default_factory=list)  # [{"task", "msg"}] of failed tasks


def _serve(conn, private_data_dir: str, envvars: dict, settings: dict, keep_artifacts: int) -> None:
    """The child: run each requested playbook, answer with a RunReport (as a dict)."""
    import ansible_runner  # imported here only: the parent never loads it

    # Stopping is the parent's call (it cancels the run, then closes the pipe): a Ctrl-C or a
    # SIGTERM sent to the whole process group must not kill a run half-way.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    bin_dir = str(Path(sys.executable).parent)  # ansible-playbook beside this interpreter
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        if request == CANCEL:  # arrived after its run ended
            continue
        playbook, extravars = request
        started = time.monotonic()
        cancel_callback = _cancel_callback(conn)

        try:
            runner = ansible_runner.run(
                private_data_dir=private_data_dir,
                ident=uuid.uuid4().hex,
                playbook=playbook,
                inventory=f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}",
                envvars=envvars,
                extravars=extravars,
                settings=settings,
                rotate_artifacts=keep_artifacts,
                cancel_callback=cancel_callback,
                quiet=True,
            )
            results, failures = {}, []
            for event in runner.events:
                data = event.get("event_data") or {}
                if event.get("event") in ("runner_on_ok", "runner_on_failed"):
                    results[data.get("resolved_action") or data.get("task_action", "")] = data.get("res") or {}
                if event.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
                    failures.append({"task": data.get("task", ""), "msg": str((data.get("res") or {}).get("msg", ""))})
            report = {"status": runner.status, "rc": runner.rc, "results": results, "failures": failures}
        except Exception as error:  # a broken private data dir, a missing playbook: the run failed, the child lives
            report = {"status": "error", "rc": None, "results": {}, "failures": [{"task": "", "msg": str(error)}]}
        report["seconds"] = time.monotonic() - started
        conn.send(report)


def _cancel_callback(conn):
    """ansible-runner's cancel_callback: True once the parent sent "cancel" (polled every pexpect_timeout)."""
    cancelled = []

    def cancel_callback() -> bool:
        while conn.poll():
            if conn.recv() == CANCEL:
                cancelled.append(True)
        return bool(cancelled)

    return cancel_callback


class Runner:
    """The parent's handle on the child. run() is called from one thread (the dispatcher)."""

    def __init__(
        self,
        private_data_dir: Path,
        envvars: dict,
        *,
        keep_artifacts: int = 20,
        pexpect_timeout: float = 0.05,
        job_timeout: int | None = 1800,
    ):
        private_data_dir.mkdir(parents=True, exist_ok=True)
        settings = {"pexpect_timeout": pexpect_timeout, "suppress_ansible_output": True}
        if job_timeout:
            settings["job_timeout"] = job_timeout
        self._args = (str(private_data_dir), envvars, settings, keep_artifacts)
        self._lock = threading.Lock()
        self._process = None
        self._conn = None
        self.pid: int | None = None

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, *self._args), name="metalclaim-runner", daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        self.pid = self._process.pid

    def run(self, playbook: str, extravars: dict, cancel: threading.Event | None = None) -> RunReport:
        """Run a playbook; `cancel` set during the run cancels it (the report then says canceled)."""
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._start()
            self._conn.send((playbook, extravars))
            sent_cancel = False
            while not self._conn.poll(0.05):
                if not self._process.is_alive():
                    self._process = None
                    return RunReport("error", None, 0.0, failures=[{"task": "", "msg": "the runner process died"}])
                if cancel is not None and cancel.is_set() and not sent_cancel:
                    self._conn.send(CANCEL)
                    sent_cancel = True
            return RunReport(**self._conn.recv())

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            if self._process is None:
                return
            with contextlib.suppress(OSError):
                self._conn.send(None)
            self._process.join(timeout)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(timeout)
            self._process = None
