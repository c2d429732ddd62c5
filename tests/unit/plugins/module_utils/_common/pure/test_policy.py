"""The HostDeployPolicy matrix: which tenant namespaces a policy admits, and why not."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import policy


def hdp(name: str, rule: dict | None, namespace: str = "infrahost", field: str = "hostclaimNamespaces") -> dict:
    spec = {} if rule is None else {field: rule}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.mark.parametrize(
    ("rule", "namespace", "labels", "admitted", "reason"),
    [
        (None, "cluster-ns", {}, False, policy.NO_NAMESPACE_RULE),
        ({}, "cluster-ns", {}, True, policy.ADMITTED),
        ({"names": ["cluster-ns"]}, "cluster-ns", {}, True, policy.ADMITTED),
        ({"names": ["other"]}, "cluster-ns", {}, False, policy.NAME_NOT_LISTED),
        ({"names": []}, "cluster-ns", {}, False, policy.NAME_NOT_LISTED),
        ({"nameMatches": "prod"}, "prod", {}, True, policy.ADMITTED),
        # A full match: `prod` must not admit `not-prod` or `prod-2`.
        ({"nameMatches": "prod"}, "not-prod", {}, False, policy.NAME_DOES_NOT_MATCH),
        ({"nameMatches": "prod"}, "prod-2", {}, False, policy.NAME_DOES_NOT_MATCH),
        ({"nameMatches": "team-[a-z]+"}, "team-blue", {}, True, policy.ADMITTED),
        ({"nameMatches": "team-(["}, "team-blue", {}, False, policy.INVALID_POLICY),
        ({"hasLabels": [{"name": "tier"}]}, "ns", {"tier": "gold"}, True, policy.ADMITTED),
        ({"hasLabels": [{"name": "tier"}]}, "ns", {}, False, policy.MISSING_LABEL),
        ({"hasLabels": [{"name": "tier", "value": "gold"}]}, "ns", {"tier": "gold"}, True, policy.ADMITTED),
        (
            {"hasLabels": [{"name": "tier", "value": "gold"}]},
            "ns",
            {"tier": "bronze"},
            False,
            policy.LABEL_VALUE_MISMATCH,
        ),
        # An empty value is a value: it must be equal, not merely present.
        ({"hasLabels": [{"name": "tier", "value": ""}]}, "ns", {"tier": "gold"}, False, policy.LABEL_VALUE_MISMATCH),
        ({"hasLabels": [{"name": "a"}, {"name": "b"}]}, "ns", {"a": "1"}, False, policy.MISSING_LABEL),
        # All present fields must hold together.
        (
            {"names": ["prod"], "nameMatches": "p.*", "hasLabels": [{"name": "x"}]},
            "prod",
            {"x": ""},
            True,
            policy.ADMITTED,
        ),
        ({"names": ["prod"], "nameMatches": "q.*"}, "prod", {}, False, policy.NAME_DOES_NOT_MATCH),
    ],
)
def test_policy_matrix(rule, namespace, labels, admitted, reason):
    decision = policy.evaluate_policy(hdp("p", rule), namespace, labels)
    assert (decision.admitted, decision.reason) == (admitted, reason)
    assert decision.message


def test_upstream_spelling_is_an_alias():
    decision = policy.evaluate_policy(hdp("p", {"names": ["ns"]}, field="hostClaimNamespaces"), "ns", {})
    assert decision.admitted


def test_both_spellings_at_once_is_invalid():
    both = hdp("p", {})
    both["spec"]["hostClaimNamespaces"] = {}
    assert policy.evaluate_policy(both, "ns", {}).reason == policy.INVALID_POLICY


def test_invalid_regex_invalidates_only_that_policy():
    policies = [hdp("broken", {"nameMatches": "(("}, "rack-1"), hdp("open", {}, "rack-2")]
    authorized, decisions = policy.evaluate_policies(policies, "cluster-ns", {})
    assert authorized == ["rack-2"]
    broken = next(d for d in decisions if d.policy == "rack-1/broken")
    assert broken.reason == policy.INVALID_POLICY
    assert "'((' is not a valid regular expression" in broken.message


def test_policies_or_together_and_admit_only_their_own_namespace():
    policies = [
        hdp("strict", {"names": ["other"]}, "rack-1"),
        hdp("labels", {"hasLabels": [{"name": "tier"}]}, "rack-1"),
        hdp("none", None, "rack-2"),
        hdp("open", {}, "rack-3"),
    ]
    authorized, _decisions = policy.evaluate_policies(policies, "cluster-ns", {"tier": "gold"})
    assert authorized == ["rack-1", "rack-3"]


def test_no_policy_means_no_namespace_and_says_so():
    authorized, decisions = policy.evaluate_policies([], "cluster-ns", {})
    assert authorized == []
    assert policy.refusal_message(decisions) == "no HostDeployPolicy admits this namespace"
    assert (
        policy.refusal_message(decisions, "rack-1") == "no HostDeployPolicy in namespace 'rack-1' admits this namespace"
    )


def test_refusal_message_names_each_policy():
    _authorized, decisions = policy.evaluate_policies([hdp("only-prod", {"names": ["prod"]})], "dev", {})
    assert policy.refusal_message(decisions) == "infrahost/only-prod: namespace 'dev' is not in names"
