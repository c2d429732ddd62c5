"""The controller as a test's separate process, and what tests read from it (claims' conditions, its runs)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from metalclaim_dev.claimlayer import TENANT_A, Rack
from metalclaim_dev.support import REPO_ROOT, eventually


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControllerProcess:
    def __init__(
        self,
        devenv,
        tmp_path,
        *args: str,
        kubeconfig_identity: str | None = "controller",
        command: tuple[str, ...] = (sys.executable, "-m", "metalclaim.controller"),
        env: dict[str, str] | None = None,
        cwd=None,
    ):
        """command, env (the whole environment) and cwd run another install of the controller; by default
        this checkout's, with its collections path."""
        self.metrics_port, self.health_port = _port(), _port()
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.log = open(tmp_path / "controller.log", "w+")  # noqa: SIM115 (closed in stop())
        if env is None:
            env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections")}
        env = {**env, "METALCLAIM_RESYNC_PERIOD": "3600"}
        self.process = subprocess.Popen(
            [
                *command,
                *(["--kubeconfig", devenv.kubeconfig(kubeconfig_identity)] if kubeconfig_identity else []),
                "--private-data-dir",
                str(tmp_path / "runner"),
                "--metrics-bind-address",
                f"127.0.0.1:{self.metrics_port}",
                "--health-probe-bind-address",
                f"127.0.0.1:{self.health_port}",
                *args,
            ],
            env=env,
            cwd=cwd,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        eventually(lambda: self.get(self.health_port, "/readyz")[0] == 200, timeout=30, message="controller ready")

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""
        except OSError:
            assert self.process.poll() is None, self.output()
            return 0, ""

    def metric(self, name: str, **labels) -> float:
        """Sum of a metric's samples whose labels include `labels`."""
        _status, text = self.get(self.metrics_port, "/metrics")
        total = 0.0
        for line in text.splitlines():
            match = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
            if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
                total += float(match.group(2))
        return total

    def output(self, full: bool = False) -> str:
        self.log.flush()
        self.log.seek(0)
        text = self.log.read()
        return text if full else text[-5000:]

    def stop(self) -> float:
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()
        return time.monotonic() - started


def claim_side(rack: Rack, leader_elect: bool = False) -> list[str]:
    """Options of a controller serving the rack's hosts, without the provisioner (the rack's hosts have no BMC)."""
    options = ["--infra-namespaces", rack.namespace, "--controllers", "claims"]
    if leader_elect:
        options += ["--leader-elect", "true", "--leader-election-id", f"test-{rack.namespace}"]
    return options


def provisioner(devenv, tmp_path, namespace: str) -> ControllerProcess:
    """The provisioner side for one infrastructure namespace, as its own identity (as config/manager deploys it)."""
    return ControllerProcess(
        devenv,
        tmp_path,
        "--infra-namespaces",
        namespace,
        "--controllers",
        "provisioner",
        kubeconfig_identity="provisioner",
    )


def association(rack: Rack, name: str, namespace: str = TENANT_A) -> str | None:
    status = rack.read_claim(name, namespace).get("status") or {}
    return next((c["status"] for c in status.get("conditions") or [] if c["type"] == "Association"), None)


def associated(rack: Rack, name: str) -> bool:
    return association(rack, name) == "True"


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
