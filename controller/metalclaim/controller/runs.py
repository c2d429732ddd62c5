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

Each run directory is bounded too, whatever its module results hold (a reconcile of 1000 claims, each with a 4 KiB
error, returns megabytes): the report takes every task's full result from the events as ansible-runner passes them
(never from disk), then each event is written to job_events/ cut to EVENT_FILE_LIMIT, at most EVENTS_KEPT of them,
and the run's stdout to STDOUT_LIMIT. ansible-runner's own drop of a result larger than 700,000 characters from its
event (MAX_EVENT_RES), which left the controller without the outcomes of a large batch, is lifted.
"""

from __future__ import annotations

import contextlib
import json
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

# What one run leaves in its artifacts directory (artifacts/<ident>/), at most: EVENTS_KEPT event files (and the
# run's recap) of EVENT_FILE_LIMIT bytes each, STDOUT_LIMIT bytes of stdout, and ansible-runner's `command` (the
# controller's environment and the batch's keys, under 400 bytes a key), `status` and `rc`.
EVENT_FIELD_LIMIT = 2048  # characters kept of one value of an event (its stdout, a field of its data)
EVENT_FILE_LIMIT = 8192  # bytes of one job_events/ file
EVENTS_KEPT = 64  # job_events/ files of one run, besides its recap (playbook_on_stats)
STDOUT_LIMIT = 65536  # bytes of a run's stdout file
RUN_DIR_LIMIT = (EVENTS_KEPT + 1) * EVENT_FILE_LIMIT + STDOUT_LIMIT + 1024  # all but `command`
MESSAGE_LIMIT = 4096  # characters of a failed task's message in the report (the controller logs it)
# ansible-runner's callback replaces a result whose text is longer than this by {} in its event (default 700,000):
# the report would lose a large batch's outcomes. Results reach the report whole; only the artifacts are cut.
MAX_EVENT_RES = 1 << 30
# Kept of a result cut from its event: what says how the task went.
_RESULT_SUMMARY = ("changed", "failed", "skipped", "unreachable", "rc")
# Kept of an event too large even with its values cut: what says which event of which task it was.
_EVENT_ESSENTIALS = ("event", "uuid", "counter", "parent_uuid", "created", "runner_ident", "start_line", "end_line")
_DATA_ESSENTIALS = ("playbook", "play", "task", "task_path", "task_action", "resolved_action", "role", "host")


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
        ident = uuid.uuid4().hex
        recorder = EventRecorder(Path(private_data_dir) / "artifacts" / ident)

        try:
            runner = ansible_runner.run(
                private_data_dir=private_data_dir,
                ident=ident,
                playbook=playbook,
                inventory=f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}",
                envvars={**envvars, "MAX_EVENT_RES": str(MAX_EVENT_RES)},
                extravars=extravars,
                settings=settings,
                rotate_artifacts=keep_artifacts,
                # Else the first run's extravars are written to env/extravars and read by every later run.
                suppress_env_files=True,
                # The recorder writes a bounded stdout instead of ansible-runner's whole one (and no stderr file).
                suppress_output_file=True,
                # Nothing of a run is kept in a file fact cache (artifacts/<ident>/fact_cache): our plays gather none.
                fact_cache_type="memory",
                event_handler=recorder,
                cancel_callback=cancel_callback,
                quiet=True,
            )
            recorder.close()
            report = {
                "status": runner.status,
                "rc": runner.rc,
                "results": recorder.results,
                "failures": recorder.failures,
            }
        except Exception as error:  # a broken private data dir, a missing playbook: the run failed, the child lives
            recorder.close()
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


class EventRecorder:
    """ansible-runner's event_handler: takes each task's full result for the report, then bounds what is written.

    Called with every event before ansible-runner writes it to job_events/ (returning False: not written); the
    event is cut in place (its result summed up, long values cut) once the report has what it needs. The run's
    stdout (ansible-runner's own file is turned off) is written here from the events' text, up to STDOUT_LIMIT.
    """

    def __init__(self, artifact_dir: Path):
        self.artifact_dir = artifact_dir
        self.results: dict = {}  # module results by module (resolved FQCN; the last one per module)
        self.failures: list = []  # [{"task", "msg"}] of failed tasks
        self.kept = 0  # event files written
        self.dropped = 0  # events not written (beyond EVENTS_KEPT)
        self._stdout = None
        self._stdout_bytes = 0
        self._stdout_cut = 0

    def __call__(self, event: dict) -> bool:
        data = event.get("event_data") or {}
        kind = event.get("event")
        if kind in ("runner_on_ok", "runner_on_failed"):
            self.results[data.get("resolved_action") or data.get("task_action", "")] = data.get("res") or {}
        if kind == "runner_on_failed" and not data.get("ignore_errors"):
            message = str((data.get("res") or {}).get("msg", ""))
            self.failures.append({"task": data.get("task", ""), "msg": _cut(message, MESSAGE_LIMIT)})
        trim_event(event)
        self._write_stdout(event.get("stdout"))
        if self.kept >= EVENTS_KEPT and kind != "playbook_on_stats":
            self.dropped += 1
            return False
        self.kept += 1
        return True

    def _write_stdout(self, text) -> None:
        if not text:
            return
        data = (text + "\n").encode("utf-8", "replace")
        room = STDOUT_LIMIT - 256 - self._stdout_bytes  # room left for the closing note
        if len(data) > room:
            self._stdout_cut += len(data)
            return
        if self._stdout is None:
            path = self.artifact_dir / "stdout"
            self._stdout = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
        self._stdout.write(data)
        self._stdout_bytes += len(data)

    def close(self) -> None:
        """The closing note: what was not kept."""
        if self._stdout is None and not (self._stdout_cut or self.dropped):
            return
        with contextlib.suppress(OSError):
            if self._stdout is None:
                self._stdout = os.fdopen(
                    os.open(self.artifact_dir / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb"
                )
            if self._stdout_cut or self.dropped:
                note = f"[metalclaim: {self._stdout_cut} bytes of output and {self.dropped} events not kept]\n"
                self._stdout.write(note.encode())
            self._stdout.close()
        self._stdout = None


def trim_event(event: dict) -> None:
    """Bound one event as it is written to job_events/ (in place; values are replaced, never changed): a result of
    more than EVENT_FIELD_LIMIT characters becomes a summary (how the task went, its message's beginning), other
    values are cut to EVENT_FIELD_LIMIT; an event still larger than EVENT_FILE_LIMIT keeps only what identifies it."""
    if isinstance(event.get("stdout"), str):
        event["stdout"] = _cut(event["stdout"], EVENT_FIELD_LIMIT)
    data = event.get("event_data")
    if isinstance(data, dict):
        event["event_data"] = {key: _bounded(key, value) for key, value in data.items()}
    for limit in (256, 64):  # 16 values of 64 characters fit in EVENT_FILE_LIMIT even as JSON's \\uXXXX escapes
        if _size(event) <= EVENT_FILE_LIMIT:
            return
        data = event.get("event_data") or {}
        kept = {key: _bounded(key, event[key], limit) for key in _EVENT_ESSENTIALS if key in event}
        kept["event_data"] = {key: _bounded(key, data[key], limit) for key in _DATA_ESSENTIALS if key in data}
        kept["event_data"]["trimmed"] = True
        event.clear()
        event.update(kept)


def _bounded(key: str, value, limit: int = EVENT_FIELD_LIMIT):
    if isinstance(value, str):
        return _cut(value, limit)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    size = _size(value)
    if size <= limit:
        return value
    if key == "res" and isinstance(value, dict):
        summary = {name: value[name] for name in _RESULT_SUMMARY if isinstance(value.get(name), (bool, int))}
        if "msg" in value:
            summary["msg"] = _cut(str(value["msg"]), min(1024, limit // 2))
        return {**summary, "trimmed_chars": size}
    return {"trimmed_chars": size}


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    note = f"... [{len(text) - limit} more characters not kept]"
    return text[: max(0, limit - len(note))] + note


def _size(value) -> int:
    return len(json.dumps(value, default=str))


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
