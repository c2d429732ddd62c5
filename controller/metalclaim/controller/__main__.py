"""metalclaim-controller: reconcile HostClaims and provision BareMetalHosts on API events.

Every flag may also be given as an environment variable: --batch-max-wait is
METALCLAIM_BATCH_MAX_WAIT. Flags win over variables. Durations are seconds (15, 0.25)
or Go durations as Kubernetes components take them (15s, 250ms, 2m, 1h30m). A boolean
flag alone means true (--leader-elect); it also takes true or false (--leader-elect=false).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import os
import signal
import ssl
import sys
import threading
import time

from . import collection, logconfig, serving
from .cgroup import cpu_limit, slots_for
from .settings import GROUPS, Settings, boolean, conflicts, duration, flags  # noqa: F401 (duration: the tests')

ENV_PREFIX = "METALCLAIM_"
_bool = boolean  # the parsers the flags' tests name


def _env(flag: str, default):
    return os.environ.get(ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper(), default)


def _version() -> str:
    try:
        return importlib.metadata.version("metalclaim")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def parser() -> argparse.ArgumentParser:
    """One flag per Settings field (settings.py), in the sections its metadata names, in the order of its fields."""
    p = argparse.ArgumentParser(
        prog="metalclaim-controller",
        usage="%(prog)s [flags]  (--help lists them)",
        description=__doc__.split("\n", 1)[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sections = {title: p.add_argument_group(title) for title in GROUPS}
    for _name, flag in flags():
        kwargs = {"metavar": flag.shown_metavar}
        if flag.parse is boolean:  # alone: true (--leader-elect), as Kubernetes components take their boolean flags
            kwargs.update(nargs="?", const=True)
        if flag.choices is not None:
            kwargs["choices"] = flag.choices
        default = _env(flag.name, flag.default)
        # A default made at start (--identity) is described, never made here: --help says the same each time.
        shown = flag.shown if flag.shown and default == flag.default else "%(default)s"
        sections[flag.group].add_argument(
            flag.name, default=default, type=flag.parse, help=f"{flag.help} (default: {shown})", **kwargs
        )
    return p


def settings_from(p: argparse.ArgumentParser, args: argparse.Namespace, late: bool) -> dict:
    """The fields of the flags converted at this stage (late: those that need the collection); a value refused is a
    flag error (argparse's: usage, exit 2)."""
    values = {}
    for name, flag in flags():
        if flag.late is not late:
            continue
        parsed = getattr(args, name)
        try:
            values[name] = flag.value(parsed)
        except ValueError as error:
            p.error(str(error))
        why = flag.check(values[name]) if flag.check is not None else None
        if why:
            p.error(f"{flag.name} {parsed}: {why}")
    return values


def _resolved(settings: Settings) -> Settings:
    """The runner slots and batching the mode and the CPU limit make of the flags."""
    if settings.mode == "per-event":  # one key per run, no wait to collect more, one run per CPU at once
        return dataclasses.replace(
            settings,
            batch_quiet=0.0,
            batch_max_wait=0.0,
            batch_max_size=1,
            runner_slots=settings.runner_slots or os.cpu_count() or 1,
        )
    return dataclasses.replace(settings, runner_slots=settings.runner_slots or slots_for(cpu_limit()))


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


def _metrics_server(settings: Settings, controller, api_client):
    """/metrics: over HTTPS behind a TokenReview and a SubjectAccessReview (metricsauth), or plain when told."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from .manager import log
    from .metricsauth import Guard

    routes = {"/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(controller.metrics.registry))}
    if not settings.metrics_secure:
        return serving.serve(settings.metrics_bind_address, routes)
    if settings.metrics_bind_address in ("0", ""):
        return None
    try:
        certificates = (
            serving.Certificates.from_dir(settings.metrics_cert_dir)
            if settings.metrics_cert_dir
            else serving.Certificates.self_signed()
        )
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"--metrics-cert-dir {settings.metrics_cert_dir}: {error}") from None
    reviews = serving.ApiReviews(api_client)
    guard = Guard(reviews.token, reviews.access, clock=time.monotonic, on_review=controller.metrics.reviewed)
    return serving.serve(settings.metrics_bind_address, routes, certificates=certificates, guard=guard, log=log)


def _probes_server(settings: Settings, controller):
    """/healthz and /readyz: plain HTTP, for the kubelet."""
    return serving.serve(
        settings.health_probe_bind_address,
        {
            "/healthz": lambda: (200, "text/plain", b"ok\n") if controller.alive() else (500, "text/plain", b"dead\n"),
            "/readyz": lambda: (
                (200, "text/plain", b"ok\n") if controller.synced() else (503, "text/plain", b"stores not synced\n")
            ),
        },
    )


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    values = settings_from(p, args, late=False)
    for error in conflicts(values):
        p.error(error)
    logconfig.configure(args.log_level)  # every line on stderr one JSON object, whoever logs it
    try:
        collection.import_path()
    except FileNotFoundError as error:  # the controller only runs the collection's playbooks
        return _fail(f"{error} (ANSIBLE_COLLECTIONS_PATH; ansible-galaxy collection install metalclaim.hostclaim)")
    settings = Settings(**values, **settings_from(p, args, late=True))
    settings = _resolved(settings)
    import yaml
    from kubernetes.config import ConfigException

    from .manager import Controller

    try:
        api_client = _api_client(settings.kubeconfig)
    except (ConfigException, OSError, yaml.YAMLError, TypeError, ValueError, KeyError, AttributeError) as error:
        where = f"--kubeconfig {settings.kubeconfig}" if settings.kubeconfig else "not in a pod, the default kubeconfig"
        return _fail(f"{where}: {error}")
    controller = Controller(settings, api_client)
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()

    # Before the probes answer: a SIGTERM from the first moment stops the controller cleanly.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        servers = [_metrics_server(settings, controller, api_client), _probes_server(settings, controller)]
    except (OSError, ValueError) as error:  # the certificate files, or an address taken
        return _fail(str(error))
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
