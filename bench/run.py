"""make bench: the controller beside the one-run-per-event baseline, on the devenv's real control plane.

    .venv/bin/python bench/run.py [--dir .bench-devenv] [--out bench/out] [--scenarios floor,idle,...] [sizes]

Figures, never pass/fail. Brings up its own devenv in --dir (or reuses a running one there with a large
enough fleet), runs the scenarios, prints a progress line on stderr and a table at the end, and writes
every figure to <out>/bench-<timestamp>.json and the plots to <out>/bench-<timestamp>.png.

Scenarios (each with its own namespaces, deleted afterwards; one failing is reported, the rest still run):
  floor      F: median wall time of a one-task debug playbook through the controller's own Runner
  idle       one claim at a time into a quiet system: create -> Association=True as a watcher sees it,
             the cold path and then the standby run (--standby), each its own controller process
  storm      N available hosts, N claims created by threads from 10 tenant namespaces, the claim side as
             config/manager deploys it (standby runs): last create -> all Associated, claims/s, latencies, runs,
             batch sizes, double bindings, controller RSS
  resync     the storm's bound claims under a controller with a short --resync-period: idle latency of
             new claims while full resyncs run
  baseline   the storm (or --baseline-claims of it, extrapolated linearly and labelled so) with the
             controller in --mode per-event (one run per claim event, CPU-count runs at once)
  provision  both sides against emulated BMCs behind a counting proxy: idle create -> Provisioned (a few
             samples), then a wave of claims (live-iso, online): all Provisioned, Redfish requests per host,
             each host's power delay (power-on asked -> first read showing On) taken out; with
             --provision-image disk, disk images through the media server and a stand-in writer calling back
             --writer-seconds after each config drive is published: each callback -> Provisioned
  provision-sweep  (only when named in --scenarios) the provision wave again at each --provision-sweep
             concurrency (default 20, Metal3's, and the wave's size), each on fleet systems of its own and without
             idle samples: the wave's time beyond power delays and requests per host at each
  churn      claims created and deleted continuously against a fixed fleet: RSS, apiserver connections,
             artifacts, stuck claims, runs beyond the changes the bench made
  slots      the runner-slot sweep: the same storm (--slots-claims, 300) under --runner-slots 1, 2 and N (the
             CPU count, 4 when that is 2), each its own rack and controller, with idle probe claims created one
             at a time while it runs (up to --slots-probes): last create -> all Associated, claims/s, the probes'
             create->Associated, runs, controller and runner RSS; a note says which default the figures suggest
             (the controller's default is never changed by the bench)
  tenants    the controller's tenants side: a Tenant applied -> Deployed, one at a time (--tenant-samples),
             then --tenants applied at once (each: a child namespace, a host pool, a quota): all Deployed,
             per-tenant latencies, runs; then all deleted -> gone
  storm-old  the storm again with the controller and collection of --old-rev (default: the revision before
             the chunked bind), on the same devenv: the path it replaced, beside the storm in the plot
  storm-scale  (long: only when named in --scenarios) the storm at each of --scale-sizes (100,1000,5000), each
             its own rack and controller: time, claims/s, runs, controller and runner RSS, the per-claim cost
             (ms of first create -> all Associated per claim) and its growth over the smallest size's

A smoke run: --idle-claims 5 --storm-claims 50 --baseline-claims 10 --wave 4 --churn-seconds 20 --slots-claims 40
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from metalclaim.controller.cgroup import cpu_limit, slots_for
from metalclaim_dev import bench as common
from metalclaim_dev.bench import REPO, ClaimWatch, Controller, Rack, TimingProxy, distribution, rack_of, site_of
from metalclaim_dev.devenv.env import Devenv, tenant_namespace_bindings
from metalclaim_dev.netfixtures import FileServer, MediaServer
from metalclaim_dev.tenancy import tenancy_rights

SCENARIOS = (
    "floor",
    "idle",
    "storm",
    "resync",
    "baseline",
    "storm-old",
    "slots",
    "provision",
    "provision-sweep",
    "churn",
    "tenants",
    "storm-scale",
)
# storm-old's revision: the last one before the chunked bind (72ae34f), whose runs wrote every claim's status at the
# end of the batch and committed its bindings one at a time.
OLD_REV = "72ae34f^"
# What runs without --scenarios: all but the long per-claim cost table (three storms, the largest of 5,000 claims).
DEFAULT_SCENARIOS = tuple(s for s in SCENARIOS if s not in ("storm-scale", "provision-sweep"))

# The targets (issue 24) beside the figures they are for, shown in the table as figures, never as a pass or
# a fail of anything: (scenario, figure) -> (comparison, bound, unit). An "F" bound is in multiples of F.
TARGETS = {
    ("idle", "cold create->Associated p50"): ("<=", 1.1, "F"),
    ("idle", "cold create->Associated p99"): ("<=", 2.0, "F"),
    ("idle", "standby create->Associated p50"): ("<=", 0.1, "F"),
    ("idle", "standby create->Associated p99"): ("<=", 0.2, "F"),
    ("storm", "last create -> all Associated"): ("<=", 10.0, "s"),
    ("storm", "claims bound per second"): (">=", 100.0, "/s"),
    ("storm", "create->Associated p50"): ("<=", 5.0, "s"),
    ("storm", "runs (reconcile.yml)"): ("<=", 10, ""),
    ("storm", "double bindings"): ("<=", 0, ""),
    ("resync", "create->Associated during resync p50"): ("<=", 1.1, "F"),
    ("resync", "create->Associated during resync p99"): ("<=", 2.0, "F"),
    ("resync", "standby create->Associated during resync p50"): ("<=", 1.1, "F"),
    ("resync", "standby create->Associated during resync p99"): ("<=", 2.0, "F"),
    ("baseline", "ours/B throughput"): (">=", 50.0, "x"),
    ("provision", "idle create->Provisioned minus power delay p50"): ("<=", 2.0, "s"),
    ("provision", "wave: minus each host's power delay (max)"): ("<=", 15.0, "s"),
    ("provision", "wave: Redfish requests per host"): ("<=", 8.0, "req"),
    ("churn", "key-runs beyond changes and retries"): ("<=", 0, ""),
}


def git(*argv: str) -> str:
    """git's output in this checkout, stripped; empty when it fails."""
    return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()


# -- progress on stderr -------------------------------------------------------------------------


class Progress:
    """One line on stderr: the scenario, a bar, done/total and the seconds spent; plain lines when not a tty."""

    def __init__(self):
        self.tty = sys.stderr.isatty()
        self.prefix = ""
        self._label, self._total, self._started, self._printed = "", 0, 0.0, 0.0

    def start(self, label: str, total: int) -> None:
        self._label, self._total, self._started, self._printed = label, max(total, 1), time.monotonic(), 0.0
        self.update(0)

    def update(self, done: int) -> None:
        now = time.monotonic()
        width = 30
        filled = min(width, int(width * done / self._total))
        line = (
            f"{self.prefix} {self._label} [{'#' * filled}{'.' * (width - filled)}] "
            f"{done}/{self._total} {now - self._started:5.1f} s"
        )
        if self.tty:
            print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)
        elif now - self._printed >= 10 or done >= self._total:
            print(line, file=sys.stderr, flush=True)
            self._printed = now

    def note(self, message: str) -> None:
        if self.tty:
            print("\r\033[K", end="", file=sys.stderr)
        print(f"{self.prefix} {message}", file=sys.stderr, flush=True)

    def end(self) -> None:
        if self.tty:
            print(file=sys.stderr, flush=True)


# -- the bench ----------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, env: Devenv, work: Path):
        self.args = args
        self.env = env
        self.work = work
        self.admin = common.dynamic(env.kubeconfig("admin"), pool=args.threads + 4)
        self.claims_api = common.kube_client.CustomObjectsApi(common.api_client(env.kubeconfig("admin"), args.threads))
        self.watch = ClaimWatch(env.kubeconfig("admin"))
        self.progress = Progress()
        self.results: dict = {}
        self.rows: list[dict] = []
        self.floor: float | None = None
        self.storm_rack: Rack | None = None
        self.storm_keys: list[tuple] = []
        self.later = contextlib.ExitStack()  # the storm's rack, kept for the resync scenario

    # -- reporting ------------------------------------------------------------------------------

    def row(self, scenario: str, figure: str, value, unit: str = "s", note: str = "") -> None:
        if not isinstance(value, int | float):
            unit = ""  # "incomplete", "-", a ratio as text: no unit to print beside it
        in_f = value / self.floor if unit == "s" and self.floor and isinstance(value, int | float) else None
        target, met = None, None
        if (scenario, figure) in TARGETS:
            comparison, bound, bound_unit = TARGETS[(scenario, figure)]
            target = f"{comparison} {bound:g} {bound_unit}".strip()
            judged = in_f if bound_unit == "F" else value
            if isinstance(judged, int | float):
                met = judged <= bound if comparison == "<=" else judged >= bound
        self.rows.append(
            {
                "scenario": scenario,
                "figure": figure,
                "value": value,
                "unit": unit,
                "F": in_f,
                "target": target,
                "met": met,
                "note": note,
            }
        )

    def rows_for(self, scenario: str, label: str, figures: dict, expected: int, note: str = "") -> None:
        """p50..max of a distribution, each row saying how many samples it has of those `expected`; when any is
        missing (a claim never got there), every row says "incomplete" beside its figure."""
        n = figures.get("n", 0)
        samples = f"{n}/{expected} samples" + ("" if n == expected else ", INCOMPLETE")
        if not n:
            self.row(scenario, f"{label}", "incomplete", unit="", note=samples)
            return
        for q in ("p50", "p90", "p99", "max"):
            self.row(
                scenario,
                f"{label} {q}",
                figures[q],
                note="; ".join(filter(None, [samples, note if q == "p50" else ""])),
            )

    def in_f(self, figures: dict) -> dict:
        """The distribution with each figure also as a multiple of F."""
        if not self.floor or not figures.get("n"):
            return figures
        return {**figures, "in_F": {k: v / self.floor for k, v in figures.items() if k != "n"}}

    # -- helpers ---------------------------------------------------------------------------------

    def controller(self, side: str, infra: list[str], name: str, *extra: str, mode: str | None = None, **kw):
        """A controller side; mode batch|per-event and standby through METALCLAIM_MODE / METALCLAIM_STANDBY."""
        environment = {}
        if mode is not None:
            environment["METALCLAIM_MODE"] = mode
        if kw.pop("standby", False):
            environment["METALCLAIM_STANDBY"] = "true"
        with _environment(environment):
            return Controller(self.env, side, infra, self.work / name, "--log-level", "INFO", *extra, **kw)

    def create_claims(self, bodies: list[dict], threads: int | None = None) -> dict[tuple, float]:
        """Create the claims as fast as the API accepts them; key -> monotonic time just before its request."""
        sent: dict[tuple, float] = {}

        def one(body: dict) -> None:
            key = (body["metadata"]["namespace"], body["metadata"]["name"])
            sent[key] = time.monotonic()
            self.claims_api.create_namespaced_custom_object(
                common.GROUP, common.VERSION, key[0], "hostclaims", body, _request_timeout=60
            )

        with ThreadPoolExecutor(max_workers=threads or self.args.threads) as pool:
            list(pool.map(one, bodies))
        return sent

    def delete_claim(self, key: tuple) -> None:
        with contextlib.suppress(common.ApiException):
            self.claims_api.delete_namespaced_custom_object(common.GROUP, common.VERSION, key[0], "hostclaims", key[1])

    def wait_all(self, condition: str, keys: list[tuple], label: str, timeout: float) -> bool:
        """Wait (on the watch's events) until every key has the condition True, with a progress bar."""
        self.progress.start(label, len(keys))
        deadline = time.monotonic() + timeout
        done = self.watch.count(condition, keys)
        while done < len(keys) and time.monotonic() < deadline:
            time.sleep(0.2)  # the times are the watch's own; this only reads them
            done = self.watch.count(condition, keys)
            self.progress.update(done)
        self.progress.end()
        return done == len(keys)

    def one_at_a_time(
        self,
        label: str,
        controller: Controller,
        bodies: list[dict],
        condition: str,
        gap: float,
        timeout: float = 120,
        quiet=None,
    ) -> list[float]:
        """Create each claim into a quiet system and wait for the condition; then for its run to end, and `gap`.
        quiet(): also true before each create (with standby runs: one is ready, as in a system left alone)."""
        latencies = []
        self.progress.start(label, len(bodies))
        for index, body in enumerate(bodies):
            key = (body["metadata"]["namespace"], body["metadata"]["name"])
            deadline = time.monotonic() + 60
            while quiet is not None and not quiet() and time.monotonic() < deadline:
                time.sleep(0.05)
            runs = controller.runs()
            sent = self.create_claims([body], threads=1)[key]
            if not self.watch.wait(lambda w, key=key: key in w.seen[condition], timeout):
                raise RuntimeError(f"{key} not {condition}=True within {timeout} s:\n{controller.tail()}")
            latencies.append(self.watch.at(condition, key) - sent)
            deadline = time.monotonic() + 30
            while controller.runs() <= runs and time.monotonic() < deadline:  # the run that bound it ends
                time.sleep(0.05)
            time.sleep(gap)
            self.progress.update(index + 1)
        self.progress.end()
        return latencies

    # -- scenarios -----------------------------------------------------------------------------

    def scenario_floor(self, out: dict, stack: contextlib.ExitStack) -> None:
        self.progress.note(
            f"floor F: {self.args.floor_runs} one-task debug playbook runs through the controller's Runner"
        )
        times = common.floor_times(self.work / "floor", self.env.kubeconfig("controller"), self.args.floor_runs)
        self.floor = statistics.median(times)
        out.update({"F": self.floor, "runs": times, "distribution": distribution(times)})
        self.row("floor", "F (median debug playbook run)", self.floor, note=f"{len(times)} runs")

    def _floor_needed(self) -> None:
        if self.floor is None:
            self.progress.note("no floor F yet: measuring it (scenario floor)")
            self.scenario_floor(self.results.setdefault("floor", {"status": "ok"}), contextlib.ExitStack())

    def _idle_series(self, name: str, stack: contextlib.ExitStack, *, standby: bool) -> dict:
        n = self.args.idle_claims
        rack = rack_of(self.admin, n, 1, prefix="bench-idle")
        stack.callback(rack.teardown)
        controller = self.controller("claims", [rack.namespace], f"idle-{name}", mode="batch", standby=standby)
        stack.callback(controller.stop)
        controller.settle(quiet=1.0)
        gap = self.args.idle_gap if self.args.idle_gap is not None else max(1.0, 1.5 * (self.floor or 1.0))
        bodies = [rack.claim_body(rack.tenants[0], f"idle-{index:03d}") for index in range(n)]
        ready = (lambda: controller.metric("metalclaim_standby_ready") >= 1) if standby else None
        latencies = self.one_at_a_time(
            f"idle ({name}) create -> Association=True", controller, bodies, "Association", gap, quiet=ready
        )
        figures = self.in_f(distribution(latencies))
        figures["samples"] = latencies
        figures["gap_seconds"] = gap
        figures["controller_histogram_count"] = controller.metric("metalclaim_claim_association_seconds_count")
        figures["paths"] = controller.metrics_by_label("metalclaim_standby_batches_total", "path")
        figures["runs"] = controller.runs("reconcile")
        controller.stop()
        rack.teardown()
        return figures

    def scenario_idle(self, out: dict, stack: contextlib.ExitStack) -> None:
        self._floor_needed()
        out["cold"] = self._idle_series("cold", stack, standby=False)
        self.rows_for("idle", "cold create->Associated", out["cold"], self.args.idle_claims)
        out["standby"] = self._idle_series("standby", stack, standby=True)
        paths = out["standby"].get("paths") or {}
        self.rows_for(
            "idle",
            "standby create->Associated",
            out["standby"],
            self.args.idle_claims,
            note=f"batches standby/cold: {paths.get('standby', 0):.0f}/{paths.get('cold', 0):.0f}",
        )

    def _storm(
        self, name: str, rack: Rack, keys: list[tuple], controller: Controller, timeout: float, after=None
    ) -> dict:
        """after(): called once the claims are all Associated (or the timeout passed), before the runs are read;
        returns how many more claims (the bench's own, beside the storm) bound meanwhile, whose runs count too."""
        runs_before = controller.runs("reconcile")
        events_before = len(controller.run_events())
        bodies = [rack.claim_body(namespace, claim) for namespace, claim in keys]
        self.progress.note(f"{name}: creating {len(keys)} claims with {self.args.threads} threads")
        sent = self.create_claims(bodies)
        first, last = min(sent.values()), max(sent.values())
        complete = self.wait_all("Association", keys, f"{name}: claims Associated", timeout)
        more = after() if after is not None else 0
        bound = {k: self.watch.at("Association", k) for k in keys if self.watch.at("Association", k) is not None}
        # A run writes its claims' statuses before it ends, and settle() cannot see a run in flight: first the runs
        # that bound them end (the keys of the runs ended since, from the log, cover every claim bound).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(bound) + more > sum(
            e.get("count") or 0 for e in controller.run_events()[events_before:] if e.get("playbook") == "reconcile"
        ):
            time.sleep(0.5)
        controller.settle(quiet=1.0, timeout=60)
        done = max(bound.values()) if bound else time.monotonic()
        latencies = [bound[k] - sent[k] for k in bound]
        runs = [e for e in controller.run_events()[events_before:] if e.get("playbook") == "reconcile"]
        rss, child_rss = controller.rss_mib()
        figures = {
            "claims": len(keys),
            "associated": len(bound),
            "complete": complete,
            "create_seconds": last - first,
            "creates_per_second": len(keys) / (last - first) if last > first else None,
            "last_create_to_all_associated": done - last if complete else None,
            "first_create_to_all_associated": done - first if complete else None,
            # Over the whole storm only: a rate over the claims that happened to bind would flatter a failure.
            "claims_per_second": len(keys) / (done - first) if complete and done > first else None,
            "latency": self.in_f(distribution(latencies)),
            "latency_samples": latencies,
            "runs": controller.runs("reconcile") - runs_before,
            "runs_failed": sum(1 for e in runs if e.get("status") != "successful"),
            "batch_sizes": [e.get("count") for e in runs],
            "run_seconds": [e.get("seconds") for e in runs],
            "slots_used": sorted({e["slot"] for e in runs if e.get("slot") is not None}),
            "bound_over_time": sorted(t - first for t in bound.values()),
            "controller_rss_mib": rss,
            "runner_rss_mib": child_rss,
            **common.double_bindings(self.admin, rack.namespace),
        }
        return figures

    def _storm_rows(self, scenario: str, figures: dict, note: str = "") -> None:
        tail = figures.get("last_create_to_all_associated")
        self.row(
            scenario,
            "last create -> all Associated",
            tail if tail is not None else "incomplete",
            note=f"{figures['associated']}/{figures['claims']} claims{note}",
        )
        rate = figures.get("claims_per_second")
        self.row(
            scenario,
            "claims bound per second",
            round(rate, 1) if rate else "incomplete",
            unit="/s" if rate else "",
            note=f"{figures['associated']}/{figures['claims']} claims{note}",
        )
        self.rows_for(
            scenario, "create->Associated", figures["latency"], figures["claims"], note=note.removeprefix("; ")
        )
        sizes = figures.get("batch_sizes") or []
        self.row(
            scenario,
            "runs (reconcile.yml)",
            figures["runs"],
            unit="",
            note=f"batch sizes {_short(sizes)}"
            + (f"; {figures['runs_failed']} failed" if figures["runs_failed"] else ""),
        )
        self.row(
            scenario,
            "double bindings",
            figures["claims_on_two_hosts"] + figures["claims_disagreeing_with_their_host"],
            unit="",
            note="claims on two hosts + claims whose host disagrees",
        )

    def scenario_storm(self, out: dict, stack: contextlib.ExitStack) -> None:
        self._floor_needed()
        n, spare = self.args.storm_claims, 2 * self.args.resync_probes
        self.progress.note(f"storm: {n + spare} available hosts ({spare} spare for the resync's two probe series)")
        rack = rack_of(
            self.admin, n + spare, self.args.storm_namespaces, prefix="bench-storm", threads=self.args.threads
        )
        if "resync" in self.args.scenarios:
            self.later.callback(rack.teardown, teardown_wait(n + spare))
        else:
            stack.callback(rack.teardown, teardown_wait(n + spare))
        # As config/manager deploys the claim side: its batches are served by a standby run (slots and baseline
        # measure cold runs).
        controller = self.controller("claims", [rack.namespace], "storm", mode="batch", standby=True)
        stack.callback(controller.stop)
        controller.settle(quiet=1.0)
        deadline = time.monotonic() + 60
        while controller.metric("metalclaim_standby_ready") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        keys = [(rack.tenants[index % len(rack.tenants)], f"s{index:04d}") for index in range(n)]
        out.update(self._storm(f"storm ({n})", rack, keys, controller, timeout=120 + 0.5 * n))
        self._storm_rows("storm", out)
        self.row(
            "storm",
            "controller RSS after the storm",
            round(out["controller_rss_mib"], 1),
            unit="MiB",
            note=f"{n} claims, {n + spare} hosts; runner child {out['runner_rss_mib']:.0f} MiB",
        )
        if out["complete"]:
            self.storm_rack, self.storm_keys = rack, keys

    def scenario_baseline(self, out: dict, stack: contextlib.ExitStack) -> None:
        self._floor_needed()
        n, full = self.args.baseline_claims, self.args.storm_claims
        factor = full / n
        rack = rack_of(self.admin, n, self.args.storm_namespaces, prefix="bench-base", threads=self.args.threads)
        stack.callback(rack.teardown)
        controller = self.controller("claims", [rack.namespace], "baseline", mode="per-event")
        stack.callback(controller.stop)
        controller.settle(quiet=1.0)
        keys = [(rack.tenants[index % len(rack.tenants)], f"b{index:04d}") for index in range(n)]
        figures = self._storm(f"baseline per-event ({n})", rack, keys, controller, timeout=120 + 15 * n)
        out.update(figures)
        extrapolated = factor != 1
        label = " (extrapolated)" if extrapolated else ""
        out["extrapolated"] = extrapolated
        out["extrapolation"] = (
            f"measured with {n} claims, times and latencies x {factor:g} for {full} (per-event runs scale linearly)"
            if extrapolated
            else "measured at the storm's size"
        )
        tail = figures.get("last_create_to_all_associated")
        whole = figures.get("first_create_to_all_associated")
        out["at_storm_size"] = {
            "claims": full,
            "last_create_to_all_associated": tail * factor if tail is not None else None,
            "first_create_to_all_associated": whole * factor if whole is not None else None,
            "claims_per_second": figures.get("claims_per_second"),
            "latency_p50": figures["latency"].get("p50", 0) * factor if figures["latency"].get("n") else None,
            "runs": figures["runs"] * factor,
        }
        scaled = out["at_storm_size"]
        self.row(
            "baseline",
            f"measured: {n} claims, all Associated after last create",
            tail or "incomplete",
            note=f"{figures['associated']}/{n}; {figures['runs']} runs",
        )
        self.row(
            "baseline",
            f"last create -> all Associated{label}",
            scaled["last_create_to_all_associated"] or "-",
            note=f"{full} claims",
        )
        measured = f"measured at {n} claims, {figures['associated']}/{n} bound"
        rate = scaled["claims_per_second"]
        self.row(
            "baseline",
            "claims bound per second",
            round(rate, 2) if rate else "incomplete",
            unit="/s" if rate else "",
            note=measured,
        )
        if scaled["latency_p50"] is not None:
            self.row("baseline", f"create->Associated p50{label}", scaled["latency_p50"], note=measured)
        self.row("baseline", f"runs{label}", round(scaled["runs"]), unit="")
        self.row(
            "baseline",
            "double bindings",
            figures["claims_on_two_hosts"] + figures["claims_disagreeing_with_their_host"],
            unit="",
        )
        out["ours_over_baseline"] = ours_over_baseline(self.results.get("storm") or {}, figures, scaled)
        ratio = out["ours_over_baseline"]
        if ratio is None:
            self.row("baseline", "ours/B throughput", "incomplete", note="a ratio needs both sides complete")
            return
        self.row("baseline", "ours/B throughput", round(ratio["throughput"], 1), unit="x", note=label.strip())
        if ratio["latency_p50"] is not None:
            self.row("baseline", "ours/B p50 latency", round(ratio["latency_p50"], 3), unit="x", note=label.strip())

    def _fresh_storm(self, label: str, prefix: str, n: int, name: str, *extra: str, probes: int = 0) -> dict:
        """_storm on a rack of its own (n hosts, and `probes` more) under a controller of its own started with
        `extra`; with probes, up to that many idle claims created one at a time while the storm's claims are not
        all Associated (each waits for its own before the next). Both gone when it returns."""
        with contextlib.ExitStack() as stack:
            self.progress.note(f"{label}: {n + probes} available hosts in {self.args.storm_namespaces} namespaces")
            rack = rack_of(self.admin, n + probes, self.args.storm_namespaces, prefix=prefix, threads=self.args.threads)
            stack.callback(rack.teardown, teardown_wait(n + probes))
            controller = self.controller("claims", [rack.namespace], name, *extra, mode="batch")
            stack.callback(controller.stop)
            controller.settle(quiet=1.0)
            keys = [(rack.tenants[index % len(rack.tenants)], f"s{index:04d}") for index in range(n)]
            if not probes:
                return self._storm(label, rack, keys, controller, timeout=120 + 0.5 * n)
            records: list[tuple] = []
            errors: list[str] = []
            stop, abort = threading.Event(), threading.Event()
            thread = threading.Thread(
                target=self._probes,
                args=(rack, keys, probes, 120 + 0.5 * n, records, errors, stop, abort),
                name="probes",
                daemon=True,
            )
            thread.start()

            def probes_over() -> int:
                stop.set()
                thread.join()
                return sum(1 for _key, _sent, bound in records if bound is not None)

            try:
                figures = self._storm(label, rack, keys, controller, timeout=120 + 0.5 * n, after=probes_over)
            except BaseException:
                abort.set()
                raise
            finally:
                stop.set()
                thread.join()
            latencies = [bound - sent for _key, sent, bound in records if bound is not None]
            figures["probes"] = {
                **self.in_f(distribution(latencies)),
                "created": len(records),
                "samples": latencies,
                "errors": errors,
            }
            return figures

    def _probes(self, rack: Rack, storm: list[tuple], limit: int, timeout: float, records, errors, stop, abort):
        """The probe thread: from the storm's first claim seen on, one claim at a time (created, then waited for
        until Associated, `timeout` at most) while the storm is not all Associated and `stop` is not set; records
        (key, sent, bound or None). `abort` ends the wait for the one in flight."""
        try:
            self.watch.wait(lambda w: stop.is_set() or any(k in w.present for k in storm), 60)
            for index in range(limit):
                if stop.is_set() or self.watch.count("Association", storm) == len(storm):
                    return
                key = (rack.tenants[0], f"p{index:03d}")
                sent = self.create_claims([rack.claim_body(*key)], threads=1)[key]
                self.watch.wait(lambda w, key=key: key in w.seen["Association"] or abort.is_set(), timeout)
                records.append((key, sent, self.watch.at("Association", key)))
        except Exception as error:  # the storm goes on; the probes' rows say how many they have
            errors.append(f"{type(error).__name__}: {error}")

    def old_checkout(self) -> tuple[Path, str]:
        """--old-rev's tree, exported (git archive) into the work directory once: (its root, its commit)."""
        rev = self.args.old_rev
        commit = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        if not commit:
            raise RuntimeError(f"--old-rev {rev} is not a commit of this clone (a shallow clone lacks it)")
        root = self.work / f"old-{commit[:10]}"
        if not root.exists():
            root.mkdir()
            archive = subprocess.Popen(["git", "-C", str(REPO), "archive", commit], stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", str(root)], stdin=archive.stdout, check=True)
            if archive.wait():
                raise RuntimeError(f"git archive {commit} failed")
        return root, commit

    def scenario_storm_old(self, out: dict, stack: contextlib.ExitStack) -> None:
        """The storm at --old-rev (its controller and collection, this devenv): the path it replaced, for the
        bound-over-time plot."""
        self._floor_needed()
        root, commit = self.old_checkout()
        n = self.args.storm_claims
        self.progress.note(f"storm-old: the storm at {self.args.old_rev} ({commit[:10]}), {n} available hosts")
        rack = rack_of(self.admin, n, self.args.storm_namespaces, prefix="bench-old", threads=self.args.threads)
        stack.callback(rack.teardown, teardown_wait(n))
        controller = self.controller("claims", [rack.namespace], "storm-old", mode="batch", install=root)
        stack.callback(controller.stop)
        controller.settle(quiet=1.0)
        keys = [(rack.tenants[index % len(rack.tenants)], f"o{index:04d}") for index in range(n)]
        out.update(self._storm(f"storm-old ({n})", rack, keys, controller, timeout=120 + 0.5 * n))
        out["revision"] = commit
        self._storm_rows("storm-old", out, note=f"; {self.args.old_rev} = {commit[:10]}")

    def scenario_slots(self, out: dict, stack: contextlib.ExitStack) -> None:
        """The same storm under --runner-slots 1, 2 and N, each its own rack and controller, probes during it."""
        self._floor_needed()
        n, probes = self.args.slots_claims, self.args.slots_probes
        counts = slot_counts(os.cpu_count())
        default = slots_for(cpu_limit())
        out.update({"claims": n, "probes_at_most": probes, "slot_counts": counts, "default_slots_here": default})
        by_slots: dict[int, dict] = {}
        out["by_slots"] = by_slots
        for slots in counts:
            try:
                by_slots[slots] = self._fresh_storm(
                    f"slots {slots} ({n})", "bench-slots", n, f"slots-{slots}", "--runner-slots", str(slots),
                    probes=probes,
                )  # fmt: skip
            except Exception as error:  # the other slot counts still run
                by_slots[slots] = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
                self.progress.note(f"slots {slots}: failed: {type(error).__name__}: {error}")
        self._slots_rows(out, n, default)

    def _variant_rows(self, scenario: str, by_variant: dict, label):
        """(the variants that ran, each): a FAILED row per variant that did not; each(figure, value, unit, note) then
        prints a row per variant that ran, value(variant, figures) beside note(variant, figures)."""
        done = {v: f for v, f in by_variant.items() if f.get("status") != "failed"}
        for variant, figures in by_variant.items():
            if variant not in done:
                self.row(scenario, f"{label(variant)}: FAILED", figures["error"].splitlines()[0][:90], unit="")

        def each(figure: str, value, unit: str = "s", note=lambda v, f: "") -> None:
            for variant, figures in done.items():
                shown = value(variant, figures)
                self.row(
                    scenario,
                    f"{label(variant)}: {figure}",
                    shown if shown is not None else "incomplete",
                    unit=unit,
                    note="; ".join(filter(None, [_claims_note(figures), note(variant, figures)])),
                )

        return done, each

    def _slots_rows(self, out: dict, n: int, default: int) -> None:
        """A row per slot count and figure (the slot counts side by side), then the note on the default."""
        done, each = self._variant_rows("slots", out["by_slots"], lambda slots: f"runner-slots {slots}")

        each(
            "last create -> all Associated",
            lambda k, f: f.get("last_create_to_all_associated"),
            note=lambda k, f: f"slots used {f['slots_used']}",
        )
        each("claims bound per second", lambda k, f: _rounded(f.get("claims_per_second"), 1), unit="/s")
        for slots, figures in done.items():
            probes = figures["probes"]
            if not probes["created"]:
                self.row(
                    "slots",
                    f"runner-slots {slots}: probe create->Associated",
                    "none",
                    unit="",
                    note="0 samples: the storm was over before a probe" + "".join(f"; {e}" for e in probes["errors"]),
                )
                continue
            self.rows_for(
                "slots",
                f"runner-slots {slots}: probe create->Associated",
                probes,
                probes["created"],
                note=f"probes during a {n}-claim storm" + (f"; {probes['errors'][0]}" if probes["errors"] else ""),
            )
        each(
            "runs (reconcile.yml)",
            lambda k, f: f["runs"],
            unit="",
            note=lambda k, f: (
                f"probes' runs included; batch sizes {_short(f['batch_sizes'])}"
                + (f"; {f['runs_failed']} failed" if f["runs_failed"] else "")
            ),
        )
        _after_storm_rows(each, "after, all slots")
        measured = {
            k: (
                f.get("last_create_to_all_associated") if f.get("complete") else None,
                f["probes"].get("p99") if f["probes"].get("n") == f["probes"]["created"] else None,
            )
            for k, f in done.items()
        }
        measured.update({k: (None, None) for k in out["by_slots"] if k not in done})
        suggested, why = suggest_slots(measured, default)
        out["suggestion"] = {"slots": suggested, "why": why}
        self.row(
            "slots",
            "default the figures suggest",
            suggested if suggested is not None else "none",
            unit="",
            note=f"{why}; one run's figures: the controller's default (--runner-slots 0: {default} here) stays",
        )

    def scenario_storm_scale(self, out: dict, stack: contextlib.ExitStack) -> None:
        """The storm at each of --scale-sizes, each its own rack and controller: the per-claim cost table."""
        self._floor_needed()
        by_size: dict[int, dict] = {}
        out["by_size"] = by_size
        for n in self.args.scale_sizes:
            try:
                by_size[n] = self._fresh_storm(f"storm-scale ({n})", "bench-scale", n, f"scale-{n}")
            except Exception as error:  # the other sizes still run
                by_size[n] = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
                self.progress.note(f"storm-scale {n}: failed: {type(error).__name__}: {error}")
        done, each = self._variant_rows("storm-scale", by_size, lambda n: f"{n} claims")
        costs = per_claim_costs(
            {
                n: by_size[n].get("first_create_to_all_associated") if n in done and done[n]["complete"] else None
                for n in by_size
            }
        )
        out["per_claim_cost"] = costs

        each(
            "first create -> all Associated",
            lambda n, f: costs[n]["seconds"],
            note=lambda n, f: (
                f"last create -> all Associated {_seconds(f.get('last_create_to_all_associated'))}, "
                f"creates {_rounded(f.get('creates_per_second'), 0)}/s"
            ),
        )
        each("claims bound per second", lambda n, f: _rounded(f.get("claims_per_second"), 1), unit="/s")
        each(
            "runs (reconcile.yml)",
            lambda n, f: f["runs"],
            unit="",
            note=lambda n, f: (
                f"batch sizes {_short(f['batch_sizes'])}" + (f"; {f['runs_failed']} failed" if f["runs_failed"] else "")
            ),
        )
        _after_storm_rows(each, "after")
        each(
            "per-claim cost",
            lambda n, f: _rounded(costs[n]["ms_per_claim"], 2),
            unit="ms",
            note=lambda n, f: "first create -> all Associated / claims",
        )
        each(
            "per-claim cost growth",
            lambda n, f: _rounded(costs[n]["growth"], 2),
            unit="x",
            note=lambda n, f: f"over the {costs[n]['growth_over']}-claim storm's" if costs[n]["growth_over"] else "",
        )

    def scenario_resync(self, out: dict, stack: contextlib.ExitStack) -> None:
        self._floor_needed()
        rack, keys = self.storm_rack, self.storm_keys
        if rack is None:
            n = self.args.storm_claims
            self.progress.note(f"resync: no storm to reuse; {n} claims bound first")
            probes = 2 * self.args.resync_probes  # a series with cold runs, one with standby runs
            rack = rack_of(self.admin, n + probes, 1, prefix="bench-resync", threads=self.args.threads)
            stack.callback(rack.teardown)
            keys = [(rack.tenants[0], f"s{index:04d}") for index in range(n)]
            self.create_claims([rack.claim_body(*key) for key in keys])
        else:
            self.storm_rack = None
            stack.callback(self.later.close)  # the storm's rack goes with this scenario
        out["bound_claims"] = len(keys)
        out["resync_period"] = self.args.resync_period
        # Cold runs, then standby runs as config/manager deploys the claim side: the same claims, fresh probes.
        for standby in (False, True):
            series = self._resync_probes(rack, keys, standby)
            prefix = "standby " if standby else ""
            if standby:
                out["standby"] = series
            else:
                out.update(series)
            resyncs = series["resyncs_during_probes"]
            note = f"{len(series['samples'])} probes, {resyncs:.0f} resyncs of {len(keys)} claims"
            label = f"{prefix}create->Associated during resync"
            self.rows_for("resync", label, series["latency"], self.args.resync_probes, note=note)
            runs = zip(series["run_seconds"], series["batch_sizes"], strict=True)
            full = [(seconds, count) for seconds, count in runs if count > 1]  # a probe's run is of one key
            if full:
                self.row(
                    "resync",
                    f"{prefix}longest resync run",
                    max(seconds for seconds, _count in full),
                    note=f"{len(full)} resync runs of {_short([count for _seconds, count in full])} keys",
                )
        out.update(common.double_bindings(self.admin, rack.namespace))

    def _resync_probes(self, rack, keys: list, standby: bool) -> dict:
        """A claims controller resyncing every --resync-period, the probes created one at a time after its first
        resync: how long a live claim waits behind them."""
        period = self.args.resync_period
        name = "resync-standby" if standby else "resync"
        controller = self.controller(
            "claims", [rack.namespace], name, "--resync-period", str(period), mode="batch", standby=standby
        )
        try:
            started = time.monotonic()
            if not self.wait_all("Association", keys, f"{name}: {len(keys)} claims bound", 120 + 0.5 * len(keys)):
                raise RuntimeError("the claims to resync did not all bind")
            self.progress.note(f"{name}: waiting for the first periodic resync (--resync-period {period:g} s)")
            resyncs = controller.metric("metalclaim_resyncs_total")
            deadline = started + 3 * period + 60
            while controller.metric("metalclaim_resyncs_total") <= resyncs and time.monotonic() < deadline:
                time.sleep(0.1)
            resync_at = time.monotonic()
            events_before = len(controller.run_events())
            first = "q" if standby else "r"
            probes = range(self.args.resync_probes)
            bodies = [rack.claim_body(rack.tenants[0], f"{first}{index:03d}") for index in probes]
            label = f"{name}: probes create -> Associated"
            latencies = self.one_at_a_time(label, controller, bodies, "Association", 0.0)
            runs = [e for e in controller.run_events()[events_before:] if e.get("playbook") == "reconcile"]
            return {
                "resyncs_during_probes": controller.metric("metalclaim_resyncs_total") - resyncs,
                "probes_seconds": time.monotonic() - resync_at,
                # The resync's runs are those of more keys than a probe's (--resync-batch-max-size cuts them).
                "run_seconds": [e.get("seconds") for e in runs],
                "batch_sizes": [e.get("count") or 0 for e in runs],
                "latency": self.in_f(distribution(latencies)),
                "samples": latencies,
                "controller_rss_mib": controller.rss_mib()[0],
            }
        finally:
            controller.stop()

    def scenario_provision(self, out: dict, stack: contextlib.ExitStack) -> None:
        self._provision(out, stack, "provision", self.args.provision_samples, self.args.provision_max_concurrent)

    def scenario_provision_sweep(self, out: dict, stack: contextlib.ExitStack) -> None:
        """The wave at each --provision-sweep concurrency (Metal3's default of 20 and the wave's size, by default),
        each on fleet systems of its own, no idle samples: how the provisioner's pace follows the hosts it may
        provision at once."""
        for index, limit in enumerate(self.args.provision_sweep):
            limit = limit or self.args.wave
            with contextlib.ExitStack() as own:
                part = out.setdefault(f"max_{limit}", {})
                self._provision(part, own, "provision-sweep", 0, limit, first=index * self.args.wave)

    def _provision(self, out: dict, stack, label: str, samples: int, max_concurrent: int, first: int = 0) -> None:
        """Idle samples (`samples`, one at a time), then the wave, on fleet systems from `first` on, the provisioner
        at `max_concurrent` (0: its default); rows under `label` (a sweep's figures say their concurrency)."""
        self._floor_needed()
        wave = self.args.wave
        prefix = f"max {max_concurrent}: " if label != "provision" else ""
        fleet = self.env.state["redfish"]
        if len(fleet["systems"]) < first + samples + wave:
            raise RuntimeError(f"the fleet has {len(fleet['systems'])} systems; {first} + {samples} + {wave} wanted")
        upstream = fleet["systems"][0]["address"].split("://", 1)[1].split("/", 1)[0]
        state_db = self.env.directory / "redfish" / "redfish-state" / "fakedriver.sqlite"
        proxy = TimingProxy(f"http://{upstream}", state_db)
        stack.callback(proxy.close)
        served = tempfile.TemporaryDirectory()
        stack.callback(served.cleanup)
        files = FileServer(Path(served.name))
        stack.callback(files.close)
        iso = files.add("live.iso", b"metalclaim bench live image\n" * 64)
        tag = os.urandom(3).hex()
        site = site_of(self.env, self.admin, samples + wave, proxy, labels={"bench": tag}, first=first)
        stack.callback(site.teardown)
        tenant = f"bench-prov-t-{tag}"
        common.create_namespace(self.admin, tenant)
        stack.callback(common.delete_namespaces, self.admin, [tenant])
        for binding in tenant_namespace_bindings(tenant):
            common.api(self.admin, "RoleBinding", "rbac.authorization.k8s.io/v1").create(body=binding)
        common.api(self.admin, "HostDeployPolicy").create(
            body={
                "apiVersion": common.METAL3,
                "kind": "HostDeployPolicy",
                "metadata": {"name": "p", "namespace": site.namespace},
                "spec": {"hostclaimNamespaces": {"names": [tenant]}},
            }
        )
        extra = []
        if max_concurrent:
            extra += ["--provision-max-concurrent", str(max_concurrent)]
        writer = None
        if self.args.provision_image == "disk":
            # Disk images: the deploy ISO (never booted: the emulator runs nothing), the media server, and a stand-in
            # writer that calls back --writer-seconds after each config drive is published.
            media = stack.enter_context(MediaServer(Path(served.name) / "media"))
            deploy_iso = files.add("writer.iso", b"metalclaim bench deploy iso\n" * 64)
            extra += ["--deploy-iso-url", deploy_iso, "--media-dir", media.dir, "--media-url", media.url]
            writer = common.FakeWriter(self.admin, site.namespace, media.dir, media.url, self.args.writer_seconds)
            writer.start()
            stack.callback(writer.close)
        # Both sides as config/manager deploys them: standby runs on the claim side and on the provisioner.
        provisioner = self.controller(
            "provisioner", [site.namespace], f"{label}-{max_concurrent}-provisioner", *extra, standby=True
        )
        stack.callback(provisioner.stop)
        size = samples + wave
        self.progress.start(f"provision: {size} hosts registered and inspected", size)
        deadline = time.monotonic() + 120 + 3 * size
        while (available := site.states().get("available", 0)) < size and time.monotonic() < deadline:
            self.progress.update(available)
            time.sleep(1)
        self.progress.update(available)
        self.progress.end()
        if available < size:
            raise RuntimeError(f"only {available}/{size} hosts became available: {site.states()}")
        claims = self.controller(
            "claims", [site.namespace], f"{label}-{max_concurrent}-claims", mode="batch", standby=True
        )
        stack.callback(claims.stop)
        claims.settle(quiet=1.0)
        provisioner.settle(quiet=1.0)
        image = {"url": iso, "format": "live-iso"}
        if writer is not None:  # the stand-in writer never fetches it: any checksum does
            image = {"url": files.add("disk.qcow2", b"qcow2"), "format": "qcow2", "checksum": "0" * 64}
        spec = {"online": True, "image": image, "hostSelector": {"matchLabels": {"bench": tag}}}

        def body(name: str) -> dict:
            return {
                "apiVersion": common.METAL3,
                "kind": "HostClaim",
                "metadata": {"name": name, "namespace": tenant},
                "spec": spec,
            }

        def hosts_of(names: list[str]) -> dict[str, str | None]:
            """claim name -> the host it was provisioned on (its HardwareData's)."""
            found = {}
            for item in common.api(self.admin, "HostClaim").get(namespace=tenant).to_dict()["items"]:
                if item["metadata"]["name"] in names:
                    found[item["metadata"]["name"]] = ((item.get("status") or {}).get("hardwareData") or {}).get("name")
            return found

        def systems_of(names: list[str]) -> dict[str, str | None]:
            """claim name -> the Redfish system of the host it was provisioned on."""
            return {name: site.uuids.get(host) for name, host in hosts_of(names).items()}

        def after_callback(names: list[str]) -> list[float]:
            """Each claim's writer callback -> Provisioned (disk images): how long the provisioner took to notice."""
            if writer is None:
                return []
            lags = []
            for name, host in hosts_of(names).items():
                provisioned = self.watch.at("Provisioned", (tenant, name))
                if provisioned is not None and host in writer.called_back:
                    lags.append(provisioned - writer.called_back[host])
            return lags

        # Idle create -> Provisioned, a few samples, one at a time.
        if samples:
            proxy.reset_timing()
            bodies = [body(f"idle-{index:02d}") for index in range(samples)]
            idle = self.one_at_a_time("provision: idle create -> Provisioned", claims, bodies, "Provisioned", 1.0, 180)
            idle_names = [b["metadata"]["name"] for b in bodies]
            idle_systems = systems_of(idle_names)
            idle_delays = proxy.power_delays()
            # Each sample minus its own host's power delay (paired by host, never by order); a negative stays
            # negative: it would say the accounting is wrong, which a max(0, ...) would hide.
            accounted = [
                latency - idle_delays[idle_systems[name]]
                for name, latency in zip(idle_names, idle, strict=True)
                if idle_systems.get(name) in idle_delays
            ]
            out["idle"] = {**self.in_f(distribution(idle)), "samples": idle, "power_delays": idle_delays}
            self.rows_for(label, "idle create->Provisioned", out["idle"], samples)
            out["idle"]["minus_power_delay"] = distribution(accounted)
            if accounted:
                delays = sorted(idle_delays[idle_systems[n]] for n in idle_names if idle_systems.get(n) in idle_delays)
                self.row(
                    label,
                    prefix + "idle create->Provisioned minus power delay p50",
                    out["idle"]["minus_power_delay"]["p50"],
                    note=f"{len(accounted)}/{samples} samples paired with their host's delay; "
                    f"BMC power delay p50 {delays[len(delays) // 2]:.1f} s",
                )
            if writer is not None:
                out["idle"]["callback_to_provisioned"] = distribution(after_callback(idle_names))
                self.row(
                    label,
                    prefix + "idle writer's callback -> Provisioned p50",
                    out["idle"]["callback_to_provisioned"].get("p50", "none"),
                    note=f"disk image, the stand-in writer calling back {self.args.writer_seconds:g} s after its "
                    "config drive is published",
                )
        provisioner.settle(quiet=2.0, timeout=60)
        # The wave.
        proxy.reset_counts()
        proxy.reset_timing()
        prov_runs, prov_events = provisioner.runs(), len(provisioner.run_events())
        keys = [(tenant, f"wave-{index:03d}") for index in range(wave)]
        self.progress.note(f"provision: {wave} claims ({self.args.provision_image}, online: true)")
        sent = self.create_claims([body(name) for _ns, name in keys])
        first, last = min(sent.values()), max(sent.values())
        complete = self.wait_all("Provisioned", keys, "provision: wave Provisioned", 300 + 3 * wave)
        done = {k: self.watch.at("Provisioned", k) for k in keys if self.watch.at("Provisioned", k) is not None}
        host_of = {(tenant, name): system for name, system in systems_of([name for _ns, name in keys]).items()}
        delays = proxy.power_delays()
        accounted = [done[k] - sent[k] - delays[host_of[k]] for k in done if host_of.get(k) in delays]
        per_system = proxy.requests_per_system()
        wave_systems = [host_of[k] for k in keys if host_of.get(k)]
        per_host = [per_system.get(system, 0) for system in wave_systems]
        events = provisioner.run_events()[prov_events:]
        states = site.states()
        errors = sum(
            1
            for h in common.api(self.admin, "BareMetalHost").get(namespace=site.namespace).to_dict()["items"]
            if (h.get("status") or {}).get("errorType")
        )
        out["wave"] = {
            "claims": wave,
            "provisioned": len(done),
            "complete": complete,
            "first_create_to_all_provisioned": max(done.values()) - first if done else None,
            "last_create_to_all_provisioned": max(done.values()) - last if complete else None,
            "latency": self.in_f(distribution([done[k] - sent[k] for k in done])),
            "power_delay": distribution(list(delays.values())),
            "power_delay_samples": list(delays.values()),
            "power_delay_source": "the emulator's schedule (its state database)"
            if proxy.power_on_applied
            else "power-on asked -> first read showing On (includes the provisioner's polling)",
            "poll_lag": distribution(list(proxy.poll_lags().values())),
            "redfish_requests_not_per_system": proxy.requests_per_system().get("(fleet-wide)", 0),
            "minus_power_delay": distribution(accounted),
            "accounting": "per host: create -> Provisioned minus that host's power delay (from the POST of "
            "ComputerSystem.Reset On to the emulator applying it, read from its state database; only when that "
            "cannot be read, to the first GET answering PowerState On, which includes the provisioner's polling: "
            "see power_delay_source); the wave's accounted time is the largest",
            "redfish_requests_per_host": distribution(per_host) if per_host else {"n": 0},
            "redfish_requests_total": proxy.total,
            "redfish_requests_by_kind_per_host": {
                k: v / max(1, len(wave_systems)) for k, v in proxy.requests_by_kind().items()
            },
            "provisioned_over_time": sorted(t - first for t in done.values()),
            "minus_power_delay_over_time": sorted(
                done[k] - first - delays.get(host_of.get(k), 0.0) for k in done if host_of.get(k) in delays
            ),
            "provisioner_runs": provisioner.runs() - prov_runs,
            "provisioner_runs_failed": sum(1 for e in events if e.get("status") != "successful"),
            "provisioner_batch_sizes": [e.get("count") for e in events],
            "hosts_in_error": errors,
            "image": self.args.provision_image,
            "provision_max_concurrent": max_concurrent or "the controller's default",
            "callback_to_provisioned": distribution(after_callback([name for _ns, name in keys])),
            "writer_failures": list(writer.failures) if writer is not None else [],
            "host_states": states,
            **common.double_bindings(self.admin, site.namespace),
        }
        w = out["wave"]
        self.row(
            label,
            prefix + f"wave: last create -> all {wave} Provisioned",
            w["last_create_to_all_provisioned"] or "incomplete",
            note=f"{len(done)}/{wave}",
        )
        if w["minus_power_delay"].get("n"):
            self.row(
                label,
                prefix + "wave: minus each host's power delay (max)",
                w["minus_power_delay"]["max"] if complete else "incomplete",
                note=f"BMC power delay p50 {w['power_delay'].get('p50', 0):.1f} s, "
                f"max {w['power_delay'].get('max', 0):.1f} s",
            )
        if w["poll_lag"].get("n"):
            self.row(
                label,
                prefix + "wave: power applied -> provisioner saw it (max)",
                w["poll_lag"]["max"],
                note=f"p50 {w['poll_lag']['p50']:.1f} s (the provisioner's polling, not taken out)",
            )
        if per_host:
            self.row(
                label,
                prefix + "wave: Redfish requests per host",
                round(w["redfish_requests_per_host"]["mean"], 1),
                unit="req",
                note=f"min {min(per_host)}, max {max(per_host)} per system, incl. power polls; + "
                f"{w['redfish_requests_not_per_system'] / len(per_host):.1f} to the service root and sessions",
            )
        if writer is not None and w["callback_to_provisioned"].get("n"):
            self.row(
                label,
                prefix + "wave: writer's callback -> Provisioned (max)",
                w["callback_to_provisioned"]["max"],
                note=f"p50 {w['callback_to_provisioned']['p50']:.1f} s, disk image",
            )
        self.row(
            label,
            prefix + "wave: failures",
            len(keys) - len(done) + errors + w["provisioner_runs_failed"],
            unit="",
            note=f"not provisioned + hosts in error + failed runs; {w['provisioner_runs']:.0f} provisioner runs",
        )

    def scenario_churn(self, out: dict, stack: contextlib.ExitStack) -> None:
        self._floor_needed()
        hosts, seconds, rate = self.args.churn_hosts, self.args.churn_seconds, self.args.churn_rate
        window = max(1, hosts // 2)
        rack = rack_of(self.admin, hosts, 1, prefix="bench-churn", threads=self.args.threads)
        stack.callback(rack.teardown)
        controller = self.controller("claims", [rack.namespace], "churn", mode="batch")
        stack.callback(controller.stop)
        controller.settle(quiet=1.0)
        before = {
            "runs": controller.runs("reconcile"),
            "keys": controller.metric("metalclaim_batch_size_sum", playbook="reconcile"),
            "dropped": controller.metric("metalclaim_events_dropped_total"),
            "results": controller.metrics_by_label("controller_runtime_reconcile_total", "result"),
        }
        samples: list[dict] = []
        stop = threading.Event()
        started = time.monotonic()

        def sample() -> None:
            while not stop.is_set():
                rss, child = controller.rss_mib()
                size, files = common.tree_bytes(controller.private)
                samples.append(
                    {
                        "t": time.monotonic() - started,
                        "rss_mib": rss,
                        "runner_rss_mib": child,
                        "apiserver_connections": controller.connections(),
                        "artifacts_mib": size / 2**20,
                        "artifact_files": files,
                    }
                )
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        live: list[tuple] = []
        created = deleted = 0
        self.progress.start(f"churn: {rate:g} claims/s for {seconds:g} s ({window} live at most)", int(seconds))
        while (elapsed := time.monotonic() - started) < seconds:
            key = (rack.tenants[0], f"c{created:05d}")
            self.create_claims([rack.claim_body(*key)], threads=1)
            live.append(key)
            created += 1
            if len(live) > window:
                self.delete_claim(live.pop(0))
                deleted += 1
            self.progress.update(int(elapsed))
            time.sleep(max(0.0, started + created / rate - time.monotonic()))
        self.progress.end()
        for key in live:
            self.delete_claim(key)
            deleted += 1
        self.progress.note(f"churn: {created} created, {deleted} deleted; waiting for every claim to go")
        gone = self.watch.wait(lambda w: not any(k[0] == rack.tenants[0] for k in w.present), 60 + 2 * window)
        drained = time.monotonic() - started - seconds
        controller.settle(quiet=2.0, timeout=60)
        runs_settled = controller.runs("reconcile")
        time.sleep(self.args.quiet_tail)
        quiet_runs = controller.runs("reconcile") - runs_settled
        stop.set()
        sampler.join(5)
        stuck_claims = sorted(f"{k[0]}/{k[1]}" for k in self.watch.present if k[0] == rack.tenants[0])
        stuck_hosts = [
            h["metadata"]["name"]
            for h in common.api(self.admin, "BareMetalHost").get(namespace=rack.namespace).to_dict()["items"]
            if (h.get("spec") or {}).get("consumerRef")
        ]
        results = controller.metrics_by_label("controller_runtime_reconcile_total", "result")
        again = {k: results.get(k, 0) - before["results"].get(k, 0) for k in results}
        key_runs = controller.metric("metalclaim_batch_size_sum", playbook="reconcile") - before["keys"]
        changes = created + deleted  # each claim created once and deleted once by the bench
        rss = [s["rss_mib"] for s in samples]
        third = max(1, len(rss) // 3)
        out.update(
            {
                "seconds": seconds,
                "rate": rate,
                "hosts": hosts,
                "created": created,
                "deleted": deleted,
                "all_gone": gone,
                "drain_seconds": drained,
                "stuck_claims": stuck_claims,
                "hosts_still_consumed": stuck_hosts,
                "runs": controller.runs("reconcile") - before["runs"],
                "key_runs": key_runs,
                "bench_changes": changes,
                "outcomes": again,
                "key_runs_beyond_changes": max(
                    0.0, key_runs - changes - again.get("retry", 0) - again.get("requeue", 0)
                ),
                "events_dropped": controller.metric("metalclaim_events_dropped_total") - before["dropped"],
                "quiet_tail_seconds": self.args.quiet_tail,
                "runs_in_quiet_tail": quiet_runs,
                "rss_first_third_mib": sum(rss[:third]) / third if rss else None,
                "rss_last_third_mib": sum(rss[-third:]) / third if rss else None,
                "samples": samples,
            }
        )
        if rss:
            self.row(
                "churn",
                "controller RSS first/last third",
                round(out["rss_first_third_mib"], 1),
                unit="MiB",
                note=f"-> {out['rss_last_third_mib']:.1f} MiB (max {max(rss):.1f})",
            )
            conns = [s["apiserver_connections"] for s in samples]
            self.row(
                "churn",
                "apiserver connections (watches+pool)",
                max(conns),
                unit="",
                note=f"min {min(conns)}, last {conns[-1]}",
            )
            self.row(
                "churn",
                "artifacts on disk (max)",
                round(max(s["artifacts_mib"] for s in samples), 2),
                unit="MiB",
                note=f"last {samples[-1]['artifacts_mib']:.2f} MiB, {samples[-1]['artifact_files']} files",
            )
        self.row(
            "churn",
            "stuck claims / hosts still consumed",
            f"{len(stuck_claims)}/{len(stuck_hosts)}",
            unit="",
            note=f"{created} created and deleted in {seconds:g} s",
        )
        self.row(
            "churn",
            "runs / key-runs / bench changes",
            f"{out['runs']:.0f}/{key_runs:.0f}/{changes}",
            unit="",
            note=f"own-write events dropped {out['events_dropped']:.0f}",
        )
        self.row(
            "churn",
            "key-runs beyond changes and retries",
            round(out["key_runs_beyond_changes"]),
            unit="",
            note=f"{again.get('wait', 0):.0f} waits (keys an event may wake) over {seconds:g} s",
        )
        self.row(
            "churn",
            "runs from own writes",
            f"{quiet_runs:.0f} in quiet tail",
            unit="",
            note=f"key-runs beyond changes+retries {out['key_runs_beyond_changes']:.0f} "
            f"({again.get('wait', 0):.0f} waits: keys an event may wake)",
        )

    def scenario_tenants(self, out: dict, stack: contextlib.ExitStack) -> None:
        tag = datetime.datetime.now().strftime("%H%M%S")
        pool = f"bench-tenants-pool-{tag}"
        common.create_namespace(self.admin, pool)
        stack.callback(common.delete_namespaces, self.admin, [pool])
        stack.enter_context(tenancy_rights({"admin": self.admin}))  # the controller identity as a tenants side
        tenants_api = common.api(self.admin, "Tenant", common.TENANCY)
        names: list[str] = []
        stack.callback(common.delete_tenants, self.admin, names)
        controller = self.controller(
            "tenants", [pool], "tenants", "--tenant-claim-side", "user:metalclaim-controller", identity="controller"
        )
        stack.callback(controller.stop)
        controller.settle(quiet=1.0)

        def body(name: str) -> dict:
            spec = {"tenantName": name, "childNamespaces": ["work"], "hostPools": [{"namespace": pool}]}
            spec["quota"] = {"maxHostClaims": 5}
            return {"apiVersion": common.TENANCY, "kind": "Tenant", "metadata": {"name": name}, "spec": spec}

        def deployed_at(wanted: list[str], timeout: float, label: str) -> dict[str, float]:
            """name -> monotonic time its status first read Deployed (polled every 0.1 s)."""
            seen: dict[str, float] = {}
            self.progress.start(label, len(wanted))
            deadline = time.monotonic() + timeout
            while len(seen) < len(wanted) and time.monotonic() < deadline:
                for item in tenants_api.get().to_dict()["items"]:
                    name = item["metadata"]["name"]
                    if name in wanted and name not in seen and (item.get("status") or {}).get("state") == "Deployed":
                        seen[name] = time.monotonic()
                self.progress.update(len(seen))
                time.sleep(0.1)
            self.progress.end()
            return seen

        samples = []
        for index in range(self.args.tenant_samples):
            name = f"bt{tag}s{index}"
            names.append(name)
            applied = time.monotonic()
            tenants_api.create(body=body(name))
            seen = deployed_at([name], 60, f"tenant {index + 1}/{self.args.tenant_samples}")
            if name in seen:
                samples.append(seen[name] - applied)
            time.sleep(1.0)  # quiet between samples: each is a tenant alone
        out["one_at_a_time"] = distribution(samples)
        out["one_at_a_time_timed_out"] = self.args.tenant_samples - len(samples)
        self.rows_for("tenants", "applied -> Deployed, alone", out["one_at_a_time"], self.args.tenant_samples)

        n = self.args.tenants
        batch = [f"bt{tag}b{index:03d}" for index in range(n)]
        names.extend(batch)
        runs_before = controller.runs()
        sent: dict[str, float] = {}

        def create(name: str) -> None:
            sent[name] = time.monotonic()
            tenants_api.create(body=body(name))

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.args.threads) as workers:
            list(workers.map(create, batch))
        seen = deployed_at(batch, 120 + 3 * n, f"{n} tenants at once")
        out["at_once"] = distribution([seen[name] - sent[name] for name in seen])
        out["at_once_complete"] = len(seen) == n
        out["at_once_wall"] = (max(seen.values()) - started) if seen else None
        controller.settle(quiet=1.0)  # a run's count goes up when it ends, after its statuses were written
        out["at_once_runs"] = controller.runs() - runs_before
        self.rows_for("tenants", f"applied -> Deployed, {n} at once", out["at_once"], n)
        self.row(
            "tenants",
            f"first apply -> all {n} Deployed",
            round(out["at_once_wall"], 2) if out["at_once_complete"] else "incomplete",
            note=f"{len(seen)}/{n} Deployed, {out['at_once_runs']:.0f} tenant.yml runs",
        )

        deleted = time.monotonic()
        common.delete_tenants(self.admin, names, wait=120 + 3 * n)
        out["delete_all"] = time.monotonic() - deleted
        self.row("tenants", f"delete all {len(names)} -> gone", round(out["delete_all"], 2), note="namespaces removed")
        names.clear()

    # -- the whole run -----------------------------------------------------------------------------

    def run(self) -> None:
        chosen = [s for s in SCENARIOS if s in self.args.scenarios]
        for index, name in enumerate(chosen, 1):
            self.progress.prefix = f"[bench {index}/{len(chosen)} {name}]"
            out: dict = {"status": "ok"}
            self.results[name] = out
            started = time.monotonic()
            try:
                with contextlib.ExitStack() as stack:
                    getattr(self, f"scenario_{name.replace('-', '_')}")(out, stack)
            except Exception as error:
                out.update(status="failed", error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
                self.row(name, "FAILED", f"{type(error).__name__}: {str(error).splitlines()[0][:90]}", unit="")
                self.progress.note(f"failed: {type(error).__name__}: {error}")
            out["scenario_seconds"] = time.monotonic() - started
        self.later.close()
        self.watch.close()


def ours_over_baseline(storm: dict, baseline: dict, scaled: dict) -> dict | None:
    """The storm over the per-event baseline (throughput, p50 latency); None unless both sides are complete:
    a ratio of two rates over the claims that happened to bind would say nothing."""
    if not (storm.get("complete") and baseline.get("complete")):
        return None
    if not (storm.get("claims_per_second") and scaled.get("claims_per_second")):
        return None
    return {
        "throughput": storm["claims_per_second"] / scaled["claims_per_second"],
        "latency_p50": storm["latency"]["p50"] / scaled["latency_p50"] if scaled.get("latency_p50") else None,
    }


def slot_counts(cpus: int | None) -> list[int]:
    """The slots scenario's --runner-slots values: 1, 2 and the CPU count, or 4 where that is 2 or less (or
    unknown), so always three distinct values, in order."""
    return [1, 2, cpus if cpus and cpus > 2 else 4]


def suggest_slots(figures: dict, default: int, margin: float = 0.2) -> tuple[int | None, str]:
    """Which --runner-slots the slots scenario's figures suggest, and why: (slot count, reason), or (None, reason)
    when they are not clear. figures: slot count -> (last create -> all Associated, the probes' p99), either None
    when that slot count's storm or probes were incomplete.

    Clear means: every slot count complete, the default measured, and the slot count with the shortest storm is
    the default, or is at least `margin` faster than it with its probes' p99 no more than `margin` worse."""
    incomplete = sorted(k for k, (tail, p99) in figures.items() if tail is None or p99 is None)
    if incomplete:
        return None, f"no suggestion: --runner-slots {','.join(map(str, incomplete))} incomplete"
    if default not in figures:
        return None, f"no suggestion: the default here ({default}) was not measured"
    best = min(figures, key=lambda k: (figures[k][0], k))
    (tail, p99), (default_tail, default_p99) = figures[best], figures[default]
    if best == default:
        return default, f"{default} (the default here) had the shortest storm"
    gain = 1 - tail / default_tail if default_tail > 0 else 0.0
    versus = f"{best} slots' storm {gain:.0%} shorter than {default}'s"
    if gain < margin:
        return None, f"not clear: {versus} (under {margin:.0%})"
    if p99 > default_p99 * (1 + margin):
        return None, f"mixed: {versus}, but its probes' p99 {p99:.2f} s against {default_p99:.2f} s"
    return best, f"{versus}, probes' p99 {p99:.2f} s against {default_p99:.2f} s"


def per_claim_costs(points: dict) -> dict:
    """The per-claim cost table: storm size -> {"seconds", "ms_per_claim", "growth", "growth_over"} from
    points: storm size -> seconds (first create -> all Associated), None when incomplete. ms_per_claim is seconds
    per claim in ms; growth, its ratio to the smallest complete size's (growth_over), None when either is
    missing."""
    costs = {n: (1000 * seconds / n if seconds is not None and n > 0 else None) for n, seconds in points.items()}
    base = min((n for n, cost in costs.items() if cost), default=None)
    return {
        n: {
            "seconds": points[n],
            "ms_per_claim": costs[n],
            "growth": costs[n] / costs[base] if base is not None and costs[n] is not None else None,
            "growth_over": base,
        }
        for n in sorted(points)
    }


def teardown_wait(hosts: int) -> float:
    """Seconds a rack of `hosts` hosts (and as many claims) is given to go: its finalizers are dropped one request
    at a time and the namespace controller deletes each object; 180 s, and more for large racks."""
    return 180 + hosts / 20


def sizes(text: str) -> tuple[int, ...]:
    """--scale-sizes: positive whole numbers, comma-separated, each once."""
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: whole numbers, comma-separated") from None
    if not values or values[0] <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: one size or more, each above 0")
    return values


@contextlib.contextmanager
def _environment(values: dict):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _after_storm_rows(each, runner_note: str) -> None:
    """The rows every storm variant ends with: RSS of the controller and its runners, double bindings."""
    each("controller RSS", lambda v, f: round(f["controller_rss_mib"], 1), unit="MiB", note=lambda v, f: "after")
    each("runner RSS", lambda v, f: round(f["runner_rss_mib"], 1), unit="MiB", note=lambda v, f: runner_note)
    each(
        "double bindings",
        lambda v, f: f["claims_on_two_hosts"] + f["claims_disagreeing_with_their_host"],
        unit="",
    )


def _claims_note(figures: dict) -> str:
    """How many of a storm's claims bound, and INCOMPLETE when not all did."""
    return f"{figures['associated']}/{figures['claims']} claims" + ("" if figures["complete"] else ", INCOMPLETE")


def _rounded(value, digits: int):
    return None if value is None else round(value, digits)


def _seconds(value) -> str:
    return "incomplete" if value is None else f"{value:.2f} s"


def _short(values: list) -> str:
    if len(values) <= 8:
        return str(values)
    return f"{values[:4]} ... {values[-2:]} ({len(values)} runs, max {max(v or 0 for v in values)})"


# -- output --------------------------------------------------------------------------------------


def metadata(args, env: Devenv, reused: bool) -> dict:
    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    limit = cpu_limit()
    return {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_revision": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "versions": {
            "python": platform.python_version(),
            "ansible-core": version("ansible-core"),
            "ansible-runner": version("ansible-runner"),
            "kubernetes (python)": version("kubernetes"),
            "kubernetes (control plane)": env.state.get("versions", {}).get("kubernetes"),
            "etcd": env.state.get("versions", {}).get("etcd"),
            "sushy-tools": version("sushy-tools"),
            "matplotlib": version("matplotlib"),
        },
        "fleet_size": env.state.get("fleet_size"),
        "devenv": {"directory": str(env.directory), "reused": reused},
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cgroup_cpu_limit": limit,
        "loadavg_at_start": os.getloadavg(),
        "arguments": {k: v for k, v in vars(args).items() if k not in ("dir", "out")},
    }


def table(rows: list[dict]) -> str:
    lines = [f"{'scenario':<11} {'figure':<48} {'value':>14} {'x F':>7} {'target':>18}  note", "-" * 131]
    for row in rows:
        value = row["value"]
        if isinstance(value, float):
            shown = f"{value:.3f} {row['unit']}" if row["unit"] == "s" else f"{value:g} {row['unit']}"
        else:
            shown = f"{value} {row['unit']}".strip()
        in_f = f"{row['F']:.2f}" if row.get("F") is not None else ""
        target = row.get("target") or ""
        if target:
            target += {True: " met", False: " missed", None: " -"}[row.get("met")]
        lines.append(
            f"{row['scenario']:<11} {row['figure'][:48]:<48} {shown:>14} {in_f:>7} {target:>18}  {row['note']}"
        )
    return "\n".join(lines)


def _legend(ax, loc: str) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc=loc)


def plot(results: dict, path: Path, floor: float | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(3, 3, figsize=(18, 15))
    unit = floor or 1.0
    xlabel = "x F" if floor else "seconds"

    def ecdf(ax, values, label, scale=1.0, **kw):
        if values:
            ordered = sorted(v / scale for v in values)
            ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", label=label, **kw)

    ax = axes[0][0]
    idle = results.get("idle") or {}
    ecdf(ax, (idle.get("cold") or {}).get("samples"), "cold path", unit)
    ecdf(ax, (idle.get("standby") or {}).get("samples"), "standby run", unit)
    ax.set(title="idle: create -> Association=True", xlabel=xlabel, ylabel="fraction of claims")
    _legend(ax, loc="lower right")

    ax = axes[0][1]
    storm, base = results.get("storm") or {}, results.get("baseline") or {}
    old = results.get("storm-old") or {}
    compared = (
        (storm, "ours (chunked batch)"),
        (old, f"old path ({str(old.get('revision', ''))[:10]})"),
        (base, "baseline per-event (measured)"),
    )
    for figures, label in compared:
        if figures.get("latency", {}).get("n"):
            ordered = sorted(figures["bound_over_time"])
            ax.plot(ordered, range(1, len(ordered) + 1), label=f"{label}: {figures['claims']} claims")
    if base.get("extrapolated") and base.get("bound_over_time"):
        factor = base["at_storm_size"]["claims"] / base["claims"]
        ordered = sorted(base["bound_over_time"])
        ax.plot(
            [t * factor for t in ordered],
            [(i + 1) * factor for i in range(len(ordered))],
            "--",
            label="baseline, extrapolated",
        )
    ax.set(title="bind storm: claims bound over time", xlabel="seconds since the first create", ylabel="claims bound")
    _legend(ax, loc="upper left")
    # The chunked and the old path end within a minute, the per-event baseline after many: zoomed in, both apart.
    batch = [f for f, _label in compared[:2] if f.get("latency", {}).get("n")]
    if batch:
        zoom = ax.inset_axes([0.52, 0.08, 0.45, 0.45])
        for figures, label in compared[:2]:
            if figures.get("latency", {}).get("n"):
                ordered = sorted(figures["bound_over_time"])
                zoom.plot(ordered, range(1, len(ordered) + 1), label=label.split(" (")[0])
        zoom.set_xlim(0, 1.05 * max(max(f["bound_over_time"]) for f in batch))
        zoom.set_title("ours and the old path", fontsize=8)
        zoom.tick_params(labelsize=7)
        zoom.legend(loc="lower right", fontsize=7)

    ax = axes[0][2]
    for figures, label in compared:
        ecdf(ax, figures.get("latency_samples"), label)
    ax.set(title="bind storm: create -> Association=True", xlabel="seconds", ylabel="fraction of claims")
    if ax.lines:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # the minor labels overlap
        _legend(ax, loc="lower right")

    ax = axes[1][0]
    wave = (results.get("provision") or {}).get("wave") or {}
    if wave.get("provisioned_over_time"):
        ordered = wave["provisioned_over_time"]
        ax.plot(ordered, range(1, len(ordered) + 1), label="Provisioned")
    if wave.get("minus_power_delay_over_time"):
        ordered = wave["minus_power_delay_over_time"]
        ax.plot(ordered, range(1, len(ordered) + 1), "--", label="each host minus its BMC power delay")
    ax.set(title="provision wave: hosts Provisioned over time", xlabel="seconds since the first create", ylabel="hosts")
    _legend(ax, loc="lower right")

    ax = axes[1][1]
    churn = results.get("churn") or {}
    if churn.get("samples"):
        t = [s["t"] for s in churn["samples"]]
        ax.plot(t, [s["rss_mib"] for s in churn["samples"]], label="controller RSS (MiB)")
        ax.plot(t, [s["runner_rss_mib"] for s in churn["samples"]], label="runner child RSS (MiB)")
        ax.plot(t, [s["artifacts_mib"] for s in churn["samples"]], label="artifacts (MiB)")
        ax2 = ax.twinx()
        ax2.plot(
            t, [s["apiserver_connections"] for s in churn["samples"]], ":", color="black", label="apiserver connections"
        )
        ax2.set_ylabel("connections")
        _legend(ax2, loc="upper right")
    ax.set(title="churn: memory, artifacts, connections", xlabel="seconds")
    _legend(ax, loc="upper left")

    ax = axes[1][2]
    resync = results.get("resync") or {}
    if resync.get("samples"):
        ax.plot([v / unit for v in resync["samples"]], "o-", label="probe during resyncs (cold)")
    if (resync.get("standby") or {}).get("samples"):
        ax.plot([v / unit for v in resync["standby"]["samples"]], "o-", label="probe during resyncs (standby)")
    if (idle.get("cold") or {}).get("samples"):
        ax.axhline(idle["cold"]["p99"] / unit, color="grey", ls="--", label="idle cold p99")
    ax.set(title="resync under load: create -> Associated", xlabel="probe", ylabel=xlabel)
    _legend(ax, loc="upper right")

    by_slots = (results.get("slots") or {}).get("by_slots") or {}
    ax = axes[2][0]
    for slots, figures in by_slots.items():
        if figures.get("bound_over_time"):
            ordered = figures["bound_over_time"]
            ax.plot(ordered, range(1, len(ordered) + 1), label=f"--runner-slots {slots}")
    ax.set(title="slots: storm claims bound over time", xlabel="seconds since the first create", ylabel="claims bound")
    _legend(ax, loc="lower right")

    ax = axes[2][1]
    for slots, figures in by_slots.items():
        ecdf(ax, (figures.get("probes") or {}).get("samples"), f"--runner-slots {slots}")
    ax.set(title="slots: probes during the storm, create -> Associated", xlabel="seconds", ylabel="fraction")
    _legend(ax, loc="lower right")

    ax = axes[2][2]
    costs = (results.get("storm-scale") or {}).get("per_claim_cost") or {}
    points = sorted((n, c["ms_per_claim"]) for n, c in costs.items() if c.get("ms_per_claim") is not None)
    if points:
        ax.plot([n for n, _ in points], [c for _, c in points], "o-", label="first create -> all Associated / claims")
        ax.set_xscale("log")
    ax.set(title="storm-scale: per-claim cost", xlabel="claims in the storm", ylabel="ms per claim")
    _legend(ax, loc="upper left")

    fig.suptitle("metalclaim bench (" + (f"F = {floor:.2f} s" if floor else "no F") + ")")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# -- main -----------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dir", type=Path, default=Path(".bench-devenv"), help="the devenv's directory (made or reused)")
    p.add_argument("--out", type=Path, default=Path("bench/out"), help="where the JSON and PNG go")
    p.add_argument("--keep-devenv", action="store_true", help="leave a devenv this run started running")
    p.add_argument(
        "--scenarios",
        default=",".join(DEFAULT_SCENARIOS),
        help="comma-separated subset of " + ",".join(SCENARIOS) + " (default: all but storm-scale and provision-sweep)",
    )
    p.add_argument("--threads", type=int, default=16, help="threads creating claims and hosts")
    p.add_argument("--floor-runs", type=int, default=10)
    p.add_argument("--idle-claims", type=int, default=50)
    p.add_argument("--idle-gap", type=float, default=None, help="seconds of quiet between idle claims (1.5 F)")
    p.add_argument("--storm-claims", type=int, default=1000)
    p.add_argument("--storm-namespaces", type=int, default=10)
    p.add_argument("--baseline-claims", type=int, default=100, help="the per-event storm's size (extrapolated)")
    p.add_argument(
        "--old-rev", default=OLD_REV, help=f"storm-old's revision (default {OLD_REV}: before the chunked bind)"
    )
    p.add_argument("--resync-period", type=float, default=20.0, help="the resync scenario controller's period")
    p.add_argument("--resync-probes", type=int, default=20, help="new claims, one at a time, during resyncs")
    p.add_argument("--provision-samples", type=int, default=5, help="idle create -> Provisioned samples")
    p.add_argument("--wave", type=int, default=100, help="claims provisioned at once (needs as many BMCs)")
    p.add_argument(
        "--provision-sweep",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[20, 0],
        help="provision-sweep: the --provision-max-concurrent values its waves run at (0: the wave's size)",
    )
    p.add_argument(
        "--provision-image",
        choices=("live-iso", "disk"),
        default="live-iso",
        help="provision scenario's image: a live ISO, or a disk image (deploy ISO, media server, a stand-in writer)",
    )
    p.add_argument(
        "--writer-seconds", type=float, default=20.0, help="disk image: the stand-in writer's time to call back"
    )
    p.add_argument(
        "--provision-max-concurrent", type=int, default=0, help="the provisioner's flag (0: the controller's default)"
    )
    p.add_argument("--churn-seconds", type=float, default=120.0)
    p.add_argument("--churn-rate", type=float, default=4.0, help="claims created (and deleted) per second")
    p.add_argument("--churn-hosts", type=int, default=40)
    p.add_argument("--quiet-tail", type=float, default=10.0, help="seconds watched for runs after churn settles")
    p.add_argument("--tenant-samples", type=int, default=5, help="Tenants applied one at a time")
    p.add_argument("--tenants", type=int, default=50, help="Tenants applied at once")
    p.add_argument("--slots-claims", type=int, default=300, help="the slots scenario's storm, per slot count")
    p.add_argument("--slots-probes", type=int, default=20, help="at most this many probes, one at a time, per storm")
    p.add_argument(
        "--scale-sizes",
        type=sizes,
        default=(100, 1000, 5000),
        help="storm-scale's storm sizes, comma-separated (default 100,1000,5000)",
    )
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser().error(f"unknown scenarios {sorted(unknown)}; choose from {','.join(SCENARIOS)}")
    if args.baseline_claims > args.storm_claims:
        args.baseline_claims = args.storm_claims
    os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(common.COLLECTIONS))
    os.environ.setdefault("ANSIBLE_COLLECTIONS_SCAN_SYS_PATH", "false")
    fleet = max(
        args.provision_samples + args.wave if "provision" in args.scenarios else 1,
        args.wave * len(args.provision_sweep) if "provision-sweep" in args.scenarios else 1,
    )
    directory = args.dir.resolve()
    env = Devenv.load(directory)
    reused = (
        env is not None and env.healthy() and (env.state.get("fleet_size") or 0) >= fleet and "redfish" in env.state
    )
    if reused:
        print(
            f"[bench] reusing the devenv in {directory} ({env.state.get('fleet_size')} emulated systems)",
            file=sys.stderr,
        )
    else:
        print(f"[bench] bringing up a devenv in {directory} with {fleet} emulated systems", file=sys.stderr)
        env = Devenv.up(directory, hosts=fleet, register=False)
    # What the install role adds on a cluster that serves MutatingAdmissionPolicies (this one does): the claim
    # finalizer given at creation, so binding a claim writes its host and its status only. The devenv leaves it out
    # (its tests delete claims no controller serves); the bench measures what users run.
    env.kubectl("admin", "apply", "--server-side", "-k", str(REPO / "config" / "admission-create"))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_path, png_path = args.out / f"bench-{stamp}.json", args.out / f"bench-{stamp}.png"
    work = Path(tempfile.mkdtemp(prefix="metalclaim-bench-"))
    meta = metadata(args, env, reused)
    bench = None
    try:
        bench = Bench(args, env, work)
        bench.run()
    finally:
        if bench is not None:
            meta["loadavg_at_end"] = os.getloadavg()
            meta["work_dir"] = str(work)
            report = {"meta": meta, "F": bench.floor, "scenarios": bench.results, "table": bench.rows}
            json_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
            try:
                plot(bench.results, png_path, bench.floor)
            except Exception as error:  # the figures are in the JSON whatever happens to the plot
                print(f"[bench] no PNG: {type(error).__name__}: {error}", file=sys.stderr)
                png_path = None
            print()
            print(table(bench.rows))
            print(f"\nF = {bench.floor:.3f} s" if bench.floor else "\nno F measured", end="")
            print(
                f"; {meta['cpu_count']} CPUs, cgroup limit {meta['cgroup_cpu_limit'] or 'none'}; "
                f"rev {meta['git_revision'][:10]}"
            )
            print(f"figures: {json_path}" + (f"\nplots:   {png_path}" if png_path else ""))
            print(f"controller logs: {work}")
        if not reused and not args.keep_devenv:
            env.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
