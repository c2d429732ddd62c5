# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A remote HostClaim: the local claim (kind remote) mirrored into the hardware cluster. Pure.

What crosses, and which way (the contract, in docs/remote.md):

local -> remote
  spec: online (poweredOn read as its alias), image, hostSelector, customDeploy, failureDomain; kind is
  spec.remote.kind (default baremetal); userData/metaData/networkData point at copies beside the remote
  claim, ``<name>-userdata`` etc. Not consumerRef (it names a local object).
  annotations: ``reboot.metal3.io/<key>`` mirrored exactly; the one-shot ``reboot.metal3.io`` moved
  (put on the remote claim, then dropped locally, as the claim layer moves it to a host).
  Nothing else of the tenant's labels or annotations: they may carry workload-cluster internals.
  Ours: annotation MIRROR_OF (the local claim's uid) on the remote claim and its Secret copies, label
  MANAGED_BY: what proves a remote object is ours (a remote claim of the same name without it is
  someone else's: RemoteNameTaken, never overwritten nor deleted).

remote -> local
  status: every condition but Ready (Association, Provisioned, Synchronization as the hardware cluster's
  claim layer writes them), poweredOn, hostUID, hardware; Ready recomputed here, over those and ours
  (RemoteCluster, Mirrored). Not hardwareData: it names a host in a namespace of another cluster, nothing
  a local client can read; the Host column stays empty and the remote claim's name is the local one.
  metadata: exactly the keys the hardware cluster copied onto the remote claim (its metadataCopy, listed in
  its ``metalclaim.io/copied-metadata``), recorded locally the same way so they are updated and removed,
  never a key the tenant set itself.
"""

from __future__ import annotations

import copy
import datetime
import re

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metadata import (
    CopyRules,
    copied_record,
    metadata_plan,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    API_VERSION,
    DATA_ROLES,
    REBOOT_ANNOTATION,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import (
    desired_status,
    status_patch,
)

REMOTE_KIND = "remote"
DEFAULT_REMOTE_KIND = "baremetal"
# Our finalizer on the local claim: the remote claim is deleted, and gone, before the local one goes.
FINALIZER = "metalclaim.io/remote"
MIRROR_OF = "metalclaim.io/mirror-of"  # on remote objects: the local claim's uid
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "metalclaim-remote"
COPY_OF_LABEL = "metalclaim.io/mirror-of-claim"  # on remote Secret copies: the remote claim's name

# Polling the hardware cluster (the controller cannot watch it): Ready claims seldom; others fast while
# their remote claim changes, then slower the longer it has not (a claim waiting for a host, or powered off
# without an image, may never be Ready: it must not keep a runner busy every 2 s for ever).
POLL_STEADY = 30.0
POLL_CHANGING = 2.0
POLL_QUIET_FRACTION = 0.25  # not Ready: poll after a quarter of the time since its last transition
# A hardware cluster that does not answer is asked again after POLL_UNREACHABLE seconds, then after half the time
# it has not answered (each delay about 1.5 times the last), at most POLL_UNREACHABLE_MAX: one that never answers
# costs a run every few minutes, not every few seconds, and one back after a short outage is seen again soon.
POLL_UNREACHABLE = 5.0
# A claim a run had no time left for (its budget spent on clusters that did not answer) comes back this soon.
POLL_DEFERRED = 1.0
POLL_UNREACHABLE_FRACTION = 0.5
POLL_UNREACHABLE_MAX = 300.0

# Conditions of a remote claim, besides those the hardware cluster's claim layer writes.
REMOTE_CLUSTER = "RemoteCluster"
MIRRORED = "Mirrored"
# Reasons.
REACHABLE = "Reachable"
UNREACHABLE = "Unreachable"
NOT_CONTACTED = "NotContacted"
SYNCED = "RemoteClaimSynced"
DELETING = "RemoteClaimDeleting"
NAME_TAKEN = "RemoteNameTaken"
FORBIDDEN = "RemoteForbidden"
QUOTA_EXCEEDED = "RemoteQuotaExceeded"
REFUSED = "RemoteRefused"
REMOTE_ERROR = "RemoteError"
DATA_SECRET = "DataSecretRefused"

MIRRORED_SPEC = ("image", "hostSelector", "customDeploy", "failureDomain")
# Every remote spec field this mirror decides (set or removes); others are left as the hardware cluster has them.
MANAGED_SPEC = (*MIRRORED_SPEC, "online", "poweredOn", "kind", *DATA_ROLES)
STATUS_COPIED = ("poweredOn", "hostUID", "hardware")
STATUS_LEFT_OUT = ("hardwareData",)


def is_remote(claim: dict) -> bool:
    return ((claim.get("spec") or {}).get("kind") or "") == REMOTE_KIND


def remote_settings(claim: dict) -> dict:
    return (claim.get("spec") or {}).get("remote") or {}


def copy_name(remote_name: str, role: str) -> str:
    return f"{remote_name}-{role.lower()}"


def is_ours(remote: dict | None, local: dict) -> bool:
    annotations = ((remote or {}).get("metadata") or {}).get("annotations") or {}
    return bool(local["metadata"].get("uid")) and annotations.get(MIRROR_OF) == local["metadata"]["uid"]


def _reboots(annotations: dict) -> dict:
    return {k: v for k, v in annotations.items() if k.startswith(REBOOT_ANNOTATION + "/")}


def desired_remote_spec(local: dict) -> dict:
    spec = local.get("spec") or {}
    desired = {name: copy.deepcopy(spec[name]) for name in MIRRORED_SPEC if spec.get(name) is not None}
    online = spec.get("online", spec.get("poweredOn"))
    if online is not None:
        desired["online"] = online
    desired["kind"] = remote_settings(local).get("kind") or DEFAULT_REMOTE_KIND
    name = local["metadata"]["name"]
    for role in DATA_ROLES:
        if (spec.get(role) or {}).get("name"):
            desired[role] = {"name": copy_name(name, role)}
    return desired


def remote_claim_plan(local: dict, existing: dict | None, namespace: str) -> tuple[dict | None, dict]:
    """(the remote claim to write, or None when it already is as wanted; the local annotations afterwards).

    `existing` must be ours (is_ours) or None.
    """
    local_annotations = dict(local["metadata"].get("annotations") or {})
    if existing is None:
        remote = {
            "apiVersion": API_VERSION,
            "kind": "HostClaim",
            "metadata": {
                "name": local["metadata"]["name"],
                "namespace": namespace,
                "labels": {MANAGED_BY: MANAGER},
                "annotations": {MIRROR_OF: local["metadata"]["uid"]},
            },
            "spec": {},
        }
    else:
        remote = copy.deepcopy(existing)
    meta = remote["metadata"]
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(REBOOT_ANNOTATION + "/")
    }
    annotations.update(_reboots(local_annotations))
    if REBOOT_ANNOTATION in local_annotations:  # one-shot: moved, as the claim layer moves it to a host
        annotations[REBOOT_ANNOTATION] = local_annotations.pop(REBOOT_ANNOTATION)
    meta["annotations"] = annotations
    spec = {k: v for k, v in (remote.get("spec") or {}).items() if k not in MANAGED_SPEC}
    spec.update(desired_remote_spec(local))
    remote["spec"] = spec
    if existing is not None and remote == existing:
        return None, local_annotations
    return remote, local_annotations


def data_copy(local: dict, role: str, source: dict, namespace: str) -> dict:
    """The Secret beside the remote claim holding a copy of the tenant's data Secret for `role`."""
    remote_name = local["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": copy_name(remote_name, role),
            "namespace": namespace,
            "labels": {MANAGED_BY: MANAGER, COPY_OF_LABEL: remote_name},
            "annotations": {MIRROR_OF: local["metadata"]["uid"]},
        },
        "data": dict(source.get("data") or {}),
    }


def copy_needs_write(wanted: dict, existing: dict | None) -> bool:
    if existing is None:
        return True
    meta, wanted_meta = existing.get("metadata") or {}, wanted["metadata"]
    return (
        (existing.get("data") or {}) != wanted["data"]
        or any((meta.get("labels") or {}).get(k) != v for k, v in wanted_meta["labels"].items())
        or (meta.get("annotations") or {}).get(MIRROR_OF) != wanted_meta["annotations"][MIRROR_OF]
    )


def cross_namespace(local: dict, role: str) -> str:
    """Why the `role` reference may not even be read ('' when it may): a Secret of another namespace."""
    ref = (local.get("spec") or {}).get(role) or {}
    namespace = local["metadata"]["namespace"]
    if ref.get("namespace", namespace) != namespace:
        return f"spec.{role}.namespace {ref['namespace']!r}: only Secrets in the claim's namespace may be used"
    return ""


def data_refusal(local: dict, role: str, source: dict | None) -> str:
    """Why the tenant's `role` Secret, as read from the claim's namespace, cannot be copied across ('' when it can)."""
    ref = (local.get("spec") or {}).get(role) or {}
    namespace = local["metadata"]["namespace"]
    if source is None:
        return f"spec.{role}: Secret {ref.get('name')!r} does not exist in namespace {namespace!r}"
    if (source.get("type") or "Opaque") != "Opaque":
        return f"spec.{role}: Secret {ref.get('name')!r} is of type {source.get('type')!r}; only Opaque is copied"
    return ""


def refusal_reason(server_message: str) -> str:
    """The Mirrored reason for a write the hardware cluster refused (403/422)."""
    if "exceeded quota" in server_message:
        return QUOTA_EXCEEDED
    if "forbidden" in server_message.lower() and "cannot" in server_message:
        return FORBIDDEN
    return REFUSED


def metadata_from_remote(local: dict, remote: dict | None) -> tuple[dict, dict]:
    """(local labels, local annotations) with the keys the hardware cluster copied onto the remote claim mirrored."""
    meta = local["metadata"]
    if remote is None:
        rules = CopyRules()
        source_labels, source_annotations = {}, {}
    else:
        remote_meta = remote.get("metadata") or {}
        source_labels = remote_meta.get("labels") or {}
        source_annotations = remote_meta.get("annotations") or {}
        record = copied_record(source_annotations)
        rules = CopyRules(
            labels=[re.compile(re.escape(k)) for k in sorted(record["labels"])],
            annotations=[re.compile(re.escape(k)) for k in sorted(record["annotations"])],
        )
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return metadata_plan(labels, annotations, source_labels, source_annotations, rules)


def local_status(
    local: dict, remote: dict | None, reachable: tuple[str, str, str], mirrored: tuple[str, str, str], timestamp: str
) -> dict:
    """The local claim's whole status: the remote claim's (as last seen when it is not reachable) and ours.

    `remote` None while reachable: there is none (yet, or any more); unreachable: keep what was copied before.
    """
    current = copy.deepcopy(local.get("status") or {})
    conditions = current.get("conditions") or []
    updates: dict = {name: None for name in STATUS_LEFT_OUT}
    if remote is not None or reachable[0] == "True":
        remote_status = (remote or {}).get("status") or {}
        copied = [c for c in remote_status.get("conditions") or [] if c.get("type") not in (cond.READY,)]
        kept = [
            c for c in conditions if c.get("type") in (REMOTE_CLUSTER, MIRRORED, cond.READY)
        ]  # Ready: its transition time
        conditions = kept + [_copied_condition(c, local) for c in copied]
        for name in STATUS_COPIED:
            updates[name] = copy.deepcopy(remote_status.get(name))
    base = {**local, "status": {**current, "conditions": conditions}}
    wanted = [(REMOTE_CLUSTER, *reachable), (MIRRORED, *mirrored)]
    return desired_status(base, updates, wanted, timestamp)


def _copied_condition(condition: dict, local: dict) -> dict:
    copied = {k: condition[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in condition}
    copied.setdefault("lastTransitionTime", "1970-01-01T00:00:00Z")
    copied["observedGeneration"] = local["metadata"].get("generation", 0)
    return copied


def status_changes(local: dict, wanted: dict) -> dict | None:
    return status_patch(local, wanted)


def poll_after(remote: dict | None, now: float) -> float:
    """Seconds until the next look at a mirrored remote claim: POLL_STEADY once Ready; before, a quarter of
    the time since its latest condition transition, between POLL_CHANGING and POLL_STEADY."""
    conditions = ((remote or {}).get("status") or {}).get("conditions") or []
    if (cond.find(conditions, cond.READY) or {}).get("status") == "True":
        return POLL_STEADY
    latest = max((_epoch(c.get("lastTransitionTime")) for c in conditions), default=None)
    if latest is None:
        return POLL_CHANGING  # nothing written there yet: its claim layer is about to
    return min(POLL_STEADY, max(POLL_CHANGING, (now - latest) * POLL_QUIET_FRACTION))


def unreachable_after(local: dict, now: float) -> float:
    """Seconds until a claim whose hardware cluster did not answer is looked at again, from its RemoteCluster
    condition before this run: POLL_UNREACHABLE the first time, then half the time since it turned False (each
    delay about 1.5 times the last), at most POLL_UNREACHABLE_MAX. Kept on the claim: a restarted controller backs
    off the same."""
    conditions = (local.get("status") or {}).get("conditions") or []
    reachable = cond.find(conditions, REMOTE_CLUSTER) or {}
    if reachable.get("status") != "False":
        return POLL_UNREACHABLE
    since = now - _epoch(reachable.get("lastTransitionTime"))
    return min(POLL_UNREACHABLE_MAX, max(POLL_UNREACHABLE, since * POLL_UNREACHABLE_FRACTION))


def unanswered_message(error_type: str, late: bool, deadline: float) -> str:
    """The RemoteCluster message of a hardware cluster that did not answer: the error's type only (its text holds
    the server's address), or that the claim's time there ran out."""
    if late:
        return f"the hardware cluster did not answer within the {deadline:g} s a claim may take there per run"
    return f"the hardware cluster did not answer ({error_type})"


def mirror_order(local: dict) -> tuple:
    """The order of a run's claims: those whose hardware cluster answered last time first (one that does not
    answer takes up to a claim's deadline), then by creation and name."""
    conditions = (local.get("status") or {}).get("conditions") or []
    unanswered = (cond.find(conditions, REMOTE_CLUSTER) or {}).get("status") == "False"
    meta = local["metadata"]
    return (unanswered, meta.get("creationTimestamp") or "", meta["name"])


def _epoch(timestamp: str | None) -> float:
    """An RFC 3339 time as the API server writes it (UTC, 'Z'), in seconds; 0 when absent or malformed."""
    try:
        parsed = datetime.datetime.strptime(timestamp or "", cond.TIMESTAMP_FORMAT)
    except ValueError:
        return 0.0
    return parsed.replace(tzinfo=datetime.timezone.utc).timestamp()
