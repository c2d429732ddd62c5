# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_secrets: copy a bound claim's userData/metaData/networkData Secrets beside its host.

A reference is only ever read in the claim's own namespace: a tenant naming another
namespace (say, the BMC credentials Secret of the infra namespace) is refused before
anything is read. Copies are named ``<host>-userdata`` / ``-metadata`` / ``-networkdata``,
owned by the host (never the tenant's Secret), and followed by the host's refs.
"""

from __future__ import annotations

import base64
import binascii
import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _binding as binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_bind import (
    bound_claims,
    reread_bound,
    step_each,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_release import DATA_ROLES, copied_secret_name
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_status import (
    desired_status,
    event,
    write_status,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_sync import IMAGE_CHANGE_REJECTED, image_plan
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._kube import METAL3, AlreadyExistsError

COPY_OF_LABEL = "metalclaim.io/copy-of-claim"
SYNCED = "ConfigurationSynced"
CROSS_NAMESPACE = "CrossNamespaceReference"

# Largest decoded value copied per role, in bytes. userData carries cloud-init or Ignition
# (kubeadm bootstrap data with embedded certificates runs to a few hundred KiB); metaData
# and networkData are small maps (OpenStack, whose config-drive layout Metal3 follows, caps
# user data at 64 KiB). Every limit stays well under a Secret's 1 MiB, so one tenant cannot
# fill the infra namespace (or the host's config drive) through a claim.
SIZE_LIMITS = {"userData": 512 * 1024, "metaData": 64 * 1024, "networkData": 64 * 1024}
# Only plain data Secrets are copied. Any other type (service-account-token, dockerconfigjson,
# tls, basic-auth, ...) holds credentials a tenant must not ship to an infra namespace by accident.
COPYABLE_TYPES = ("", "Opaque")


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
                    "apiVersion": METAL3,
                    "kind": "BareMetalHost",
                    "name": host_name,
                    "uid": host["metadata"]["uid"],
                }
            ],
        },
        "data": data,
    }


def sync_secrets(kube, wanted: list[dict] | None, timestamp: str, check_mode: bool) -> dict:
    pairs = bound_claims(kube, wanted)
    # Our copies, one list call per infra namespace; tenant Secrets are only ever read by name
    # (those the claim references, in the claim's own namespace).
    copies = {}
    for namespace in sorted({binding.key(host)[0] for _claim, host in pairs}):
        for secret in kube.list("v1", "Secret", namespace, label_selector=COPY_OF_LABEL):
            copies[binding.key(secret)] = secret
    return step_each(
        pairs, lambda claim, host: _sync(kube, claim, host, copies, timestamp, check_mode), reread_bound(kube)
    )


def _sync(kube, claim: dict, host: dict, copies: dict, timestamp: str, check_mode: bool) -> dict:
    namespace, name = binding.key(claim)
    host_ns, host_name = binding.key(host)
    result = {"namespace": namespace, "name": name, "host": f"{host_ns}/{host_name}", "changed": False, "copies": []}
    failures: list[tuple[str, str]] = []
    new_host = copy.deepcopy(host)
    for role in DATA_ROLES:
        source_name = wanted_source(claim, role)
        source = kube.get("v1", "Secret", source_name, namespace) if source_name else None
        data, reason, message = plan_role(claim, role, source)
        copy_name = copied_secret_name(host_name, role)
        existing = copies.get((host_ns, copy_name))
        if reason:
            failures.append((reason, message))
            continue  # keep what the host has: a bad edit must not take away a working config
        if data is None:
            if existing is not None and (existing["metadata"].get("labels") or {}).get(COPY_OF_LABEL):
                result["changed"] = True
                if not check_mode:
                    kube.delete("v1", "Secret", copy_name, host_ns)
            if (new_host["spec"].get(role) or {}).get("name") == copy_name:
                del new_host["spec"][role]
            continue
        desired = copy_object(claim, host, role, data)
        if existing is None:
            result["changed"] = True
            # A Secret of that name that is not labelled as a copy (say, made by hand) is taken over.
            existing = None if check_mode else _create_copy(kube, desired)
        if existing is not None and (
            existing.get("data") != data
            or (existing["metadata"].get("labels") or {}).get(COPY_OF_LABEL) != claim["metadata"]["uid"]
        ):
            updated = copy.deepcopy(existing)
            updated["data"] = data
            updated["metadata"]["labels"] = desired["metadata"]["labels"]
            updated["metadata"]["ownerReferences"] = desired["metadata"]["ownerReferences"]
            result["changed"] = True
            if not check_mode:
                kube.replace(updated)
        result["copies"].append(f"{host_ns}/{copy_name}")
        new_host["spec"][role] = {"name": copy_name, "namespace": host_ns}
    # Synchronization also covers the claim's spec: an image change the host cannot take now.
    _image, problem = image_plan(claim, host)
    if problem:
        failures.append((IMAGE_CHANGE_REJECTED, problem))
    if new_host["spec"] != host["spec"]:
        result["changed"] = True
        if not check_mode:
            kube.replace(new_host)
    if failures:
        reason = failures[0][0]
        sync = (cond.SYNCHRONIZATION, "False", reason, "; ".join(message for _reason, message in failures))
    else:
        sync = (cond.SYNCHRONIZATION, "True", SYNCED, "")
    previous = cond.find((claim.get("status") or {}).get("conditions"), cond.SYNCHRONIZATION) or {}
    wrote = write_status(kube, claim, desired_status(claim, {}, [sync], timestamp), timestamp, check_mode)
    result["changed"] = result["changed"] or wrote
    if failures and (previous.get("reason"), previous.get("message")) != (sync[2], sync[3]):
        event(kube, claim, "Warning", sync[2], sync[3], timestamp, check_mode)
    result["synchronized"] = not failures
    if failures:
        result["message"] = sync[3]
    return result


def _create_copy(kube, desired: dict) -> dict | None:
    """Create a copy; None when done, else the Secret of that name not labelled as ours (to take over)."""
    try:
        kube.create(desired)
    except AlreadyExistsError:
        meta = desired["metadata"]
        return kube.get("v1", "Secret", meta["name"], meta["namespace"])
    return None
