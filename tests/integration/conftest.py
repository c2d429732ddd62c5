"""One devenv (real etcd, kube-apiserver, kube-controller-manager, Redfish fleet) per session: with
pytest-xdist (`make test`), one per worker, each worker running whole files (--dist loadfile).

Set METALCLAIM_DEVENV=<dir> to reuse an environment started with
`python -m metalclaim_dev.devenv up --dir <dir>` (faster when iterating).
"""

from __future__ import annotations

import os
import signal

import pytest

from metalclaim_dev.capifixture import cluster_api  # noqa: F401 (fixture)
from metalclaim_dev.devenv.env import Devenv
from metalclaim_dev.fixtures import clients, rack, site  # noqa: F401 (fixtures)
from metalclaim_dev.netfixtures import FileServer, MediaServer
from metalclaim_dev.support import session_devenv

# Eight emulated systems: the provisioner must take a fleet of 8 from registering to available.
FLEET_SIZE = int(os.environ.get("METALCLAIM_TEST_HOSTS", "8"))


def _interrupt(signum, frame):
    # Turn SIGTERM into the same unwinding as Ctrl-C so the devenv fixture stops its processes.
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def devenv(tmp_path_factory) -> Devenv:
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield from session_devenv("METALCLAIM_DEVENV", tmp_path_factory.mktemp("devenv") / "env", FLEET_SIZE)
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def files(tmp_path):
    with FileServer(tmp_path / "files") as server:
        yield server


@pytest.fixture
def media_server(tmp_path):
    """The media server process (config drives out, image writer callbacks in): {"dir", "url"}."""
    with MediaServer(tmp_path / "media") as server:
        yield {"dir": server.dir, "url": server.url}
