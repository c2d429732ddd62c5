"""Dispatch: batches -> runs -> outcomes -> queue, as controller-runtime's workers call Reconcile.

One thread per runner slot (the only threads that talk to the runner processes) takes a batch of one group's keys
from the work queue (groups.py: the playbook and its variables), runs it (on the slot's standby run when there is
one, else a cold run; remote claims on a slot of their own beside other work), and settles each key from the
outcomes the step returned (outcomes.py): forgotten, backed off or due again after a delay.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import collection, mapper, outcomes
from .groups import COLLECTION, GROUPS
from .runs import Runner, RunReport, private_directory
from .scope import CLAIMS, PROVISIONER, TENANTS
from .standby import Standby


def run_of(group: str, keys: list, settings) -> tuple[str, dict]:
    """The playbook a batch of `group` runs and its variables (groups.GROUPS: the one table of them)."""
    entry = GROUPS[group]
    return entry.playbook_path(), entry.extravars(keys, settings)


def standby_group(settings) -> str | None:
    """The group whose runs a slot's standby serves (--standby): the claim side's reconcile runs, the most frequent
    and the ones a tenant waits on, else a provisioner's (alone in its process, as deployed) provision runs."""
    if not settings.standby:
        return None
    if CLAIMS in settings.scope.sides:
        return mapper.CLAIM
    if PROVISIONER in settings.scope.sides:
        return mapper.HOST
    return None


def remote_slot_wanted(settings) -> bool:
    """Whether remote claims get a runner slot of their own: when they are served beside other work (baremetal
    claims, hosts, Tenants), which then never waits behind a remote run (issue 22)."""
    sides = settings.scope.sides
    if CLAIMS not in sides or mapper.REMOTE_KIND not in settings.kinds:
        return False
    return mapper.BAREMETAL_KIND in settings.kinds or PROVISIONER in sides or TENANTS in sides


class Dispatcher:
    def __init__(self, settings, queue, metrics, stop: threading.Event, leading: Callable[[], bool], log):
        """leading(): whether this instance may dispatch now (the Lease's holder, or no election); stop: the
        controller's flag."""
        self.settings = settings
        self.queue = queue
        self.metrics = metrics
        self.stop = stop
        self._leading = leading
        self._log = log
        self.runners: list[Runner] = []
        self.standbys: list[Standby] = []  # one per slot with --standby (the slot's two runners)
        # A runner slot of their own for remote claims, beside --runner-slots, when other work shares the process:
        # a hardware cluster that answers slowly (or never, until the claim's deadline) never delays that work.
        self.remote_slot: int | None = None
        self._remote_runner: Runner | None = None
        self._standby_dir: Path | None = None
        self._standby_group = standby_group(settings)
        self._cancel_run = threading.Event()
        self.threads: list[threading.Thread] = []

    # -- one slot --------------------------------------------------------------------------------

    def loop(self, slot: int) -> None:
        """One runner slot: take a batch (the queue never hands a key to two slots), run it, settle its keys."""
        while not self.stop.is_set():
            if not self._leading():
                self.stop.wait(0.1)
                continue
            keys = self.queue.get_batch(
                group=lambda key: key[0],
                max_size=self.settings.batch_max_size,
                resync_max_size=self.settings.resync_batch_max_size,
                quiet=self.settings.batch_quiet,
                max_wait=self.settings.batch_max_wait,
                timeout=0.5,
                accept=self._accepts(slot),
            )
            if keys is None:
                return
            if not keys:
                if slot < len(self.standbys):
                    self.standbys[slot].maintain()
                continue
            finished = []  # keys the run settled done: a wake that came meanwhile finds them waiting no more
            try:
                found = self.run_batch(keys, slot)
                finished = [key for key, outcome in found.items() if outcome.result == outcomes.DONE]
            except Exception as error:  # never lose the keys: back off and carry on
                self._log("dispatch_error", error=f"{type(error).__name__}: {error}")
                for key in keys:
                    self.queue.add_rate_limited(key)
            finally:
                self.queue.done(keys, finished)
                self.metrics.depth.set(len(self.queue))

    def _accepts(self, slot: int):
        """The keys a slot takes: with a remote slot, remote claims there and only there."""
        if self.remote_slot is None:
            return None
        if slot == self.remote_slot:
            return lambda key: key[0] == mapper.REMOTE
        return lambda key: key[0] != mapper.REMOTE

    def run_batch(self, keys: list, slot: int) -> dict:
        """Run one batch and settle its keys; each key's Outcome."""
        group = keys[0][0]
        playbook, extravars = run_of(group, keys, self.settings)
        name = GROUPS[group].playbook
        self.metrics.batch_size.labels(name).observe(len(keys))
        report = self._run(slot, group, playbook, extravars)
        self.metrics.runs.labels(name, report.status).inc()
        self.metrics.run_seconds.labels(name).observe(report.seconds)
        self._log(
            "run",
            playbook=name,
            status=report.status,
            count=len(keys),
            keys=_shown(keys),
            seconds=round(report.seconds, 3),
            slot=slot,
        )
        if report.status != "successful":
            for failure in report.failures:
                self._log("run_failed", playbook=name, task=failure["task"], message=failure["msg"], keys=_shown(keys))
            found = outcomes.failed_run(keys, report.status)
        else:
            found = outcomes.read(group, keys, GROUPS[group].result_of(report.results))
        self._settle(name, found)
        self.metrics.reconcile_seconds.labels(name).observe(report.seconds)
        return found

    def _settle(self, playbook: str, found: dict) -> None:
        """What the queue does with each key, from its outcome (outcomes.py)."""
        for key, outcome in found.items():
            self.metrics.reconciles.labels(playbook, outcome.result).inc()
            if outcome.result == outcomes.RETRY:
                delay = self.queue.add_rate_limited(key)
                self._log("retry", key="/".join(key), reason=outcome.reason, after=round(delay, 3))
            elif outcome.result == outcomes.REQUEUE:
                self.queue.forget(key)
                self.queue.add_after(key, outcome.delay)
            else:
                self.queue.forget(key)

    def _run(self, slot: int, group: str, playbook: str, extravars: dict):
        """The batch's run: handed to the slot's standby run when there is one, else a cold run."""
        if slot == self.remote_slot:
            return self._remote_runner.run(playbook, extravars, self._cancel_run)
        if not self.standbys:
            return self.runners[slot].run(playbook, extravars, self._cancel_run)
        standby = self.standbys[slot]
        if group == self._standby_group:
            started = time.monotonic()
            result = standby.serve(extravars[GROUPS[group].objects_var], self.stop, self._cancel_run)
            if result is not None:
                self.metrics.standby_batches.labels("standby").inc()
                return served_report(GROUPS[group], result, time.monotonic() - started)
            self.metrics.standby_batches.labels("cold").inc()
        return standby.free_runner().run(playbook, extravars, self._cancel_run)

    # -- the slots' life cycle -------------------------------------------------------------------

    def start(self) -> None:
        """The runners (a standby pair per slot with --standby, a remote slot when wanted), then a thread per slot."""
        settings = self.settings
        envvars = {"ANSIBLE_COLLECTIONS_PATH": collection.collections_path()}
        if settings.kubeconfig:
            envvars["K8S_AUTH_KUBECONFIG"] = settings.kubeconfig
        # One private data dir per runner, each rotating its artifacts: disk stays within
        # runners x keep_artifacts runs, however many runs happen. All inside one directory of our own.
        private_directory(settings.private_data_dir)
        standby = self._standby_group
        per_slot = 2 if standby else 1
        self.runners = [
            Runner(
                _runner_dir(settings.private_data_dir, slot, settings.runner_slots, runner, per_slot),
                envvars,
                keep_artifacts=settings.keep_artifacts,
            )
            for slot in range(settings.runner_slots)
            for runner in range(per_slot)
        ]
        if remote_slot_wanted(settings):
            self.remote_slot = settings.runner_slots
            self._remote_runner = Runner(
                settings.private_data_dir / "remote", envvars, keep_artifacts=settings.keep_artifacts
            )
            self.runners.append(self._remote_runner)  # closed with the others
        if standby:
            # A short path (sockets: 107 bytes at most), a directory only this user can enter (mkdtemp: 0700).
            self._standby_dir = Path(tempfile.mkdtemp(prefix="metalclaim-standby-"))
            entry = GROUPS[standby]
            self.standbys = [
                Standby(
                    self.runners[2 * slot : 2 * slot + 2],
                    self._standby_dir / f"slot-{slot}.sock",
                    entry.playbook_path(),
                    standby_var=entry.standby_var,
                    extravars=entry.run_options(settings),  # its objects come through the socket
                    max_age=settings.standby_max_age,
                    fingerprint=collection.fingerprint,
                    log=lambda event, slot=slot, **fields: self._log(event, slot=slot, **fields),
                    on_ready=self.metrics.standby_ready.inc,
                )
                for slot in range(settings.runner_slots)
            ]
            for slot_standby in self.standbys:
                slot_standby.launch()

    def start_threads(self) -> None:
        slots = self.settings.runner_slots + (self.remote_slot is not None)
        self.threads = [
            threading.Thread(target=self.loop, args=(slot,), name=f"dispatcher-{slot}", daemon=True)
            for slot in range(slots)
        ]
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        """After the stop: the runs in flight finish within half the grace period, or are cancelled and given the
        other half; then every runner closes."""
        threads = [t for t in self.threads if t is not threading.current_thread()]
        deadline = time.monotonic() + self.settings.grace_period / 2
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads):
            self._cancel_run.set()
            deadline = time.monotonic() + self.settings.grace_period / 2
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        for slot_standby in self.standbys:
            slot_standby.close()
        for runner in self.runners:
            runner.close()
        if self._standby_dir is not None:
            with contextlib.suppress(OSError):
                self._standby_dir.rmdir()


def served_report(entry, result: dict, seconds: float) -> RunReport:
    """A batch a serving standby answered, as the report of a run of its own: the step's result, or its failure."""
    if result.get("failed"):
        return RunReport("failed", 2, seconds, failures=[{"task": entry.module, "msg": result.get("msg", "")}])
    return RunReport("successful", 0, seconds, results={f"{COLLECTION}.{entry.module}": result})


def _runner_dir(private: Path, slot: int, slots: int, runner: int, per_slot: int) -> Path:
    """private (one slot), private/slot-N (several); with standby runs, a slot's second runner in .../standby-b."""
    slot_dir = private if slots == 1 else private / f"slot-{slot}"
    return slot_dir if runner == 0 else slot_dir / "standby-b"


def _shown(keys: list, limit: int = 20) -> list[str]:
    return ["/".join(key) for key in keys[:limit]] + ([f"... {len(keys) - limit} more"] if len(keys) > limit else [])
