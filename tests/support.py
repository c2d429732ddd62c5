"""Helpers shared by unit and integration tests."""

from __future__ import annotations

import re
import time
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
USER_GUIDE = REPO_ROOT.parent / "shared" / "seeds" / "000_1b8e7e2e89d67340.txt"


def guide_yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", USER_GUIDE.read_text(), flags=re.S)


def guide_object(kind: str) -> tuple[str, dict]:
    """The first YAML block of the guide whose kind is `kind`: (verbatim text, parsed)."""
    for block in guide_yaml_blocks():
        parsed = yaml.safe_load(block)
        if isinstance(parsed, dict) and parsed.get("kind") == kind:
            return block, parsed
    raise LookupError(f"no {kind} in {USER_GUIDE}")


def eventually(check, timeout: float = 60.0, interval: float = 0.5, message: str = "condition"):
    """Poll until check() returns a truthy value; the cluster's controllers are asynchronous."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not reached within {timeout}s")
        time.sleep(interval)


def run_playbook(tmp_path: Path, playbook: Path, kubeconfig: str, extravars: dict | None = None) -> list[dict]:
    """Run a playbook with ansible-runner against localhost; return each task result, in order.

    Each result carries `task` (its name) and `failed`. The collection is used from the
    project's collections path, exactly as a user runs it.
    """
    import os
    import sys

    import ansible_runner

    # ansible-runner finds ansible-playbook on PATH; use the one beside this interpreter.
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in os.environ["PATH"].split(os.pathsep):
        os.environ["PATH"] = venv_bin + os.pathsep + os.environ["PATH"]
    tmp_path.mkdir(parents=True, exist_ok=True)
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path),
        playbook=str(playbook),
        inventory="localhost ansible_connection=local ansible_python_interpreter=" + sys.executable,
        envvars={"ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections"), "K8S_AUTH_KUBECONFIG": kubeconfig},
        extravars=extravars or {},
        quiet=True,
    )
    results = [
        dict(event["event_data"]["res"], task=event["event_data"]["task"], failed=event["event"] == "runner_on_failed")
        for event in runner.events
        if event.get("event") in ("runner_on_ok", "runner_on_failed")
    ]
    if runner.status != "successful" and not any(r["failed"] for r in results):
        raise AssertionError(f"ansible-runner ended {runner.status}:\n" + runner.stdout.read())
    return results


def run_tasks(tmp_path: Path, tasks: list[dict], kubeconfig: str) -> list[dict]:
    """Run tasks in a localhost play; return each task's result, in order."""
    import json

    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    play = [{"name": "test", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    (project / "playbook.yml").write_text(json.dumps(play))
    results = run_playbook(tmp_path, Path("playbook.yml"), kubeconfig)
    assert len(results) == len(tasks), results
    return results
