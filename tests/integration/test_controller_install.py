"""The controller and the media server run from their built artifacts, installed as the Containerfile installs
them, not from this checkout.

No container base image can be pulled here, so the image itself is not built: the test builds the collection
tarball and the controller wheel into its tmp_path, installs both with hack/install-controller.sh (the script the
Containerfile runs) into a fresh virtualenv and collections path, and runs that install's `metalclaim-controller`
from a directory outside the checkout, with nothing of the checkout on its paths, against the devenv as the
controller identity (claim side). A claim binds, and the runs' playbook and tasks come from the installed collection.
The media server, started both ways the README shows, serves a published file and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import media

from metalclaim_dev.controllerproc import ControllerProcess, associated, claim_side
from metalclaim_dev.support import REPO_ROOT, eventually

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent  # this checkout's virtualenv: builds only, never the installed controller
REQUIREMENTS = REPO_ROOT / "requirements"
COLLECTION = Path("ansible_collections") / "metalclaim" / "hostclaim"
# Where hack/install-kubernetes-core.py keeps the ansible wheel; the runtime wheels go beside it.
PROBE = b"metalclaim media probe\n" * 64
WHEEL_CACHE = Path(os.environ.get("METALCLAIM_CACHE", Path.home() / ".cache" / "metalclaim")) / "wheels"


def _run(*argv, **options) -> None:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **options)
    assert result.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{result.stdout}\n{result.stderr}"


def _runtime_wheelhouse() -> Path:
    """requirements/runtime.txt under its constraints as wheels, downloaded once per change of either file.

    A fresh virtualenv then installs them with --no-index: the same packages as from PyPI, without its round
    trips on every run (about 25 s here)."""
    digest = hashlib.sha256(
        b"".join((REQUIREMENTS / name).read_bytes() for name in ("runtime.txt", "constraints.txt"))
    ).hexdigest()[:16]
    wheelhouse = WHEEL_CACHE / f"runtime-{digest}"
    if not wheelhouse.is_dir():
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix="runtime-partial-", dir=WHEEL_CACHE))
        _run(
            sys.executable, "-m", "pip", "download", "--quiet", "--dest", partial,
            "-r", REQUIREMENTS / "runtime.txt", "-c", REQUIREMENTS / "constraints.txt",
        )  # fmt: skip
        try:
            partial.rename(wheelhouse)
        except OSError:  # another session finished the same download first
            shutil.rmtree(partial)
    return wheelhouse


def _kubernetes_core_wheel() -> None:
    """The pinned `ansible` wheel hack/install-kubernetes-core.py extracts kubernetes.core from, in its cache
    (downloaded here, with the index: the install itself runs with PIP_NO_INDEX)."""
    spec = importlib.util.spec_from_file_location(
        "install_kubernetes_core", REPO_ROOT / "hack" / "install-kubernetes-core.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.cached_wheel(WHEEL_CACHE)


def _build(dist: Path, scratch: Path) -> None:
    """The collection tarball and the controller wheel, as `make build` makes them, into dist."""
    _run(BIN / "ansible-galaxy", "collection", "build", "--output-path", dist, REPO_ROOT)
    # setuptools builds in the source tree (build/, *.egg-info): build from a copy, never in the checkout.
    source = scratch / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    shutil.copytree(
        REPO_ROOT / "controller", source / "controller", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dist, source)


def _outside_the_checkout_env(collections: Path) -> dict[str, str]:
    """What the container gives the controller: its PATH, a UTF-8 locale, the collections path; nothing else."""
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and not Path(p).resolve().is_relative_to(REPO_ROOT)]
    return {
        "PATH": os.pathsep.join(path),
        "HOME": os.environ["HOME"],
        "LANG": "C.UTF-8",
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
    }


def _serves_published_media(command: list, directory: Path, env: dict, cwd: Path) -> None:
    """Start the installed media server on a free loopback port, fetch a file published in its directory
    (the layout the collection's media.py writes), and stop it with SIGTERM as a supervisor would."""
    token = media.publish(str(directory), "probe.iso", PROBE)[0]
    process = subprocess.Popen(
        [str(a) for a in (*command, "--dir", directory, "--port", "0")],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), f"{command}: {process.stderr.read()}"
        with urllib.request.urlopen(f"{url}/media/{token}/probe.iso", timeout=10) as response:
            assert (response.status, response.read()) == (200, PROBE)
    finally:
        process.send_signal(signal.SIGTERM)
        stderr = process.communicate(timeout=10)[1]
    assert process.returncode == 0, stderr
    assert '"event": "stopped"' in stderr, stderr


def test_the_controller_installed_from_its_wheel_and_tarball_binds_a_claim(devenv, rack, tmp_path):
    timings: dict[str, float] = {}
    started = time.monotonic()

    def lap(what: str) -> None:
        nonlocal started
        timings[what] = time.monotonic() - started
        started = time.monotonic()

    dist, venv, collections, workdir = (tmp_path / name for name in ("dist", "venv", "collections", "workdir"))
    dist.mkdir()
    workdir.mkdir()
    _build(dist, tmp_path)
    assert len(list(dist.glob("metalclaim-hostclaim-*.tar.gz"))) == 1 and len(list(dist.glob("metalclaim-*.whl"))) == 1
    lap("build tarball + wheel")
    wheelhouse = _runtime_wheelhouse()
    _kubernetes_core_wheel()
    lap("downloads: runtime wheels, the ansible wheel (cached after the first run)")
    _run(
        "sh",
        REPO_ROOT / "hack" / "install-controller.sh",
        venv,
        collections,
        dist,
        REQUIREMENTS,
        env={
            **os.environ,
            "PYTHON": sys.executable,  # `python -m venv` from a virtualenv makes one of its base interpreter
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(wheelhouse),
            "PIP_NO_COMPILE": "1",  # the image compiles (read-only root); a test's throwaway venv need not
        },
        cwd=workdir,
    )
    lap("install (venv, requirements, wheel, kubernetes.core, tarball)")

    installed = collections / COLLECTION
    assert installed.is_dir() and not installed.is_symlink()
    assert (collections / "ansible_collections" / "kubernetes" / "core" / "MANIFEST.json").is_file()
    env = _outside_the_checkout_env(collections)
    probe = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "import json, sys, metalclaim; print(json.dumps([metalclaim.__file__, sys.path]))",
        ],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    )
    package_file, sys_path = json.loads(probe.stdout)
    assert Path(package_file).is_relative_to(venv), package_file
    assert not [p for p in sys_path if p and Path(p).resolve().is_relative_to(REPO_ROOT)], sys_path

    controller = ControllerProcess(
        devenv,
        tmp_path / "controller",
        *claim_side(rack),
        command=(str(venv / "bin" / "metalclaim-controller"),),
        env=env,
        cwd=workdir,
    )
    try:
        lap("controller ready")
        rack.policy()
        rack.host("h1")
        rack.claim("c1")
        eventually(lambda: associated(rack, "c1"), timeout=60, message=f"c1 associated\n{controller.output()}")
        lap("claim -> Association=True")
        assert rack.read_host("h1")["spec"]["consumerRef"]["name"] == "c1"
    finally:
        controller.stop()

    # The media server the README documents, both ways, from the installed wheel.
    commands = {
        "entry-point": [venv / "bin" / "metalclaim-mediaserver"],
        "module": [venv / "bin" / "python", "-m", "metalclaim.mediaserver"],
    }
    for name, command in commands.items():
        _serves_published_media(command, tmp_path / "media" / name, env, workdir)
    lap("media server from the wheel (entry point and -m)")

    # ansible-runner's artifacts: the playbook each run started and where its tasks came from.
    artifacts = list((tmp_path / "controller" / "runner" / "artifacts").iterdir())
    assert artifacts, controller.output()
    for artifact in artifacts:
        command = json.loads((artifact / "command").read_text())["command"]
        playbooks = [arg for arg in command if arg.endswith(".yml")]
        assert playbooks and all(Path(p).is_relative_to(installed / "playbooks") for p in playbooks), command
        events = [json.loads(path.read_text()) for path in (artifact / "job_events").glob("*.json")]
        task_paths = [e["event_data"]["task_path"] for e in events if e.get("event_data", {}).get("task_path")]
        assert task_paths and all(p.startswith(f"{installed}/") for p in task_paths), task_paths
    print("\n" + "\n".join(f"{what}: {seconds:.1f} s" for what, seconds in timings.items()), end="")
