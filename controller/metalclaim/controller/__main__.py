"""metalclaim-controller: reconcile HostClaims and provision BareMetalHosts on API events.

Every flag may also be given as an environment variable: --batch-max-wait is
METALCLAIM_BATCH_MAX_WAIT. Flags win over variables.
"""

from __future__ import annotations

import argparse
import http.server
import logging
import os
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


def _env(flag: str, default):
    return os.environ.get(ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper(), default)


def _bool(value) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="metalclaim-controller",
        description=__doc__.split("\n", 1)[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    def add(flag, help_text, default=None, type_=str, **kwargs):
        p.add_argument(
            flag, default=_env(flag, default), type=type_, help=f"{help_text} (default: %(default)s)", **kwargs
        )

    add("--kubeconfig", "kubeconfig for the API server; unset: in-cluster service account, then ~/.kube/config")
    add("--infra-namespaces", "comma-separated namespaces of BareMetalHosts and HostDeployPolicies; empty: all", "")
    add("--resync-period", "seconds between full resyncs", 600.0, float)
    add("--batch-quiet", "seconds without a new key that close a batch", 0.02, float)
    add("--batch-max-wait", "seconds after which a batch is cut however busy", 0.25, float)
    add("--batch-max-size", "keys per run at most", 1000, int)
    add(
        "--private-data-dir", "ansible-runner's private data dir (artifacts rotate there)", "/tmp/metalclaim-controller"
    )
    add("--keep-artifacts", "run artifact directories kept per runner slot", 20, int)
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
    add("--standby-max-age", "seconds an idle standby run waits before it is replaced by a fresh one", 300.0, float)
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
        "seconds a deploy or cleaning waits for the image writer's callback before it is a provisioning error "
        "(retried after backoff); 0: the provision role's default (1800)",
        0.0,
        float,
    )
    add(
        "--provision-power-poll-interval",
        "seconds after which a settled host's power is read again, so a change made behind our back shows on the "
        "host and its claim within this; 0: the provision role's default (60)",
        0.0,
        float,
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
    add("--leader-elect-lease-duration", "seconds a follower waits before taking an unrenewed Lease", 15.0, float)
    add("--leader-elect-renew-deadline", "seconds the leader keeps trying to renew before giving up", 10.0, float)
    add("--leader-elect-retry-period", "seconds between Lease attempts", 2.0, float)
    add("--identity", "this instance's Lease holder identity", f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}")
    add("--metrics-bind-address", "address of /metrics; 0 disables it", "127.0.0.1:8080")
    add("--health-probe-bind-address", "address of /healthz and /readyz; 0 disables them", "127.0.0.1:8081")
    add("--grace-period", "seconds a stop waits for the run in progress before cancelling it", 20.0, float)
    add("--log-level", "DEBUG, INFO, WARNING or ERROR", "INFO")
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


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        scope = Scope(sides=parse_sides(args.controllers), shard=parse_shard(args.shard))
        tenant_claim_side_subject = parse_subject(args.tenant_claim_side)
    except ValueError as error:
        parser().error(str(error))
    if args.runner_slots < 0:
        parser().error(f"--runner-slots {args.runner_slots}: 0 (from the CPU limit) or more")
    if args.mode == "per-event" and args.standby:
        parser().error("--standby works in batch mode only (per-event is the baseline without it)")
    if args.provision_power_poll_interval < 0:
        parser().error(f"--provision-power-poll-interval {args.provision_power_poll_interval}: seconds, 0 or more")
    if args.provision_callback_timeout < 0:
        parser().error(f"--provision-callback-timeout {args.provision_callback_timeout}: seconds, 0 or more")
    if args.provision_max_concurrent < 0:
        parser().error(f"--provision-max-concurrent {args.provision_max_concurrent}: a count of hosts, 0 or more")
    if not 0 < args.standby_max_age < JOB_TIMEOUT / 2:
        parser().error(f"--standby-max-age {args.standby_max_age}: seconds, below half a run's limit ({JOB_TIMEOUT} s)")
    batching = {
        "batch_quiet": args.batch_quiet,
        "batch_max_wait": args.batch_max_wait,
        "batch_max_size": args.batch_max_size,
        "runner_slots": args.runner_slots or slots_for(cpu_limit()),
    }
    if args.mode == "per-event":  # one key per run, no wait to collect more, one run per CPU at once
        batching = {"batch_quiet": 0.0, "batch_max_wait": 0.0, "batch_max_size": 1}
        batching["runner_slots"] = args.runner_slots or os.cpu_count() or 1
    logging.basicConfig(level=args.log_level.upper(), format="%(message)s", stream=sys.stderr)
    collection.import_path()
    from . import mapper  # the claim kinds are the collection's names

    try:
        kinds = mapper.parse_kinds(args.kinds)
        remote_allowed_namespaces = mapper.parse_allowed_namespaces(args.remote_allowed_namespaces)
    except ValueError as error:
        parser().error(str(error))
    from kubernetes import config as kube_config
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from .manager import Controller, Settings

    if args.kubeconfig:
        api_client = kube_config.new_client_from_config(config_file=args.kubeconfig)
    else:
        try:
            kube_config.load_incluster_config()
            from kubernetes import client as kube_client

            api_client = kube_client.ApiClient()
        except kube_config.ConfigException:
            api_client = kube_config.new_client_from_config()
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
