"""Benchmark: the Redfish provisioner (bmh_redfish) on the emulated fleet, run through ansible-runner.

    .venv/bin/python bench/provision.py [--devenv DIR] [--sizes 1,8]

Prints figures, never pass/fail. Uses a running devenv (METALCLAIM_DEVENV or --devenv) whose
fleet has at least the largest size in systems, or brings one up and down. Each size gets a
fresh infrastructure namespace with one BareMetalHost per emulated system; the BMC addresses
go through a counting proxy, so every Redfish request is counted where it crosses the wire.

Three phases, each one bmh_redfish run that waits until the hosts settle:
  register  new host -> registering -> inspecting -> available
  live-iso  image (format live-iso) and online: true -> provisioned (CD inserted, boot Cd, power On)
  release   image removed, online: false -> deprovisioning -> available (media ejected, power Off)
The emulator applies power changes 1-11 s late (at random), so the live-iso and release wall
times are mostly that wait; requests per host include the power polls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import config as kube_config
from kubernetes.dynamic import DynamicClient

from metalclaim_dev.bench import Site, site_of
from metalclaim_dev.devenv.env import Devenv
from metalclaim_dev.netfixtures import FaultProxy, FileServer
from metalclaim_dev.runner import run

# The emulator answers at once: short Redfish timeouts, and backoff short enough for a benchmark.
OPTIONS = {"backoff_base": 1, "backoff_cap": 4, "redfish_timeout": 5, "redfish_retries": 1, "wait": 180}


def provision(kubeconfig: str, namespace: str) -> tuple[float, dict]:
    """One bmh_redfish run for the namespace, waiting until its hosts settle; (seconds, module result)."""
    with tempfile.TemporaryDirectory() as private:
        started = time.perf_counter()
        result = run(
            Path(private),
            kubeconfig,
            module="metalclaim.hostclaim.bmh_redfish",
            module_args={"namespaces": [namespace], **OPTIONS},
        )
        elapsed = time.perf_counter() - started
    outcome = result.tasks[0] if result.tasks else {"failed": True, "msg": result.status}
    if outcome.get("failed"):
        raise SystemExit(f"bmh_redfish failed: {outcome.get('msg')}")
    return elapsed, outcome


def phase(name: str, site: Site, proxy: FaultProxy, provisioner: str, expected: str, single: dict, paths: bool) -> dict:
    proxy.reset_counts()
    seconds, result = provision(provisioner, site.namespace)
    size = len(site.names)
    wire = proxy.total
    states = site.states()
    figures = {"seconds": seconds, "requests": wire, "per_host": wire / size}
    baseline = single.get(name)
    ratio = f"{seconds / baseline['seconds']:.2f}" if baseline else "1.00"
    settled = "" if states == {expected: size} else f"  NOT SETTLED: {states}"
    print(
        f"{size:>6} {name:>9} {seconds:>8.2f} {ratio:>11} {result.get('steps', 0):>6} {wire:>9} "
        f"{wire / size:>9.1f} {result.get('redfish_requests', 0):>12}{settled}",
        flush=True,
    )
    if paths:
        for line, count in sorted(proxy.counts.items(), key=lambda item: -item[1]):
            print(f"{'':>17}{count:>6}  {line}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devenv", default=os.environ.get("METALCLAIM_DEVENV"))
    parser.add_argument("--sizes", default="1,8", help="hosts per run; the first is the baseline of the ratio")
    parser.add_argument("--paths", action="store_true", help="also print the requests of each phase by method and path")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    own_env = None
    if args.devenv:
        env = Devenv.load(Path(args.devenv).resolve())
    else:
        own_env = env = Devenv.up(Path(tempfile.mkdtemp()) / "devenv", hosts=max(sizes), register=False)
    fleet = env.state["redfish"]
    if len(fleet["systems"]) < max(sizes):
        raise SystemExit(f"the devenv's fleet has {len(fleet['systems'])} systems; --sizes asks for {max(sizes)}")
    admin = DynamicClient(kube_config.new_client_from_config(config_file=env.kubeconfig("admin")))
    provisioner = env.kubeconfig("provisioner")
    upstream = fleet["systems"][0]["address"].split("://", 1)[1].split("/", 1)[0]
    single: dict = {}
    every: dict = {}
    try:
        with tempfile.TemporaryDirectory() as served, FileServer(Path(served)) as files:
            live_iso = files.add("live.iso", b"metalclaim bench live image\n" * 64)
            phases = [  # (name, spec patch applied first, state every host must reach)
                ("register", None, "available"),
                ("live-iso", {"online": True, "image": {"url": live_iso, "format": "live-iso"}}, "provisioned"),
                ("release", {"online": False, "image": None}, "available"),
            ]
            with FaultProxy(f"http://{upstream}") as proxy:
                print("one bmh_redfish run per phase, waiting until the hosts settle")
                print(
                    f"{'hosts':>6} {'phase':>9} {'wall s':>8} {'vs 1 host':>11} {'steps':>6} {'requests':>9} "
                    f"{'per host':>9} {'module says':>12}"
                )
                for size in sizes:
                    site = site_of(env, admin, size, proxy)
                    try:
                        figures = {}
                        for name, spec, expected in phases:
                            if spec:
                                site.patch_hosts(spec)
                            figures[name] = phase(name, site, proxy, provisioner, expected, single, args.paths)
                    finally:
                        site.teardown()
                    single = single or figures
                    every[size] = figures
                print(json.dumps(every))  # the same figures, for scripts
    finally:
        if own_env is not None:
            own_env.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
