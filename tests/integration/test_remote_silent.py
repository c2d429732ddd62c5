"""A tenant's hardware cluster that accepts connections and never answers (issue 22), as an attack through the
controller: it must cost seconds, not the run, and never the runner slot the baremetal claims share.

The silent server is a loopback socket that accepts every connection and never reads nor writes (not even the
TLS handshake); the tenant's remote claim points at it through its own kubeconfig Secret. A claim side serving
both kinds (`--kinds baremetal,remote`, one runner slot, as the issue's controller had) must still associate a
baremetal claim created meanwhile within its usual latency, and the remote claim must say that its cluster does
not answer, without any address of the infrastructure in what the tenant reads.
"""

# ruff: noqa: F811 (the tenant fixture is imported, then named as a test argument)
from __future__ import annotations

import base64
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from metalclaim_dev.claimlayer import TENANT_A
from metalclaim_dev.controllerproc import ControllerProcess, associated, claim_side, runs_of
from metalclaim_dev.remotecluster import condition, tenant  # noqa: F401 (fixture)
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration
# A baremetal claim is Associated in ~1.5-4 s on a loaded 2-core machine (one run); before issue 22 it waited
# behind the silent server's run: 369 s in the issue, the 30-minute job limit at worst.
BAREMETAL_LATENCY = 20
REACTION = 60  # seconds for the remote claim to say its cluster does not answer


class SilentServer:
    """Accepts every TCP connection on loopback and never answers: a hardware cluster that hangs."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _peer = self.listener.accept()
            except OSError:  # closed
                return
            self.accepted.append(connection)  # kept open, never read nor written

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, ca_pem: bytes) -> dict:
        """What a tenant would give: its cluster's https URL, a CA, a token, a namespace."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "silent",
                    "cluster": {"server": self.url, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
                }
            ],
            "users": [{"name": "tenant", "user": {"token": "a-token-the-silent-server-never-reads"}}],
            "contexts": [{"name": "silent", "context": {"cluster": "silent", "user": "tenant", "namespace": "hw"}}],
            "current-context": "silent",
        }

    def close(self) -> None:
        self.listener.close()
        for connection in self.accepted:
            connection.close()


def _infrastructure_addresses(devenv) -> list[str]:
    """host:port of everything of the infrastructure a message could leak: the API server and the BMC fleet."""
    addresses = [devenv.state["apiserver"].split("://", 1)[-1]]
    redfish = devenv.state.get("redfish") or {}
    for value in redfish.values() if isinstance(redfish, dict) else []:
        if isinstance(value, str) and "://" in value:
            addresses.append(value.split("://", 1)[-1].split("/", 1)[0])
    return addresses


def test_a_silent_hardware_cluster_costs_seconds_and_never_the_baremetal_claims_slot(devenv, rack, tenant, tmp_path):
    rack.policy()
    rack.host("h1")
    rack.host("h2")
    silent = SilentServer()
    controller = None
    try:
        controller = ControllerProcess(
            devenv,
            tmp_path / "claims",
            *claim_side(rack),
            *("--kinds", "baremetal,remote", "--runner-slots", "1"),
        )
        # The usual latency, here and now (a loaded machine makes each run slower).
        usual = f"usual-{tenant.suffix}"
        created = time.monotonic()
        rack.claim(usual)
        eventually(lambda: associated(rack, usual), timeout=60, message=f"{usual} associated\n{controller.output()}")
        baseline = time.monotonic() - created

        secret = tenant.kubeconfig_secret(silent.kubeconfig(Path(devenv.state["ca"]).read_bytes()), "silent")
        remote = tenant.claim("silent", secret)
        # The remote claim's run is in flight: it holds a connection to the silent server.
        eventually(
            lambda: len(silent.accepted) >= 1,
            timeout=REACTION,
            message=f"the remote run connects to the silent server\n{controller.output()}",
        )
        local = f"local-{tenant.suffix}"
        created = time.monotonic()
        rack.claim(local)
        eventually(
            lambda: associated(rack, local),
            timeout=BAREMETAL_LATENCY,
            message=(
                f"{local} not Associated within {BAREMETAL_LATENCY} s while a remote claim's cluster is silent "
                f"({len(silent.accepted)} connection(s) held)\n{controller.output()}"
            ),
        )
        latency = time.monotonic() - created

        def unreachable() -> dict:
            found = condition(tenant.read(remote) or {}, "RemoteCluster")
            return found if found.get("status") == "False" else {}

        eventually(unreachable, timeout=REACTION, message=f"{remote} says unreachable\n{controller.output()}")
        said = time.monotonic() - created
        found = unreachable()
        assert found["reason"] == "Unreachable", found
        assert "did not answer" in found["message"], found
        mirrored = condition(tenant.read(remote), "Mirrored")
        assert mirrored.get("status") == "Unknown" and mirrored.get("reason") == "Unreachable", mirrored
        # What the tenant reads (its claim, its Events) names no address of the infrastructure.
        shown = json.dumps([tenant.read(remote), tenant.events(remote)])
        for address in _infrastructure_addresses(devenv):
            assert address not in shown, (address, shown)
        # And its run ends (the event is logged at the end): the silent server held it seconds, not the job limit.
        eventually(
            lambda: runs_of(controller, f"remote/{TENANT_A}/{remote}") >= 1,
            timeout=REACTION,
            message=f"{remote}'s run ended\n{controller.output()}",
        )
        runs = [json.loads(line) for line in controller.output(full=True).splitlines() if '"event": "run"' in line]
        print(
            f"\nbaremetal claim created -> Associated: alone {baseline:.2f} s, beside a silent hardware cluster "
            f"{latency:.2f} s; remote claim RemoteCluster=False {said:.2f} s after ({found['message']}); "
            "runs (playbook slot seconds): " + ", ".join(f"{r['playbook']} {r['slot']} {r['seconds']}" for r in runs),
            end="",
        )
    finally:
        if controller is not None:
            controller.stop()
        silent.close()
