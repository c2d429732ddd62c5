# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metadataCopy: copying a host's labels and annotations onto a claim, given the patterns. Pure.

Which patterns apply (the HostDeployPolicies' ``metadataCopy``) is the claim layer's
(_claims/pure/metadata.py); the hardware cluster's copies are mirrored by the remote
claims with the same record (_remote/pure/mirror.py). A pattern is a Python regular
expression that must match the *whole* key, as ``nameMatches`` does.

Keys the claim layer uses for itself (``metalclaim.io/...``) and reboot requests
(``reboot.metal3.io...``) are never copied. The keys copied are recorded on the claim
(COPIED_ANNOTATION), so that only those are ever updated or removed: a key the tenant
set on its claim is left alone, even when a host key of the same name matches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import REBOOT_ANNOTATION

COPIED_ANNOTATION = "metalclaim.io/copied-metadata"
KINDS = ("labels", "annotations")


def never_copied(key: str) -> bool:
    """Keys that carry the claim layer's own bookkeeping or a reboot request: never copied nor removed."""
    prefix, _slash, _name = key.rpartition("/")
    return prefix == "metalclaim.io" or prefix.endswith(".metalclaim.io") or key.startswith(REBOOT_ANNOTATION)


@dataclass
class CopyRules:
    """The patterns that apply to one (host, claim) pair, and the policies ignored for an invalid one."""

    labels: list = field(default_factory=list)  # compiled patterns
    annotations: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # one message per ignored policy

    def patterns(self, kind: str) -> list:
        return self.labels if kind == "labels" else self.annotations


def selected(keys, patterns: list) -> set:
    """The keys some pattern matches in full, less those never copied."""
    return {k for k in keys if not never_copied(k) and any(p.fullmatch(k) for p in patterns)}


def copied_record(claim_annotations: dict) -> dict:
    """{"labels": set, "annotations": set} of keys copied earlier; the tenant may have mangled it, so be lenient."""
    try:
        record = json.loads(claim_annotations.get(COPIED_ANNOTATION) or "{}")
    except ValueError:
        record = {}
    if not isinstance(record, dict):
        record = {}
    result = {}
    for kind in KINDS:
        keys = record.get(kind) if isinstance(record.get(kind), list) else []
        result[kind] = {k for k in keys if isinstance(k, str) and not never_copied(k)}
    return result


def metadata_plan(
    claim_labels: dict, claim_annotations: dict, host_labels: dict, host_annotations: dict, rules: CopyRules
) -> tuple[dict, dict]:
    """(claim labels, claim annotations) with the host's selected keys copied and stale copies removed."""
    previous = copied_record(claim_annotations)
    targets = {"labels": dict(claim_labels), "annotations": dict(claim_annotations)}
    sources = {"labels": host_labels, "annotations": host_annotations}
    record = {}
    for kind in KINDS:
        target, source = targets[kind], sources[kind]
        wanted = selected(source, rules.patterns(kind))
        for stale in previous[kind] - wanted:
            target.pop(stale, None)
        copied = []
        for key in sorted(wanted):
            if key in target and key not in previous[kind]:
                continue  # the tenant's own key: never overwritten, so never removed either
            target[key] = source[key]
            copied.append(key)
        if copied:
            record[kind] = copied
    annotations = targets["annotations"]
    if record:
        annotations[COPIED_ANNOTATION] = json.dumps(record, sort_keys=True, separators=(",", ":"))
    else:
        annotations.pop(COPIED_ANNOTATION, None)
    return targets["labels"], annotations
