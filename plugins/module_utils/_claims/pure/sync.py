# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Claim -> host (online, image, reboot annotations) and host -> claim (status, copied metadata). Pure.

Only non-secret host facts reach the claim: never the BMC address, credentials or any
infra Secret.

Reboot requests follow Metal3's contract: ``reboot.metal3.io[/<key>]`` acts on a host in
the ``provisioned`` or ``externally provisioned`` state. A request on a claim whose host
is in another state stays on the claim, is not passed to the host, and the claim's
Synchronization condition says so (RebootNotApplicable); it takes effect once the host is
provisioned, or is cancelled by removing it. Removing a keyed request always reaches the host.

When no HostDeployPolicy admits the claim's namespace to its host's namespace any more,
the host stays bound (taking it away would destroy the tenant's workload) and power
requests still apply, but a new image (which would provision the host anew) is refused
and the claim says so (AuthorizationRevoked). Deleting the claim releases the host as usual.
"""

from __future__ import annotations

import copy
import re
import urllib.parse
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metadata import CopyRules, metadata_plan
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    PROVISIONED_STATES,
    REBOOT_ANNOTATION,
)

# Keyed reboot annotations this layer put on a host, so it removes only its own.
REBOOT_KEYS_ANNOTATION = "metalclaim.io/reboot-keys"
# States in which the host runs (or is writing) an image: its URL may not change under it.
IMAGE_IN_USE_STATES = ("provisioning", *PROVISIONED_STATES)
IMAGE_CHANGE_REJECTED = "ImageChangeRejected"
REBOOT_NOT_APPLICABLE = "RebootNotApplicable"
AUTHORIZATION_REVOKED = "AuthorizationRevoked"
PROVISIONING_ERROR = "provisioning error"  # Metal3's errorType for a failed deployment
MESSAGE_LIMIT = 512
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_NAME_AND_PORT = re.compile(r"\b[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?:\d{1,5}\b")
_ADDRESS = re.compile(r"\[?\b(?:\d{1,3}\.){3}\d{1,3}\b\]?(?::\d+)?|\[[0-9A-Fa-f:]*:[0-9A-Fa-f:]*\](?::\d+)?")


def host_state(host: dict) -> str:
    return ((host.get("status") or {}).get("provisioning") or {}).get("state") or ""


def desired_online(claim: dict) -> bool:
    spec = claim.get("spec") or {}
    return bool(spec.get("online", spec.get("poweredOn", False)))


def image_plan(claim: dict, host: dict, authorized: bool = True) -> tuple[dict | None, str]:
    """(the image the host should have, or None for none; a message when the claim's change is refused)."""
    wanted = (claim.get("spec") or {}).get("image")
    current = (host.get("spec") or {}).get("image")
    state = host_state(host)
    if not wanted:
        return None, ""
    if wanted.get("ociAuthSecretName"):
        # Metal3 reads that Secret in the host's (infrastructure) namespace: a tenant must not name one there.
        return current, (
            "spec.image.ociAuthSecretName is not supported: the image is not applied while it is set "
            "(it would name a Secret in the infrastructure's namespace); use an image URL that needs no credentials"
        )
    if not authorized and (current or {}).get("url") != wanted.get("url"):
        return current, "spec.image: not applied while the claim's namespace is not authorized for its host"
    if current and current.get("url") != wanted.get("url") and state in IMAGE_IN_USE_STATES:
        return current, (
            f"spec.image.url changed while the host is {state}: remove spec.image, wait until the host is "
            "deprovisioned (Provisioned: available), then set the new image"
        )
    return dict(wanted), ""


def reboot_plan(claim_annotations: dict, host_annotations: dict, state: str) -> tuple[dict, dict, list[str]]:
    """(host annotations, claim annotations, requests waiting) after propagating reboot requests.

    The bare `reboot.metal3.io` is a one-shot request: put on the host, then dropped from the
    claim. Keyed `reboot.metal3.io/<key>` ones hold the host off while present: mirrored, and
    removed from the host once the claim drops them (only those this layer set). New requests
    reach a host only in a provisioned state; the others wait on the claim (see the module doc).
    """
    host = dict(host_annotations)
    claim = dict(claim_annotations)
    applicable = state in PROVISIONED_STATES
    ours = set(filter(None, host.get(REBOOT_KEYS_ANNOTATION, "").split(",")))
    keyed = {k: v for k, v in claim.items() if k.startswith(REBOOT_ANNOTATION + "/")}
    waiting = []
    for name in ours - set(keyed):
        host.pop(name, None)
        ours.discard(name)
    for name, value in sorted(keyed.items()):
        if applicable or name in ours:
            host[name] = value
            ours.add(name)
        else:
            waiting.append(name)
    if ours:
        host[REBOOT_KEYS_ANNOTATION] = ",".join(sorted(ours))
    else:
        host.pop(REBOOT_KEYS_ANNOTATION, None)
    if REBOOT_ANNOTATION in claim:
        if applicable:
            host[REBOOT_ANNOTATION] = claim.pop(REBOOT_ANNOTATION)
        else:
            waiting.insert(0, REBOOT_ANNOTATION)
    return host, claim, waiting


def hardware_summary(host: dict) -> dict | None:
    """What a tenant may know of its server: NICs, CPU, RAM, disk sizes. Nothing about its BMC."""
    hardware = (host.get("status") or {}).get("hardware")
    if not hardware:
        return None
    summary = {}
    nics = [{k: nic[k] for k in ("name", "mac", "ip") if nic.get(k)} for nic in hardware.get("nics") or []]
    if nics:
        summary["nics"] = nics
    cpu = hardware.get("cpu") or {}
    if cpu:
        summary["cpu"] = {k: cpu[k] for k in ("arch", "count", "model") if cpu.get(k) is not None}
    if hardware.get("ramMebibytes") is not None:
        summary["ramMebibytes"] = hardware["ramMebibytes"]
    disks = [{k: d[k] for k in ("name", "sizeBytes") if d.get(k) is not None} for d in hardware.get("storage") or []]
    if disks:
        summary["storage"] = disks
    return summary or None


def state_reason(state: str) -> str:
    """A condition reason for a host state: the state in lowerCamelCase (`available`, `externallyProvisioned`).

    Metal3's states may hold spaces, which a condition reason may not; one-word states stay as
    the user guide shows them.
    """
    words = state.split()
    if not words:
        return "unknown"
    return words[0] + "".join(word.capitalize() for word in words[1:])


def provisioned_condition(host: dict) -> tuple[str, str, str, str]:
    """Provisioned: True in a provisioned state; else False with the state, or the host's error, as reason.

    A provisioning error (what the tenant's image, checksum or data caused, e.g. a checksum mismatch) is
    shown with its message, addresses taken out: it may quote a BMC's (infrastructure) URL. Other errors
    (registration, inspection, power management) concern the infrastructure: their type only."""
    state = host_state(host)
    status = host.get("status") or {}
    error_type = status.get("errorType") or ""
    if state not in PROVISIONED_STATES and error_type:
        message = f"the host is in {error_type}"
        if error_type == PROVISIONING_ERROR and status.get("errorMessage"):
            message += ": " + tenant_message(str(status["errorMessage"]), host)[:MESSAGE_LIMIT]
        return cond.PROVISIONED, "False", state_reason(error_type), message
    return cond.PROVISIONED, "True" if state in PROVISIONED_STATES else "False", state_reason(state), ""


def without_addresses(message: str) -> str:
    """URLs and IP addresses (with their ports) replaced: what a host's error may show a tenant."""
    message = _URL.sub("<url>", message)
    return _ADDRESS.sub("<address>", message)


def tenant_message(message: str, host: dict) -> str:
    """A host's error as its tenant may read it: nothing of the BMC's address. URLs and IP addresses go, then the
    name:port (how the provisioner names a BMC it cannot reach), then the BMC's host name wherever it still appears."""
    message = _NAME_AND_PORT.sub("<address>", without_addresses(message))
    bmc_host = _bmc_host_name((host.get("spec") or {}).get("bmc") or {})
    return re.sub(re.escape(bmc_host), "<bmc>", message, flags=re.IGNORECASE) if bmc_host else message


def _bmc_host_name(bmc: dict) -> str:
    address = str(bmc.get("address") or "")
    if "://" not in address:  # ipmi's host:port, or a bare name
        address = "//" + address
    try:
        return urllib.parse.urlsplit(address).hostname or ""
    except ValueError:
        return ""


@dataclass
class SyncPlan:
    """What to write for one bound claim, besides its data Secrets."""

    host_spec: dict  # the host's spec with online and image applied (data refs are the copy plan's)
    host_annotations: dict | None  # None: unchanged
    claim_labels: dict | None  # None: unchanged
    claim_annotations: dict | None
    updates: dict  # claim status fields
    provisioned: tuple[str, str, str, str]
    failures: list[tuple[str, str]] = field(default_factory=list)  # what the claim asks and cannot have now


def plan_sync(claim: dict, host: dict, authorized: bool, rules: CopyRules) -> SyncPlan:
    host_ns, host_name = binding.key(host)
    failures = []
    if not authorized:
        failures.append(
            (
                AUTHORIZATION_REVOKED,
                f"no HostDeployPolicy of BareMetalHost {host_ns}/{host_name}'s namespace admits namespace "
                f"{binding.key(claim)[0]!r} any more: the host stays bound and power requests apply, "
                "a new image is refused; delete the claim to release the host",
            )
        )
    spec = copy.deepcopy(host.get("spec") or {})
    spec["online"] = desired_online(claim)
    image, problem = image_plan(claim, host, authorized)
    if image is None:
        spec.pop("image", None)
    else:
        spec["image"] = image
    if problem and authorized:
        failures.append((IMAGE_CHANGE_REJECTED, problem))
    state = host_state(host)
    before_host = host["metadata"].get("annotations") or {}
    before_claim = claim["metadata"].get("annotations") or {}
    host_annotations, claim_annotations, waiting = reboot_plan(before_claim, before_host, state)
    if waiting:
        failures.append(
            (
                REBOOT_NOT_APPLICABLE,
                f"{', '.join(waiting)}: a reboot applies only to a provisioned host (this one is "
                f"{state or 'unknown'}); the request stays on the claim and takes effect once the host is "
                "provisioned, remove it to cancel",
            )
        )
    claim_labels, claim_annotations = metadata_plan(
        claim["metadata"].get("labels") or {},
        claim_annotations,
        host["metadata"].get("labels") or {},
        host_annotations,
        rules,
    )
    return SyncPlan(
        host_spec=spec,
        host_annotations=None if host_annotations == before_host else host_annotations,
        claim_labels=None if claim_labels == (claim["metadata"].get("labels") or {}) else claim_labels,
        claim_annotations=None if claim_annotations == before_claim else claim_annotations,
        updates={
            "poweredOn": bool((host.get("status") or {}).get("poweredOn", False)),
            "hostUID": host["metadata"]["uid"],
            "hardware": hardware_summary(host),
        },
        provisioned=provisioned_condition(host),
        failures=failures,
    )
