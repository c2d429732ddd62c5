"""Bookings ahead: what a run costs with many bookings, and booking start -> bound through the controller.

    .venv/bin/python bench/booking.py [--dir .bench-devenv] [--bookings 1000] [--hosts 100] [--samples 5]

Figures, never pass/fail. Reuses a running devenv in --dir (`python -m metalclaim_dev.devenv up --dir DIR`), else
starts one there and stops it afterwards.

  run       --bookings claims with spec.lease.start (windows of 1-10 min starting within the next 24 h) created in a
            fresh rack of --hosts hosts; then one hostclaim_reconcile run over all of them, in this process, as the
            controller runs it (the claims and hosts listed once, every booking decided first come, first served,
            the hosts' annotations and every claim's status written): its wall time, API calls and writes; then the
            same run again (nothing to do: no write) and a run for one claim (what a single claim's run costs with
            that many bookings around).
  latency   --samples bookings starting 8 s apart, one claim-side controller (standby runs): booking start -> the
            Bound Event's creationTimestamp (the API server's, whole seconds) and -> a watch seeing Association=True
            (this machine's clock, sub-second).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from metalclaim_dev import bench  # noqa: F401 (puts the collection on sys.path)
from metalclaim_dev.claimlayer import TENANT_A, Rack, parse_time, stamp
from metalclaim_dev.controllerproc import ControllerProcess, claim_side
from metalclaim_dev.devenv.env import Devenv
from metalclaim_dev.support import clients_of

WRITES = ("create", "replace", "patch", "delete")


def one_run(env: Devenv, wanted: list[dict], at: datetime.datetime) -> tuple[float, dict]:
    # The collection is importable once metalclaim_dev.bench put .collections on sys.path.
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.reconcile import reconcile_claims
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube

    started = time.perf_counter()
    run = ClaimRun(Kube({"kubeconfig": env.kubeconfig("controller")}), wanted, stamp(at), False)
    result = run.finish(reconcile_claims(run))
    return time.perf_counter() - started, result


def run_scenario(env: Devenv, clients, bookings: int, hosts: int) -> dict:
    rack = Rack(clients)
    try:
        rack.policy(maxBookingsPerNamespace=min(bookings, 1000))  # one namespace's bookings: the CRD's most
        rack.add_hosts(hosts)
        t0 = rack.server_now()
        chance = random.Random(26)

        def create(index: int) -> None:
            start = t0 + datetime.timedelta(seconds=600 + chance.randrange(24 * 3600))
            rack.claim(f"bk{index:05d}", lease={"start": stamp(start), "duration": f"{chance.randint(1, 10)}m"})

        with ThreadPoolExecutor(max_workers=10) as pool:
            list(pool.map(create, range(bookings)))
        everyone = rack.claim_args()
        seconds, first = one_run(env, everyone, t0)
        again_seconds, again = one_run(env, everyone, t0)
        single_seconds, single = one_run(env, everyone[:1], t0)
        booked = sum(1 for c in first["booking"]["claims"] if c["booking"] == "booked")
        return {
            "bookings": bookings,
            "hosts": hosts,
            "accepted": booked,
            "run_seconds": round(seconds, 2),
            "run_api_calls": first["api_calls"],
            "run_host_writes": first["booking"]["host_writes"],
            "run_status_writes": first["status_writes"],
            "again_seconds": round(again_seconds, 2),
            "again_writes": sum(n for verb, n in again["api_calls"].items() if verb in WRITES),
            "one_claim_seconds": round(single_seconds, 2),
            "one_claim_api_calls": single["api_calls"],
        }
    finally:
        rack.cleanup()


def latency_scenario(env: Devenv, clients, samples: int, work: Path) -> dict:
    rack = Rack(clients)
    controller = ControllerProcess(env, work / "latency", *claim_side(rack), "--standby=true")
    seen: dict = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for event in rack.api("admin", "HostClaim").watch(namespace=TENANT_A, timeout=5):
                obj = event["raw_object"]
                conditions = (obj.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Association" and c["status"] == "True" for c in conditions):
                    seen.setdefault(obj["metadata"]["name"], time.time())
                if stop.is_set():
                    return

    try:
        rack.policy()
        rack.add_hosts(samples)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        t0 = rack.server_now()
        starts = {f"lat{i}": t0 + datetime.timedelta(seconds=15 + 8 * i) for i in range(samples)}
        for name, start in starts.items():
            rack.claim(name, lease={"start": stamp(start), "duration": "10m"})
        deadline = time.time() + 15 + 8 * samples + 60
        events: dict = {}
        uids = {n: rack.read_claim(n)["metadata"]["uid"] for n in starts}
        while time.time() < deadline and len(events) < samples:
            found = rack.api("admin", "Event", "v1").get(namespace=TENANT_A, field_selector="reason=Bound")
            for event in found.items:
                if uids.get(event.involvedObject.name) == event.involvedObject.uid:
                    events[event.involvedObject.name] = parse_time(event.metadata.creationTimestamp)
            time.sleep(0.5)
        stop.set()
        server = sorted((events[n] - starts[n]).total_seconds() for n in events)
        wall = sorted(seen[n] - starts[n].timestamp() for n in seen if n in starts)
        return {
            "samples": samples,
            "bound": len(events),
            "start_to_bound_event_s": server,
            "start_to_watch_s": [round(w, 2) for w in wall],
            "watch_median_s": round(statistics.median(wall), 2) if wall else None,
        }
    finally:
        stop.set()
        controller.stop()
        rack.cleanup()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=".bench-devenv")
    parser.add_argument("--bookings", type=int, default=1000)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--scenarios", default="run,latency")
    args = parser.parse_args(argv)
    directory = Path(args.dir).resolve()
    env = Devenv.load(directory)
    started_here = env is None or not env.healthy()
    if started_here:
        env = Devenv.up(directory, 1)
    clients = clients_of(env)
    figures: dict = {"load_average": Path("/proc/loadavg").read_text().split()[:3]}
    try:
        if "run" in args.scenarios:
            figures["run"] = run_scenario(env, clients, args.bookings, args.hosts)
            print(json.dumps(figures["run"]), file=sys.stderr)
        if "latency" in args.scenarios:
            figures["latency"] = latency_scenario(env, clients, args.samples, directory / "bench-booking")
        figures["load_average_after"] = Path("/proc/loadavg").read_text().split()[:3]
    finally:
        if started_here:
            env.down()
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
