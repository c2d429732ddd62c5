"""What the VM test files share: a devenv of one real VM per module, and its phase timings."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from metalclaim.devenv.env import Devenv
from metalclaim.devenv.processes import DevenvError


class Phases:
    """Seconds per phase, shown as they happen (even when the tests pass) and kept in <devenv>/vm-phases.json."""

    def __init__(self, path: Path, capture):
        self.path = path
        self.capture = capture  # pytest's capture manager
        self.seconds: dict[str, float] = {}

    def record(self, name: str, started: float, at: float | None = None) -> None:
        self.seconds[name] = round((at or time.monotonic()) - started, 1)
        with self.capture.global_and_fixture_disabled():
            print(f"\n[vm-phase] {name}: {self.seconds[name]}s", file=sys.stderr, flush=True)
        self.path.write_text(json.dumps(self.seconds, indent=2) + "\n")


def vm_environment(tmp_path_factory, pytestconfig, name: str):
    """A module fixture's body: one VM behind its own control plane (nothing registered), failing, never skipping,
    where VMs cannot start; env.state["phases"] records the timings."""
    started = time.monotonic()
    try:
        env = Devenv.up(tmp_path_factory.mktemp(name) / "env", 0, register=False, vm_count=1)
    except DevenvError as error:
        pytest.fail(f"the VM environment cannot start on this machine: {error}")
    try:
        capture = pytestconfig.pluginmanager.getplugin("capturemanager")
        env.state["phases"] = Phases(env.directory / "vm-phases.json", capture)
        env.state["phases"].record("environment up (control plane, libvirtd, emulator)", started)
        yield env
    finally:
        env.state.pop("phases", None)
        env.down()
