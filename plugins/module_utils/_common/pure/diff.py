# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible diff entries (`--diff`) for Kubernetes objects: before/after of what changed, Secrets redacted. Pure.

A module that asks for diffs builds them from the objects it already holds (what it read and what
it writes or would write): never an API call of its own.
"""

from __future__ import annotations

import base64
import binascii
import copy

# Set by `kubectl apply` to the whole object as applied: for a Secret, its values.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def changed_fields(before: dict | None, after: dict | None) -> tuple[dict, dict]:
    """(before, after) reduced to the fields that differ, nested dicts followed down.

    A key on one side only (added or removed) is kept on that side only; a dict that holds a change
    is kept, with only its changed keys, on both sides; any other value (lists too) is compared whole.
    """
    before, after = before or {}, after or {}
    old, new = {}, {}
    for key in sorted(set(before) | set(after), key=str):
        if key not in after:
            old[key] = copy.deepcopy(before[key])
        elif key not in before:
            new[key] = copy.deepcopy(after[key])
        elif before[key] != after[key]:
            if isinstance(before[key], dict) and isinstance(after[key], dict):
                old[key], new[key] = changed_fields(before[key], after[key])
            else:
                old[key], new[key] = copy.deepcopy(before[key]), copy.deepcopy(after[key])
    return old, new


def redacted_secret(secret: dict | None) -> dict:
    """A Secret (or part of one) safe to show: the keys of `data` and `stringData`, never their values.

    Each value becomes `<redacted, N bytes>` (N: its decoded size); kubectl's last-applied annotation,
    which holds the values too, is redacted whole, and managedFields (noise) is left out.
    """
    shown = copy.deepcopy(secret or {})
    for section in ("data", "stringData"):
        values = shown.get(section)
        if isinstance(values, dict):
            shown[section] = {key: _redacted(value, section == "data") for key, value in values.items()}
        elif values is not None:
            shown[section] = "<redacted>"
    metadata = shown.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            annotations[LAST_APPLIED] = "<redacted>"
    return shown


def entry(kind: str, namespace: str | None, name: str, before, after) -> dict:
    """One item of a module result's `diff` list, as Ansible's callbacks show it."""
    header = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    return {
        "before_header": header,
        "after_header": header,
        "before": {} if before is None else before,
        "after": {} if after is None else after,
    }


def _redacted(value, encoded: bool) -> str:
    if not isinstance(value, str):
        return "<redacted>"
    size = _decoded_size(value) if encoded else None
    return f"<redacted, {len(value.encode('utf-8')) if size is None else size} bytes>"


def _decoded_size(value: str) -> int | None:
    try:
        return len(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return None
