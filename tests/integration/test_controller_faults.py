"""Faults under the controller, run as its own process on the real API server (and Redfish emulator).

A SIGKILL in the middle of a batch, the kube-apiserver restarted under it, a BMC that refuses its
credentials, and a quiet system: after each, the claims and hosts converge, nothing is bound twice,
and runs happen only when something asks for one.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path

import pytest

from metalclaim_dev.claimlayer import TENANT_A, Rack
from metalclaim_dev.controllerproc import ControllerProcess, associated, claim_side, provisioner, runs_of
from metalclaim_dev.devenv.controlplane import start_apiserver, stop_apiserver
from metalclaim_dev.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.minutes(2)]
SETTLE = 120  # seconds: a generous bound for convergence on a loaded 2-core machine (detects a hang, not a speed)


# -- processes, from /proc -------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...); None once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _descendants(pid: int) -> list[int]:
    parents = {child: (_stat(child) or [None, None])[1] for child in _pids()}
    found, frontier = [], [str(pid)]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = [str(child) for child in children]
    return found


def _session_members(sids: set[str]) -> list[int]:
    return [pid for pid in _pids() if (_stat(pid) or [None] * 4)[3] in sids]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _in_claim_step(pid: int) -> bool:
    """A playbook worker (an ansible-playbook forked by ansible-playbook) talking to the API server: the run is
    inside hostclaim_reconcile, which the controller's runs execute in the worker's own process (in_process)."""
    stat = _stat(pid)
    if stat is None or "ansible-playbook" not in _cmdline(pid) or "ansible-playbook" not in _cmdline(int(stat[1])):
        return False
    try:
        sockets = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        table = (
            Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
            + (Path(f"/proc/{pid}/net/tcp6").read_text().splitlines()[1:])
        )
    except OSError:
        return False
    established = {f"socket:[{line.split()[9]}]" for line in table if line.split()[3] == "01"}
    return bool(sockets & established)


def _alive(pid: int, started: str) -> bool:
    """The same process (pid and start time: pids are reused) still runs."""
    fields = _stat(pid)
    return fields is not None and fields[18] == started


# -- claims and hosts ------------------------------------------------------------------------------


def _conditions(claim: dict) -> dict:
    return {c["type"]: c for c in (claim.get("status") or {}).get("conditions") or []}


def _binding_state(rack: Rack, claims: list[str], hosts: list[str]) -> tuple[bool, str]:
    """Whether the rack converged (every host bound to a distinct one of `claims`, exactly those claims associated,
    every other claim waiting for a host), and a summary of what is wrong."""
    consumers = [(rack.read_host(h)["spec"].get("consumerRef") or {}) for h in hosts]
    bound = sorted(c.get("name", "") for c in consumers)
    conditions = {name: _conditions(rack.read_claim(name)) for name in claims}
    associated_claims = sorted(n for n, c in conditions.items() if (c.get("Association") or {}).get("status") == "True")
    problems = []
    if any(c.get("namespace") != TENANT_A or c.get("name") not in claims for c in consumers):
        problems.append(f"hosts' consumers {consumers}")
    if len(set(bound)) != len(bound):
        problems.append(f"a claim holds two hosts: {bound}")
    if bound != associated_claims:
        problems.append(f"bound {bound} != associated {associated_claims}")
    unbound = [n for n in claims if n not in bound]
    for name in unbound:
        association = conditions[name].get("Association") or {}
        if association.get("status") != "False" or association.get("reason") != "NoBareMetalHost":
            problems.append(f"{name}: {association or 'no Association condition'}")
    return not problems, "; ".join(problems[:5]) + (f" (+{len(problems) - 5})" if len(problems) > 5 else "")


def _converge(check, timeout: float, what: str, output) -> None:
    """eventually(check), check returning (done, summary): the last summary and the controller's log on timeout."""
    last = ["never checked"]

    def done() -> bool:
        ok, last[0] = check()
        return ok

    try:
        eventually(done, timeout=timeout, interval=1.0, message=what)
    except AssertionError as error:
        raise AssertionError(f"{error}: {last[0]}\n{output()}") from None


# -- 1. SIGKILL or SIGTERM in the middle of a batch ----------------------------------------------------


def _rack_of(rack: Rack, hosts: int, claims: int) -> tuple[list[str], list[str]]:
    rack.policy()
    host_names = [f"h{i:02d}" for i in range(hosts)]
    claim_names = [f"c{i:02d}" for i in range(claims)]
    for host in host_names:
        rack.host(host)
    for claim in claim_names:
        rack.claim(claim)
    return host_names, claim_names


def _run_tree_mid_claim_step(controller: ControllerProcess) -> list[int]:
    """Wait until the controller's run is inside hostclaim_reconcile (runner child -> ansible-playbook -> worker,
    talking to the API server); returns the run's processes."""

    def step_running() -> list[int]:
        tree = _descendants(controller.process.pid)
        return tree if any(_in_claim_step(pid) for pid in tree) else []

    return eventually(step_running, timeout=60, interval=0.02, message="hostclaim_reconcile running")


class _Tree:
    """A run's processes as they were, and what is left of them: the same pids (start times checked) and
    anything in their sessions (ansible-playbook and each of its workers run in a session of their own)."""

    def __init__(self, pids: list[int]):
        self.started = {pid: (_stat(pid) or [""] * 19)[18] for pid in pids}
        own = (_stat(os.getpid()) or [None] * 4)[3]
        self.sessions = {(_stat(pid) or [None] * 4)[3] for pid in pids} - {own, None}

    def left(self) -> tuple[bool, str]:
        alive = sorted(
            {pid for pid, started in self.started.items() if _alive(pid, started)}
            | set(_session_members(self.sessions))
        )
        return not alive, "still running: " + "; ".join(f"{pid} {_cmdline(pid)[:120]}" for pid in alive)


def test_sigkill_in_the_middle_of_a_batch_then_restart_converges(devenv, rack, tmp_path):
    """30 claims race for 10 hosts; the controller is SIGKILLed while its first run's claim step runs. Its runner
    process and the playbook must not outlive it (they would write beside the next controller); a restarted
    controller converges: 10 claims hold one host each, 20 wait with NoBareMetalHost, no host bound twice."""
    hosts, claims = _rack_of(rack, hosts=10, claims=30)
    first = ControllerProcess(devenv, tmp_path / "first", *claim_side(rack))
    try:
        tree = _Tree(_run_tree_mid_claim_step(first))
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
        killed = time.monotonic()
        _converge(tree.left, 20, "the killed controller's run ended", lambda: "")
        print(f"\nSIGKILL mid-step: its run's processes gone {time.monotonic() - killed:.2f} s later", end="")
        bound = sum(1 for h in hosts if rack.read_host(h)["spec"].get("consumerRef"))
        print(
            f"; {bound}/10 hosts bound, {sum(1 for c in claims if _conditions(rack.read_claim(c)))}/30 claims with"
            " conditions at restart"
        )
    finally:
        first.stop()
    restarted = time.monotonic()
    second = ControllerProcess(devenv, tmp_path / "second", *claim_side(rack))
    try:
        _converge(lambda: _binding_state(rack, claims, hosts), SETTLE, "the rack converged", second.output)
        print(f"restart -> converged in {time.monotonic() - restarted:.1f} s")
    finally:
        second.stop()


def test_a_run_cancelled_by_sigterm_leaves_nothing_writing(devenv, rack, tmp_path):
    """SIGTERM with a grace period shorter than the run: the run is cancelled and the controller exits; by then
    every process of the run has ended (ansible-runner alone kills ansible-playbook's process group, and the
    worker running the claim step, in a session of its own, would go on binding hosts after the exit - after the
    Lease is released, beside the next leader)."""
    hosts, _claims = _rack_of(rack, hosts=10, claims=30)
    controller = ControllerProcess(devenv, tmp_path, *claim_side(rack), "--grace-period", "0.2")
    try:
        tree = _Tree(_run_tree_mid_claim_step(controller))
        controller.process.send_signal(signal.SIGTERM)
        assert controller.process.wait(30) == 0
        bound_at_exit = [rack.read_host(h)["spec"].get("consumerRef") for h in hosts]
        _converge(tree.left, 10, "the cancelled run's processes ended", controller.output)
        assert '"reason": "canceled"' in controller.output()
        # Nothing wrote after the exit (an orphaned worker goes on binding hosts for a second or two).
        assert [rack.read_host(h)["spec"].get("consumerRef") for h in hosts] == bound_at_exit
    finally:
        controller.stop()


# -- 2. kube-apiserver restarted under it --------------------------------------------------------------------


def _log_events(controller: ControllerProcess, event: str, since: int = 0) -> list[dict]:
    lines = controller.output(full=True).splitlines()[since:]
    return [json.loads(line) for line in lines if line.startswith("{") and f'"event": "{event}"' in line]


def _watches(controller: ControllerProcess, event: str, since: int = 0) -> set[tuple]:
    return {(e.get("resource"), e.get("namespace")) for e in _log_events(controller, event, since)}


def _restarts_by_reason(controller: ControllerProcess) -> dict[str, float]:
    return {
        reason: controller.metric("metalclaim_watch_restarts_total", reason=reason)
        for reason in ("expired", "gone", "error", "timeout")
    }


def test_the_apiserver_restarted_under_the_controller(devenv, rack, tmp_path):
    """The kube-apiserver stops (as in an upgrade) right after a claim is made, and starts again: every watch
    ends, each reflector backs off and re-watches (re-listing if its resourceVersion is gone), and the claim made
    before the stop and claims made right after the restart bind. /readyz says the stores synced once; it stays
    200 through the outage (the stores keep serving the last state), as an informer's HasSynced does."""
    rack.policy()
    for host in ("h1", "h2", "h3"):
        rack.host(host)
    controller = ControllerProcess(devenv, tmp_path, *claim_side(rack))
    argv = None
    try:
        eventually(
            lambda: _watches(controller, "listed") <= _watches(controller, "watch_started"),
            timeout=30,
            message="every reflector watching",
        )
        watched = _watches(controller, "listed")
        rack.claim("before")
        argv = stop_apiserver(devenv.state)
        stopped = len(controller.output(full=True).splitlines())
        # Every watch saw the server go (its stream ended), and at least one reconnect failed.
        eventually(
            lambda: (
                watched <= _watches(controller, "watch_ended", stopped)
                and any(e.get("outcome") == "error" for e in _log_events(controller, "watch_ended", stopped))
            ),
            timeout=60,
            message=f"the reflectors saw the apiserver stop\n{controller.output()}",
        )
        during_outage = controller.get(controller.health_port, "/readyz")[0]
        start_apiserver(devenv.state, argv)
        devenv.save()  # the new pid, for later tests' health checks and `devenv down`
        argv = None
        back = time.monotonic()
        rack.claim("after-1")
        rack.claim("after-2")
        for name in ("before", "after-1", "after-2"):
            eventually(
                lambda name=name: associated(rack, name),
                timeout=SETTLE,
                message=f"{name} associated after the restart\n{controller.output()}",
            )
        print(f"\napiserver back -> 3 claims associated in {time.monotonic() - back:.1f} s", end="")
        # Counted from the stop, not from start_apiserver's return: a reflector in backoff may reconnect while
        # start_apiserver still waits for /readyz, and no watch can start while the server is down.
        eventually(
            lambda: watched <= _watches(controller, "watch_started", stopped),
            timeout=60,
            message=f"every reflector watching again\n{controller.output()}",
        )
        # A watch whose resourceVersion the new server no longer has (410 Gone) re-listed: nothing lost.
        gone = {
            (e["resource"], e["namespace"])
            for e in _log_events(controller, "watch_ended", stopped)
            if e.get("outcome") == "gone"
        }
        assert gone <= _watches(controller, "listed", stopped), gone
        assert during_outage == 200
        assert controller.get(controller.health_port, "/readyz")[0] == 200
        assert controller.get(controller.health_port, "/healthz")[0] == 200
        print(f"; watch restarts by reason {_restarts_by_reason(controller)}")
    finally:
        if argv is not None:  # leave the devenv healthy for the tests after this one
            start_apiserver(devenv.state, argv)
            devenv.save()
        controller.stop()


# -- 4. BMC errors back off per host ------------------------------------------------------------------------------


def test_bmc_errors_back_off_per_host_without_blocking_others(devenv, site, tmp_path):
    """One host's BMC refuses its credentials, another's accepts them: the good host reaches `available` while
    the bad one shows Metal3's error fields, its attempts spaced by bmh_redfish's growing backoff (10 s, 20 s,
    ...: the collection's default base), each attempt one run: no retry storm, no run blocked by it."""
    site.host("good", 0)
    site.host("bad", 1, password="not-the-bmc-password")
    controller = provisioner(devenv, tmp_path, site.namespace)
    started = time.monotonic()
    bad_key = f"host/{site.namespace}/bad"
    attempts: dict[int, float] = {}  # errorCount -> when it was first seen
    good_available = None

    def observe() -> bool:
        nonlocal good_available
        if good_available is None and site.state("good") == "available":
            good_available = time.monotonic() - started
        count = int((site.read("bad").get("status") or {}).get("errorCount") or 0)
        if count and count not in attempts:
            attempts[count] = time.monotonic() - started
        return good_available is not None and len(attempts) >= 3

    try:
        eventually(
            observe, timeout=150, interval=0.25, message=f"3 attempts of bad, good available\n{controller.output()}"
        )
        bad = site.read("bad")["status"]
        good = site.read("good")["status"]
        runs = runs_of(controller, bad_key)
        output = controller.output(full=True)
    finally:
        controller.stop()
    counts = sorted(attempts)
    gaps = [attempts[b] - attempts[a] for a, b in itertools.pairwise(counts)]
    print(
        f"\ngood available after {good_available:.1f} s; bad's attempts at "
        f"{', '.join(f'{attempts[c]:.1f}' for c in counts)} s (gaps {', '.join(f'{g:.1f}' for g in gaps)} s), "
        f"{runs} runs held it"
    )
    assert good["operationalStatus"] == "OK" and not good.get("errorCount"), good
    assert bad["operationalStatus"] == "error" and bad["errorType"] and bad["errorMessage"], bad
    assert counts[:3] == [1, 2, 3], f"attempts seen {attempts}: each is one errorCount"
    # bmh_redfish waits base * 2**(n-1) after the n-th error (base 10 s); a run's own time comes on top.
    backoffs = [10.0 * 2**i for i in range(len(gaps))]
    assert all(gap >= 0.9 * backoff for gap, backoff in zip(gaps, backoffs, strict=True)), (gaps, backoffs)
    assert gaps[1] > gaps[0], f"attempts not spaced by a growing backoff: {gaps}"
    # Each attempt is one run (and perhaps a run that found the backoff not yet over): no retry storm.
    assert runs <= 2 * len(counts) + 1, f"{runs} runs for {len(counts)} attempts\n{output[-5000:]}"
    assert "not-the-bmc-password" not in output and site.password not in output


# -- 5. a quiet system -------------------------------------------------------------------------------------------

QUIET_WINDOW = 60.0
QUIET_RESYNC = 50.0


def test_a_quiet_system_runs_only_the_resync(devenv, rack, tmp_path):
    """Claims bound, nothing changing: over a minute (the issue's "quiet system") the only run is the periodic
    resync's. A minute is long beside every timer that could wake the controller by mistake (batching in tens of
    milliseconds, Lease renewals every 2 s with --leader-elect, requeues, status echoes of its own writes), yet
    shorter than the watches' server timeouts (5-10 min), whose re-watch must not cause runs either. The resync
    period (50 s, counted from the controller's start) puts exactly one resync in a window that starts at most
    40 s after the start: the first at 50 s, the second at 100 s."""
    rack.policy()
    for host in ("h1", "h2"):
        rack.host(host)
    rack.claim("c1")
    rack.claim("c2")
    launched = time.monotonic()
    controller = ControllerProcess(
        devenv, tmp_path, *claim_side(rack, leader_elect=True), "--resync-period", str(QUIET_RESYNC)
    )
    try:
        eventually(
            lambda: associated(rack, "c1") and associated(rack, "c2"), timeout=SETTLE, message="c1, c2 associated"
        )

        def idle() -> bool:  # nothing queued, no run in flight (a run's batch size is observed as it starts)
            started = controller.metric("metalclaim_batch_size_count")
            return controller.metric("workqueue_depth") == 0 and started == controller.metric("metalclaim_runs_total")

        eventually(idle, timeout=SETTLE, message="the controller idle")
        window_start = time.monotonic()
        # One resync in the window: the first (at QUIET_RESYNC) after its start, the second after its end.
        assert window_start - launched < 2 * QUIET_RESYNC - QUIET_WINDOW, "settling took too long for the window"
        runs_before = controller.metric("metalclaim_batch_size_count")
        resyncs_before = controller.metric("metalclaim_resyncs_total")
        time.sleep(QUIET_WINDOW)  # waiting out the window is the test
        runs = controller.metric("metalclaim_batch_size_count") - runs_before
        resyncs = controller.metric("metalclaim_resyncs_total") - resyncs_before
        print(
            f"\nquiet {QUIET_WINDOW:.0f} s from {window_start - launched:.1f} s after launch: {runs:.0f} runs, "
            f"{resyncs:.0f} resyncs"
        )
        assert resyncs == 1
        assert runs == resyncs, f"{runs} runs in a quiet minute, {resyncs} resync\n{controller.output()}"
    finally:
        controller.stop()
