"""Benchmark: hostclaim_bind, and the whole reconcile.yml, through ansible-runner as the controller runs them.

    .venv/bin/python bench/bind.py [--devenv DIR] [--claims 1,100,1000] [--race 200x50x4]

Prints figures, never pass/fail. Uses a running devenv (METALCLAIM_DEVENV or --devenv),
or brings a bare one up and down. Each size gets a fresh rack namespace with as many
hosts as claims (all `available`), and one tenant namespace for its claims.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import config as kube_config
from kubernetes.dynamic import DynamicClient

from metalclaim_dev.bench import REPO, api, setup, teardown
from metalclaim_dev.devenv.env import Devenv
from metalclaim_dev.runner import run


def reconcile_run(kubeconfig: str, tenant: str, claims: int) -> tuple[float, dict]:
    """The full reconcile playbook (release, bind, secrets, sync) for the claims; returns (seconds, summary)."""
    wanted = [{"namespace": tenant, "name": f"c{index:04d}"} for index in range(claims)]
    with tempfile.TemporaryDirectory() as private:
        started = time.perf_counter()
        result = run(
            Path(private),
            kubeconfig,
            playbook=str(REPO / "playbooks" / "reconcile.yml"),
            extravars={"claims_list": wanted},
        )
        elapsed = time.perf_counter() - started
    summary = next((t for t in result.tasks if t["task"] == "Summarize"), {"msg": result.status})
    reconciled = next((t for t in result.tasks if "summary" in t), {})
    return elapsed, {**summary, **reconciled.get("summary", {})}


def bind_run(kubeconfig: str, tenant: str, claims: int) -> tuple[float, dict]:
    wanted = [{"namespace": tenant, "name": f"c{index:04d}"} for index in range(claims)]
    with tempfile.TemporaryDirectory() as private:
        project = Path(private) / "project"
        project.mkdir()
        play = [
            {
                "hosts": "localhost",
                "gather_facts": False,
                "name": "bind",
                "tasks": [{"metalclaim.hostclaim.hostclaim_bind": {"claims": wanted}}],
            }
        ]
        (project / "playbook.yml").write_text(json.dumps(play))
        started = time.perf_counter()
        result = run(Path(private), kubeconfig, playbook="playbook.yml")
        elapsed = time.perf_counter() - started
    return elapsed, (result.tasks[0] if result.tasks else {"status": result.status})


def race(admin, controller: str, what: str, claims: int, hosts: int, runs: int) -> None:
    """`runs` concurrent runs of `what` over the same claims; prints wall time, bindings and claim conflicts."""
    rack, tenant, _kind = setup(admin, hosts, claims)
    try:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=runs) as pool:
            if what == "hostclaim_bind":
                outcomes = list(pool.map(lambda _index: bind_run(controller, tenant, claims), range(runs)))
                conflicts = sum(1 for _s, r in outcomes for c in r.get("claims", []) if c["action"] == "conflict")
            else:
                outcomes = list(pool.map(lambda _index: reconcile_run(controller, tenant, claims), range(runs)))
                conflicts = sum(r.get("conflicts", 0) for _s, r in outcomes)
        wall = time.perf_counter() - started
        consumers = [
            h.spec.consumerRef.name for h in api(admin, "BareMetalHost").get(namespace=rack).items if h.spec.consumerRef
        ]
        print(
            f"\nrace ({what}): {claims} claims, {hosts} hosts, {runs} concurrent runs: {wall:.2f}s wall, "
            f"{len(consumers)} hosts bound, {len(set(consumers))} distinct claims, "
            f"{conflicts} claim conflicts (claims another run was writing)",
            flush=True,
        )
    finally:
        teardown(admin, rack, tenant)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devenv", default=os.environ.get("METALCLAIM_DEVENV"))
    parser.add_argument("--claims", default="1,100,1000")
    parser.add_argument("--race", default="200x50x4", help="claims x hosts x concurrent runs")
    args = parser.parse_args()
    own_env = None
    if args.devenv:
        env = Devenv.load(Path(args.devenv).resolve())
    else:
        own_env = env = Devenv.up(Path(tempfile.mkdtemp()) / "devenv", hosts=0)
    admin = DynamicClient(kube_config.new_client_from_config(config_file=env.kubeconfig("admin")))
    controller = env.kubeconfig("controller")
    try:
        print(f"{'claims':>7} {'hosts':>6} {'first run s':>12} {'per claim ms':>13} {'rerun s':>8} {'bound':>6}")
        for size in [int(n) for n in args.claims.split(",")]:
            rack, tenant, _kind = setup(admin, size, size)
            try:
                first, result = bind_run(controller, tenant, size)
                rerun, again = bind_run(controller, tenant, size)
                print(
                    f"{size:>7} {size:>6} {first:>12.2f} {1000 * first / size:>13.1f} {rerun:>8.2f} "
                    f"{result.get('bound', '?'):>6}  (rerun changed={again.get('changed')})",
                    flush=True,
                )
            finally:
                teardown(admin, rack, tenant)
        print(f"\n{'claims':>7} {'reconcile.yml first s':>22} {'rerun s':>8}  summary")
        for size in [int(n) for n in args.claims.split(",")]:
            rack, tenant, _kind = setup(admin, size, size)
            try:
                first, summary = reconcile_run(controller, tenant, size)
                rerun, _summary = reconcile_run(controller, tenant, size)
                print(f"{size:>7} {first:>22.2f} {rerun:>8.2f}  {summary.get('msg')}", flush=True)
            finally:
                teardown(admin, rack, tenant)
        claims, hosts, runs = (int(n) for n in args.race.split("x"))
        for what in ("hostclaim_bind", "reconcile.yml"):
            race(admin, controller, what, claims, hosts, runs)
    finally:
        if own_env is not None:
            own_env.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
