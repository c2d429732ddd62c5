# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_release: give the host of a deleted claim back, cleaned, then let the claim go.

Order matters: the host is first stripped of everything the tenant gave it (image,
data Secrets and their copies, reboot annotations) and told to power off and clean
its disks' metadata; only once its provisioner reports it `available` again is its
consumerRef cleared (so nobody can bind a dirty host) and then the claim's finalizer
removed.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _binding as binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_bind import select_claims, step_each
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_status import event
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._kube import METAL3

DATA_ROLES = ("userData", "metaData", "networkData")
REBOOT_ANNOTATION = "reboot.metal3.io"


def copied_secret_name(host_name: str, role: str) -> str:
    """Where the claim layer copies a tenant's data Secret, beside the host (the guide's names)."""
    return f"{host_name}-{role.lower()}"


def scrubbed_spec(host: dict) -> dict:
    """The host as it must be before it is given back: no tenant data, off, metadata cleaning on."""
    scrubbed = copy.deepcopy(host)
    spec = scrubbed["spec"]
    for field in ("image", *DATA_ROLES):
        spec.pop(field, None)
    spec["online"] = False
    spec["automatedCleaningMode"] = "metadata"
    annotations = scrubbed["metadata"].get("annotations") or {}
    for name in [a for a in annotations if a == REBOOT_ANNOTATION or a.startswith(REBOOT_ANNOTATION + "/")]:
        del annotations[name]
    return scrubbed


def release_claims(kube, wanted: list[dict] | None, timestamp: str, check_mode: bool) -> dict:
    deleting = [
        c
        for c in select_claims(kube.list(METAL3, "HostClaim"), wanted)
        if c["metadata"].get("deletionTimestamp") and binding.FINALIZER in (c["metadata"].get("finalizers") or [])
    ]
    hosts = kube.list(METAL3, "BareMetalHost") if deleting else []
    outcome = step_each(
        [(claim, hosts) for claim in deleting],
        lambda claim, all_hosts: _release(kube, claim, all_hosts, timestamp, check_mode),
    )
    outcome["pending"] = sum(1 for r in outcome["claims"] if r["state"] == "waiting")
    return outcome


def _release(kube, claim: dict, hosts: list[dict], timestamp: str, check_mode: bool) -> dict:
    namespace, name = binding.key(claim)
    result = {"namespace": namespace, "name": name, "host": None, "changed": False}
    own = [h for h in hosts if binding.consumed_by(h, claim)]
    for host in own:
        host_ns, host_name = binding.key(host)
        result["host"] = f"{host_ns}/{host_name}"
        scrubbed = scrubbed_spec(host)
        if scrubbed != host:
            result["changed"] = True
            if not check_mode:
                host = kube.replace(scrubbed)
        for role in DATA_ROLES:
            secret = kube.get("v1", "Secret", copied_secret_name(host_name, role), host_ns)
            if secret is not None:
                result["changed"] = True
                if not check_mode:
                    kube.delete("v1", "Secret", secret["metadata"]["name"], host_ns)
        state = ((host.get("status") or {}).get("provisioning") or {}).get("state", "")
        if state not in binding.FREE_STATES:
            result["state"] = "waiting"
            result["message"] = (
                f"waiting for BareMetalHost {result['host']} to be deprovisioned (now {state or 'unknown'})"
            )
            if result["changed"]:
                event(kube, claim, "Normal", "Releasing", result["message"], timestamp, check_mode)
            return result
        released = copy.deepcopy(host)
        released["spec"].pop("consumerRef", None)
        result["changed"] = True
        if not check_mode:
            kube.replace(released)
    result["state"] = "released"
    result["changed"] = True
    if result["host"]:
        event(kube, claim, "Normal", "Released", f"BareMetalHost {result['host']} released", timestamp, check_mode)
    if not check_mode:
        updated = copy.deepcopy(claim)
        updated["metadata"]["finalizers"] = [f for f in claim["metadata"]["finalizers"] if f != binding.FINALIZER]
        kube.replace(updated)
    return result
