"""pytest fixtures every suite on a devenv shares; its conftest.py imports them by name and defines `devenv`."""

from __future__ import annotations

import pytest

from metalclaim_dev.claimlayer import Rack
from metalclaim_dev.site import Site
from metalclaim_dev.support import clients_of


@pytest.fixture(scope="session")
def clients(devenv):
    """identity -> DynamicClient authenticated as that identity."""
    return clients_of(devenv)


@pytest.fixture
def rack(clients) -> Rack:
    """A fresh infrastructure namespace for one claim-layer test, removed afterwards."""
    rack = Rack(clients)
    yield rack
    rack.cleanup()


@pytest.fixture
def site(devenv, clients, tmp_path) -> Site:
    """A fresh infrastructure namespace of hosts on the emulated fleet; removed and the fleet reset afterwards."""
    site = Site(devenv, clients, tmp_path)
    yield site
    site.cleanup()
    site.reset_fleet()
