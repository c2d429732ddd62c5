"""The controller takes what it needs from the collection through one door, plugins/module_utils/controller_contract.py
(issue 41: the mapper imported 27 names from 11 private modules, so a change to a concern's helper could silently
change which events wake which claims)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CONTROLLER = ROOT / "controller" / "metalclaim"
COLLECTION = "ansible_collections.metalclaim.hostclaim"
DOOR = f"{COLLECTION}.plugins.module_utils.controller_contract"


def collection_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a collection module in a Python file, however it is spelled."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible_collections"):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("ansible_collections")]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "__import__",
        ):
            for argument in node.args[:1]:
                if isinstance(argument, ast.Constant) and str(argument.value).startswith("ansible_collections"):
                    found.append((node.lineno, str(argument.value)))
    return found


def test_the_controller_imports_the_collection_only_through_its_contract():
    reached = {}
    for path in sorted(CONTROLLER.rglob("*.py")):
        for line, module in collection_imports(path):
            if module != DOOR:
                reached[f"{path.relative_to(ROOT)}:{line}"] = module
    assert reached == {}, "the controller reaches the collection other than through controller_contract"
    used = sum(1 for path in CONTROLLER.rglob("*.py") for _line, module in collection_imports(path) if module == DOOR)
    assert used >= 4  # mapper, manager, handlers, callbacks


def test_the_check_catches_a_private_import_in_any_spelling(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "import importlib\n"
        f"from {COLLECTION}.plugins.module_utils._claims.pure import binding\n"
        f"import {COLLECTION}.plugins.module_utils._common.pure.metal3\n"
        f"importlib.import_module('{COLLECTION}.plugins.module_utils._tenancy.pure.hooks')\n"
        f"from {DOOR} import claim_kind\n"
    )
    modules = [module for _line, module in collection_imports(sneaky)]
    assert [m for m in modules if m != DOOR] == [
        f"{COLLECTION}.plugins.module_utils._claims.pure",
        f"{COLLECTION}.plugins.module_utils._common.pure.metal3",
        f"{COLLECTION}.plugins.module_utils._tenancy.pure.hooks",
    ]


def test_every_name_the_contract_offers_is_used_by_the_controller():
    """A name no controller file reads is not part of the contract: it goes, so the door says what is relied on."""
    door = ast.parse((ROOT / "plugins" / "module_utils" / "controller_contract.py").read_text())
    offered = next(
        ast.literal_eval(node.value)
        for node in door.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
    )
    taken = set()
    for path in CONTROLLER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == DOOR:
                taken.update(alias.name for alias in node.names)
    assert sorted(offered) == sorted(taken)
