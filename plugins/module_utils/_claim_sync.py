# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_sync: claim -> host (online, image, reboot annotations), host -> claim status.

The pure plans come first; sync_claims at the bottom is the I/O edge. Only non-secret
host facts reach the claim: never the BMC address, credentials or any infra Secret.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _binding as binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_bind import (
    bound_claims,
    namespace_labels,
    reread_bound,
    step_each,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_metadata import copy_rules, metadata_plan
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_release import REBOOT_ANNOTATION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_status import (
    desired_status,
    event,
    write_status,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._kube import METAL3

# Keyed reboot annotations this layer put on a host, so it removes only its own.
REBOOT_KEYS_ANNOTATION = "metalclaim.io/reboot-keys"
PROVISIONED_STATES = ("provisioned", "externally provisioned")
# States in which the host runs (or is writing) an image: its URL may not change under it.
IMAGE_IN_USE_STATES = ("provisioning", "provisioned", "externally provisioned")
IMAGE_CHANGE_REJECTED = "ImageChangeRejected"


def desired_online(claim: dict) -> bool:
    spec = claim.get("spec") or {}
    return bool(spec.get("online", spec.get("poweredOn", False)))


def image_plan(claim: dict, host: dict) -> tuple[dict | None, str]:
    """(the image the host should have, or None for none; a message when the claim's change is refused)."""
    wanted = (claim.get("spec") or {}).get("image")
    current = (host.get("spec") or {}).get("image")
    state = ((host.get("status") or {}).get("provisioning") or {}).get("state", "")
    if not wanted:
        return None, ""
    if current and current.get("url") != wanted.get("url") and state in IMAGE_IN_USE_STATES:
        return current, (
            f"spec.image.url changed while the host is {state}: remove spec.image, wait until the host is "
            "deprovisioned (Provisioned: available), then set the new image"
        )
    return dict(wanted), ""


def reboot_plan(claim_annotations: dict, host_annotations: dict) -> tuple[dict, dict]:
    """(host annotations, claim annotations) after propagating reboot requests.

    The bare `reboot.metal3.io` is a one-shot request: put on the host, then dropped from the
    claim. Keyed `reboot.metal3.io/<key>` ones hold the host off while present: mirrored, and
    removed from the host once the claim drops them (only those this layer set).
    """
    host = dict(host_annotations)
    claim = dict(claim_annotations)
    ours = set(filter(None, host.get(REBOOT_KEYS_ANNOTATION, "").split(",")))
    keyed = {k: v for k, v in claim.items() if k.startswith(REBOOT_ANNOTATION + "/")}
    for name in ours - set(keyed):
        host.pop(name, None)
    host.update(keyed)
    if keyed:
        host[REBOOT_KEYS_ANNOTATION] = ",".join(sorted(keyed))
    else:
        host.pop(REBOOT_KEYS_ANNOTATION, None)
    if REBOOT_ANNOTATION in claim:
        host[REBOOT_ANNOTATION] = claim.pop(REBOOT_ANNOTATION)
    return host, claim


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


def provisioned_condition(host: dict) -> tuple[str, str, str, str]:
    state = ((host.get("status") or {}).get("provisioning") or {}).get("state") or "unknown"
    return cond.PROVISIONED, "True" if state in PROVISIONED_STATES else "False", state, ""


def sync_claims(kube, wanted: list[dict] | None, timestamp: str, check_mode: bool) -> dict:
    pairs = bound_claims(kube, wanted)
    policies = kube.list(METAL3, "HostDeployPolicy") if pairs else []
    # Namespace labels matter only to decide which policies' metadataCopy apply.
    labels = namespace_labels(kube) if any((p.get("spec") or {}).get("metadataCopy") for p in policies) else {}
    outcome = step_each(
        pairs,
        lambda claim, host: _sync(kube, claim, host, policies, labels, timestamp, check_mode),
        reread_bound(kube),
    )
    problems = sorted({p for r in outcome["claims"] for p in r.get("metadata_copy_problems", [])})
    if problems:
        outcome["warnings"] = problems
    return outcome


def _sync(kube, claim: dict, host: dict, policies: list[dict], labels: dict, timestamp: str, check_mode: bool) -> dict:
    namespace, name = binding.key(claim)
    host_ns, host_name = binding.key(host)
    result = {"namespace": namespace, "name": name, "host": f"{host_ns}/{host_name}", "changed": False}
    new_host = copy.deepcopy(host)
    new_host["spec"]["online"] = desired_online(claim)
    image, problem = image_plan(claim, host)
    if image is None:
        new_host["spec"].pop("image", None)
    else:
        new_host["spec"]["image"] = image
    if problem:
        result["message"] = problem
    host_annotations, claim_annotations = reboot_plan(
        claim["metadata"].get("annotations") or {}, host["metadata"].get("annotations") or {}
    )
    new_host["metadata"]["annotations"] = host_annotations
    if new_host != host:
        result["changed"] = True
        if not check_mode:
            host = kube.replace(new_host)
    rules = copy_rules(policies, host_ns, namespace, labels.get(namespace, {}))
    if rules.problems:
        result["metadata_copy_problems"] = rules.problems
    claim_labels, claim_annotations = metadata_plan(
        claim["metadata"].get("labels") or {},
        claim_annotations,
        host["metadata"].get("labels") or {},
        host["metadata"].get("annotations") or {},
        rules,
    )
    if (claim_labels, claim_annotations) != (
        claim["metadata"].get("labels") or {},
        claim["metadata"].get("annotations") or {},
    ):
        # The one-shot reboot reached the host (take it off the claim), or copied host metadata changed.
        result["changed"] = True
        if not check_mode:
            updated = copy.deepcopy(claim)
            updated["metadata"]["labels"] = claim_labels
            updated["metadata"]["annotations"] = claim_annotations
            claim = kube.replace(updated)
    updates = {
        "poweredOn": bool((host.get("status") or {}).get("poweredOn", False)),
        "hostUID": host["metadata"]["uid"],
        "hardware": hardware_summary(host),
    }
    provisioned = provisioned_condition(host)
    before = cond.find((claim.get("status") or {}).get("conditions"), cond.PROVISIONED) or {}
    wrote = write_status(kube, claim, desired_status(claim, updates, [provisioned], timestamp), timestamp, check_mode)
    result["changed"] = result["changed"] or wrote
    result["provisioned"] = provisioned[2]
    if provisioned[1] == "True" and before.get("status") != "True":
        event(
            kube,
            claim,
            "Normal",
            "Provisioned",
            f"BareMetalHost {result['host']} is {provisioned[2]}",
            timestamp,
            check_mode,
        )
    return result
