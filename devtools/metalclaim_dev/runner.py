"""Run the collection's playbooks and modules on localhost with ansible-runner, as a user would.

How tests and benches invoke Ansible outside the controller (`support.run_playbook` and `run_tasks` build on it):
the controller's collections path, this interpreter's ansible-playbook, one kubeconfig. The controller itself runs
playbooks through its own `metalclaim.controller.runs.Runner` (a pool of ansible-runner children), not this.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import ansible_runner

from metalclaim.controller.collection import collections_path


@dataclass(frozen=True)
class RunResult:
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    tasks: list[dict]  # each task's result for localhost, with `task` (its name) and `failed`
    stdout: str


def run(
    private_data_dir: Path,
    kubeconfig: str,
    *,
    playbook: str | None = None,
    module: str | None = None,
    module_args: dict | None = None,
    extravars: dict | None = None,
) -> RunResult:
    """Run a playbook, or one module, against localhost."""
    # ansible-runner looks ansible-playbook up on PATH: use the one beside this interpreter.
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
    private_data_dir.mkdir(parents=True, exist_ok=True)
    target = {"playbook": playbook} if playbook else {"host_pattern": "localhost", "module": module}
    if module_args:
        # JSON keeps lists and numbers typed (key=value would turn a list into one string).
        target["module_args"] = json.dumps(module_args)
    runner = ansible_runner.run(
        private_data_dir=str(private_data_dir),
        inventory=f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}",
        envvars={"ANSIBLE_COLLECTIONS_PATH": collections_path(), "K8S_AUTH_KUBECONFIG": kubeconfig},
        extravars=extravars or {},
        quiet=True,
        **target,
    )
    tasks = [
        dict(event["event_data"]["res"], task=event["event_data"]["task"], failed=event["event"] == "runner_on_failed")
        for event in runner.events
        if event.get("event") in ("runner_on_ok", "runner_on_failed")
    ]
    return RunResult(runner.status, tasks, runner.stdout.read())
