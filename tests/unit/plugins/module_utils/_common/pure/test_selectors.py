"""Label selectors: Kubernetes syntax, Metal3 operators, messages naming the field."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.selectors import (
    SelectorError,
    matches,
    validate,
)

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
