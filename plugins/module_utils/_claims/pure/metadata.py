# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metadataCopy: which BareMetalHost labels and annotations reach the claim. Pure.

Nothing is copied unless a HostDeployPolicy opts in. The policies that count for a
host are those of the host's namespace that admit the claim's namespace; their
``metadataCopy`` patterns OR together. A pattern is a Python regular expression
that must match the *whole* key, as ``nameMatches`` does. A policy with an invalid
pattern contributes nothing (the other policies still do) and is reported.

Keys the claim layer uses for itself (``metalclaim.io/...``) and reboot requests
(``reboot.metal3.io...``) are never copied. The keys copied are recorded on the claim
(COPIED_ANNOTATION), so that only those are ever updated or removed: a key the tenant
set on its claim is left alone, even when a host key of the same name matches.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.policy import evaluate_policy
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


def compile_metadata_copy(policy: dict) -> tuple[dict, str]:
    """({"labels": [...], "annotations": [...]} compiled, '') or ({}, why the policy's metadataCopy is ignored)."""
    meta = policy.get("metadata") or {}
    copy_spec = (policy.get("spec") or {}).get("metadataCopy") or {}
    compiled: dict = {kind: [] for kind in KINDS}
    for kind in KINDS:
        for index, pattern in enumerate(copy_spec.get(kind) or []):
            try:
                compiled[kind].append(re.compile(pattern))
            except (re.error, TypeError) as error:
                return {}, (
                    f"HostDeployPolicy {meta.get('namespace', '')}/{meta.get('name', '')}: "
                    f"metadataCopy.{kind}[{index}] {pattern!r} is not a valid regular expression ({error}); "
                    "its metadataCopy is ignored"
                )
    return compiled, ""


def copy_rules(policies: list[dict], host_namespace: str, claim_namespace: str, namespace_labels: dict) -> CopyRules:
    """The metadataCopy patterns for a host of `host_namespace` bound to a claim of `claim_namespace`."""
    rules = CopyRules()
    for policy in sorted(policies, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        if (policy.get("metadata") or {}).get("namespace") != host_namespace:
            continue
        if not (policy.get("spec") or {}).get("metadataCopy"):
            continue
        if not evaluate_policy(policy, claim_namespace, namespace_labels).admitted:
            continue
        compiled, problem = compile_metadata_copy(policy)
        if problem:
            rules.problems.append(problem)
            continue
        rules.labels.extend(compiled["labels"])
        rules.annotations.extend(compiled["annotations"])
    return rules


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
