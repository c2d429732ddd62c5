"""python -m metalclaim_dev.devenv up|status|down --dir DIR [--hosts N | --vms N] [--clusters 2] [--node] [--capi]"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import capi, clusters, node
from .env import Devenv
from .processes import DevenvError, alive


def summary(env: Devenv) -> str:
    state = env.state
    lines = [
        f"metalclaim devenv in {env.directory}",
        f"  kubernetes {state['versions']['kubernetes']}, etcd {state['versions']['etcd']}"
        + (f", started in {state['startup_seconds']}s" if "startup_seconds" in state else ""),
        f"  apiserver  {state['apiserver']}",
    ]
    if "vms" in state:
        lines.append(f"  redfish    {state['redfish']['endpoint']} ({len(state['vms']['systems'])} VMs, basic auth)")
        lines.append(f"  media      {state['vms']['media_url']} (as guests see it; dir {state['vms']['media_dir']})")
        lines.append(f"  images     {state['vms']['images_url']} (as guests see it; dir {state['vms']['images_dir']})")
        lines += [f"  serial     {s['name']}: {s['serial_log']}" for s in state["vms"]["systems"]]
    elif "redfish" in state:
        lines.append(f"  redfish    {state['redfish']['endpoint']} ({state['fleet_size']} systems, basic auth)")
    if "node" in state:
        lines.append(f"  node       {state['node']['name']} (kubelet, containerd {state['node']['containerd']})")
    if "cluster_api" in state:
        record = state["cluster_api"]
        lines.append(
            f"  cluster-api {record['version']} core manager, webhooks {record['webhook_url']}, log {record['log']}"
        )
    lines.append(
        "  processes  " + ", ".join(f"{name}={'up' if alive(pid) else 'DOWN'}" for name, pid in env.processes().items())
    )
    lines.append("  kubeconfigs (export KUBECONFIG=... or pass --kubeconfig):")
    lines += [f"    {identity:<11} {path}" for identity, path in state["kubeconfigs"].items()]
    lines.append(f"  kubectl    {state['binaries']['kubectl']}")
    lines.append(f"  state      {env.directory / 'devenv.json'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metalclaim_dev.devenv", description=__doc__)
    parser.add_argument("command", choices=("up", "status", "down"))
    parser.add_argument("--dir", type=Path, default=Path(".devenv"), help="where state, logs and certs live")
    parser.add_argument("--hosts", type=int, default=4, help="emulated Redfish systems (and BareMetalHosts)")
    parser.add_argument("--vms", type=int, default=0, help="real VMs (libvirt, QEMU) instead of emulated systems")
    parser.add_argument(
        "--clusters",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: also a hardware cluster in DIR/hardware (its own fleet) and tenant-a's kubeconfig for remote claims",
    )
    parser.add_argument("--no-register", action="store_true", help="start the systems without creating BareMetalHosts")
    parser.add_argument("--bare", action="store_true", help="only the control plane: no CRDs, RBAC or fleet")
    parser.add_argument(
        "--node",
        action="store_true",
        help="also a node (kubelet, kube-scheduler, containerd) that runs pods: root; metalclaim_dev.devenv.node",
    )
    parser.add_argument(
        "--capi", action="store_true", help="also Cluster API's core manager (metalclaim_dev.devenv.capi)"
    )
    parser.add_argument("--json", action="store_true", help="print the state file instead of a summary")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            existing = Devenv.load(args.dir.resolve())
            if existing is not None and "node" in existing.state:  # Devenv.up replaces it: its node goes first
                same = existing.state.get("fleet_size") == args.hosts and existing.vm_count == args.vms
                if not (same and existing.healthy()):
                    node.down(existing)
            env = Devenv.up(args.dir, args.hosts, register=not args.no_register, bare=args.bare, vm_count=args.vms)
            if args.clusters == 2:
                clusters.up(env, args.hosts)
            if args.node:
                node.up(env)
            if args.capi:
                capi.start(env)
        else:
            env = Devenv.load(args.dir.resolve())
            if env is None:
                print(f"no devenv in {args.dir}", file=sys.stderr)
                return 0 if args.command == "down" else 1
            if args.command == "down":
                hardware = clusters.load(env.directory)
                if hardware is not None:  # its processes live under this directory: stopped before it goes
                    hardware.down()
                node.down(env)  # its pods, mounts and cgroups before the processes and the directory go
                env.down()
                print(f"devenv in {env.directory} stopped and removed")
                return 0
    except DevenvError as error:
        print(f"devenv: {error}", file=sys.stderr)
        return 1
    hardware = clusters.load(env.directory)
    if args.json:
        print(json.dumps({**env.state, **({"hardware": hardware.state} if hardware else {})}, indent=2))
    else:
        print(summary(env))
        if hardware is not None:
            print(summary(hardware).replace("metalclaim devenv", "hardware cluster", 1))
            print(clusters.summary())
    return 0 if env.healthy() and (hardware is None or hardware.healthy()) else 1


if __name__ == "__main__":
    sys.exit(main())
