"""Helpers shared by the unit, integration, node and end-to-end tests and the benches."""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import yaml
from kubernetes.client.exceptions import ApiException

from metalclaim_dev import REPO_ROOT
from metalclaim_dev.devenv.processes import free_port  # noqa: F401 (the tests' and benches' import)

# Metal3's HostClaim walkthrough as a team coming from Metal3 writes it (the fixture says what each document is).
METAL3_WALKTHROUGH = REPO_ROOT / "tests" / "fixtures" / "metal3_hostclaim_walkthrough.yaml"


def walkthrough_object(kind: str) -> tuple[str, dict]:
    """The walkthrough's document of kind `kind`: (its text as written, to apply verbatim; parsed)."""
    for text in re.split(r"^---$", METAL3_WALKTHROUGH.read_text(), flags=re.M):
        parsed = yaml.safe_load(text)
        if isinstance(parsed, dict) and parsed.get("kind") == kind:
            return text, parsed
    raise LookupError(f"no {kind} in {METAL3_WALKTHROUGH}")


def manifest_objects(docs) -> list[dict]:
    """The objects of parsed manifest documents, a List's items expanded (as kubectl, kustomize and
    kubernetes.core.k8s do): config/ keeps one document per file, several objects as a List."""
    return [item for doc in docs if doc for item in (doc["items"] if doc.get("kind") == "List" else [doc])]


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
    """Run a playbook against localhost as a user would; return each task's result, in order."""
    from metalclaim_dev.runner import run

    result = run(tmp_path, kubeconfig, playbook=str(playbook), extravars=extravars)
    if result.status != "successful" and not any(task["failed"] for task in result.tasks):
        raise AssertionError(f"ansible-runner ended {result.status}:\n{result.stdout}")
    return result.tasks


def run_tasks(tmp_path: Path, tasks: list[dict], kubeconfig: str) -> list[dict]:
    """Run tasks in a localhost play; return each task's result, in order."""
    import json

    project = tmp_path / "project"
    project.mkdir(parents=True, exist_ok=True)
    play = [{"name": "test", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    (project / "playbook.yml").write_text(json.dumps(play))
    results = run_playbook(tmp_path, Path("playbook.yml"), kubeconfig)
    assert len(results) == len(tasks), results
    return results


def create_namespace(admin, name: str, labels: dict | None = None) -> None:
    """A namespace, created as `admin` (a DynamicClient)."""
    admin.resources.get(api_version="v1", kind="Namespace").create(
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
    )


def delete_namespaces(
    admin, names: list[str], kinds: tuple = ("HostClaim", "BareMetalHost"), wait: float = 180
) -> None:
    """The finalizers of the namespaces' objects of `kinds` (metal3.io) dropped, then the namespaces deleted; waits
    up to `wait` s for them to go (a claim side started next serves every claim namespace: it must not find the
    last user's claims)."""
    namespaces = admin.resources.get(api_version="v1", kind="Namespace")
    for name in names:
        for kind in kinds:
            resource = admin.resources.get(api_version="metal3.io/v1alpha1", kind=kind)
            try:
                items = resource.get(namespace=name).items
            except ApiException:
                continue
            for item in items:
                if item.metadata.finalizers:
                    with contextlib.suppress(ApiException):
                        resource.patch(
                            body={"metadata": {"finalizers": None}},
                            name=item.metadata.name,
                            namespace=name,
                            content_type="application/merge-patch+json",
                        )
        with contextlib.suppress(ApiException):
            namespaces.delete(name=name)
    deadline = time.monotonic() + wait
    while wait and time.monotonic() < deadline:
        if not [n for n in names if status_of(lambda n=n: namespaces.get(name=n)) == 200]:
            return
        time.sleep(0.5)


def status_of(call) -> int:
    """The HTTP status an API call ends with: 200, or the ApiException's status."""
    try:
        call()
    except ApiException as error:
        return error.status
    return 200


def clients_of(devenv) -> dict:
    """identity -> DynamicClient authenticated as that identity, for each kubeconfig of the devenv."""
    from kubernetes import config as kube_config
    from kubernetes.dynamic import DynamicClient

    return {
        identity: DynamicClient(kube_config.new_client_from_config(config_file=devenv.kubeconfig(identity)))
        for identity in devenv.state["kubeconfigs"]
    }


def session_devenv(variable: str, directory: Path, hosts: int):
    """A session fixture's body: the running devenv named by the environment `variable` (reused, left running),
    else one started in `directory` with `hosts` systems and stopped afterwards."""
    from metalclaim_dev.devenv.env import Devenv

    reuse = os.environ.get(variable)
    if reuse:
        env = Devenv.load(Path(reuse).resolve())
        assert env is not None and env.healthy(), f"{variable}={reuse} is not a running devenv"
        yield env
        return
    env = Devenv.up(directory, hosts)
    try:
        yield env
    finally:
        env.down()
