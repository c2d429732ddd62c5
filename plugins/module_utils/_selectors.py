# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Label selectors of HostClaim.spec.hostSelector, matched against BareMetalHost labels. Pure."""

from __future__ import annotations

# Kubernetes' spellings and the lowercase ones Cluster API's Metal3 provider writes.
_OPERATORS = {
    "In": "In",
    "in": "In",
    "NotIn": "NotIn",
    "notin": "NotIn",
    "Exists": "Exists",
    "exists": "Exists",
    "DoesNotExist": "DoesNotExist",
    "!": "DoesNotExist",
}


class SelectorError(ValueError):
    """A selector that cannot be evaluated; the message names the offending field."""


def validate(selector: dict | None) -> None:
    """Raise SelectorError for an expression the API schema let through but that cannot be evaluated."""
    for index, expression in enumerate((selector or {}).get("matchExpressions") or []):
        field = f"spec.hostSelector.matchExpressions[{index}]"
        operator = _OPERATORS.get(expression.get("operator", ""))
        if operator is None:
            raise SelectorError(f"{field}.operator: unsupported operator {expression.get('operator')!r}")
        if not expression.get("key"):
            raise SelectorError(f"{field}.key: required")
        values = expression.get("values") or []
        if operator in ("In", "NotIn") and not values:
            raise SelectorError(f"{field}.values: {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{field}.values: {operator} takes no values")


def matches(selector: dict | None, labels: dict | None) -> bool:
    """Whether labels satisfy matchLabels and every matchExpression (an empty selector matches all)."""
    selector = selector or {}
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key = expression["key"]
        operator = _OPERATORS[expression["operator"]]
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True
