"""What the two artifacts ship: the collection tarball (the collection, not the workshop) and the wheel (the
controller and the media server, with their console scripts, and nothing that looks for the checkout)."""

from __future__ import annotations

import ast
import configparser
import fnmatch
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from metalclaim_dev.support import REPO_ROOT

BIN = Path(sys.executable).parent

# Every file of the tarball must match one of these (fnmatch: `*` also crosses `/`).
TARBALL_ALLOW = (
    "MANIFEST.json",
    "FILES.json",
    "README.md",
    "COPYING",
    "CHANGELOG.rst",
    "requirements.txt",
    "bindep.txt",
    "meta/runtime.yml",
    "meta/execution-environment.yml",
    "plugins/*.py",
    "plugins/*.yml",
    "roles/*/defaults/main.yml",
    "roles/*/meta/main.yml",
    "roles/*/meta/argument_specs.yml",
    "roles/*/tasks/*.yml",
    "roles/*/templates/*.j2",
    "roles/*/README.md",
    "playbooks/*.yml",
    "config/*.yaml",  # the manifests the install role applies, and the samples
    "files/metalclaim-image-writer",
    "files/metalclaim-build-deploy-iso",
    "docs/*.md",
    "docs/*.sh",
    "changelogs/changelog.yaml",
    "changelogs/config.yaml",
    "changelogs/fragments/*.yml",
    "tests/sanity/ignore-*.txt",
    "tests/config.yml",  # ansible-test: the Python versions the modules support
)
# And these must be there.
TARBALL_REQUIRED = (
    "MANIFEST.json",
    "FILES.json",
    "README.md",
    "COPYING",
    "requirements.txt",
    "bindep.txt",
    "meta/runtime.yml",
    "meta/execution-environment.yml",
    "files/metalclaim-image-writer",
    "files/metalclaim-build-deploy-iso",  # the infra guide tells infra teams to run it from the collection
    "config/crd/metal3.io_hostclaims.yaml",
    "playbooks/reconcile.yml",
)


def _run(*argv, **options) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **options)
    assert result.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def tarball_files(tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("tarball")
    _run(BIN / "ansible-galaxy", "collection", "build", "--output-path", out, REPO_ROOT)
    (tarball,) = out.glob("metalclaim-hostclaim-*.tar.gz")
    with tarfile.open(tarball) as archive:
        return sorted(member.name for member in archive.getmembers() if not member.isdir())


def test_the_tarball_ships_only_allowed_files(tarball_files):
    outside = [name for name in tarball_files if not any(fnmatch.fnmatch(name, p) for p in TARBALL_ALLOW)]
    assert not outside, f"files outside the allow-list (galaxy.yml build_ignore): {outside}"
    assert not [n for n in tarball_files if n.split("/")[0] in ("controller", "devtools", "bench", "hack", "molecule")]


def test_the_tarball_ships_the_collection(tarball_files):
    missing = [name for name in TARBALL_REQUIRED if name not in tarball_files]
    assert not missing, missing
    for role in sorted(p.name for p in (REPO_ROOT / "roles").iterdir()):
        assert f"roles/{role}/tasks/main.yml" in tarball_files, role
        assert f"roles/{role}/meta/argument_specs.yml" in tarball_files, role
    modules = sorted(p.name for p in (REPO_ROOT / "plugins" / "modules").glob("*.py"))
    assert modules and all(f"plugins/modules/{m}" in tarball_files for m in modules)
    # What ansible-builder reads names files the tarball holds.
    ee = yaml.safe_load((REPO_ROOT / "meta" / "execution-environment.yml").read_text())
    assert sorted(ee["dependencies"].values()) == ["bindep.txt", "requirements.txt"]


def test_requirements_txt_states_lower_bounds_for_what_the_modules_import():
    lines = [line.split("#")[0].strip() for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()]
    wanted = {m.group(1).lower(): m.group(2) for m in (re.fullmatch(r"([A-Za-z0-9_.-]+)(.*)", x) for x in lines if x)}
    assert "ansible-core" not in wanted and "ansible" not in wanted
    assert all(spec.startswith(">=") and "==" not in spec for spec in wanted.values()), wanted
    # Third-party top-level imports of plugins/ (the modules and module_utils), by distribution name.
    distribution = {"kubernetes": "kubernetes", "urllib3": "kubernetes", "sushy": "sushy", "requests": "sushy"}
    distribution["pycdlib"] = "pycdlib"
    distribution["yaml"] = "kubernetes"  # PyYAML: a dependency of the client (and of ansible-core itself)
    imported = set()
    for path in (REPO_ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module.split(".")[0]]
            else:
                continue
            for name in names:
                if name in sys.stdlib_module_names or name in ("ansible", "ansible_collections", "__future__"):
                    continue
                assert name in distribution, f"{path}: imports {name}, which requirements.txt does not account for"
                imported.add(distribution[name])
    assert imported == set(wanted), (imported, wanted)


def test_requires_ansible_is_the_range_ci_tests():
    # meta/runtime.yml claims the minor releases CI runs, no more: make matrix's (ANSIBLE_MATRIX) and the .venv's
    # (requirements/runtime.txt), without a gap; else ansible-core warns of a release the collection passes, or
    # stays silent on one never tested.
    (matrix,) = re.findall(r"^ANSIBLE_MATRIX \?= (.+)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    runtime_txt = (REPO_ROOT / "requirements" / "runtime.txt").read_text()
    (venv,) = re.findall(r"^ansible-core==(\S+)$", runtime_txt, re.MULTILINE)
    minors = sorted({tuple(int(part) for part in v.split(".")[:2]) for v in [*matrix.split(), venv]})
    assert minors == [(2, minor) for minor in range(minors[0][1], minors[-1][1] + 1)], minors
    (first, last) = (minors[0][1], minors[-1][1])
    runtime = yaml.safe_load((REPO_ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == f">=2.{first}.0,<2.{last + 1}.0", (runtime["requires_ansible"], minors)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    scratch = tmp_path_factory.mktemp("wheel")
    source = scratch / "source"  # setuptools writes build/ and *.egg-info beside its sources: a copy
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "COPYING"):
        shutil.copy2(REPO_ROOT / name, source / name)
    shutil.copytree(
        REPO_ROOT / "controller", source / "controller", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", scratch, source)
    (path,) = scratch.glob("metalclaim-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_declares_every_distribution_it_imports(wheel):
    # The controller imports the collection's module_utils and runs its modules on its own Python (ansible-runner,
    # localhost), so what plugins/ imports is the wheel's to declare too, beside what the wheel's own code imports.
    requires = [
        line.split(":", 1)[1].strip()
        for name in wheel.namelist()
        if name.endswith(".dist-info/METADATA")
        for line in wheel.read(name).decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    declared = {re.split(r"[<>=!~; \[]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in requires}
    distribution = {
        "ansible": "ansible-core",
        "ansible_runner": "ansible-runner",
        "kubernetes": "kubernetes",
        "urllib3": "kubernetes",  # the client's own HTTP library
        "prometheus_client": "prometheus-client",
        "sushy": "sushy",
        "requests": "sushy",  # sushy's HTTP library
        "pycdlib": "pycdlib",
        "yaml": "pyyaml",
        "cryptography": "cryptography",  # the controller's self-signed /metrics certificate
    }
    sources = [(n, wheel.read(n).decode()) for n in wheel.namelist() if n.endswith(".py")]
    sources += [(str(p), p.read_text()) for p in (REPO_ROOT / "plugins").rglob("*.py")]
    for name, text in sources:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                modules = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module.split(".")[0]]
            else:
                continue
            for module in modules:
                if module in sys.stdlib_module_names or module in ("ansible_collections", "__future__", "metalclaim"):
                    continue
                assert module in distribution, f"{name}: imports {module}, from which distribution?"
                assert distribution[module] in declared, f"{name}: imports {module}, pyproject does not declare it"


def test_the_wheel_states_its_license_as_an_spdx_expression_and_ships_it(wheel):
    # PEP 639 (pyproject.toml's license string and license-files), not the deprecated table form.
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    headers = wheel.read(metadata).decode().split("\n\n", 1)[0].splitlines()
    assert "License-Expression: GPL-3.0-or-later" in headers, [h for h in headers if h.startswith("License")]
    assert "License-File: COPYING" in headers
    assert not [h for h in headers if h.startswith(("License:", "Classifier: License ::"))], headers
    (copying,) = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/COPYING")]
    assert wheel.read(copying) == (REPO_ROOT / "COPYING").read_bytes()


def test_the_wheel_has_the_controller_and_mediaserver_console_scripts(wheel):
    names = wheel.namelist()
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(entry_points).decode())
    assert dict(parser["console_scripts"]) == {
        "metalclaim-controller": "metalclaim.controller.__main__:main",
        "metalclaim-mediaserver": "metalclaim.mediaserver:main",
    }
    assert "metalclaim/mediaserver.py" in names and "metalclaim/controller/__main__.py" in names
    # The development package (devtools/: the devenv, runner, test and bench helpers) stays in the checkout.
    assert {n.split("/")[0] for n in names if "/" in n and ".dist-info/" not in n} == {"metalclaim"}
    assert not [n for n in names if n.startswith(("metalclaim/devenv", "metalclaim/runner"))]


def test_nothing_in_the_wheel_looks_for_the_checkout(wheel):
    sources = {n: wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".py")}
    assert sources
    for name, text in sources.items():
        assert "REPO_ROOT" not in text, name
        assert not re.search(r"""["'/]shared\b""", text), f"{name} reaches for a directory beside the checkout"
        assert not re.search(r"__file__\)?\.resolve\(\)\.parents\[[2-9]", text), f"{name} climbs out of its package"
        assert not re.search(r"""["'/]\.collections\b""", text), f"{name} looks for the checkout's collections path"
