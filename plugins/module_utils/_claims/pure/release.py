# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What hostclaim_release decides about a host, as data: how it must look before it is given back, and whether
its claim is gone (orphaned). Pure: _claims/io/release.py reads, writes and waits.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.secrets import COPIES_ANNOTATION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    DATA_ROLES,
    REBOOT_ANNOTATION,
)


def scrubbed_spec(host: dict) -> dict:
    """The host as it must be before it is given back: no tenant data (nor record of its copies), off, metadata
    cleaning on."""
    scrubbed = copy.deepcopy(host)
    spec = scrubbed["spec"]
    for name in ("image", *DATA_ROLES):
        spec.pop(name, None)
    spec["online"] = False
    spec["automatedCleaningMode"] = "metadata"
    annotations = scrubbed["metadata"].get("annotations") or {}
    for name in [a for a in annotations if a == REBOOT_ANNOTATION or a.startswith(REBOOT_ANNOTATION + "/")]:
        del annotations[name]
    annotations.pop(COPIES_ANNOTATION, None)
    return scrubbed


def orphaned(host: dict, claims_by_key: dict) -> bool:
    """Whether the host's consumerRef names a HostClaim missing from claims_by_key (or another uid)."""
    ref = binding.consumer(host)
    if not ref or ref.get("kind") != binding.CLAIM_KIND:
        return False
    claim = claims_by_key.get((ref.get("namespace", ""), ref.get("name", "")))
    return claim is None or not binding.consumed_by(host, claim)
