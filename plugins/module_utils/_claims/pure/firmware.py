# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Firmware (BIOS) settings a claim asks for, as its hosts' policies allow them. Pure.

An infrastructure team lists in a HostDeployPolicy (spec.firmware.allowedSettings) the BIOS attributes and values the
claims of the namespaces it admits may ask for on the hosts of its namespace; several admitting policies of one
namespace add up. A claim asks in spec.firmware.settings (Metal3's HostFirmwareSettings spec.settings shape); it is
bound only to a host whose namespace allows every one. The claim layer writes the bound claim's settings to the
host's HostFirmwareSettings (same name and namespace as the BareMetalHost) before the host gets the claim's image,
and empties them at release; the provisioner applies them and reads them back into its status, which the claim
reports (status.firmware.settings).
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.firmware_policy import refused
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    API_VERSION,
    FIRMWARE_SETTINGS_KIND,
)

# Association reason (refused) and Synchronization reason (bound, the policy changed since).
NOT_ALLOWED = "FirmwareSettingNotAllowed"


def asked(claim: dict) -> dict:
    """spec.firmware.settings: {attribute: value}, values as text."""
    settings = (((claim.get("spec") or {}).get("firmware") or {}).get("settings")) or {}
    return {str(name): str(value) for name, value in settings.items()}


def fitting(settings: dict, namespaces: list[str], allowed_by_namespace: dict | None) -> list[str]:
    """The namespaces among `namespaces` whose hosts may take every setting asked."""
    if not settings:
        return list(namespaces)
    allowed_by_namespace = allowed_by_namespace or {}
    return [ns for ns in namespaces if refused(settings, allowed_by_namespace.get(ns)) is None]


def refusal(settings: dict, namespaces: list[str], allowed_by_namespace: dict | None) -> str:
    """What a tenant reads when no namespace allows its settings: the setting and value it asked for, and nothing of
    the policies (which namespaces allow what is the infrastructure's; hostdeploypolicy_check tells it)."""
    allowed_by_namespace = allowed_by_namespace or {}
    # The setting refused everywhere, if one is; else the first one the first namespace refuses.
    for name in sorted(settings):
        single = {name: settings[name]}
        if all(refused(single, allowed_by_namespace.get(ns)) is not None for ns in namespaces):
            return _message(name, settings[name])
    name, value = refused(settings, allowed_by_namespace.get(namespaces[0] if namespaces else "")) or next(
        iter(sorted(settings.items()))
    )
    return _message(name, value) + " together with the other settings asked"


def _message(name: str, value: str) -> str:
    return (
        f"spec.firmware.settings: {name}={value!r} is not allowed on any BareMetalHost this namespace may use "
        "(the infrastructure team lists the firmware settings it allows in its HostDeployPolicies)"
    )


def desired(hfs: dict | None, host: dict, settings: dict) -> dict | None:
    """The host's HostFirmwareSettings with spec.settings = `settings`; None when it already is (or, for no settings,
    when there is none)."""
    if hfs is None:
        if not settings:
            return None
        namespace, name = host["metadata"]["namespace"], host["metadata"]["name"]
        return {
            "apiVersion": API_VERSION,
            "kind": FIRMWARE_SETTINGS_KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "ownerReferences": [
                    {"apiVersion": API_VERSION, "kind": "BareMetalHost", "name": name, "uid": host["metadata"]["uid"]}
                ],
            },
            "spec": {"settings": dict(settings)},
        }
    current = {str(k): str(v) for k, v in ((hfs.get("spec") or {}).get("settings") or {}).items()}
    if current == settings:
        return None
    updated = copy.deepcopy(hfs)
    updated.setdefault("spec", {})["settings"] = dict(settings)
    updated.pop("status", None)  # a replace never writes status; sent back it would only be dropped
    return updated


def read_back(hfs: dict | None, settings: dict) -> dict:
    """{attribute: value} the provisioner last read back (HostFirmwareSettings status.settings), for the attributes
    asked only: the claim reports those, never the host's other BIOS attributes."""
    read = ((hfs or {}).get("status") or {}).get("settings") or {}
    return {name: str(read[name]) for name in sorted(settings) if name in read}


def image_coming(host: dict, host_spec: dict | None) -> bool:
    """Whether the sync gives the host an image it does not have yet (host_spec: the host's spec as the sync writes
    it): the one moment the HostFirmwareSettings of a claim that asks for nothing is looked at."""
    image = (host_spec or {}).get("image")
    return bool(image) and image != (host.get("spec") or {}).get("image")


def involved(claim: dict | None) -> bool:
    """Whether the claim has, or had, settings on its host (a host with no claim: unknown, so yes)."""
    if claim is None:
        return True
    return bool(asked(claim)) or bool((claim.get("status") or {}).get("firmware"))
