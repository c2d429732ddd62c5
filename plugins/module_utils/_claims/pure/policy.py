# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which HostDeployPolicies admit a tenant namespace: the claim layer's name for _common/pure/policy.py, where the
rule lives since the catalog (_catalog) reads it too. Pure."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import (  # noqa: F401
    ADMITTED,
    INVALID_POLICY,
    LABEL_VALUE_MISMATCH,
    MISSING_LABEL,
    NAME_DOES_NOT_MATCH,
    NAME_NOT_LISTED,
    NAMESPACE_RULE_FIELDS,
    NO_NAMESPACE_RULE,
    PolicyDecision,
    evaluate_policies,
    evaluate_policy,
    namespace_rule,
    refusal_message,
)
