# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copies of a bound claim's userData/metaData/networkData Secrets beside its host. Pure.

A reference is only ever read in the claim's own namespace: a tenant naming another
namespace (say, the BMC credentials Secret of the infra namespace) is refused before
anything is read. Copies are named ``<host>-userdata`` / ``-metadata`` / ``-networkdata``,
owned by the host (never the tenant's Secret), labelled as ours, and followed by the
host's refs. A Secret of a copy's name that is not labelled as ours is never touched.
"""

from __future__ import annotations

import base64
import binascii
import copy
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION, DATA_ROLES

COPY_OF_LABEL = "metalclaim.io/copy-of-claim"
SYNCED = "ConfigurationSynced"
CROSS_NAMESPACE = "CrossNamespaceReference"
COPY_NAME_TAKEN = "CopyNameTaken"

# Largest decoded value copied per role, in bytes. userData carries cloud-init or Ignition
# (kubeadm bootstrap data with embedded certificates runs to a few hundred KiB); metaData
# and networkData are small maps (OpenStack, whose config-drive layout Metal3 follows, caps
# user data at 64 KiB). Every limit stays well under a Secret's 1 MiB, so one tenant cannot
# fill the infra namespace (or the host's config drive) through a claim.
SIZE_LIMITS = {"userData": 512 * 1024, "metaData": 64 * 1024, "networkData": 64 * 1024}
# Only plain data Secrets are copied. Any other type (service-account-token, dockerconfigjson,
# tls, basic-auth, ...) holds credentials a tenant must not ship to an infra namespace by accident.
COPYABLE_TYPES = ("", "Opaque")


def copied_secret_name(host_name: str, role: str) -> str:
    """Where the claim layer copies a tenant's data Secret, beside the host (the guide's names)."""
    return f"{host_name}-{role.lower()}"


def ours(secret: dict | None) -> bool:
    """Whether a Secret is a copy the claim layer made (and so may update or delete)."""
    return bool(secret) and COPY_OF_LABEL in ((secret.get("metadata") or {}).get("labels") or {})


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
    if secret_type not in COPYABLE_TYPES:
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


@dataclass
class CopyPlan:
    """What to write for one bound claim's data Secrets."""

    create: list[dict] = field(default_factory=list)
    replace: list[dict] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # names, in the host's namespace
    host_spec: dict = field(default_factory=dict)  # the host's spec with its data refs following the copies
    failures: list[tuple[str, str]] = field(default_factory=list)  # (reason, message)
    copies: list[str] = field(default_factory=list)  # namespace/name of each copy the host uses


def plan_copies(claim: dict, host: dict, sources: dict, existing: dict) -> CopyPlan:
    """Plan the copies for a bound claim.

    sources: role -> the tenant Secret read for it (None when absent; roles with no readable
    reference are left out); existing: role -> the Secret of the copy's name beside the host,
    ours or not (None or left out when there is none).
    """
    host_ns, host_name = binding.key(host)
    result = CopyPlan(host_spec=copy.deepcopy(host.get("spec") or {}))
    for role in DATA_ROLES:
        data, reason, message = plan_role(claim, role, sources.get(role))
        copy_name = copied_secret_name(host_name, role)
        current = existing.get(role)
        if reason:
            result.failures.append((reason, message))
            continue  # keep what the host has: a bad edit must not take away a working config
        if data is None:
            if ours(current):
                result.delete.append(copy_name)
            if (result.host_spec.get(role) or {}).get("name") == copy_name:
                del result.host_spec[role]
            continue
        if current is not None and not ours(current):
            result.failures.append(
                (
                    COPY_NAME_TAKEN,
                    f"spec.{role}: the Secret {copy_name} beside BareMetalHost {host_name} was not made by "
                    "metalclaim and is left alone; ask the infrastructure team to remove or rename it",
                )
            )
            continue
        desired = copy_object(claim, host, role, data)
        if current is None:
            result.create.append(desired)
        elif current.get("data") != data or (current["metadata"].get("labels") or {}).get(COPY_OF_LABEL) != claim[
            "metadata"
        ].get("uid"):
            updated = copy.deepcopy(current)
            updated["data"] = data
            updated["metadata"]["labels"] = desired["metadata"]["labels"]
            updated["metadata"]["ownerReferences"] = desired["metadata"]["ownerReferences"]
            result.replace.append(updated)
        result.copies.append(f"{host_ns}/{copy_name}")
        result.host_spec[role] = {"name": copy_name, "namespace": host_ns}
    return result
