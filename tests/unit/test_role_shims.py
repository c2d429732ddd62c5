"""The deprecated role names (issue 25): each old role is a shim that maps every variable of its new role.

A variable added to a new role and not to its shim would leave old playbooks without it: these tests fail then.
The shim runs the new role with each new variable set from the old one, or else from the new role's defaults
(read from its defaults/main.yml at run time), so every optional variable of a new role needs a default there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
# old role -> new role
RENAMED = {
    "hostclaim_hosts": "hosts",
    "hostclaim_install": "install",
    "hostclaim_policy": "policy",
    "hostclaim_provision": "provisioner",
    "hostclaim_reconcile": "claims",
    "hostclaim_remote": "remote",
    "tenant": "tenancy",
}
# Roles that came after the renames (no old name, no shim).
NEW_ROLES = {"capi", "catalog", "claimsets"}
MAPPED = re.compile(r"^\{\{ (?P<old>\w+)(?: \| default\((?P<defaults>\w+)\.(?P<default>\w+)\))? \}\}$")


def load(path: Path):
    return yaml.safe_load(path.read_text())


def options(role: str) -> dict:
    return load(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def tasks(role: str) -> list[dict]:
    return load(ROLES / role / "tasks" / "main.yml")


def mapping(old: str) -> dict:
    """new variable -> (old variable, the new role default it falls back on or None) of the shim's import."""
    [include] = [task for task in tasks(old) if "ansible.builtin.import_role" in task]
    assert include["ansible.builtin.import_role"] == {"name": f"metalclaim.hostclaim.{RENAMED[old]}"}
    result = {}
    for new, template in include["vars"].items():
        match = MAPPED.match(template)
        assert match, f"{old}: {new}: {template}"
        result[new] = (match["old"], match["default"], match["defaults"])
    return result


def spec_shape(spec: dict) -> dict:
    """What a variable's spec says about the values it takes (its descriptions left out)."""
    shape = {key: spec[key] for key in ("type", "elements", "required", "choices", "default", "no_log") if key in spec}
    for key in ("required_if", "mutually_exclusive", "required_together", "required_one_of"):
        if key in spec:
            shape[key] = spec[key]
    if "options" in spec:
        shape["options"] = {name: spec_shape(sub) for name, sub in spec["options"].items()}
    return shape


def test_every_old_role_is_a_shim_and_no_other():
    roles = {path.name for path in ROLES.iterdir() if path.is_dir()}
    assert set(RENAMED) | set(RENAMED.values()) | NEW_ROLES == roles
    for old in RENAMED:
        assert (ROLES / old / "defaults").exists() is False  # an unset old variable must stay undefined


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_the_shim_maps_every_variable_of_the_new_role(old):
    new = RENAMED[old]
    mapped = mapping(old)
    new_options = options(new)
    old_options = options(old)
    assert set(mapped) == set(new_options), "a variable of the new role is not mapped (or one is mapped twice)"
    assert sorted(source for source, _default, _defaults in mapped.values()) == sorted(old_options)
    defaults = load(ROLES / new / "defaults" / "main.yml") or {}
    assert set(defaults) <= set(new_options)
    for new_name, (old_name, default, defaults_var) in mapped.items():
        # The old variable's spec takes the same values as the new one's (only the names differ).
        assert spec_shape(old_options[old_name]) == spec_shape(new_options[new_name]), old_name
        if old_options[old_name].get("required"):
            assert default is None  # the shim's own argument spec requires it: no fallback
        else:
            # Unset, it takes the new role's default, which must exist (an undefined one fails validation).
            assert (default, defaults_var) == (new_name, f"__{old}_defaults")
            assert new_name in defaults, f"{new}: {new_name} has no default in defaults/main.yml"


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_the_shim_warns_first_and_reads_the_new_roles_defaults(old):
    new = RENAMED[old]
    first, read = tasks(old)[:2]
    message = first["ansible.builtin.debug"]["msg"]
    assert f"metalclaim.hostclaim.{old} is renamed metalclaim.hostclaim.{new}" in " ".join(message.split())
    assert read["ansible.builtin.include_vars"] == {
        "file": f"{{{{ role_path }}}}/../{new}/defaults/main.yml",
        "name": f"__{old}_defaults",
    }


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_the_shims_readme_says_deprecated_and_lists_every_variable(old):
    readme = (ROLES / old / "README.md").read_text()
    assert "**Deprecated:**" in readme and f"metalclaim.hostclaim.{RENAMED[old]}" in readme
    for new, (source, _default, _defaults) in mapping(old).items():
        assert f"| `{source}` | `{new}` |" in readme
    meta = load(ROLES / old / "meta" / "main.yml")
    assert meta["galaxy_info"]["description"].startswith("Deprecated")
