"""Benchmark: the controller's memory with a large fleet, and its artifact directory after many runs.

    .venv/bin/python bench/controller_scale.py [--devenv DIR] [--hosts 1000] [--claims 1000] [--runs 500]

Phase 1: `--hosts` available hosts and `--claims` claims; the claim side binds them all; then
the controller's RSS (and its ansible-runner child's) with everything in its stores. Phase 2:
`--runs` single-claim changes one after another (each one run); the private data dir's size,
which artifact rotation (--keep-artifacts) must keep bounded. Prints figures, never pass/fail.
Uses a running devenv (METALCLAIM_DEVENV or --devenv).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import config as kube_config
from kubernetes.dynamic import DynamicClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "controller"))

from bind import api, setup, teardown  # noqa: E402 (bench/bind.py: the same rack of available hosts)
from controller_idle import associated, claim_side, free_port, metric  # noqa: E402

from metalclaim.devenv.env import Devenv  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:  # a thread that ended meanwhile
            continue
    return found


def tree_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) under path."""
    total = count = 0
    for folder, _dirs, names in os.walk(path):  # os.walk skips what rotation removes while it walks
        for name in names:
            try:
                total, count = total + (Path(folder) / name).stat().st_size, count + 1
            except FileNotFoundError:
                continue
    return total, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--devenv", default=os.environ.get("METALCLAIM_DEVENV"))
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--keep-artifacts", type=int, default=20)
    args = parser.parse_args()
    env = Devenv.load(Path(args.devenv).resolve())
    admin = DynamicClient(kube_config.new_client_from_config(config_file=env.kubeconfig("admin")))
    work = Path(tempfile.mkdtemp(prefix="metalclaim-bench-"))
    started = time.monotonic()
    rack, tenant, _tag = setup(admin, args.hosts, args.claims)
    print(f"{args.hosts} hosts and {args.claims} claims created in {time.monotonic() - started:.1f} s")
    metrics_port = free_port()
    private = work / "runner"
    controller = claim_side(
        env, rack, private, metrics_port, None, "--keep-artifacts", str(args.keep_artifacts), "--runner-slots", "1"
    )
    try:
        started = time.monotonic()
        while len(associated(admin, tenant)) < min(args.hosts, args.claims):
            if controller.poll() is not None:
                raise SystemExit(f"the controller exited with {controller.returncode}")
            time.sleep(2)
            print(f"\r  associated: {len(associated(admin, tenant))}/{args.claims}", end="", flush=True)
        while (runs := metric(metrics_port, "metalclaim_runs_total")) < 1:  # the binding run's own bookkeeping
            time.sleep(0.1)
        print(f"\nall bound in {time.monotonic() - started:.1f} s, {runs:.0f} runs")
        child = children(controller.pid)
        print(
            f"RSS with {args.claims} claims and {args.hosts} hosts in its stores: controller "
            f"{rss_mib(controller.pid):.0f} MiB, runner child {sum(rss_mib(p) for p in child):.0f} MiB"
        )
        claims = api(admin, "HostClaim")
        before = metric(metrics_port, "metalclaim_runs_total")
        started = time.monotonic()
        for index in range(args.runs):
            # A spec change (generation) is what the claim side reacts to: one run each, one after another.
            claims.patch(
                body={"spec": {"online": index % 2 == 0}},
                name="c0000",
                namespace=tenant,
                content_type="application/merge-patch+json",
            )
            while metric(metrics_port, "metalclaim_runs_total") < before + index + 1:
                time.sleep(0.05)
            if (index + 1) % 25 == 0:
                size, _files = tree_bytes(private)
                print(f"\r  runs: {index + 1}/{args.runs}, private data dir {size / 2**20:.1f} MiB", end="", flush=True)
        size, files = tree_bytes(private)
        artifacts = len(list((private / "artifacts").iterdir())) if (private / "artifacts").exists() else 0
        print(
            f"\nafter {args.runs} more runs ({time.monotonic() - started:.0f} s): private data dir "
            f"{size / 2**20:.2f} MiB in {files} files, {artifacts} artifact dirs kept (--keep-artifacts "
            f"{args.keep_artifacts}); controller RSS {rss_mib(controller.pid):.0f} MiB"
        )
    finally:
        controller.send_signal(signal.SIGTERM)
        controller.wait(60)
        teardown(admin, rack, tenant)
    return 0


if __name__ == "__main__":
    sys.exit(main())
