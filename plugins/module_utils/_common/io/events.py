# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes Events on our objects, one Event per (object, type, reason, message).

The claim layer and the provisioner run many times; the same occurrence again must not
pile up new objects. As client-go's event correlator does, a repeat updates the one
Event (``count`` + 1, ``lastTimestamp``). The Event's name is derived from what it says,
so finding it costs no list: create, and only when the name is taken, get and update.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.events import new_event, repeated


def record(kube, obj: dict, event_type: str, reason: str, message: str, timestamp: str, check_mode: bool) -> None:
    """Record one occurrence: a new Event, or the count of the same one raised."""
    if check_mode:
        return
    first = new_event(obj, event_type, reason, message, timestamp)
    try:
        kube.create(first)
        return
    except AlreadyExistsError:
        pass
    meta = first["metadata"]
    existing = kube.get("v1", "Event", meta["name"], meta["namespace"])
    try:
        if existing is None:  # expired (the API server's event TTL) between the two calls
            kube.create(first)
        else:
            kube.replace(repeated(existing, timestamp))
    except (ConflictError, AlreadyExistsError):
        pass  # a concurrent run recorded the same occurrence at the same moment: it is counted
