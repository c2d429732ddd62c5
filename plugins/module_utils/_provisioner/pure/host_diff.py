# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What bmh_redfish's ``--diff`` shows: per object the run wrote (or would write), the fields it changed. Pure.

Built from the objects the run already holds (each host as read, and as written or as it would be
written): never an API call of its own. Of a BareMetalHost, only what the provisioner writes is
shown: its annotations, its finalizers and its status, without ``status.lastUpdated`` (it changes with
every write). The media token in the operation annotation (a callback credential) is shown redacted,
as in the run's results. The BMC Secret is only ever read, so no credential can appear. With the
``wait`` loop, an object's entry runs from before the run's first step to after its last one.
"""

from __future__ import annotations

import copy
import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.diff import changed_fields, entry
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.machine import (
    OPERATION_ANNOTATION,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.media_protocol import redact

HOST = "BareMetalHost"
HARDWARE_DATA = "HardwareData"
# Written with every status write: shown, it would make every entry differ.
_UNSHOWN_STATUS = ("lastUpdated",)


def host_view(host: dict | None, annotations: dict | None = None, finalizers: list | None = None) -> dict:
    """The part of a host the provisioner writes; `annotations`/`finalizers` replace the host's when given."""
    host = host or {}
    meta = host.get("metadata") or {}
    shown = dict(meta.get("annotations") or {}) if annotations is None else dict(annotations)
    if shown.get(OPERATION_ANNOTATION):
        shown[OPERATION_ANNOTATION] = _without_token(shown[OPERATION_ANNOTATION])
    status = {k: v for k, v in (host.get("status") or {}).items() if k not in _UNSHOWN_STATUS}
    return {
        "metadata": {
            "annotations": shown,
            "finalizers": list(meta.get("finalizers") or []) if finalizers is None else list(finalizers),
        },
        "status": copy.deepcopy(status),
    }


def patched(view: dict, status_patch: dict) -> dict:
    """`view` with a status merge patch applied (None removes a field), as the API server applies it."""
    after = copy.deepcopy(view)
    after["status"] = _merge(
        after.get("status") or {}, {k: v for k, v in status_patch.items() if k not in _UNSHOWN_STATUS}
    )
    return after


def hardware_data_view(hardware_data: dict | None) -> dict:
    """The part of a HardwareData the provisioner writes (its spec); {} when there is none."""
    return {"spec": copy.deepcopy(hardware_data.get("spec"))} if hardware_data else {}


class RunDiff:
    """The objects a run wrote, each with its state before the run's first write and after its last."""

    def __init__(self):
        self._objects: dict = {}  # (kind, namespace, name) -> [before, after]

    def record(self, kind: str, namespace: str, name: str, before: dict, after: dict) -> None:
        key = (kind, namespace, name)
        if key in self._objects:
            self._objects[key][1] = after
        else:
            self._objects[key] = [before, after]

    def entries(self) -> list[dict]:
        """Ansible's diff list, in kind/namespace/name order; objects that ended as they began are left out."""
        result = []
        for (kind, namespace, name), (before, after) in sorted(self._objects.items()):
            old, new = changed_fields(before, after)
            if old or new:
                result.append(entry(kind, namespace, name, old, new))
        return result


def _merge(target: dict, patch: dict) -> dict:
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _without_token(raw: str) -> str:
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, dict) and isinstance(value.get("token"), str):
        return json.dumps({**value, "token": redact(value["token"])}, sort_keys=True)
    return raw
