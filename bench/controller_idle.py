"""Benchmark: the controller's idle latency (create -> Association=True) beside the floor F, and a burst.

    .venv/bin/python bench/controller_idle.py [--devenv DIR] [--claims 20] [--burst 100]

Prints figures, never pass/fail. F is the median wall time of a one-task `debug` playbook
through the controller's own runner (a spawned ansible-runner process, same settings),
measured in the same run. Uses a running devenv (METALCLAIM_DEVENV or --devenv).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from kubernetes import config as kube_config
from kubernetes.dynamic import DynamicClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "controller"))

from bind import api, setup, teardown  # noqa: E402 (bench/bind.py: the same rack of available hosts)

from metalclaim.controller.runs import Runner  # noqa: E402
from metalclaim.devenv.env import Devenv  # noqa: E402

METAL3 = "metal3.io/v1alpha1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def floor(work: Path, runs: int = 10) -> float:
    playbook = work / "debug.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug:\n        msg: hi\n"
    )
    runner = Runner(work / "floor", {"ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections")})
    runner.run(str(playbook), {})  # the child's start-up is not part of F
    times = [runner.run(str(playbook), {}).seconds for _run in range(runs)]
    runner.close()
    return statistics.median(times)


def claim_side(env, rack: str, private: Path, metrics_port: int, health_port: int | None, *extra: str):
    """The controller's claim side for the rack, as its own process and identity (quiet: WARNING logs)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "metalclaim.controller",
            "--kubeconfig",
            env.kubeconfig("controller"),
            "--infra-namespaces",
            rack,
            "--controllers",
            "claims",
            "--private-data-dir",
            str(private),
            "--metrics-bind-address",
            f"127.0.0.1:{metrics_port}",
            "--health-probe-bind-address",
            f"127.0.0.1:{health_port}" if health_port else "0",
            "--log-level",
            "WARNING",
            *extra,
        ],
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections")},
    )


def claim(admin, tenant: str, kind: str, name: str) -> None:
    api(admin, "HostClaim").create(
        body={
            "apiVersion": METAL3,
            "kind": "HostClaim",
            "metadata": {"name": name, "namespace": tenant},
            "spec": {"online": False, "hostSelector": {"matchLabels": {"infra-kind": kind}}},
        }
    )


def associated(admin, tenant: str) -> set[str]:
    found = set()
    for item in api(admin, "HostClaim").get(namespace=tenant).to_dict()["items"]:
        for condition in (item.get("status") or {}).get("conditions") or []:
            if condition["type"] == "Association" and condition["status"] == "True":
                found.add(item["metadata"]["name"])
    return found


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--devenv", default=os.environ.get("METALCLAIM_DEVENV"))
    parser.add_argument("--claims", type=int, default=20)
    parser.add_argument("--burst", type=int, default=100)
    args = parser.parse_args()
    env = Devenv.load(Path(args.devenv).resolve())
    admin = DynamicClient(kube_config.new_client_from_config(config_file=env.kubeconfig("admin")))
    work = Path(tempfile.mkdtemp(prefix="metalclaim-bench-"))
    f = floor(work)
    print(f"floor F (one-task debug playbook through the runner): {f:.3f} s")
    rack, tenant, kind = setup(admin, args.claims + args.burst, 0)
    metrics_port, health_port = free_port(), free_port()
    controller = claim_side(env, rack, work / "runner", metrics_port, health_port)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        time.sleep(2)  # the initial list's batch
        latencies = []
        for index in range(args.claims):
            name = f"idle-{index:03d}"
            started = time.monotonic()
            claim(admin, tenant, kind, name)
            while name not in associated(admin, tenant):
                time.sleep(0.05)
            latencies.append(time.monotonic() - started)
            print(f"\r  idle claims: {index + 1}/{args.claims}", end="", flush=True)
        print()
        p50, p90, p99 = (percentile(latencies, q) for q in (0.5, 0.9, 0.99))
        print(
            f"idle create -> Association=True over {len(latencies)} claims: p50 {p50:.2f} s ({p50 / f:.2f} F), "
            f"p90 {p90:.2f} s, p99 {p99:.2f} s ({p99 / f:.2f} F), max {max(latencies):.2f} s"
        )
        runs_before = metric(metrics_port, "metalclaim_runs_total")
        started = time.monotonic()
        for index in range(args.burst):
            claim(admin, tenant, kind, f"burst-{index:03d}")
        while len(associated(admin, tenant)) < args.claims + args.burst:
            time.sleep(0.2)
        took = time.monotonic() - started
        runs = metric(metrics_port, "metalclaim_runs_total") - runs_before
        per_100 = 100 * runs / args.burst
        print(f"burst of {args.burst} claims: all associated in {took:.1f} s, {runs:.0f} runs ({per_100:.0f} per 100)")
    finally:
        controller.send_signal(signal.SIGTERM)
        controller.wait(30)
        teardown(admin, rack, tenant)
    return 0


if __name__ == "__main__":
    sys.exit(main())
