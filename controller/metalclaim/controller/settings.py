"""The controller's settings, each field one flag: its name, default as typed, help, parser, range, section of
--help and metavar in one place.

`__main__` builds the command line from these fields (`Flag` in each field's metadata) and the `Settings` from
what it parsed; a field's default is its flag's default parsed, so a `Settings()` made by a test is what the
command line gives without flags (a fresh `--identity` each, as each process makes one at start). Options the
collection's roles also take default to 0 or empty here: the controller passes only the options set (groups.py),
so the role's default is the one source of theirs.

Importable without the collection: the claim kinds and remote patterns are checked once it is found (`late`).
"""

from __future__ import annotations

import argparse
import math
import re
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path

from .metricsauth import ALLOWED_TTL, REFUSED_TTL
from .runs import JOB_TIMEOUT
from .scope import DEFAULT_SIDES, Scope, parse_shard, parse_sides, parse_subject

MODES = ("batch", "per-event")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
CLEANING_ERASES = ("metadata", "full")
TRUE = ("1", "t", "true", "y", "yes", "on")
FALSE = ("0", "f", "false", "n", "no", "off")
# A Go duration (time.ParseDuration, as kube-controller-manager's flags take them): 15s, 1h30m, 1.5h, 250ms.
DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def boolean(value: str) -> bool:
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


def _names(text: str) -> tuple[str, ...]:
    return tuple(name for name in text.split(",") if name)


def _kinds(text: str) -> tuple[str, ...]:
    from . import mapper  # the claim kinds are the collection's names

    return mapper.parse_kinds(text)


def _allowed_namespaces(text: str) -> tuple[str, ...]:
    from . import mapper

    return mapper.parse_allowed_namespaces(text)


IDENTITY_SHOWN = "<hostname>_<random>, made at start"


def _identity(text: str) -> str:
    """The Lease holder identity given, or one made now (at start: once per process, never at each --help)."""
    return text or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _at_least_zero(why: str) -> Callable[[float], str | None]:
    return lambda value: None if value >= 0 else why


# --help's sections, in this order; each flag names its own (Flag.group).
SIDES_GROUP = "API server and sides"
RUNS_GROUP = "runs and batches"
LEADER_GROUP = "leader election"
CLAIMS_GROUP = "claim side"
PROVISIONER_GROUP = "provisioner side"
MEDIA_GROUP = "media server"
TENANTS_GROUP = "tenants side"
SERVING_GROUP = "metrics and health"
LOGGING_GROUP = "logging"
GROUPS = (
    SIDES_GROUP,
    RUNS_GROUP,
    LEADER_GROUP,
    CLAIMS_GROUP,
    PROVISIONER_GROUP,
    MEDIA_GROUP,
    TENANTS_GROUP,
    SERVING_GROUP,
    LOGGING_GROUP,
)
# The metavar of a flag parsed so; a string flag names its own (Flag.metavar): one style, a noun in capitals.
METAVARS = {duration: "DURATION", int: "N", boolean: "BOOL"}


@dataclass(frozen=True)
class Flag:
    name: str  # --flag-name; the field is its name in snake case, its variable METALCLAIM_FLAG_NAME
    default: object  # as typed (shown in --help)
    help: str
    parse: Callable = str  # argparse's type: str, int, duration, boolean
    choices: tuple | None = None
    convert: Callable | None = None  # the parsed value -> the field's (a ValueError is a flag error)
    check: Callable | None = None  # the field's value -> why it is refused, or None
    late: bool = False  # converted once the collection is found
    group: str = ""  # its section of --help (GROUPS)
    metavar: str = ""  # what --help calls its value; empty: METAVARS' for its parser
    shown: str = ""  # --help's default when it is made at start rather than typed (--identity)

    def value(self, parsed):
        """The field's value from argparse's (the flag's, its variable's or its default as typed)."""
        return parsed if self.convert is None else self.convert(parsed)

    def field_default(self):
        text = self.default
        return self.value(self.parse(text) if isinstance(text, str) else text)

    @property
    def shown_metavar(self) -> str:
        return self.metavar or METAVARS.get(self.parse, "VALUE")


def option(name, default, help_text, parse=str, **kwargs):
    """A Settings field that is the flag `name`; its default is the flag's, parsed."""
    flag = Flag(name, default, help_text, parse, **kwargs)
    return field(default_factory=flag.field_default, metadata={"flag": flag})


def flags() -> list[tuple[str, Flag]]:
    """(field name, Flag) for each flag, in the order --help lists them within their sections."""
    return [(f.name, f.metadata["flag"]) for f in fields(Settings) if "flag" in f.metadata]


@dataclass
class Settings:
    # -- API server and sides
    kubeconfig: str | None = option(
        "--kubeconfig",
        None,
        "kubeconfig for the API server; unset: in-cluster service account, then ~/.kube/config",
        group=SIDES_GROUP,
        metavar="PATH",
    )
    controllers: tuple = option(
        "--controllers",
        ",".join(DEFAULT_SIDES),
        "comma-separated sides to run, each best as its own identity: claims (reconcile.yml: HostClaims, tenant "
        "Secrets, copies beside hosts), provisioner (provision.yml: BareMetalHosts over Redfish, BMC Secrets), "
        "tenants (tenant.yml: Tenants' namespaces, RoleBindings, quotas, policies; opt-in)",
        convert=parse_sides,
        group=SIDES_GROUP,
        metavar="NAMES",
    )
    infra_namespaces: tuple = option(
        "--infra-namespaces",
        "",
        "comma-separated namespaces of BareMetalHosts and HostDeployPolicies; empty: all",
        convert=_names,
        group=SIDES_GROUP,
        metavar="NAMES",
    )
    shard: tuple = option(
        "--shard",
        "0/1",
        "i/n: serve the claims and hosts whose namespace hashes to shard i of n (a Lease each)",
        convert=parse_shard,
        group=SIDES_GROUP,
        metavar="I/N",
    )
    namespace_selector: str = option(
        "--namespace-selector",
        "",
        "label selector of the claim namespaces served (e.g. metalclaim.io/role=tenant)",
        group=SIDES_GROUP,
        metavar="SELECTOR",
    )
    resync_period: float = option("--resync-period", "10m", "time between full resyncs", duration, group=SIDES_GROUP)
    # -- runs and batches
    mode: str = option(
        "--mode",
        "batch",
        "batch: a run reconciles every key ready (a batch); per-event: one run per key, --runner-slots at once "
        "(default: one per CPU), the Operator SDK Ansible operator's model, kept as a benchmark baseline",
        choices=MODES,
        group=RUNS_GROUP,
        metavar="MODE",
    )
    batch_quiet: float = option(
        "--batch-quiet", "5ms", "time without a new key that closes a batch", duration, group=RUNS_GROUP
    )
    batch_max_wait: float = option(
        "--batch-max-wait", "250ms", "time after which a batch is cut however busy", duration, group=RUNS_GROUP
    )
    batch_max_size: int = option("--batch-max-size", 1000, "keys per run at most", int, group=RUNS_GROUP)
    resync_batch_max_size: int = option(
        "--resync-batch-max-size",
        100,
        "keys per run at most when a run starts with resync keys: a live key waits for one such run at most",
        int,
        group=RUNS_GROUP,
    )
    runner_slots: int = option(
        "--runner-slots",
        0,
        "ansible-runner runs at once; 0: one per whole CPU of the cgroup's limit, 1 without",
        int,
        check=_at_least_zero("0 (from the CPU limit) or more"),
        group=RUNS_GROUP,
    )
    standby: bool = option(
        "--standby",
        "false",
        "start each run ahead, so a batch goes to a run already past its start-up (batch mode): the claim side's "
        "runs, or a provisioner's alone in its process",
        boolean,
        group=RUNS_GROUP,
    )
    standby_max_age: float = option(
        "--standby-max-age",
        "5m",
        "time an idle standby run waits before it is replaced by a fresh one",
        duration,
        check=lambda age: None if 0 < age < JOB_TIMEOUT / 2 else f"seconds, below half a run's limit ({JOB_TIMEOUT} s)",
        group=RUNS_GROUP,
    )
    private_data_dir: Path = option(  # noqa: RUF009 (a dataclasses.field: a fresh default each)
        "--private-data-dir",
        "/tmp/metalclaim-controller",
        "ansible-runner's private data dir (artifacts rotate there)",
        convert=Path,
        group=RUNS_GROUP,
        metavar="PATH",
    )
    keep_artifacts: int = option(
        "--keep-artifacts",
        20,
        "run artifact directories kept per runner slot; each holds at most 585 KiB (events and stdout cut, whatever "
        "the results hold) plus its command line (the batch's keys): under 1 MiB with --batch-max-size 1000",
        int,
        group=RUNS_GROUP,
    )
    grace_period: float = option(
        "--grace-period",
        "20s",
        "time a stop waits for the run in progress before cancelling it",
        duration,
        group=RUNS_GROUP,
    )
    # -- leader election
    leader_elect: bool = option(
        "--leader-elect", "false", "hold a Lease so only one instance dispatches", boolean, group=LEADER_GROUP
    )
    leader_election_namespace: str = option(
        "--leader-election-namespace",
        "metalclaim-system",
        "namespace of the Lease",
        group=LEADER_GROUP,
        metavar="NAMESPACE",
    )
    leader_election_id: str = option(
        "--leader-election-id",
        "metalclaim-controller",
        "name of the Lease (a shard i/n adds -shard-i-of-n)",
        group=LEADER_GROUP,
        metavar="NAME",
    )
    leader_elect_lease_duration: float = option(
        "--leader-elect-lease-duration",
        "15s",
        "time a follower waits before taking an unrenewed Lease",
        duration,
        group=LEADER_GROUP,
    )
    leader_elect_renew_deadline: float = option(
        "--leader-elect-renew-deadline",
        "10s",
        "time the leader keeps trying to renew before giving up",
        duration,
        group=LEADER_GROUP,
    )
    leader_elect_retry_period: float = option(
        "--leader-elect-retry-period", "2s", "time between Lease attempts", duration, group=LEADER_GROUP
    )
    identity: str = option(
        "--identity",
        "",
        "this instance's Lease holder identity",
        convert=_identity,
        group=LEADER_GROUP,
        metavar="NAME",
        shown=IDENTITY_SHOWN,
    )
    # -- claim side
    kinds: tuple = option(
        "--kinds",
        "baremetal",
        "comma-separated claim kinds (spec.kind) the claims side serves: baremetal (reconcile.yml: hosts of this "
        "cluster), remote (remote.yml: mirrored into a hardware cluster); claims of other kinds are left alone",
        convert=_kinds,
        late=True,
        group=CLAIMS_GROUP,
        metavar="NAMES",
    )
    remote_allowed_namespaces: tuple = option(
        "--remote-allowed-namespaces",
        "",
        "kind remote: comma-separated regular expressions (full match) a kubeconfig's context namespace must match "
        "in the hardware cluster; empty: any namespace its identity may use",
        convert=_allowed_namespaces,
        late=True,
        group=CLAIMS_GROUP,
        metavar="PATTERNS",
    )
    catalog_interval: float = option(
        "--catalog-interval",
        "10s",
        "a tenant namespace's HostCatalog is counted at most once per this time, however many host events come (it "
        "waits this long after the first)",
        duration,
        check=_at_least_zero("0 (at once) or more"),
        group=CLAIMS_GROUP,
    )
    cluster_api: bool = option(
        "--cluster-api",
        "false",
        "serve Cluster API's MetalClaimMachines and MetalClaimClusters (capi_machines.yml, capi_clusters.yml): "
        "watches Cluster API's Machines and Clusters, so Cluster API's CRDs must be installed",
        boolean,
        group=CLAIMS_GROUP,
    )
    watch_secrets: bool = option(
        "--watch-secrets",
        "true",
        "watch Secrets' metadata in each namespace holding claims (false: tenant Secret edits are seen at resync)",
        boolean,
        group=CLAIMS_GROUP,
    )
    # -- provisioner side
    deploy_iso_url: str = option(
        "--deploy-iso-url", "", "deploy ISO for disk images and cleaning", group=PROVISIONER_GROUP, metavar="URL"
    )
    provision_max_concurrent: int = option(
        "--provision-max-concurrent",
        0,
        "hosts provisioning or deprovisioning at once across the fleet; 0: the provision role's default",
        int,
        check=_at_least_zero("a count of hosts, 0 or more"),
        group=PROVISIONER_GROUP,
    )
    provision_callback_timeout: float = option(
        "--provision-callback-timeout",
        "0",
        "time a deploy or cleaning waits for the image writer's callback before it is a provisioning error "
        "(retried after backoff); 0: the bmh_redfish module's default (its callback_timeout)",
        duration,
        check=_at_least_zero("seconds, 0 or more"),
        group=PROVISIONER_GROUP,
    )
    provision_power_poll_interval: float = option(
        "--provision-power-poll-interval",
        "0",
        "time after which a settled host's power is read again, so a change made behind our back shows on the "
        "host and its claim within this; 0: the bmh_redfish module's default (its power_poll_interval)",
        duration,
        check=_at_least_zero("seconds, 0 or more"),
        group=PROVISIONER_GROUP,
    )
    provision_cleaning_erase: str = option(
        "--provision-cleaning-erase",
        "",
        "how deep automated cleaning goes: metadata (partition tables and signatures) or full (every byte of every "
        "disk zeroed); unset: the provision role's default (provisioner_cleaning_erase)",
        choices=CLEANING_ERASES,
        check=lambda erase: None if erase in ("", *CLEANING_ERASES) else "metadata or full",
        group=PROVISIONER_GROUP,
        metavar="ERASE",
    )
    # -- media server
    media_dir: str = option(
        "--media-dir",
        "",
        "media server directory (config drives); the provisioner side also watches the image writers' callbacks "
        "there, each waking its host at once",
        group=MEDIA_GROUP,
        metavar="PATH",
    )
    media_url: str = option("--media-url", "", "media server URL as BMCs reach it", group=MEDIA_GROUP, metavar="URL")
    # -- tenants side
    tenant_claim_side: dict = option(  # noqa: RUF009 (a dataclasses.field: a fresh default each)
        "--tenant-claim-side",
        "serviceaccount:metalclaim-system:metalclaim-controller",
        "the claim side's identity, given read access to Secrets in each tenant namespace "
        "(user:NAME, group:NAME or serviceaccount:NAMESPACE:NAME)",
        convert=parse_subject,
        group=TENANTS_GROUP,
        metavar="SUBJECT",
    )
    tenant_required_prefix: str = option(
        "--tenant-required-prefix",
        "",
        "a prefix every tenantName must start with",
        group=TENANTS_GROUP,
        metavar="PREFIX",
    )
    # -- metrics and health
    metrics_bind_address: str = option(
        "--metrics-bind-address",
        "127.0.0.1:8443",
        "address of /metrics (HTTPS, unless --metrics-secure=false); 0 disables it",
        group=SERVING_GROUP,
        metavar="ADDRESS",
    )
    metrics_secure: bool = option(
        "--metrics-secure",
        "true",
        "serve /metrics over HTTPS to callers whose bearer token the API server authenticates (a TokenReview) and "
        "authorizes for get /metrics (a SubjectAccessReview; ClusterRole metalclaim-metrics-reader): 401 without "
        f"a valid token, 403 without the right; both reviews' answers kept {ALLOWED_TTL:g} s ({REFUSED_TTL:g} s when "
        "refused). false: plain HTTP, anyone who reaches the address reads the metrics",
        boolean,
        group=SERVING_GROUP,
    )
    metrics_cert_dir: str = option(
        "--metrics-cert-dir",
        "",
        "directory of the metrics serving certificate, tls.crt and tls.key (a cert-manager Secret, mounted), read "
        "again when they change; empty: a self-signed certificate made in memory at start",
        group=SERVING_GROUP,
        metavar="PATH",
    )
    health_probe_bind_address: str = option(
        "--health-probe-bind-address",
        "127.0.0.1:8081",
        "address of /healthz and /readyz (plain HTTP, no authentication: the kubelet's); 0 disables them",
        group=SERVING_GROUP,
        metavar="ADDRESS",
    )
    # -- logging
    log_level: str = option(
        "--log-level",
        "INFO",
        "DEBUG, INFO, WARNING or ERROR",
        str.upper,
        choices=LOG_LEVELS,
        group=LOGGING_GROUP,
        metavar="LEVEL",
    )

    @cached_property
    def scope(self) -> Scope:
        """The sides (--controllers) and the shard (--shard) this controller serves."""
        return Scope(sides=self.controllers, shard=self.shard)

    @property
    def lease_name(self) -> str:
        """The Lease this instance elects on: --leader-election-id, with its shard's suffix."""
        return self.scope.lease_name(self.leader_election_id)


def conflicts(values: dict) -> list[str]:
    """Why flags, each fine alone, do not go together (a flag error each)."""
    why = []
    if values.get("mode") == "per-event" and values.get("standby"):
        why.append("--standby works in batch mode only (per-event is the baseline without it)")
    if values.get("metrics_cert_dir") and values.get("metrics_secure") is False:
        why.append("--metrics-cert-dir serves HTTPS: it goes with --metrics-secure=true only")
    return why
