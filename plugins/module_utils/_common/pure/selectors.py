# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Label selectors of HostClaim.spec.hostSelector, matched against BareMetalHost labels. Pure.

Keys and values are checked as Kubernetes checks labels; operators are those Metal3's
HostClaim accepts (k8s.io/apimachinery's selection spellings and Kubernetes' own).
The claim layer refuses a claim whose selector fails validation before matching any host.
"""

from __future__ import annotations

import re

# spelling -> (meaning, how many values: "some" (>= 1), "one" or "none")
_OPERATORS = {
    "In": ("In", "some"),
    "in": ("In", "some"),
    "NotIn": ("NotIn", "some"),
    "notin": ("NotIn", "some"),
    "=": ("In", "one"),
    "==": ("In", "one"),
    "!=": ("NotIn", "one"),
    "Exists": ("Exists", "none"),
    "exists": ("Exists", "none"),
    "DoesNotExist": ("DoesNotExist", "none"),
    "!": ("DoesNotExist", "none"),
}
_ARITY = {
    "some": "needs at least one value",
    "one": "needs exactly one value",
    "none": "takes no values",
}

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")


class SelectorError(ValueError):
    """A selector that cannot be evaluated; the message names the offending field."""


def key_problem(key: str) -> str | None:
    """Why `key` is not a valid label key (an optional DNS subdomain prefix and a name), or None."""
    if not key:
        return "must not be empty"
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must not be empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return f"prefix part {prefix!r} must be a lowercase DNS subdomain of at most 253 characters"
    if len(name) > 63 or not _NAME.match(name):
        return (
            f"name part {name!r} must be at most 63 characters: alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def value_problem(value) -> str | None:
    """Why `value` is not a valid label value (empty, or a name of at most 63 characters), or None."""
    if not isinstance(value, str):
        return "must be a string"
    if value and (len(value) > 63 or not _NAME.match(value)):
        return (
            f"{value!r} must be at most 63 characters: alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def validate(selector: dict | None, field: str = "spec.hostSelector") -> None:
    """Raise SelectorError, naming the field, for anything Kubernetes or Metal3 would not accept."""
    for key, value in sorted(((selector or {}).get("matchLabels") or {}).items()):
        problem = key_problem(key)
        if problem:
            raise SelectorError(f"{field}.matchLabels: key {key!r}: {problem}")
        problem = value_problem(value)
        if problem:
            raise SelectorError(f"{field}.matchLabels[{key}]: value {problem}")
    for index, expression in enumerate((selector or {}).get("matchExpressions") or []):
        where = f"{field}.matchExpressions[{index}]"
        spelling = expression.get("operator", "")
        if spelling not in _OPERATORS:
            raise SelectorError(f"{where}.operator: unsupported operator {spelling!r}")
        problem = key_problem(expression.get("key") or "")
        if problem:
            raise SelectorError(f"{where}.key: {problem}")
        values = expression.get("values") or []
        arity = _OPERATORS[spelling][1]
        wrong = {"some": not values, "one": len(values) != 1, "none": bool(values)}[arity]
        if wrong:
            raise SelectorError(f"{where}.values: {spelling} {_ARITY[arity]}")
        for position, value in enumerate(values):
            problem = value_problem(value)
            if problem:
                raise SelectorError(f"{where}.values[{position}]: {problem}")


def matches(selector: dict | None, labels: dict | None) -> bool:
    """Whether labels satisfy matchLabels and every matchExpression (an empty selector matches all).

    Call validate() first (once, not per host): this assumes a valid selector.
    """
    selector = selector or {}
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key = expression["key"]
        operator = _OPERATORS[expression["operator"]][0]
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


def label_selector_matches(selector: str, labels: dict | None) -> bool | None:
    """Whether labels satisfy a list call's label selector in its equality-based form (`key`, `!key`, `key=value`,
    `key==value`, `key!=value`, joined by commas); None for anything else (set-based `in`, `notin`): not judged here.
    """
    labels = labels or {}
    matched = True
    for term in (t.strip() for t in selector.split(",")):
        if not term or " " in term or "(" in term:
            return None
        if "!=" in term:
            key, value = term.split("!=", 1)
            matched = matched and labels.get(key) != value
        elif "=" in term:
            key, value = term.replace("==", "=", 1).split("=", 1)
            matched = matched and labels.get(key) == value
        elif term.startswith("!"):
            matched = matched and term[1:] not in labels
        else:
            matched = matched and term in labels
    return matched
