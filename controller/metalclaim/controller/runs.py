"""Playbook runs through ansible-runner, in a dedicated single-threaded child process.

ansible-runner is not thread-safe and forks with pexpect; the controller's process has watch
threads, so it never calls ansible-runner itself. A child started with the `spawn` method (a
fresh interpreter: no inherited threads or locks) serves one request at a time over a pipe.
The controller cancels a run by sending "cancel" on the same pipe: the child's
cancel_callback polls it (every pexpect_timeout), so ansible-runner never takes over the
controller's signals. A cancelled run, and a run whose controller died (the pipe closed), ends
with every process it started: ansible's workers run in sessions of their own, out of reach of
ansible-runner's kill of ansible-playbook's process group, so the child (a child subreaper on
Linux) kills its whole process tree itself. Artifacts live in one private data dir and are rotated: at most
`keep_artifacts` run directories exist at any time.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import stat
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

CANCEL = "cancel"
JOB_TIMEOUT = 1800  # seconds a run may take at most (ansible-runner's job_timeout)
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


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
    _become_subreaper()

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
        cancel_callback, parent_gone = _cancel_callback(conn)

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
                # Else the first run's extravars are written to env/extravars and read by every later run.
                suppress_env_files=True,
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
        if report["status"] != "successful":
            _kill_run_tree()  # a timed-out or failed run's stragglers (orphans come back to the subreaper)
        _reap_orphans()
        if parent_gone:
            return
        report["seconds"] = time.monotonic() - started
        try:
            conn.send(report)
        except OSError:  # the controller died during the run
            return


def _cancel_callback(conn):
    """ansible-runner's cancel_callback: True once the parent sent "cancel" or died (its end of the pipe closed),
    polled every pexpect_timeout; the run's processes are killed before it returns True. Also returns a list,
    non-empty once the parent is known gone."""
    cancelled, parent_gone = [], []

    def cancel_callback() -> bool:
        if cancelled:
            return True
        try:
            while conn.poll():
                if conn.recv() == CANCEL:
                    cancelled.append(True)
        except (EOFError, OSError):
            parent_gone.append(True)
            cancelled.append(True)
        if cancelled:
            _kill_run_tree()
        return bool(cancelled)

    return cancel_callback, parent_gone


def _become_subreaper() -> None:
    """Orphans of a run (a worker whose ansible-playbook was killed) are re-parented to this process, not to
    init, so _kill_run_tree still finds them. Linux only; elsewhere the kill is best effort."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _descendants(root: int) -> list[int]:
    """Live (not zombie) processes below `root`, from /proc; [] where there is no /proc."""
    parents = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found, frontier = [], {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        found += frontier
    return found


def _kill_run_tree(attempts: int = 100) -> None:
    """SIGKILL every process this child started, however deep, until none is left (a process killed before its
    children leaves them to this subreaper: the next pass gets them)."""
    for _attempt in range(attempts):
        pids = _descendants(os.getpid())
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _reap_orphans() -> None:
    """Collect the exit status of orphans re-parented here (after a run: pexpect has waited for its own child)."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def private_directory(path: Path) -> None:
    """Make `path` the controller's own directory (0700), or refuse it.

    ansible-runner takes env/, inventory and project files from its private data dir: whoever can write there runs
    code as the controller. A directory someone else created first (a fixed name in /tmp, say) or a symlink is
    refused, never used; one of ours that others may read or write is closed to them.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"private data dir {path}: not a directory of its own (a symlink or a file): refused")
    if info.st_uid != os.geteuid():
        raise PermissionError(
            f"private data dir {path}: owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}): refused, "
            "as ansible-runner would run what it holds; remove it or choose another --private-data-dir"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(0o700)


class Runner:
    """The parent's handle on the child: one run at a time, submitted, then waited for (run() does both).
    Used from one thread (a dispatcher); close() may come from another."""

    def __init__(
        self,
        private_data_dir: Path,
        envvars: dict,
        *,
        keep_artifacts: int = 20,
        pexpect_timeout: float = 0.05,
        job_timeout: int | None = JOB_TIMEOUT,
    ):
        private_directory(private_data_dir)
        # Left by a version that let ansible-runner write it: it would add an old run's variables to every run.
        (private_data_dir / "env" / "extravars").unlink(missing_ok=True)
        settings = {"pexpect_timeout": pexpect_timeout, "suppress_ansible_output": True}
        if job_timeout:
            settings["job_timeout"] = job_timeout
        self.job_timeout = job_timeout
        self._args = (str(private_data_dir), envvars, settings, keep_artifacts)
        self._lock = threading.Lock()
        self._process = None
        self._conn = None
        self._in_flight = False
        self.pid: int | None = None

    @property
    def busy(self) -> bool:
        """A run was submitted and its report not yet taken."""
        return self._in_flight

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, *self._args), name="metalclaim-runner", daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        self.pid = self._process.pid

    def submit(self, playbook: str, extravars: dict) -> None:
        """Start a run and return at once; wait() takes its report."""
        with self._lock:
            if self._in_flight:
                raise RuntimeError("a run is already in progress on this runner")
            if self._process is None or not self._process.is_alive():
                self._start()
            self._conn.send((playbook, extravars))
            self._in_flight = True

    def wait(self, cancel: threading.Event | None = None, timeout: float | None = None) -> RunReport | None:
        """The submitted run's report; None if it has not ended within `timeout` seconds. `cancel` set meanwhile
        cancels the run (the report then says canceled)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        sent_cancel = False
        while not self._conn.poll(0.05 if timeout is None else max(0.0, min(0.05, deadline - time.monotonic()))):
            if not self._process.is_alive():
                return self._died()
            if cancel is not None and cancel.is_set() and not sent_cancel:
                self.cancel()
                sent_cancel = True
            if deadline is not None and time.monotonic() >= deadline:
                return None
        try:
            report = self._conn.recv()
        except (EOFError, OSError):  # the child ended between the poll and the read
            return self._died()
        self._in_flight = False
        return RunReport(**report)

    def _died(self) -> RunReport:
        self._process.join(5)
        self._process, self._in_flight = None, False
        return RunReport("error", None, 0.0, failures=[{"task": "", "msg": "the runner process died"}])

    def cancel(self) -> None:
        """Cancel the run in progress (its report then says canceled); nothing if none is."""
        if self._in_flight:
            with contextlib.suppress(OSError):
                self._conn.send(CANCEL)

    def run(self, playbook: str, extravars: dict, cancel: threading.Event | None = None) -> RunReport:
        """Run a playbook; `cancel` set during the run cancels it (the report then says canceled)."""
        self.submit(playbook, extravars)
        return self.wait(cancel)

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
            self._process, self._in_flight = None, False
