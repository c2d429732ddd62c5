"""bmh_redfish's defaults are written once (issue 25): _provisioner/pure/defaults.py. The module's argument spec and
machine.Settings take them from there, its DOCUMENTATION states the same values, and the provisioner role passes
those options only when set, so an unset role variable leaves the module's default."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import defaults, machine
from ansible_collections.metalclaim.hostclaim.plugins.modules import bmh_redfish

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "provisioner"
# option -> its default, written once
DEFAULTS = {
    "callback_timeout": defaults.CALLBACK_TIMEOUT,
    "power_poll_interval": defaults.POWER_POLL_INTERVAL,
    "power_off_timeout": defaults.POWER_OFF_TIMEOUT,
    "backoff_base": defaults.BACKOFF_BASE,
    "backoff_cap": defaults.BACKOFF_CAP,
    "cleaning_erase": defaults.CLEANING_ERASE,
}
# the role variables left to the module's default: 0 (the role's default) is "not set"
LEFT_TO_THE_MODULE = ["callback_timeout", "power_poll_interval"]


@pytest.mark.parametrize("option", sorted(DEFAULTS))
def test_the_documentation_the_argument_spec_and_the_settings_agree(option):
    documented = yaml.safe_load(bmh_redfish.DOCUMENTATION)["options"][option]["default"]
    assert documented == bmh_redfish.ARGUMENT_SPEC[option]["default"] == DEFAULTS[option]
    assert type(documented) is type(DEFAULTS[option]) or isinstance(documented, int)  # 1800 documents 1800.0
    fields = {f.name: f.default for f in dataclasses.fields(machine.Settings)}
    assert fields[option] == DEFAULTS[option]


@pytest.mark.parametrize("option", LEFT_TO_THE_MODULE)
def test_the_role_passes_the_option_only_when_set(option):
    variable = f"provisioner_{option}"
    assert yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())[variable] == 0
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
    assert spec["options"][variable]["default"] == 0
    [step] = [
        t for t in yaml.safe_load((ROLE / "tasks" / "main.yml").read_text()) if "metalclaim.hostclaim.bmh_redfish" in t
    ]
    assert step["metalclaim.hostclaim.bmh_redfish"][option] == f"{{{{ ({variable} | float) or omit }}}}"
    # The value is written nowhere in the role: no line about the variable states it.
    value = re.compile(rf"\b{DEFAULTS[option]:g}\b")
    for path in ROLE.rglob("*"):
        lines = path.read_text().splitlines() if path.is_file() else []
        assert not [line for line in lines if variable in line and value.search(line)], path
