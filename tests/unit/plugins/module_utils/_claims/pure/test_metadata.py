"""metadataCopy: which host labels/annotations reach a claim, under which policies, and what is removed."""

from __future__ import annotations

import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.metadata import copy_rules
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metadata as md


def hdp(name: str, copy: dict | None, rule: dict | None = None, namespace: str = "infra") -> dict:
    spec = {"hostclaimNamespaces": {} if rule is None else rule}
    if copy is not None:
        spec["metadataCopy"] = copy
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def rules(*policies, claim_namespace="tenant", labels=None) -> md.CopyRules:
    return copy_rules(list(policies), "infra", claim_namespace, labels or {})


HOST_LABELS = {"infra-kind": "medium", "topology.kubernetes.io/zone": "z1", "secret-rack": "r7"}
HOST_ANNOTATIONS = {
    "infra.example/owner": "team-x",
    "infra.example/owner-email": "x@example.org",
    "reboot.metal3.io": "",
    "reboot.metal3.io/maint": "",
    "metalclaim.io/reboot-keys": "reboot.metal3.io/maint",
}


def plan(claim_labels, claim_annotations, copy_rules):
    return md.metadata_plan(claim_labels, claim_annotations, HOST_LABELS, HOST_ANNOTATIONS, copy_rules)


def test_nothing_is_copied_without_a_policy_opting_in():
    assert plan({}, {}, rules(hdp("p", None))) == ({}, {})
    assert plan({"mine": "1"}, {}, rules()) == ({"mine": "1"}, {})


def test_keys_are_copied_only_on_a_full_match():
    labels, annotations = plan({}, {}, rules(hdp("p", {"labels": ["infra-kind", "topology\\..*"]})))
    assert labels == {"infra-kind": "medium", "topology.kubernetes.io/zone": "z1"}
    assert "secret-rack" not in labels
    # `infra.example/owner` must not match `infra.example/owner-email`: a full match, like nameMatches.
    _labels, annotations = plan({}, {}, rules(hdp("p", {"annotations": ["infra\\.example/owner"]})))
    assert annotations["infra.example/owner"] == "team-x"
    assert "infra.example/owner-email" not in annotations
    assert json.loads(annotations[md.COPIED_ANNOTATION]) == {"annotations": ["infra.example/owner"]}


def test_own_bookkeeping_and_reboot_requests_are_never_copied_even_by_a_catch_all():
    _labels, annotations = plan({}, {}, rules(hdp("p", {"annotations": [".*"]})))
    assert set(annotations) == {"infra.example/owner", "infra.example/owner-email", md.COPIED_ANNOTATION}


@pytest.mark.parametrize(
    ("key", "never"),
    [
        ("metalclaim.io/copied-metadata", True),
        ("sub.metalclaim.io/x", True),
        ("reboot.metal3.io", True),
        ("reboot.metal3.io/maint", True),
        ("reboot.metal3.iox", True),
        ("notmetalclaim.io/x", False),
        ("infra.example/reboot.metal3.io", False),
    ],
)
def test_never_copied(key, never):
    assert md.never_copied(key) is never


def test_policies_or_together_and_only_those_admitting_the_claims_namespace_count():
    admits = hdp("a", {"labels": ["infra-kind"]})
    also = hdp("b", {"labels": ["secret-rack"]})
    other_tenant = hdp("c", {"labels": ["topology.*"]}, rule={"names": ["someone-else"]})
    other_namespace = hdp("d", {"labels": [".*"]}, namespace="elsewhere")
    no_rule = {"metadata": {"name": "e", "namespace": "infra"}, "spec": {"metadataCopy": {"labels": [".*"]}}}
    labels, _annotations = plan({}, {}, rules(admits, also, other_tenant, other_namespace, no_rule))
    assert labels == {"infra-kind": "medium", "secret-rack": "r7"}


def test_has_labels_rule_uses_the_namespace_labels():
    policy = hdp("p", {"labels": ["infra-kind"]}, rule={"hasLabels": [{"name": "tier", "value": "gold"}]})
    assert plan({}, {}, rules(policy, labels={"tier": "gold"}))[0] == {"infra-kind": "medium"}
    assert plan({}, {}, rules(policy, labels={"tier": "bronze"}))[0] == {}


def test_an_invalid_pattern_ignores_that_policys_copy_only():
    broken = hdp("broken", {"labels": ["infra-kind", "rack-(["]})
    good = hdp("good", {"labels": ["secret-rack"]})
    copy_rules = rules(broken, good)
    assert copy_rules.problems == [
        "HostDeployPolicy infra/broken: metadataCopy.labels[1] 'rack-([' is not a valid regular expression "
        "(unterminated character set at position 6); its metadataCopy is ignored"
    ]
    assert plan({}, {}, copy_rules)[0] == {"secret-rack": "r7"}


def test_tenant_keys_are_never_overwritten_nor_removed():
    copy_rules = rules(hdp("p", {"labels": ["infra-kind", "secret-rack"]}))
    labels, annotations = plan({"infra-kind": "tenant-value", "app": "web"}, {}, copy_rules)
    assert labels == {"infra-kind": "tenant-value", "app": "web", "secret-rack": "r7"}
    assert json.loads(annotations[md.COPIED_ANNOTATION]) == {"labels": ["secret-rack"]}
    # The policy stops copying: only the copied key goes, the tenant's stay.
    labels, annotations = md.metadata_plan(labels, annotations, HOST_LABELS, HOST_ANNOTATIONS, rules())
    assert labels == {"infra-kind": "tenant-value", "app": "web"}
    assert md.COPIED_ANNOTATION not in annotations


def test_copies_follow_the_host_and_go_when_the_host_drops_the_key():
    copy_rules = rules(hdp("p", {"labels": ["infra-kind", "secret-rack"]}))
    labels, annotations = plan({}, {}, copy_rules)
    host_labels = {"infra-kind": "large"}
    labels, annotations = md.metadata_plan(labels, annotations, host_labels, {}, copy_rules)
    assert labels == {"infra-kind": "large"}
    assert json.loads(annotations[md.COPIED_ANNOTATION]) == {"labels": ["infra-kind"]}
    # Idempotent: the same inputs give the same outputs.
    assert md.metadata_plan(labels, annotations, host_labels, {}, copy_rules) == (labels, annotations)


@pytest.mark.parametrize("record", ["not json", "[1]", '{"labels": "x"}', '{"labels": ["reboot.metal3.io", 3]}'])
def test_a_mangled_record_removes_nothing_it_should_not(record):
    claim_annotations = {md.COPIED_ANNOTATION: record, "reboot.metal3.io": ""}
    labels, annotations = md.metadata_plan({"x": "1"}, claim_annotations, HOST_LABELS, HOST_ANNOTATIONS, rules())
    assert labels == {"x": "1"}
    assert annotations == {"reboot.metal3.io": ""}
