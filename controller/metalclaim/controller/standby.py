"""Standby runs: a run started before its batches exist, serving one batch after another (--standby).

A cold run pays its start-up (interpreter, Ansible, playbook, module process, the `kubernetes`
import: about twice the floor F) before its first API request. A standby run pays it ahead, once: the
slot's standby playbook (reconcile.yml on the claim side, provision.yml on a provisioner alone;
dispatch.py chooses) has its first task's action plugin (hostclaim_reconcile's, bmh_redfish's) build
its client, then connect to this slot's Unix socket, say it is ready and wait. Each batch (its claims
or hosts) is sent on that connection; the run steps it, answers with the step's result (which settles
the batch's keys) and waits for the next. So a batch right after another waits for no start, and the run
keeps what it built across batches (its client; the provisioner's BMC connections).

A standby run ends when it is recycled (sent {"recycle": reason}; its task is skipped): when idle
after `max_age` seconds, or before a batch once it is that old (kept below the runner's job timeout,
so no batch outlives a run), and when the collection's files change (an upgrade). Its events and
artifacts are then one run's. A slot has two runners: the next standby starts on one while the other's
run ends.

When no standby is ready (none started yet, its start failed, its runner died), a batch waits for
the one starting, up to `ready_timeout`, then goes the cold way on the free runner, as does a batch
whose standby ends without answering (steps are idempotent): a failing standby never holds a batch
back for long, and standbys are restarted with backoff.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from pathlib import Path

from .runs import Runner


class Standby:
    """One runner slot's two runners and its socket. Used from the slot's dispatcher thread only
    (close() from the stopping thread, once the dispatcher is done)."""

    def __init__(
        self,
        runners: list[Runner],
        socket_path: Path,
        playbook: str,
        *,
        standby_var: str,
        extravars: dict | None = None,
        max_age: float = 300.0,
        ready_timeout: float = 30.0,
        fingerprint=lambda: "",
        fingerprint_period: float = 10.0,
        log=lambda event, **fields: None,
        on_ready=lambda change: None,
        clock=time.monotonic,
    ):
        if len(runners) != 2:
            raise ValueError("a standby slot has two runners: one waits while the other finishes")
        job_timeouts = [r.job_timeout for r in runners if r.job_timeout]
        if job_timeouts and max_age >= min(job_timeouts) / 2:
            raise ValueError(f"standby max age {max_age} s must stay below half the runs' job timeout")
        self.runners = runners
        self.socket_path = socket_path
        self.playbook = playbook
        self.standby_var = standby_var  # the role variable that gives a standby run the socket and its token
        self.extravars = extravars or {}
        self.max_age = max_age
        self.ready_timeout = ready_timeout
        self._fingerprint = fingerprint
        self._fingerprint_period = fingerprint_period
        self._log = log
        self._on_ready = on_ready
        self._clock = clock
        self._received = b""  # what a serving standby sent and serve() has not read yet
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(socket_path))
        self._listener.listen(4)
        self._pending: Runner | None = None  # holds the standby run (started, maybe not ready yet)
        self._token = ""
        self._started_at = 0.0
        self._conn: socket.socket | None = None  # the pending run's connection, once it said ready
        self._draining: set = set()  # runners whose recycled standby has not reported yet
        self._failures = 0
        self._retry_at = 0.0
        self._built_from = fingerprint()
        self._checked_at = clock()

    # -- the dispatcher's calls ------------------------------------------------------------------

    def serve(self, objects: list[dict], stop=None, cancel=None) -> dict | None:
        """Have the ready standby step the batch and answer, then wait for the next: its result; or None, run the
        batch cold (no standby ready, or it ended without answering: its steps are idempotent, as a cold run's)."""
        reason = self._stale() if self._conn is not None else ""
        if reason:
            self.recycle(reason)  # never a batch to a run near its job timeout, or built from old files
        self.launch()
        if not self._wait_ready(self.ready_timeout, stop):
            return None
        runner, conn = self._pending, self._conn
        try:
            conn.sendall(json.dumps({"objects": objects}).encode() + b"\n")
            answer, why = self._answer(runner, conn, cancel)
        except (OSError, ValueError) as error:  # it went away, or answered what is not a result
            answer, why = None, str(error)
        if answer is not None:
            return answer
        self._pending, self._conn = None, None
        self._on_ready(-1)
        conn.close()
        if cancel is not None and cancel.is_set():
            runner.cancel()
        self._log("standby_failed", error=why, pid=runner.pid)
        self._settle(runner)
        return None

    def _answer(self, runner: Runner, conn: socket.socket, cancel) -> tuple[dict | None, str]:
        """The serving standby's answer to the batch just sent; else (None, why there is none)."""
        conn.settimeout(0.1)
        while b"\n" not in self._received:
            if cancel is not None and cancel.is_set():
                return None, "cancelled"
            try:
                chunk = conn.recv(1 << 20)
            except TimeoutError:
                report = runner.wait(timeout=0)
                if report is not None:
                    failures = "; ".join(f"{f['task']}: {f['msg']}" for f in report.failures[:3])
                    return None, f"its run ended ({report.status}) without answering: {failures}"
                continue
            if not chunk:
                return None, "it closed the socket without answering"
            self._received += chunk
        line, self._received = self._received.split(b"\n", 1)
        return json.loads(line)["result"], ""

    def free_runner(self) -> Runner:
        """A runner for a cold run (not the one holding the standby); waits for a recycled run's end if need be."""
        for runner in self.runners:
            if runner is not self._pending and not runner.busy:
                return runner
        runner = next(r for r in self.runners if r is not self._pending)
        self._settle(runner)
        return runner

    def maintain(self) -> None:
        """While idle: notice a ready or failed standby, recycle a stale one, start one if none."""
        starting = self._pending is not None and self._conn is None and not self._wait_ready(0)
        if starting and self._pending is not None and self._clock() - self._started_at > self.ready_timeout:
            self._pending.cancel()  # stuck in its start: give up on it
            self._draining.add(self._pending)
            self._failed(f"not ready after {self.ready_timeout:.0f} s", [])
        if self._conn is not None:
            reason = self._stale()
            if reason:
                self.recycle(reason)
        self.launch()

    def launch(self) -> None:
        """Start a standby run on a free runner, unless one is pending or a failed start is backing off."""
        for runner in list(self._draining):  # a recycled run that has ended frees its runner
            if runner.wait(timeout=0) is not None:
                self._draining.discard(runner)
        if self._pending is not None or self._clock() < self._retry_at:
            return
        runner = next((r for r in self.runners if not r.busy), None)
        if runner is None:
            return
        self._token = uuid.uuid4().hex
        runner.submit(
            self.playbook,
            {**self.extravars, self.standby_var: {"socket": str(self.socket_path), "token": self._token}},
        )
        self._pending, self._started_at = runner, self._clock()

    def recycle(self, reason: str) -> None:
        """End the waiting standby run (it reconciles nothing: its task is skipped); the next one starts fresh."""
        if self._conn is None:
            return
        runner, conn = self._pending, self._conn
        self._pending, self._conn = None, None
        self._on_ready(-1)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"recycle": reason}).encode() + b"\n")
        conn.close()
        self._draining.add(runner)
        self._built_from = self._fingerprint()
        self._log("standby_recycled", reason=reason, pid=runner.pid)

    def close(self) -> None:
        """Stop: the waiting standby is recycled; the socket goes."""
        self.recycle("the controller is stopping")
        if self._pending is not None:  # still starting: it would find no socket
            self._pending.cancel()
            self._pending = None
        self._listener.close()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()

    # -- inside ------------------------------------------------------------------------------------

    def _wait_ready(self, timeout: float, stop=None) -> bool:
        """Accept connections until the pending standby says ready (True), its run ends first, or `timeout`."""
        if self._conn is not None:
            return True
        deadline = self._clock() + timeout
        while self._pending is not None:
            report = self._pending.wait(timeout=0)
            if report is not None:  # the run ended before it said ready: its start failed
                self._failed(report.status, [f"{f['task']}: {f['msg']}" for f in report.failures])
                return False
            self._listener.settimeout(max(0.0, min(0.1, deadline - self._clock())))
            try:
                conn, _address = self._listener.accept()
            except (TimeoutError, BlockingIOError):
                if self._clock() >= deadline or (stop is not None and stop.is_set()):
                    return False
                continue
            worker = self._greeting(conn)
            if worker:
                self._conn, self._received = conn, b""
                self._failures = 0
                self._on_ready(+1)
                seconds = round(self._clock() - self._started_at, 3)
                self._log("standby_ready", pid=self._pending.pid, worker_pid=worker, seconds=seconds)
                return True
            conn.close()  # a stale standby (recycled, or from a run already given up on)
        return False

    def _greeting(self, conn: socket.socket) -> int:
        """The process id of the task waiting on `conn` if it is the pending standby's, else 0."""
        conn.settimeout(5.0)
        received = b""
        with contextlib.suppress(OSError):
            while not received.endswith(b"\n") and len(received) < 4096:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                received += chunk
        try:
            greeting = json.loads(received or b"{}")
        except ValueError:
            return 0
        return int(greeting.get("pid") or 0) if greeting.get("ready") == self._token else 0

    def _failed(self, status: str, failures: list[str]) -> None:
        """The pending standby will never be ready: start the next one after a backoff (1, 2, 4 ... 60 s)."""
        pid = self._pending.pid
        self._pending = None
        self._failures += 1
        delay = min(60.0, 2.0 ** (self._failures - 1))
        self._retry_at = self._clock() + delay
        self._log("standby_failed", status=status, failures=failures[:3], pid=pid, retry_after=delay)

    def _settle(self, runner: Runner) -> None:
        """Wait for a run this slot no longer uses to end (a standby that failed or was recycled)."""
        if runner.busy:
            runner.wait()
        self._draining.discard(runner)

    def _stale(self) -> str:
        if self._clock() - self._started_at > self.max_age:
            return "max-age"
        if self._clock() - self._checked_at >= self._fingerprint_period:
            self._checked_at = self._clock()
            if self._fingerprint() != self._built_from:
                return "collection-changed"
        return ""
