"""metalclaim-controller: reconcile HostClaims and provision BareMetalHosts on API events.

Every flag may also be given as an environment variable: --batch-max-wait is
METALCLAIM_BATCH_MAX_WAIT. Flags win over variables. Durations are seconds (15, 0.25)
or Go durations as Kubernetes components take them (15s, 250ms, 2m, 1h30m). A boolean
flag alone means true (--leader-elect); it also takes true or false (--leader-elect=false).
"""

from __future__ import annotations

import argparse
import http.server
import importlib.metadata
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import uuid
from pathlib import Path

from . import collection
from .cgroup import cpu_limit, slots_for
from .runs import JOB_TIMEOUT
from .scope import DEFAULT_SIDES, Scope, parse_shard, parse_sides, parse_subject

ENV_PREFIX = "METALCLAIM_"
MODES = ("batch", "per-event")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
TRUE = ("1", "t", "true", "y", "yes", "on")
FALSE = ("0", "f", "false", "n", "no", "off")
# A Go duration (time.ParseDuration, as kube-controller-manager's flags take them): 15s, 1h30m, 1.5h, 250ms.
DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def _env(flag: str, default):
    return os.environ.get(ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper(), default)


def _bool(value: str) -> bool:
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not a boolean: true or false (or 1/0, yes/no, on/off)")


def duration(value: str) -> float:
    """Seconds: a number (15, 0.25, -5 for the range checks to name) or a Go duration (15s, 2m, 1h30m, 250ms)."""
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    parts = DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration: seconds (15) or 15s, 2m, 1h30m, 250ms")
    return sign * sum(float(number) * DURATION_UNITS[unit] for number, unit in parts)


def _version() -> str:
    try:
        return importlib.metadata.version("metalclaim")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="metalclaim-controller",
        usage="%(prog)s [flags]  (--help lists them)",
        description=__doc__.split("\n", 1)[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    def add(flag, help_text, default=None, type_=str, **kwargs):
        if type_ is _bool:  # alone: true (--leader-elect), as Kubernetes components take their boolean flags
            kwargs.update(nargs="?", const=True, metavar="true|false")
        elif type_ is duration:
            kwargs.setdefault("metavar", "DURATION")
        p.add_argument(
            flag, default=_env(flag, default), type=type_, help=f"{help_text} (default: %(default)s)", **kwargs
        )

    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")

    add("--kubeconfig", "kubeconfig for the API server; unset: in-cluster service account, then ~/.kube/config")
    add("--infra-namespaces", "comma-separated namespaces of BareMetalHosts and HostDeployPolicies; empty: all", "")
    add("--resync-period", "time between full resyncs", "10m", duration)
    add("--batch-quiet", "time without a new key that closes a batch", "20ms", duration)
    add("--batch-max-wait", "time after which a batch is cut however busy", "250ms", duration)
    add("--batch-max-size", "keys per run at most", 1000, int)
    add(
        "--private-data-dir", "ansible-runner's private data dir (artifacts rotate there)", "/tmp/metalclaim-controller"
    )
    add(
        "--keep-artifacts",
        "run artifact directories kept per runner slot; each holds at most 585 KiB (events and stdout cut, whatever "
        "the results hold) plus its command line (the batch's keys): under 1 MiB with --batch-max-size 1000",
        20,
        int,
    )
    add(
        "--mode",
        "batch: a run reconciles every key ready (a batch); per-event: one run per key, --runner-slots at once "
        "(default: one per CPU), the Operator SDK Ansible operator's model, kept as a benchmark baseline",
        "batch",
        choices=MODES,
    )
    add(
        "--standby",
        "start each claim-side run ahead, so a batch goes to a run already past its start-up (batch mode)",
        "false",
        _bool,
    )
    add("--standby-max-age", "time an idle standby run waits before it is replaced by a fresh one", "5m", duration)
    add("--runner-slots", "ansible-runner runs at once; 0: one per whole CPU of the cgroup's limit, 1 without", 0, int)
    add(
        "--controllers",
        "comma-separated sides to run, each best as its own identity: claims (reconcile.yml: HostClaims, tenant "
        "Secrets, copies beside hosts), provisioner (provision.yml: BareMetalHosts over Redfish, BMC Secrets), "
        "tenants (tenant.yml: Tenants' namespaces, RoleBindings, quotas, policies; opt-in)",
        ",".join(DEFAULT_SIDES),
    )
    add(
        "--kinds",
        "comma-separated claim kinds (spec.kind) the claims side serves: baremetal (reconcile.yml: hosts of this "
        "cluster), remote (remote.yml: mirrored into a hardware cluster); claims of other kinds are left alone",
        "baremetal",
    )
    add(
        "--remote-allowed-namespaces",
        "kind remote: comma-separated regular expressions (full match) a kubeconfig's context namespace must match "
        "in the hardware cluster; empty: any namespace its identity may use",
        "",
    )
    add("--shard", "i/n: serve the claims and hosts whose namespace hashes to shard i of n (a Lease each)", "0/1")
    add("--namespace-selector", "label selector of the claim namespaces served (e.g. metalclaim.io/role=tenant)", "")
    add(
        "--tenant-claim-side",
        "tenants side: the claim side's identity, given read access to Secrets in each tenant namespace "
        "(user:NAME, group:NAME or serviceaccount:NAMESPACE:NAME)",
        "serviceaccount:metalclaim-system:metalclaim-controller",
    )
    add("--tenant-required-prefix", "tenants side: a prefix every tenantName must start with", "")
    add("--deploy-iso-url", "deploy ISO for disk images and cleaning", "")
    add("--media-dir", "media server directory (config drives)", "")
    add("--media-url", "media server URL as BMCs reach it", "")
    add(
        "--provision-max-concurrent",
        "hosts provisioning or deprovisioning at once across the fleet; 0: the provision role's default",
        0,
        int,
    )
    add(
        "--provision-callback-timeout",
        "time a deploy or cleaning waits for the image writer's callback before it is a provisioning error "
        "(retried after backoff); 0: the provision role's default (hostclaim_provision_callback_timeout)",
        "0",
        duration,
    )
    add(
        "--provision-power-poll-interval",
        "time after which a settled host's power is read again, so a change made behind our back shows on the "
        "host and its claim within this; 0: the provision role's default (hostclaim_provision_power_poll_interval)",
        "0",
        duration,
    )
    add(
        "--watch-secrets",
        "watch Secrets' metadata in each namespace holding claims (false: tenant Secret edits are seen at resync)",
        "true",
        _bool,
    )
    add("--leader-elect", "hold a Lease so only one instance dispatches", "false", _bool)
    add("--leader-election-namespace", "namespace of the Lease", "metalclaim-system")
    add("--leader-election-id", "name of the Lease (a shard i/n adds -shard-i-of-n)", "metalclaim-controller")
    add("--leader-elect-lease-duration", "time a follower waits before taking an unrenewed Lease", "15s", duration)
    add("--leader-elect-renew-deadline", "time the leader keeps trying to renew before giving up", "10s", duration)
    add("--leader-elect-retry-period", "time between Lease attempts", "2s", duration)
    add("--identity", "this instance's Lease holder identity", f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}")
    add("--metrics-bind-address", "address of /metrics; 0 disables it", "127.0.0.1:8080")
    add("--health-probe-bind-address", "address of /healthz and /readyz; 0 disables them", "127.0.0.1:8081")
    add("--grace-period", "time a stop waits for the run in progress before cancelling it", "20s", duration)
    add("--log-level", "DEBUG, INFO, WARNING or ERROR", "INFO", str.upper, choices=LOG_LEVELS)
    return p


def _serve(address: str, routes: dict) -> http.server.ThreadingHTTPServer | None:
    if address in ("0", ""):
        return None
    host, _colon, port = address.rpartition(":")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            route = routes.get(self.path.split("?")[0])
            if route is None:
                self.send_error(404)
                return
            status, content_type, body = route()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):  # probes every few seconds: not worth a log line
            pass

    server = http.server.ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    return server


def _fail(message: str) -> int:
    """What the flags could not tell: one line, exit 1 (a flag error is argparse's: usage, exit 2)."""
    print(f"metalclaim-controller: error: {' '.join(message.split())}", file=sys.stderr)
    return 1


def _api_client(kubeconfig: str):
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config

    if kubeconfig:
        return kube_config.new_client_from_config(config_file=kubeconfig)
    try:
        kube_config.load_incluster_config()
        return kube_client.ApiClient()
    except kube_config.ConfigException:
        return kube_config.new_client_from_config()


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        scope = Scope(sides=parse_sides(args.controllers), shard=parse_shard(args.shard))
        tenant_claim_side_subject = parse_subject(args.tenant_claim_side)
    except ValueError as error:
        p.error(str(error))
    if args.runner_slots < 0:
        p.error(f"--runner-slots {args.runner_slots}: 0 (from the CPU limit) or more")
    if args.mode == "per-event" and args.standby:
        p.error("--standby works in batch mode only (per-event is the baseline without it)")
    if args.provision_power_poll_interval < 0:
        p.error(f"--provision-power-poll-interval {args.provision_power_poll_interval}: seconds, 0 or more")
    if args.provision_callback_timeout < 0:
        p.error(f"--provision-callback-timeout {args.provision_callback_timeout}: seconds, 0 or more")
    if args.provision_max_concurrent < 0:
        p.error(f"--provision-max-concurrent {args.provision_max_concurrent}: a count of hosts, 0 or more")
    if not 0 < args.standby_max_age < JOB_TIMEOUT / 2:
        p.error(f"--standby-max-age {args.standby_max_age}: seconds, below half a run's limit ({JOB_TIMEOUT} s)")
    batching = {
        "batch_quiet": args.batch_quiet,
        "batch_max_wait": args.batch_max_wait,
        "batch_max_size": args.batch_max_size,
        "runner_slots": args.runner_slots or slots_for(cpu_limit()),
    }
    if args.mode == "per-event":  # one key per run, no wait to collect more, one run per CPU at once
        batching = {"batch_quiet": 0.0, "batch_max_wait": 0.0, "batch_max_size": 1}
        batching["runner_slots"] = args.runner_slots or os.cpu_count() or 1
    logging.basicConfig(level=args.log_level, format="%(message)s", stream=sys.stderr)
    try:
        collection.import_path()
    except FileNotFoundError as error:  # the controller only runs the collection's playbooks
        return _fail(f"{error} (ANSIBLE_COLLECTIONS_PATH; ansible-galaxy collection install metalclaim.hostclaim)")
    from . import mapper  # the claim kinds are the collection's names

    try:
        kinds = mapper.parse_kinds(args.kinds)
        remote_allowed_namespaces = mapper.parse_allowed_namespaces(args.remote_allowed_namespaces)
    except ValueError as error:
        p.error(str(error))
    import yaml
    from kubernetes.config import ConfigException
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from .manager import Controller, Settings

    try:
        api_client = _api_client(args.kubeconfig)
    except (ConfigException, OSError, yaml.YAMLError, TypeError, ValueError, KeyError, AttributeError) as error:
        where = f"--kubeconfig {args.kubeconfig}" if args.kubeconfig else "not in a pod, the default kubeconfig"
        return _fail(f"{where}: {error}")
    settings = Settings(
        kubeconfig=args.kubeconfig,
        infra_namespaces=tuple(n for n in args.infra_namespaces.split(",") if n),
        resync_period=args.resync_period,
        **batching,
        private_data_dir=Path(args.private_data_dir),
        keep_artifacts=args.keep_artifacts,
        scope=scope,
        kinds=kinds,
        remote_allowed_namespaces=remote_allowed_namespaces,
        namespace_selector=args.namespace_selector,
        deploy_iso_url=args.deploy_iso_url,
        provision_max_concurrent=args.provision_max_concurrent,
        provision_callback_timeout=args.provision_callback_timeout,
        provision_power_poll_interval=args.provision_power_poll_interval,
        media_dir=args.media_dir,
        media_url=args.media_url,
        watch_secrets=args.watch_secrets,
        standby=args.standby,
        standby_max_age=args.standby_max_age,
        tenant_claim_side_subject=tenant_claim_side_subject,
        tenant_required_prefix=args.tenant_required_prefix,
        leader_elect=args.leader_elect,
        leader_election_namespace=args.leader_election_namespace,
        leader_election_id=scope.lease_name(args.leader_election_id),
        identity=args.identity,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        grace_period=args.grace_period,
    )
    controller = Controller(settings, api_client)
    servers = [
        _serve(
            args.metrics_bind_address,
            {"/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(controller.metrics.registry))},
        ),
        _serve(
            args.health_probe_bind_address,
            {
                "/healthz": lambda: (
                    (200, "text/plain", b"ok\n") if controller.alive() else (500, "text/plain", b"dead\n")
                ),
                "/readyz": lambda: (
                    (200, "text/plain", b"ok\n") if controller.synced() else (503, "text/plain", b"stores not synced\n")
                ),
            },
        ),
    ]
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    controller.start()
    while not stopping.wait(0.5) and not controller.stop.is_set():
        pass
    controller.shutdown()
    for server in servers:
        if server is not None:
            server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
