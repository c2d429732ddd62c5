"""The collection as a Galaxy user gets it: the built tarball installed into a fresh virtualenv that has only
ansible-core, then `pip install -r` the requirements.txt the tarball ships, then a module run against the devenv
and ansible-doc, from outside the checkout. What requirements.txt leaves out, the module run misses.

The wheels come from the runtime wheelhouse test_controller_install.py keeps (--no-index), so this costs
seconds, not PyPI round trips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metalclaim_dev.support import REPO_ROOT
from tests.integration.test_controller_install import (
    _kubernetes_core_wheel,
    _outside_the_checkout_env,
    _run,
    _runtime_wheelhouse,
)

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent
INSTALLED = Path("ansible_collections") / "metalclaim" / "hostclaim"


def test_the_tarball_in_a_fresh_venv_with_its_requirements_runs_a_module(devenv, rack, tmp_path):
    dist, venv, collections, workdir = (tmp_path / name for name in ("dist", "venv", "collections", "workdir"))
    workdir.mkdir()
    _run(BIN / "ansible-galaxy", "collection", "build", "--output-path", dist, REPO_ROOT)
    (tarball,) = dist.glob("metalclaim-hostclaim-*.tar.gz")
    wheelhouse = _runtime_wheelhouse()
    _kubernetes_core_wheel()
    pip_env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "PIP_NO_COMPILE": "1"}
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet"]
    _run(*pip, "ansible-core", env=pip_env, cwd=workdir)
    # Only ansible-core: none of what the modules import is there yet.
    bare = subprocess.run([venv / "bin" / "python", "-c", "import kubernetes"], capture_output=True, check=False)
    assert bare.returncode != 0
    _run(sys.executable, REPO_ROOT / "hack" / "install-kubernetes-core.py", "--dest", collections, env=pip_env)
    galaxy_env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "0"}
    _run(
        venv / "bin" / "ansible-galaxy",
        "collection",
        "install",
        "--offline",
        "-p",
        collections,
        tarball,
        env=galaxy_env,
    )
    installed = collections / INSTALLED
    _run(*pip, "-r", installed / "requirements.txt", env=pip_env, cwd=workdir)
    _run(venv / "bin" / "python", "-c", "import kubernetes, sushy, pycdlib")

    env = {**_outside_the_checkout_env(collections), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["K8S_AUTH_KUBECONFIG"] = devenv.kubeconfig("admin")
    rack.policy({"names": ["cluster-ns"]})
    ran = subprocess.run(
        [
            venv / "bin" / "ansible",
            "localhost",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={venv / 'bin' / 'python'}",
            "-o",  # one line: localhost | SUCCESS => {...}
            "-m",
            "metalclaim.hostclaim.hostdeploypolicy_check",
            "-a",
            json.dumps({"namespace": "cluster-ns", "infra_namespaces": [rack.namespace]}),
        ],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(ran.stdout.split("=>", 1)[1])
    assert result["authorized_namespaces"] == [rack.namespace], result
    doc = subprocess.run(
        [venv / "bin" / "ansible-doc", "--json", "metalclaim.hostclaim.bmh_redfish"],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout)["metalclaim.hostclaim.bmh_redfish"]["doc"]["filename"].startswith(str(installed))
