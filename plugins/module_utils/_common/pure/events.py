# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes Events as data: one Event per (object, type, reason, message), its name derived from what it says,
a repeat counted on the same Event (client-go's event correlator). Pure; _common/io/events.py records them."""

from __future__ import annotations

import copy
import hashlib

REPORTING_COMPONENT = "metalclaim"
# Object names may be 253 characters; keep room for "." and the digest.
_NAME_PREFIX_MAX = 253 - 1 - 16


def event_name(obj: dict, event_type: str, reason: str, message: str) -> str:
    """The Event's name: the object's name and a digest of (object uid, type, reason, message)."""
    meta = obj["metadata"]
    said = "\0".join((meta.get("uid") or "", event_type, reason, message))
    return f"{meta['name'][:_NAME_PREFIX_MAX]}.{hashlib.sha256(said.encode()).hexdigest()[:16]}"


def new_event(obj: dict, event_type: str, reason: str, message: str, timestamp: str) -> dict:
    """A first occurrence (core/v1 Event, what `kubectl describe` shows)."""
    meta = obj["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(obj, event_type, reason, message), "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": event_type,
        "reason": reason,
        "message": message,
        "source": {"component": REPORTING_COMPONENT},
        "reportingComponent": REPORTING_COMPONENT,
        "reportingInstance": REPORTING_COMPONENT,
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
    }


def repeated(existing: dict, timestamp: str) -> dict:
    """The Event after one more occurrence."""
    updated = copy.deepcopy(existing)
    updated["count"] = (existing.get("count") or 1) + 1
    updated["lastTimestamp"] = timestamp
    return updated
