"""The controller as a separate process of a test or a bench, and what they read from it (metrics, its runs)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from metalclaim_dev.claimlayer import TENANT_A, Rack
from metalclaim_dev.support import REPO_ROOT, eventually, free_port

PORT_ATTEMPTS = 3  # starts with fresh ports when one picked free was taken before the controller bound it


class ControllerProcess:
    """`metalclaim-controller` with *args as its own process: metrics and health on free ports, its private data
    in <directory>/runner, its log (JSON lines) in <directory>/controller.log.

    Its /metrics is plain HTTP on loopback, said explicitly (METALCLAIM_METRICS_SECURE=false), for the tests and
    benches that read it with `samples`/`metric`; secure_metrics=True leaves the controller's default, HTTPS behind
    a TokenReview and a SubjectAccessReview (`metrics_url`; tests/integration/test_metrics_auth.py)."""

    stop_timeout = 30  # seconds SIGTERM has before SIGKILL

    def __init__(
        self,
        devenv,
        directory,
        *args: str,
        kubeconfig_identity: str | None = "controller",
        command: tuple[str, ...] = (sys.executable, "-m", "metalclaim.controller"),
        env: dict[str, str] | None = None,
        cwd=None,
        resync_period: str | None = "3600",
        ready_timeout: float = 30,
        secure_metrics: bool = False,
    ):
        """command, env (the whole environment) and cwd run another install of the controller; by default
        this checkout's, with its collections path. resync_period: METALCLAIM_RESYNC_PERIOD (None: the
        controller's own default)."""
        self.secure_metrics = secure_metrics
        self.metrics_port, self.health_port = free_port(), free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.private = directory / "runner"
        self.log_path = directory / "controller.log"
        self.log = open(self.log_path, "w+")  # noqa: SIM115 (closed in stop())
        if env is None:
            env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections")}
        if resync_period is not None:
            env = {**env, "METALCLAIM_RESYNC_PERIOD": resync_period}
        # The flag's variable, not the flag: a controller of an older checkout (bench --old-rev) knows no
        # --metrics-secure, and serves plain HTTP anyway.
        env = {key: value for key, value in env.items() if key != "METALCLAIM_METRICS_SECURE"}
        if not secure_metrics:
            env["METALCLAIM_METRICS_SECURE"] = "false"
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.argv = [
                *command,
                *(["--kubeconfig", devenv.kubeconfig(kubeconfig_identity)] if kubeconfig_identity else []),
                "--private-data-dir",
                str(self.private),
                "--metrics-bind-address",
                f"127.0.0.1:{self.metrics_port}",
                "--health-probe-bind-address",
                f"127.0.0.1:{self.health_port}",
                *args,
            ]
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, env=env, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT
            )
            self.pid = self.process.pid
            try:
                eventually(
                    lambda: self._alive() and self.get(self.health_port, "/readyz")[0] == 200,
                    timeout=ready_timeout,
                    interval=0.1,
                    message=f"controller ready ({' '.join(args)})",
                )
                return
            except AssertionError as error:
                lost_port = self.process.poll() is not None and "Address already in use" in self.output()
                if lost_port and attempt < PORT_ATTEMPTS:
                    # A port free when picked was taken before the controller bound it (free_port checks, then
                    # lets go): pick others and start again, in a fresh log.
                    self.process.wait(10)
                    self.metrics_port, self.health_port = free_port(), free_port()
                    self.log.seek(0)
                    self.log.truncate()
                    continue
                self.stop()
                raise AssertionError(f"{error}:\n{self.output()}") from None

    def _alive(self) -> bool:
        # Checked before each readiness read: another process's server on a port we lost must not look like ours.
        assert self.process.poll() is None, f"the controller exited ({self.process.returncode}):\n{self.output()}"
        return True

    @property
    def metrics_url(self) -> str:
        return f"{'https' if self.secure_metrics else 'http'}://127.0.0.1:{self.metrics_port}/metrics"

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""
        except OSError:
            assert self.process.poll() is None, f"the controller exited ({self.process.returncode}):\n{self.output()}"
            return 0, ""

    def samples(self) -> list[tuple[str, dict, float]]:
        """Every Prometheus sample of /metrics (plain HTTP: secure_metrics False): (name, labels, value)."""
        assert not self.secure_metrics, "samples() reads plain /metrics: read a secure one with a token"
        _status, text = self.get(self.metrics_port, "/metrics")
        return prometheus_samples(text)

    def metric(self, name: str, **labels) -> float:
        """Sum of a metric's samples whose labels include `labels`."""
        return sum(
            value
            for sample, found, value in self.samples()
            if sample == name and all(found.get(k) == v for k, v in labels.items())
        )

    def output(self, full: bool = False) -> str:
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as log:
            text = log.read()
        return text if full else text[-5000:]

    def stop(self) -> float:
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()
        return time.monotonic() - started


def prometheus_samples(text: str) -> list[tuple[str, dict, float]]:
    """Every sample of a Prometheus text exposition: (name, labels, value)."""
    found = []
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
            found.append((match.group(1), labels, float(match.group(3))))
    return found


def claim_side(rack: Rack, leader_elect: bool = False) -> list[str]:
    """Options of a controller serving the rack's hosts, without the provisioner (the rack's hosts have no BMC)."""
    options = ["--infra-namespaces", rack.namespace, "--controllers", "claims"]
    if leader_elect:
        options += ["--leader-elect", "true", "--leader-election-id", f"test-{rack.namespace}"]
    return options


def provisioner(devenv, tmp_path, namespace: str, *extra: str) -> ControllerProcess:
    """The provisioner side for one infrastructure namespace, as its own identity (as config/manager deploys it)."""
    return ControllerProcess(
        devenv,
        tmp_path,
        "--infra-namespaces",
        namespace,
        "--controllers",
        "provisioner",
        *extra,
        kubeconfig_identity="provisioner",
    )


def association(rack: Rack, name: str, namespace: str = TENANT_A) -> str | None:
    status = rack.read_claim(name, namespace).get("status") or {}
    return next((c["status"] for c in status.get("conditions") or [] if c["type"] == "Association"), None)


def associated(rack: Rack, name: str, namespace: str = TENANT_A) -> bool:
    return association(rack, name, namespace) == "True"


def runs_of(controller: ControllerProcess, key: str) -> int:
    """Runs whose batch held `key` ("claim/<namespace>/<name>"), from the controller's JSON log."""
    return sum(
        1 for line in controller.output(full=True).splitlines() if '"event": "run"' in line and f'"{key}"' in line
    )


def fence(controller: ControllerProcess, rack: Rack, name: str = "fence") -> None:
    """Return once `controller` has handled every HostClaim and BareMetalHost change made before the call.

    A negative check ("this write caused no run") needs a signal, not a sleep. Each kind's watch delivers changes in
    order: a claim created now, then a host only it matches, reach the controller after everything written before;
    any key those earlier changes queued is run before, or in the same batch as, the run that binds the fence claim,
    and that run is logged once it ends. Needs no other claim of the rack waiting for a host.
    """
    key = f"claim/{TENANT_A}/{name}"
    rack.claim(name, hostSelector={"matchLabels": {"infra-kind": rack.kind, "metalclaim-test/fence": name}})
    eventually(lambda: runs_of(controller, key) >= 1, timeout=30, message=f"{name}: its first run logged")
    rack.host(f"{name}-host", labels={"metalclaim-test/fence": name})
    eventually(
        lambda: associated(rack, name) and runs_of(controller, key) >= 2,
        timeout=30,
        message=f"{name}: bound by a run logged\n{controller.output()}",
    )


def disk_image_provisioner(devenv, site, files, media_server, directory, hosts: list[str], *args: str):
    """The provisioner side as its own process for `hosts` (registered as the site's first systems and settled
    available first), with a deploy ISO and the media server: disk images, each host's writer calling back when a test
    posts its callback. The caller stops it."""
    from metalclaim_dev.site import settle

    deploy_iso = files.add("writer.iso", b"image writer live system\n" * 64)
    options = {"deploy_iso_url": deploy_iso, "media_dir": media_server["dir"], "media_url": media_server["url"]}
    for index, name in enumerate(hosts):
        site.host(name, index)
        settle(site, name, "available", **options)
    provisioner = ControllerProcess(
        devenv,
        directory,
        *("--infra-namespaces", site.namespace, "--controllers", "provisioner", *args),
        *("--deploy-iso-url", deploy_iso, "--media-dir", media_server["dir"], "--media-url", media_server["url"]),
        kubeconfig_identity="provisioner",
    )
    return provisioner
