"""The `cluster_api` fixture: Cluster API's real core manager on the session's devenv (metalclaim_dev.devenv.capi).

Started on first use by a test of the session (pytest worker) and left running until the devenv stops; a session
whose tests do not ask for it builds and starts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from metalclaim_dev.devenv import capi
from metalclaim_dev.devenv.env import Devenv


@dataclass(frozen=True)
class ClusterAPIHandle:
    devenv: Devenv
    manager: capi.ClusterAPI

    @property
    def log(self) -> Path:
        """The manager's log file (klog text, appended across restarts)."""
        return self.manager.log

    @property
    def version(self) -> str:
        return self.manager.version

    @property
    def identity(self) -> str:
        """The devenv identity (kubeconfig name) the manager runs as."""
        return capi.IDENTITY

    def wait_ready(self, timeout: float = 120) -> None:
        """Until the manager's /healthz and /readyz answer 200 (its webhook server is serving)."""
        self.manager.wait_ready(timeout)

    def wait_established(self, *crds: str, timeout: int = 60) -> None:
        """Until each CRD (by name, e.g. "foomachines.infrastructure.cluster.x-k8s.io") is Established, then until the
        manager is ready: for tests that install CRDs (an infrastructure provider's) the manager is to watch."""
        if crds:
            self.devenv.kubectl("admin", "wait", "--for=condition=Established", f"--timeout={timeout}s", "crd", *crds)
        self.wait_ready(timeout)

    def log_tail(self, lines: int = 40) -> str:
        return self.manager.log_tail(lines)


@pytest.fixture(scope="session")
def cluster_api(devenv) -> ClusterAPIHandle:
    """Cluster API's core manager, ready, its CRDs Established and webhooks registered; stopped with the devenv."""
    return ClusterAPIHandle(devenv, capi.start(devenv))
