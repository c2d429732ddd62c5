# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metadataCopy: which BareMetalHost labels and annotations reach the claim. Pure.

Nothing is copied unless a HostDeployPolicy opts in. The policies that count for a
host are those of the host's namespace that admit the claim's namespace; their
``metadataCopy`` patterns OR together. A policy with an invalid pattern contributes
nothing (the other policies still do) and is reported. The copying itself, and the
record of what was copied, is _common/pure/metadata.py.
"""

from __future__ import annotations

import re

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metadata import KINDS, CopyRules
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policy


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
