# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which HostDeployPolicies admit a tenant namespace, and why not (the claim layer and the catalog share it). Pure.

Semantics of ``spec.hostclaimNamespaces`` (alias ``hostClaimNamespaces``):

* absent: the policy authorizes nothing;
* ``{}``: every namespace is admitted;
* otherwise every field present must hold:
  ``names`` (the namespace is listed), ``nameMatches`` (a Python regular expression
  that must match the *whole* namespace name: ``prod`` admits ``prod`` but not
  ``not-prod``), ``hasLabels`` (each listed label is on the Namespace object, with
  the given value when one is given).

A policy admits claims only for hosts in its own namespace; several policies in
one namespace OR together. An invalid regular expression invalidates that policy
alone.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

NAMESPACE_RULE_FIELDS = ("hostclaimNamespaces", "hostClaimNamespaces")

ADMITTED = "Admitted"
NO_NAMESPACE_RULE = "NoNamespaceRule"
NAME_NOT_LISTED = "NameNotListed"
NAME_DOES_NOT_MATCH = "NameDoesNotMatch"
MISSING_LABEL = "MissingLabel"
LABEL_VALUE_MISMATCH = "LabelValueMismatch"
INVALID_POLICY = "InvalidPolicy"


@dataclass(frozen=True)
class PolicyDecision:
    policy: str  # "<namespace>/<name>"
    infra_namespace: str
    admitted: bool
    reason: str
    message: str

    def as_dict(self) -> dict:
        return asdict(self)


def namespace_rule(policy: dict) -> dict | None:
    """The policy's namespace rule under either spelling; None when absent."""
    spec = policy.get("spec") or {}
    present = [spec[field] for field in NAMESPACE_RULE_FIELDS if spec.get(field) is not None]
    if not present:
        return None
    return present[0]


def policy_ref(policy: dict) -> str:
    """A policy as decisions name it: <infra namespace>/<name>."""
    meta = policy.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def admitting(policies: list[dict], decisions: list[PolicyDecision]) -> list[tuple[str, dict]]:
    """(infra namespace, policy) for each policy that admitted the namespace (decisions: evaluate_policies' second
    value), in the decisions' order: what a cap or an offer of the policies is read from."""
    by_ref = {policy_ref(policy): policy for policy in policies}
    return [(d.infra_namespace, by_ref.get(d.policy) or {}) for d in decisions if d.admitted]


def evaluate_policy(policy: dict, namespace: str, namespace_labels: dict | None) -> PolicyDecision:
    """Decide whether one policy admits claims from `namespace` (whose labels are given)."""
    infra_namespace = (policy.get("metadata") or {}).get("namespace", "")
    ref = policy_ref(policy)

    def decision(admitted: bool, reason: str, message: str) -> PolicyDecision:
        return PolicyDecision(ref, infra_namespace, admitted, reason, message)

    spec = policy.get("spec") or {}
    if all(spec.get(field) is not None for field in NAMESPACE_RULE_FIELDS):
        return decision(False, INVALID_POLICY, "both hostclaimNamespaces and hostClaimNamespaces are set; keep one")
    rule = namespace_rule(policy)
    if rule is None:
        return decision(False, NO_NAMESPACE_RULE, "the policy has no hostclaimNamespaces and authorizes nothing")

    pattern = rule.get("nameMatches")
    if pattern is not None:
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            return decision(
                False, INVALID_POLICY, f"nameMatches {pattern!r} is not a valid regular expression: {error}"
            )
    names = rule.get("names")
    if names is not None and namespace not in names:
        return decision(False, NAME_NOT_LISTED, f"namespace {namespace!r} is not in names")
    if pattern is not None and not compiled.fullmatch(namespace):
        return decision(False, NAME_DOES_NOT_MATCH, f"namespace {namespace!r} does not fully match {pattern!r}")
    labels = namespace_labels or {}
    for wanted in rule.get("hasLabels") or []:
        key = wanted.get("name")
        if key not in labels:
            return decision(False, MISSING_LABEL, f"namespace {namespace!r} has no label {key!r}")
        value = wanted.get("value")
        if value is not None and labels[key] != value:
            return decision(
                False, LABEL_VALUE_MISMATCH, f"namespace {namespace!r} label {key!r} is {labels[key]!r}, not {value!r}"
            )
    return decision(True, ADMITTED, f"admitted by {ref}")


def evaluate_policies(
    policies: list[dict], namespace: str, namespace_labels: dict | None
) -> tuple[list[str], list[PolicyDecision]]:
    """(infra namespaces whose hosts `namespace` may claim, sorted; one decision per policy)."""
    decisions = [evaluate_policy(policy, namespace, namespace_labels) for policy in policies]
    decisions.sort(key=lambda d: d.policy)
    authorized = sorted({d.infra_namespace for d in decisions if d.admitted})
    return authorized, decisions


def refusal_message(decisions: list[PolicyDecision], infra_namespace: str | None = None) -> str:
    """One readable sentence for a claim that no policy admits (optionally within one infra namespace)."""
    relevant = [d for d in decisions if infra_namespace is None or d.infra_namespace == infra_namespace]
    if not relevant:
        where = f" in namespace {infra_namespace!r}" if infra_namespace else ""
        return f"no HostDeployPolicy{where} admits this namespace"
    return "; ".join(f"{d.policy}: {d.message}" for d in relevant)
