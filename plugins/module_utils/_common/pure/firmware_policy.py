# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which BIOS settings HostDeployPolicies allow (spec.firmware.allowedSettings). Pure.

Shared by the claim layer, which binds a claim only where its settings are allowed and writes them to the host's
HostFirmwareSettings, and the provisioner, which applies only settings an admitting policy allows for the host's
consumer, whoever wrote them (issue 40: the claim side's token wrote settings no policy allows, and the provisioner
went to set them).
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import admitting


def allowances(policies: list[dict], decisions) -> dict:
    """{infra namespace: {attribute: set of values}} over the policies that admit the claim's namespace (decisions:
    _common/pure/policy.py evaluate_policies' second value). A namespace none of whose policies lists any is absent."""
    found: dict = {}
    for namespace, policy in admitting(policies, decisions):
        for entry in (((policy.get("spec") or {}).get("firmware") or {}).get("allowedSettings")) or []:
            name = entry.get("name")
            if name:
                found.setdefault(namespace, {}).setdefault(str(name), set()).update(
                    str(v) for v in entry.get("values") or []
                )
    return found


def refused(settings: dict, allowed: dict | None) -> tuple[str, str] | None:
    """The first (attribute, value) asked that `allowed` ({attribute: values}) does not list; None when all are."""
    allowed = allowed or {}
    for name in sorted(settings):
        if settings[name] not in allowed.get(name, ()):
            return name, settings[name]
    return None
