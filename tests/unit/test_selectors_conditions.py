"""Label selectors and condition bookkeeping."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._selectors import SelectorError, matches, validate

LABELS = {"infra-kind": "medium", "zone": "z1", "gpu": ""}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (None, True),
        ({}, True),
        ({"matchLabels": {"infra-kind": "medium"}}, True),
        ({"matchLabels": {"infra-kind": "large"}}, False),
        ({"matchLabels": {"missing": "x"}}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z3"]}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "In", "values": ["z3"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "NotIn", "values": ["z1"]}]}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "absent", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "DoesNotExist"}]}, True),
        # Cluster API's lowercase spellings mean the same.
        ({"matchExpressions": [{"key": "zone", "operator": "in", "values": ["z1"]}]}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "!"}]}, False),
        # k8s.io/apimachinery's selection spellings, as Metal3 accepts them.
        ({"matchExpressions": [{"key": "zone", "operator": "=", "values": ["z1"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "==", "values": ["z2"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "!=", "values": ["z1"]}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "!=", "values": ["z1"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "notin", "values": ["z2"]}]}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "exists"}]}, True),
        # matchLabels and every expression must all hold.
        (
            {"matchLabels": {"infra-kind": "medium"}, "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]},
            False,
        ),
    ],
)
def test_selector_matching(selector, expected):
    validate(selector)
    assert matches(selector, LABELS) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            {"key": "k", "operator": "Like", "values": ["v"]},
            "matchExpressions[0].operator: unsupported operator 'Like'",
        ),
        ({"key": "k", "operator": "In"}, "matchExpressions[0].values: In needs at least one value"),
        ({"key": "k", "operator": "Exists", "values": ["v"]}, "matchExpressions[0].values: Exists takes no values"),
        ({"key": "", "operator": "Exists"}, "matchExpressions[0].key: must not be empty"),
        ({"key": "k", "operator": "=", "values": ["a", "b"]}, "matchExpressions[0].values: = needs exactly one value"),
        ({"key": "k", "operator": "!="}, "matchExpressions[0].values: != needs exactly one value"),
        ({"key": "bad key", "operator": "DoesNotExist"}, "matchExpressions[0].key: name part 'bad key'"),
        ({"key": "Bad_Prefix/k", "operator": "Exists"}, "matchExpressions[0].key: prefix part 'Bad_Prefix'"),
        ({"key": "/k", "operator": "Exists"}, "matchExpressions[0].key: prefix part must not be empty"),
        ({"key": "k" * 64, "operator": "Exists"}, "matchExpressions[0].key: name part"),
        ({"key": "k", "operator": "In", "values": ["ok", "-no"]}, "matchExpressions[0].values[1]: '-no'"),
    ],
)
def test_invalid_selectors_name_the_field(expression, message):
    with pytest.raises(SelectorError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate({"matchExpressions": [expression]})


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"a b": "x"}, "matchLabels: key 'a b'"),
        ({"example.com/ok": "x" * 64}, "matchLabels[example.com/ok]: value"),
        ({"ok": "white space"}, "matchLabels[ok]: value 'white space'"),
    ],
)
def test_invalid_match_labels_name_the_field(labels, message):
    with pytest.raises(SelectorError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate({"matchLabels": labels})


def test_valid_keys_and_values():
    validate(
        {
            "matchLabels": {"example.com/infra-kind": "Medium_1.x", "k": ""},
            "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-1", ""]}],
        }
    )


def test_last_transition_time_changes_only_when_status_flips():
    conditions = cond.set_condition([], cond.ASSOCIATION, "False", "NoBareMetalHost", "none", 1, "t1")
    conditions = cond.set_condition(conditions, cond.ASSOCIATION, "False", "NoBareMetalHost", "still none", 2, "t2")
    (association,) = conditions
    assert (association["lastTransitionTime"], association["observedGeneration"], association["message"]) == (
        "t1",
        2,
        "still none",
    )
    conditions = cond.set_condition(conditions, cond.ASSOCIATION, "True", "BareMetalHostAssociated", "", 2, "t3")
    assert conditions[0]["lastTransitionTime"] == "t3"


def test_ready_summarizes_like_the_user_guide():
    conditions = []
    for type_, status, reason in [
        (cond.ASSOCIATION, "True", "BareMetalHostAssociated"),
        (cond.PROVISIONED, "False", "available"),
        (cond.SYNCHRONIZATION, "True", "ConfigurationSynced"),
    ]:
        conditions = cond.set_condition(conditions, type_, status, reason, "", 1, "t")
    conditions = cond.with_ready(conditions, 1, "t")
    assert [c["type"] for c in conditions] == ["Ready", "Association", "Provisioned", "Synchronization"]
    ready = conditions[0]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "IssuesReported",
        "* Provisioned: available",
    )

    conditions = cond.set_condition(conditions, cond.PROVISIONED, "True", "provisioned", "", 3, "t4")
    ready = cond.with_ready(conditions, 3, "t4")[0]
    assert (ready["status"], ready["reason"], ready["message"], ready["observedGeneration"]) == (
        "True",
        "InfoReported",
        "",
        3,
    )


def test_ready_lists_every_false_condition_with_its_message():
    conditions = cond.set_condition([], cond.ASSOCIATION, "False", "NoBareMetalHost", "no free host", 1, "t")
    conditions = cond.set_condition(conditions, cond.SYNCHRONIZATION, "False", "UserDataSecretSyncFailure", "", 1, "t")
    ready = cond.with_ready(conditions, 1, "t")[0]
    assert ready["message"] == "* Association: no free host\n* Synchronization: UserDataSecretSyncFailure"


def test_ready_is_unknown_when_something_is_unknown():
    conditions = cond.set_condition([], cond.ASSOCIATION, "Unknown", "Pending", "", 1, "t")
    assert cond.with_ready(conditions, 1, "t")[0]["status"] == "Unknown"
