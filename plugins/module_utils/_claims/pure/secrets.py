# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copies of a bound claim's userData/metaData/networkData Secrets beside its host. Pure.

A reference is only ever read in the claim's own namespace: a tenant naming another
namespace (say, the BMC credentials Secret of the infra namespace) is refused before
anything is read. Copies are named ``<host>-userdata`` / ``-metadata`` / ``-networkdata``,
owned by the host (never the tenant's Secret), labelled as ours, and followed by the
host's refs.

The claim layer never reads a Secret in an infrastructure namespace (BMC credentials live
there, and a read right there is a read right on them): what it wrote is recorded on the
host itself, in the COPIES_ANNOTATION (per role, the copy's uid and a digest of what was
written). Plans compare digests, deletes carry the recorded uid as a precondition, and a
Secret of a copy's name that metalclaim did not make is protected by the API server: a
Secret becomes a copy only when created (config/admission/copy_policy.yaml), so writing
ours over it is refused and reported as COPY_NAME_TAKEN.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION, DATA_ROLES

COPY_OF_LABEL = "metalclaim.io/copy-of-claim"
SYNCED = "ConfigurationSynced"
CROSS_NAMESPACE = "CrossNamespaceReference"
COPY_NAME_TAKEN = "CopyNameTaken"
# On the BareMetalHost: {role: {"uid": <the copy's uid>, "digest": <copy_digest of what was written>}}.
# Written in the same host write that points the host's data refs at the copies.
COPIES_ANNOTATION = "metalclaim.io/copies"
# The ValidatingAdmissionPolicies (config/admission) that refuse our write of a Secret that is not a
# copy: a refusal naming one of them means the copy's name is taken by somebody else's Secret.
COPY_POLICIES = ("metalclaim-secret-copy-on-create", "metalclaim-claim-side-secrets")

# Largest decoded value copied per role, in bytes. userData carries cloud-init or Ignition
# (kubeadm bootstrap data with embedded certificates runs to a few hundred KiB); metaData
# and networkData are small maps (OpenStack, whose config-drive layout Metal3 follows, caps
# user data at 64 KiB). Every limit stays well under a Secret's 1 MiB, so one tenant cannot
# fill the infra namespace (or the host's config drive) through a claim.
SIZE_LIMITS = {"userData": 512 * 1024, "metaData": 64 * 1024, "networkData": 64 * 1024}
# Only plain data Secrets are copied. Any other type (service-account-token, dockerconfigjson,
# tls, basic-auth, ...) holds credentials a tenant must not ship to an infra namespace by accident.
COPYABLE_TYPES = ("", "Opaque")
# Bootstrap data as Cluster API's bootstrap providers write it (a Machine's spec.bootstrap.dataSecretName, key `value`):
# a machine's userData (roles/capi), so copied for that role only.
BOOTSTRAP_DATA_TYPE = "cluster.x-k8s.io/secret"


def copied_secret_name(host_name: str, role: str) -> str:
    """Where the claim layer copies a tenant's data Secret, beside the host (the guide's names)."""
    return f"{host_name}-{role.lower()}"


def sync_failure(role: str) -> str:
    return f"{role[0].upper()}{role[1:]}SecretSyncFailure"


def plan_role(claim: dict, role: str, source: dict | None) -> tuple[dict | None, str, str]:
    """(data of the copy, or None for no copy; failure reason; failure message). Pure.

    `source` is the tenant Secret (already read from the claim's namespace) or None when absent.
    """
    ref = (claim.get("spec") or {}).get(role)
    if not ref:
        return None, "", ""
    claim_namespace = claim["metadata"]["namespace"]
    if ref.get("namespace", claim_namespace) != claim_namespace:
        return (
            None,
            CROSS_NAMESPACE,
            f"spec.{role}.namespace {ref['namespace']!r}: only Secrets in the claim's namespace "
            f"{claim_namespace!r} may be used",
        )
    where = f"spec.{role}: Secret {claim_namespace}/{ref['name']}"
    if source is None:
        return None, sync_failure(role), f"{where} not found"
    secret_type = source.get("type") or ""
    if secret_type not in COPYABLE_TYPES and not (role == "userData" and secret_type == BOOTSTRAP_DATA_TYPE):
        return (
            None,
            sync_failure(role),
            f"{where} is of type {secret_type}; only Opaque Secrets are copied beside a host",
        )
    data = source.get("data") or {}
    data_key = role if role in data else "value"
    value = data.get(data_key)
    if value is None:
        return None, sync_failure(role), f"{where} has no {role} or value key"
    size = decoded_size(value)
    if size is None:
        return None, sync_failure(role), f"{where}: key {data_key} is not valid base64"
    if size == 0:
        return None, sync_failure(role), f"{where}: key {data_key} is empty"
    if size > SIZE_LIMITS[role]:
        return (
            None,
            sync_failure(role),
            f"{where}: key {data_key} holds {size} bytes, more than the {SIZE_LIMITS[role]} allowed for {role}",
        )
    return {role: value}, "", ""


def decoded_size(value) -> int | None:
    """Bytes a Secret's base64 data value decodes to; None when it is not base64."""
    try:
        return len(base64.b64decode(value, validate=True))
    except (binascii.Error, TypeError, ValueError):
        return None


def wanted_source(claim: dict, role: str) -> str | None:
    """Name of the tenant Secret to read for `role`, only when it lies in the claim's namespace."""
    ref = (claim.get("spec") or {}).get(role)
    if not ref or ref.get("namespace", claim["metadata"]["namespace"]) != claim["metadata"]["namespace"]:
        return None
    return ref["name"]


def copy_object(claim: dict, host: dict, role: str, data: dict) -> dict:
    host_ns, host_name = binding.key(host)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": copied_secret_name(host_name, role),
            "namespace": host_ns,
            "labels": {COPY_OF_LABEL: claim["metadata"]["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "BareMetalHost",
                    "name": host_name,
                    "uid": host["metadata"]["uid"],
                }
            ],
        },
        "data": data,
    }


def copy_digest(secret: dict) -> str:
    """A short digest of what a copy holds (data, type, labels): equal digests, nothing to write."""
    written = {
        "data": secret.get("data") or {},
        "type": secret.get("type") or "",
        "labels": (secret.get("metadata") or {}).get("labels") or {},
    }
    canonical = json.dumps(written, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def recorded_copies(host: dict) -> dict:
    """role -> {"uid", "digest"} of the copies the host's annotation records; {} when none or unreadable.

    An unreadable record (edited by hand) counts as none: the next write creates each copy, or
    takes over the one already there, and records it again.
    """
    raw = ((host.get("metadata") or {}).get("annotations") or {}).get(COPIES_ANNOTATION)
    try:
        records = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(records, dict):
        return {}
    return {
        role: {"uid": str(record.get("uid") or ""), "digest": str(record.get("digest") or "")}
        for role, record in records.items()
        if role in DATA_ROLES and isinstance(record, dict)
    }


def annotations_with_records(annotations: dict | None, records: dict) -> dict:
    """The host's annotations carrying `records` (the annotation removed when there are none)."""
    updated = dict(annotations or {})
    if records:
        updated[COPIES_ANNOTATION] = json.dumps(records, sort_keys=True, separators=(",", ":"))
    else:
        updated.pop(COPIES_ANNOTATION, None)
    return updated


def refused_as_no_copy(server_message: str) -> bool:
    """Whether the API server's refusal of a Secret write came from one of metalclaim's Secret policies."""
    return any(f"'{policy}'" in server_message for policy in COPY_POLICIES)


def name_taken(role: str, host_name: str) -> tuple[str, str]:
    """The Synchronization failure for a copy whose name is held by a Secret metalclaim did not make."""
    return (
        COPY_NAME_TAKEN,
        f"spec.{role}: the Secret {copied_secret_name(host_name, role)} beside BareMetalHost {host_name} was not "
        "made by metalclaim and is left alone; ask the infrastructure team to remove or rename it",
    )


@dataclass
class CopyWrite:
    """One copy to write: created when nothing is recorded for its role, else replaced (PUT)."""

    role: str
    secret: dict
    recorded: dict | None  # the host's record of the copy ({"uid", "digest"}), None when there is none


@dataclass
class CopyPlan:
    """What to write for one bound claim's data Secrets."""

    writes: list[CopyWrite] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (name, recorded uid), in the host's namespace
    host_spec: dict = field(default_factory=dict)  # the host's spec with its data refs following the copies
    # role -> {"uid", "digest"} once the writes are done (a written copy's uid is filled in from the write).
    records: dict = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (reason, message)
    copies: list[str] = field(default_factory=list)  # namespace/name of each copy the host uses


def plan_copies(claim: dict, host: dict, sources: dict) -> CopyPlan:
    """Plan the copies for a bound claim from the tenant's Secrets and what the host records.

    sources: role -> the tenant Secret read for it (None when absent; roles with no readable
    reference are left out). No Secret beside the host is read: a role recorded with the same
    digest is left alone, one recorded with another digest is replaced, one not recorded is
    created, and a recorded copy the claim no longer wants is deleted (guarded by its uid).
    """
    host_ns, host_name = binding.key(host)
    result = CopyPlan(host_spec=copy.deepcopy(host.get("spec") or {}))
    records = recorded_copies(host)
    for role in DATA_ROLES:
        data, reason, message = plan_role(claim, role, sources.get(role))
        copy_name = copied_secret_name(host_name, role)
        recorded = records.get(role)
        if reason:
            result.failures.append((reason, message))
            if recorded is not None:
                result.records[role] = recorded
            continue  # keep what the host has: a bad edit must not take away a working config
        if data is None:
            if recorded is not None and recorded["uid"]:  # no uid, no proof the Secret there is ours
                result.delete.append((copy_name, recorded["uid"]))
            if (result.host_spec.get(role) or {}).get("name") == copy_name:
                del result.host_spec[role]
            continue
        desired = copy_object(claim, host, role, data)
        digest = copy_digest(desired)
        if recorded is None or recorded["digest"] != digest:
            result.writes.append(CopyWrite(role, desired, recorded))
        result.records[role] = {"uid": recorded["uid"] if recorded else "", "digest": digest}
        result.copies.append(f"{host_ns}/{copy_name}")
        result.host_spec[role] = {"name": copy_name, "namespace": host_ns}
    return result
