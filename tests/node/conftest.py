"""The controller image (make image) run as config/manager runs it, then on the devenv's node (make node-test).

Root only (podman, containerd, kubelet). METALCLAIM_IMAGE names the image in podman's store (make node-test
passes make image's); METALCLAIM_DEVENV=<dir> reuses a running devenv (started with `--node` for test_node.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from metalclaim_dev.devenv.env import Devenv
from metalclaim_dev.fixtures import clients, rack  # noqa: F401 (fixtures)
from metalclaim_dev.support import session_devenv

FLEET_SIZE = 3


@pytest.fixture(scope="session")
def image() -> str:
    ref = os.environ.get("METALCLAIM_IMAGE")
    if not ref:
        pytest.skip("METALCLAIM_IMAGE is not set: run `make node-test` (it builds the image first)")
    if os.geteuid() != 0 or shutil.which("podman") is None:
        pytest.fail("tests/node need root and podman (make node-test installs bindep.txt's node profile)")
    if subprocess.run(["podman", "image", "exists", ref], check=False).returncode != 0:
        pytest.fail(f"{ref} is not in podman's store: run `make image IMAGE={ref}`")
    return ref


@pytest.fixture(scope="session")
def devenv(tmp_path_factory) -> Devenv:
    yield from session_devenv("METALCLAIM_DEVENV", tmp_path_factory.mktemp("devenv") / "env", FLEET_SIZE)
