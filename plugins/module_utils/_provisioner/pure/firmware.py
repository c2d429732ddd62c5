# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Firmware (BIOS) settings of a host, as Metal3's HostFirmwareSettings asks for them. Pure: no I/O.

The claim layer writes the HostFirmwareSettings' spec.settings (same name and namespace as the BareMetalHost) for a
bound claim and empties it at release. The provisioner, while it provisions, sets the BIOS attributes that differ
from it before the deploy ISO or live ISO boots (a BMC applies them at that boot), and while it deprovisions, puts
back the values the attributes had before the first change (the infrastructure's defaults) before the cleaning boot.
Those values live in a provisioner-owned annotation, written in a step of its own before the first change, so a crash
between the change and the write can never lose them. Each step reads the attributes back into the
HostFirmwareSettings' status.

Only what the infrastructure allows is applied (issue 40: the claim side's token wrote settings no policy allows into
a free host's HostFirmwareSettings, and the provisioner went to set them): each setting asked must be one an
admitting HostDeployPolicy of the host's namespace allows for the namespace of the HostClaim holding the host
(_common/pure/firmware_policy.py), else the step is a provisioning error naming it and no BIOS is read or set. A host
no HostClaim holds takes none.

One observation (FIRMWARE), read by the edge: {"hfs": the HostFirmwareSettings or None, "allowed": {attribute:
values} those policies allow for the host's consumer (read only when something is asked), "current": the BIOS
attributes or None when not read, "pending": the attributes the BMC will apply at the next boot (its Settings
object), "unsupported": why the BMC's BIOS could not be read}. Actions as data: ("bios", {name: value}).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.firmware_policy import refused

FIRMWARE = "firmware"
BASELINE_ANNOTATION = "provisioner.metalclaim.io/firmware-baseline"
# Metal3's HostFirmwareSettings conditions and reasons.
VALID = "Valid"
CHANGE_DETECTED = "ChangeDetected"
SUCCESS = "Success"
CONFIGURATION_ERROR = "ConfigurationError"


@dataclass
class Plan:
    """What the firmware asks of one step: BMC actions, host annotations, a HostFirmwareSettings status."""

    actions: list = field(default_factory=list)
    annotations: dict = field(default_factory=dict)
    status: dict | None = None  # the HostFirmwareSettings' status to write (None: nothing to write)
    problem: str = ""  # a provisioning error naming the attribute
    hold: bool = False  # the baseline annotation must be written on its own before any change


def as_text(value) -> str:
    """A setting as BIOS attributes compare: HostFirmwareSettings takes int-or-string, the BMC answers JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def wanted(hfs: dict | None) -> dict:
    """spec.settings of the host's HostFirmwareSettings, values as text ({} without one)."""
    settings = ((hfs or {}).get("spec") or {}).get("settings") or {}
    return {str(name): as_text(value) for name, value in settings.items()}


def baseline(host: dict) -> dict:
    """{attribute: value before the first change} recorded on the host ({} when nothing was changed)."""
    raw = ((host.get("metadata") or {}).get("annotations") or {}).get(BASELINE_ANNOTATION)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): as_text(v) for k, v in value.items()} if isinstance(value, dict) else {}


def for_consumer(allowed: dict | None, claimed: dict | None) -> dict | None:
    """{attribute: values} the provisioner may apply: the settings the consumer HostClaim asks for (claimed:
    its spec.firmware.settings; None: not known, `allowed` alone) that the policies allow it (`allowed`). Issue 40:
    a setting someone else left or wrote in the HostFirmwareSettings is applied to no claim that did not ask for it,
    even one a policy allows."""
    if claimed is None or allowed is None:
        return allowed
    return {name: {value} for name, value in claimed.items() if value in allowed.get(name, ())}


def needs_bios(host: dict, hfs: dict | None, allowed: dict | None = None, claimed: dict | None = None) -> bool:
    """Whether the BIOS must be read: something is asked for (and, given `allowed`, every setting allowed and, given
    `claimed`, asked for by the consumer) or still to be put back. Otherwise firmware costs no Redfish request (and
    BMCs without BIOS support work as before); a refused setting is refused before any BIOS read."""
    asked = wanted(hfs)
    allowed = for_consumer(allowed, claimed)
    return bool(baseline(host)) or (bool(asked) and (allowed is None or refused(asked, allowed) is None))


def provisioning(host: dict, observed: dict | None, now: str) -> Plan:
    """Before the deploy or live ISO boots: the HostFirmwareSettings' values, and the infrastructure's defaults for
    attributes changed for an earlier consumer and not asked for now."""
    observed = observed or {}
    asked = wanted(observed.get("hfs"))
    policies_allow = observed.get("allowed") or {}
    claimed = observed.get("claimed")
    refusal = refused(asked, for_consumer(policies_allow, claimed) or {}) if asked else None
    if refusal is not None:
        name, value = refusal
        if refused({name: value}, policies_allow) is None:  # allowed, but the consumer never asked for it
            why = "the HostClaim holding the host does not ask for it (spec.firmware.settings)"
        else:
            why = "no HostDeployPolicy of this namespace allows it for the host's consumer"
        problem = f"firmware setting {name}={value}: {why}"
        return Plan(problem=problem, status=_status(observed.get("hfs"), None, asked, problem, now))
    return _converge(host, observed, {**baseline(host), **asked}, asked, now, restoring=False)


def deprovisioning(host: dict, observed: dict | None, now: str) -> Plan:
    """Before the cleaning boot: every changed attribute back to its infrastructure default; the record of the
    defaults goes once the BMC reads them back."""
    return _converge(host, observed or {}, baseline(host), {}, now, restoring=True)


def _converge(host: dict, observed: dict, target: dict, asked: dict, now: str, restoring: bool) -> Plan:
    plan = Plan()
    hfs = observed.get("hfs")
    current = observed.get("current")
    if not target:
        plan.status = _status(hfs, current, asked, "", now)
        return plan
    if current is None:
        why = observed.get("unsupported") or "the BIOS attributes were not read"
        plan.problem = f"firmware settings {', '.join(sorted(target))}: {why}"
        plan.status = _status(hfs, None, asked, plan.problem, now)
        return plan
    missing = sorted(name for name in target if name not in current)
    if missing:
        plan.problem = f"firmware setting {missing[0]}: the BMC has no such BIOS attribute"
        plan.status = _status(hfs, current, asked, plan.problem, now)
        return plan
    pending = observed.get("pending") or {}
    # A value already pending (set, not yet applied at a boot) is not set again.
    changes = {name: value for name, value in target.items() if pending.get(name, current[name]) != value}
    recorded = baseline(host)
    if not restoring:
        unrecorded = {name: current[name] for name in changes if name not in recorded}
        if unrecorded:
            plan.annotations[BASELINE_ANNOTATION] = json.dumps({**recorded, **unrecorded}, sort_keys=True)
            plan.hold = True
            return plan
    if changes:
        plan.actions.append(("bios", changes))
    elif restoring and recorded and all(current[name] == value for name, value in recorded.items()):
        plan.annotations[BASELINE_ANNOTATION] = None  # read back equal: the defaults are in place again
    plan.status = _status(hfs, current, asked, "", now)
    return plan


def _status(hfs: dict | None, current: dict | None, asked: dict, problem: str, now: str) -> dict | None:
    """The HostFirmwareSettings' status after this read (None: no such object, or nothing changed)."""
    if hfs is None:
        return None
    old = hfs.get("status") or {}
    generation = (hfs.get("metadata") or {}).get("generation", 0)
    settings = dict(current) if current is not None else dict(old.get("settings") or {})
    valid = ("False", CONFIGURATION_ERROR, problem) if problem else ("True", SUCCESS, "")
    changed = sorted(name for name, value in asked.items() if settings.get(name) != value)
    found = conditions.set_condition(old.get("conditions"), VALID, *valid, generation, now)
    detected = ("True", SUCCESS, "not yet read back: " + ", ".join(changed)) if changed else ("False", SUCCESS, "")
    found = conditions.set_condition(found, CHANGE_DETECTED, *detected, generation, now)
    status = {"settings": settings, "conditions": found}
    if {k: old.get(k) for k in status} == status:
        return None
    return {**status, "lastUpdated": now}
