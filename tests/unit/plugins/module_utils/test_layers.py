"""The layers of plugins/module_utils, enforced: pure files do no I/O, a concern (_claims, _provisioner,
_tenancy, _remote) imports only _common and itself, claim steps share helpers through shared files, and
AnsiballZ ships each module only the files it imports (checked on the payloads Ansible really builds)."""

from __future__ import annotations

import ast
import base64
import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
MODULE_UTILS = REPO / "plugins" / "module_utils"
MODULES = REPO / "plugins" / "modules"
PREFIX = "ansible_collections.metalclaim.hostclaim.plugins.module_utils"
PURE_FILES = sorted(p for p in MODULE_UTILS.glob("*/pure/*.py") if p.name != "__init__.py")
COMMON = "_common"
CONCERNS = sorted(p.name for p in MODULE_UTILS.iterdir() if p.is_dir() and p.name.startswith("_") and p.name != COMMON)
CONCERN_FILES = sorted(p for concern in CONCERNS for p in (MODULE_UTILS / concern).glob("**/*.py"))

# What pure code may import from the standard library: computation only. Anything else (kubernetes,
# sushy, requests, pycdlib, ansible.module_utils.basic, os, socket, subprocess, urllib.request, ...)
# is I/O or leads to it.
PURE_STDLIB = {
    "__future__",
    "base64",
    "binascii",
    "bisect",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "enum",
    "functools",
    "hashlib",
    "hmac",
    "ipaddress",
    "itertools",
    "json",
    "re",
    "secrets",
    "string",
    "typing",
    "urllib.parse",
    "uuid",
}
IO_BUILTINS = {"open", "input", "print", "exec", "eval", "__import__"}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}: relative import (AnsiballZ needs absolute ones)")
            if node.module == PREFIX or (node.module or "").endswith((".pure", ".io")):
                names += [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                names.append(node.module)
    return names


def _collection_file(name: str) -> Path:
    return REPO / "plugins" / (name[len(PREFIX) - len("module_utils") :].replace(".", "/") + ".py")


def _reached(path: Path) -> set[Path]:
    """Every collection module_utils file `path` imports, recursively (what AnsiballZ must ship)."""
    seen: set[Path] = set()
    todo = [path]
    while todo:
        for name in _imports(todo.pop()):
            if name.startswith(PREFIX + "."):
                target = _collection_file(name)
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
    return seen


def test_there_are_pure_files_to_check():
    assert len(PURE_FILES) >= 12, PURE_FILES


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: str(p.relative_to(MODULE_UTILS)))
def test_pure_files_do_no_io(path):
    for name in _imports(path):
        if name.startswith(PREFIX + "."):
            assert ".pure." in name, f"{path.name} imports {name}: pure files import only pure files"
        else:
            assert name in PURE_STDLIB, f"{path.name} imports {name}: not allowed in a pure file"
    calls = {
        node.func.id
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert not calls & IO_BUILTINS, f"{path.name} calls {calls & IO_BUILTINS}"


def test_the_purity_check_catches_io(tmp_path):
    """The rule above can fail: a pure file that reads a file or imports kubernetes is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom kubernetes import client\n")
    assert [n for n in _imports(bad) if n not in PURE_STDLIB] == ["os", "kubernetes"]
    bad.write_text(f"from {PREFIX}._common.io import kube\n")
    assert _imports(bad) == [f"{PREFIX}._common.io.kube"]


def test_the_provisioner_never_reaches_the_claim_layer():
    for path in [MODULES / "bmh_redfish.py", *MODULE_UTILS.glob("_provisioner/**/*.py")]:
        claims = {p for p in _reached(path) if "_claims" in p.parts}
        assert not claims, f"{path.name} reaches {sorted(str(p) for p in claims)}"


def test_claim_steps_do_not_import_each_other():
    """bind, bound, release, lease and the policy check share the run, writes and pure plans; only
    reconcile (which runs them in order) and the module glue import the steps."""
    steps = {"bind", "bound", "release", "lease", "policy_check"}
    for path in MODULE_UTILS.glob("_claims/io/*.py"):
        if path.stem in {"reconcile", "__init__"}:
            continue
        imported = {n.rsplit(".", 1)[1] for n in _imports(path) if n.startswith(f"{PREFIX}._claims.io.")}
        assert not imported & steps, f"{path.name} imports the step(s) {imported & steps}"


def test_shared_files_import_no_concern():
    for path in MODULE_UTILS.glob("_common/**/*.py"):
        reached = {p for p in _reached(path) if p.relative_to(MODULE_UTILS).parts[0] != COMMON}
        assert not reached, f"{path.name} reaches {sorted(str(p) for p in reached)}"


def _layer(name: str) -> str:
    """The top directory of module_utils a collection import names (_common, _claims, ...)."""
    return name[len(PREFIX) + 1 :].split(".", 1)[0]


def _crossings(path: Path, concern: str) -> list[str]:
    """The collection imports of `path` (a file of `concern`) that name neither _common nor `concern`."""
    return [n for n in _imports(path) if n.startswith(PREFIX + ".") and _layer(n) not in {COMMON, concern}]


def test_there_are_concerns_to_check():
    assert set(CONCERNS) >= {"_claims", "_provisioner", "_tenancy", "_remote"}, CONCERNS


@pytest.mark.parametrize("path", CONCERN_FILES, ids=lambda p: str(p.relative_to(MODULE_UTILS)))
def test_a_concern_imports_only_common_and_itself(path):
    """What two concerns share lives in _common (selectors, metadataCopy, a claim's status), never in one of
    them: a concern can then change, move or go without breaking another."""
    concern = path.relative_to(MODULE_UTILS).parts[0]
    crossing = _crossings(path, concern)
    assert not crossing, f"{path.relative_to(MODULE_UTILS)} imports {crossing}: move what is shared to _common"


def test_the_concern_check_catches_a_sideways_import(tmp_path):
    """The rule above can fail: a remote file importing the claim layer is caught, _common and itself are not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        f"from {PREFIX}._claims.pure.status import recorded_host\n"
        f"from {PREFIX}._common.pure import conditions\n"
        f"from {PREFIX}._remote.pure.mirror import FINALIZER\n"
    )
    assert _crossings(bad, "_remote") == [f"{PREFIX}._claims.pure.status"]


# -- what AnsiballZ ships ----------------------------------------------------------------------

ALL_MODULES = sorted(p.stem for p in MODULES.glob("*.py") if p.stem != "__init__")


@pytest.fixture(scope="module")
def payloads(tmp_path_factory) -> dict[str, list[zipfile.ZipInfo]]:
    """Each module's AnsiballZ payload, as ansible-playbook builds it (kept with KEEP_REMOTE_FILES;
    the modules then fail for want of a cluster, which does not matter here)."""
    work = tmp_path_factory.mktemp("ansiballz")
    tasks = "".join(
        f"    - name: {name}\n      metalclaim.hostclaim.{name}: {{}}\n      ignore_errors: true\n"
        for name in ALL_MODULES
    )
    (work / "play.yml").write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n{tasks}")
    env = {
        **os.environ,
        "HOME": str(work),
        "ANSIBLE_KEEP_REMOTE_FILES": "1",
        "ANSIBLE_REMOTE_TMP": str(work / "remote"),
        "ANSIBLE_LOCAL_TEMP": str(work / "local"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
    }
    subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "play.yml"],
        cwd=work,
        env={k: v for k, v in env.items() if not k.startswith("K8S_AUTH")},
        check=True,
        capture_output=True,
        timeout=300,
    )
    found = {}
    for wrapper in (work / "remote").glob("*/AnsiballZ_*.py"):
        # ansible-core 2.19 passes zip_data='...' to its bootstrap; 2.17 and 2.18 assign ZIPDATA = '...'.
        data = re.search(r"(?:zip_data=|ZIPDATA = )'([A-Za-z0-9+/=]+)'", wrapper.read_text()).group(1)
        found[wrapper.stem.removeprefix("AnsiballZ_")] = zipfile.ZipFile(io.BytesIO(base64.b64decode(data))).infolist()
    return found


@pytest.mark.parametrize("module", ALL_MODULES)
def test_ansiballz_ships_exactly_what_the_module_imports(payloads, module):
    shipped = {
        REPO / info.filename.removeprefix("ansible_collections/metalclaim/hostclaim/")
        for info in payloads[module]
        if info.filename.startswith("ansible_collections/metalclaim/hostclaim/plugins/module_utils/")
        and not info.filename.endswith("__init__.py")
    }
    assert shipped == _reached(MODULES / f"{module}.py")
    layers = {p.relative_to(MODULE_UTILS).parts[0] for p in shipped}
    assert "_provisioner" not in layers or module == "bmh_redfish"
    assert "_claims" not in layers or module != "bmh_redfish"
    ours = [i for i in payloads[module] if i.filename.startswith("ansible_collections/")]
    print(
        f"\n{module}: {len(shipped)} module_utils files, payload {len(payloads[module])} entries, "
        f"{sum(i.file_size for i in payloads[module])} B ({sum(i.file_size for i in ours)} B of this collection): "
        + ", ".join(sorted(str(p.relative_to(MODULE_UTILS)) for p in shipped))
    )
