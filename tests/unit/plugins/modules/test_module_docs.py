"""Every module's DOCUMENTATION, EXAMPLES and RETURN is YAML ansible-doc can read (a plain scalar holding ": " is
not): caught here in a second, before galaxy-importer or ansible-test sanity would after a build."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[4] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_the_module_docs_are_yaml(path):
    blocks = {
        node.targets[0].id: node.value.value
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign)
        and getattr(node.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")
    }
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    for name, text in blocks.items():
        assert yaml.safe_load(text) is not None, name
