# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Cluster API Machine on a shared host: one MetalClaimMachine, one HostClaim. Pure: the caller reads, this decides.

Cluster API's v1beta2 infrastructure machine contract (cluster-api v1.14, contracts/infra-machine.md), as CAPM3 does it
with a BareMetalHost, but through a HostClaim of the machine's own namespace, so a tenant needs no right on hosts:

1. A MetalClaimMachine waits for its owner Machine (Cluster API sets it), for its Cluster's infrastructure to be
   provisioned and for the Machine's bootstrap data (`spec.bootstrap.dataSecretName`). Paused (the Cluster's
   `spec.paused`, or `cluster.x-k8s.io/paused` on the Cluster or the machine), nothing is changed but the `Paused`
   condition.
2. It takes our finalizer, then makes its HostClaim: the same name and namespace, controlled by the machine (the
   garbage collector deletes it with the machine), `consumerRef` the machine, the cluster-name label, what the
   machine's spec carries (hostSelector, kind, lease, nodeReuse, firmware), the Machine's failureDomain; no image and
   powered off yet.
3. Once the claim holds a host (Association True: `status.hardwareData` names it), the providerID is known
   (`metal3://<host namespace>/<host>/<machine>`, CAPM3's form): the machine's metaData Secret (`<machine>-metadata`:
   `local-hostname`, `providerid`, what cloud-init gives a kubelet) is written, then the claim gets its data
   (userData: the bootstrap Secret; metaData; networkData), its image and `online: true`. So nothing is written to the
   host before its metaData names it.
4. The claim Ready: `status.initialization.provisioned`, the addresses (hostname, the NIC IPs the claim shows).
5. Deleted: the claim is deleted (its host is released: powered off, cleaned, given back by the claim layer), and the
   finalizer goes only when the claim is gone, so Cluster API's Machine deletion waits for the release.

A HostClaim or Secret of the machine's names that the machine does not control is never changed: the machine says so.
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3

API_VERSION = "infrastructure.cluster.x-k8s.io/v1alpha1"
MACHINE_KIND = "MetalClaimMachine"
CLUSTER_KIND = "MetalClaimCluster"
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_API_VERSION = "cluster.x-k8s.io/v1beta2"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
FINALIZER = "metalclaimmachine.infrastructure.cluster.x-k8s.io"
# On the metaData Secret the provider makes: the uid of the machine it is for (only such a Secret is ever rewritten).
METADATA_LABEL = "metalclaim.io/metadata-of-machine"
# The HostClaim fields a machine's spec carries as they are (hack/capi-crds.py's CARRIED, minus the data Secrets and
# the image, which wait for the host).
CLAIM_FIELDS = ("hostSelector", "kind", "lease", "nodeReuse", "firmware")
IMAGE_FIELDS = ("image", "customDeploy")
PROVIDER_ID_PREFIX = "metal3://"

# Conditions of a MetalClaimMachine.
READY = cond.READY
PAUSED = "Paused"
# Ready's reasons (the tenant guide's Cluster API chapter lists each).
WAITING_FOR_MACHINE = "WaitingForMachineOwner"
WAITING_FOR_CLUSTER = "WaitingForClusterInfrastructure"
WAITING_FOR_BOOTSTRAP = "WaitingForBootstrapData"
WAITING_FOR_HOST = "WaitingForHost"
PROVISIONING = "Provisioning"
PROVISIONED = "Provisioned"
NAME_TAKEN = "NameTaken"
DELETING = "Deleting"
NOT_PAUSED = "NotPaused"
IS_PAUSED = "Paused"


def key(obj: dict | None) -> tuple[str, str]:
    meta = (obj or {}).get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def deleting(obj: dict | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def capi_owner(obj: dict | None, kind: str) -> str:
    """Name of the Cluster API object of `kind` (Machine, Cluster) owning `obj` ("" before Cluster API sets it)."""
    for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == kind and (ref.get("apiVersion") or "").split("/")[0] == CAPI_GROUP:
            return ref.get("name") or ""
    return ""


def owner_machine(metal_machine: dict) -> str:
    return capi_owner(metal_machine, "Machine")


def controlled_by(obj: dict | None, owner: dict) -> bool:
    uid = owner["metadata"].get("uid")
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return bool(uid) and any(r.get("uid") == uid and r.get("controller") for r in refs)


def paused(metal_machine: dict, cluster: dict | None) -> bool:
    """Cluster API's pause: the Cluster's spec.paused, or the paused annotation on the Cluster or the machine."""
    if PAUSED_ANNOTATION in ((metal_machine.get("metadata") or {}).get("annotations") or {}):
        return True
    if cluster is None:
        return False
    return bool((cluster.get("spec") or {}).get("paused")) or PAUSED_ANNOTATION in (
        (cluster.get("metadata") or {}).get("annotations") or {}
    )


def infrastructure_provisioned(cluster: dict) -> bool:
    return bool(((cluster.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned"))


def provider_id(claim: dict, metal_machine: dict) -> str:
    """metal3://<host namespace>/<host>/<machine> once the claim holds a host ("" before): CAPM3's form, with what the
    claim's status already shows the tenant."""
    held = (claim.get("status") or {}).get("hardwareData") or {}
    if not held.get("name") or not held.get("namespace"):
        return ""
    return f"{PROVIDER_ID_PREFIX}{held['namespace']}/{held['name']}/{key(metal_machine)[1]}"


def metadata_name(metal_machine: dict) -> str:
    return f"{key(metal_machine)[1]}-metadata"


def metadata_document(metal_machine: dict, machine: dict, pid: str) -> dict:
    """What cloud-init's meta-data gives the host (NoCloud, the config drive's, JSON being YAML): an instance-id of
    this machine (a new machine is a new instance, so cloud-init runs its bootstrap data again), the name a kubelet
    registers under and the providerID it reports."""
    return {"instance-id": metal_machine["metadata"]["uid"], "local-hostname": key(machine)[1], "providerid": pid}


def metadata_secret(metal_machine: dict, machine: dict, pid: str) -> dict:
    namespace, _name = key(metal_machine)
    text = json.dumps(metadata_document(metal_machine, machine, pid), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": metadata_name(metal_machine),
            "namespace": namespace,
            "labels": {
                METADATA_LABEL: metal_machine["metadata"]["uid"],
                **_cluster_label(metal_machine, machine),
            },
            "ownerReferences": [_owner_reference(metal_machine)],
        },
        "data": {"metaData": base64.b64encode(text.encode()).decode()},
    }


def _owner_reference(metal_machine: dict) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": MACHINE_KIND,
        "name": key(metal_machine)[1],
        "uid": metal_machine["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _cluster_label(metal_machine: dict, machine: dict) -> dict:
    name = (machine.get("spec") or {}).get("clusterName") or (
        (metal_machine.get("metadata") or {}).get("labels") or {}
    ).get(CLUSTER_NAME_LABEL)
    return {CLUSTER_NAME_LABEL: name} if name else {}


def claim_spec(metal_machine: dict, machine: dict, with_data: bool) -> dict:
    """The HostClaim spec a machine asks: before its host is known (`with_data` False) no image and off; after, its
    data Secrets, image and on."""
    spec = metal_machine.get("spec") or {}
    machine_spec = machine.get("spec") or {}
    namespace, name = key(metal_machine)
    wanted = {field_name: copy.deepcopy(spec[field_name]) for field_name in CLAIM_FIELDS if field_name in spec}
    wanted["consumerRef"] = {
        "apiVersion": API_VERSION,
        "kind": MACHINE_KIND,
        "name": name,
        "namespace": namespace,
        "uid": metal_machine["metadata"]["uid"],
    }
    if machine_spec.get("failureDomain"):
        wanted["failureDomain"] = machine_spec["failureDomain"]
    wanted["online"] = with_data
    if with_data:
        wanted["userData"] = {"name": (machine_spec.get("bootstrap") or {}).get("dataSecretName")}
        wanted["metaData"] = {"name": metadata_name(metal_machine)}
        if spec.get("networkData"):
            wanted["networkData"] = copy.deepcopy(spec["networkData"])
        for field_name in IMAGE_FIELDS:
            if field_name in spec:
                wanted[field_name] = copy.deepcopy(spec[field_name])
    return wanted


def claim_body(metal_machine: dict, machine: dict) -> dict:
    namespace, name = key(metal_machine)
    return {
        "apiVersion": metal3.API_VERSION,
        "kind": "HostClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": _cluster_label(metal_machine, machine),
            "ownerReferences": [_owner_reference(metal_machine)],
        },
        "spec": claim_spec(metal_machine, machine, with_data=False),
    }


def addresses(machine: dict, claim: dict) -> list[dict]:
    """The machine's hostname, then each IP its host's NICs were inspected with (as the claim shows them)."""
    found = [{"type": "Hostname", "address": key(machine)[1]}]
    nics = ((claim.get("status") or {}).get("hardware") or {}).get("nics") or []
    for ip in dict.fromkeys(nic["ip"] for nic in nics if nic.get("ip")):
        found.append({"type": "InternalIP", "address": ip})
    return found


@dataclass
class Plan:
    """What one run does for one MetalClaimMachine; the io edge does it in this order."""

    add_finalizer: bool = False
    remove_finalizer: bool = False
    create_claim: dict | None = None
    delete_claim: dict | None = None  # the claim (deleted by uid)
    metadata: dict | None = None  # the metaData Secret to create or replace
    claim_spec: dict | None = None  # the claim's new spec
    provider_id: str = ""  # to set in spec.providerID
    ready: tuple[str, str, str] = ("False", WAITING_FOR_MACHINE, "")
    paused: bool = False
    provisioned: bool | None = None
    addresses: list[dict] | None = None
    claim_name: str = ""
    waits_for: str = ""  # "" (done), else what brings the machine back (an event of that object)
    problems: list[str] = field(default_factory=list)


def _claim_ready(claim: dict) -> tuple[str, str, str]:
    found = cond.find((claim.get("status") or {}).get("conditions"), READY) or {}
    return found.get("status") or "Unknown", found.get("reason") or "", found.get("message") or ""


def _associated(claim: dict) -> tuple[bool, str, str]:
    found = cond.find((claim.get("status") or {}).get("conditions"), cond.ASSOCIATION) or {}
    return found.get("status") == "True", found.get("reason") or "NotYetLookedAt", found.get("message") or ""


def plan(
    metal_machine: dict,
    machine: dict | None,
    cluster: dict | None,
    claim: dict | None,
    secret: dict | None,
) -> Plan:
    """One machine's run, given its owner Machine, the Machine's Cluster, the HostClaim and the Secret of the machine's
    names (each None when absent)."""
    namespace, name = key(metal_machine)
    finalizers = (metal_machine.get("metadata") or {}).get("finalizers") or []
    result = Plan(claim_name=name)
    ours = claim if claim is not None and controlled_by(claim, metal_machine) else None
    if claim is not None and ours is None:
        result.ready = ("False", NAME_TAKEN, f"HostClaim {namespace}/{name} exists and is not this machine's")
        result.claim_name = ""
        result.waits_for = "claim"
        if deleting(metal_machine) and FINALIZER in finalizers:
            result.remove_finalizer = True  # nothing of ours to release
        return result
    if deleting(metal_machine):
        if ours is not None:
            if not deleting(ours):
                result.delete_claim = ours
            result.ready = ("False", DELETING, "the machine's host is being released (powered off and cleaned)")
            result.waits_for = "claim"
        elif FINALIZER in finalizers:
            result.remove_finalizer = True
            result.ready = ("False", DELETING, "the machine's host is released")
        return result
    if paused(metal_machine, cluster):
        result.paused = True
        result.ready = _kept_ready(metal_machine)
        return result
    if machine is None:
        owner = owner_machine(metal_machine)
        message = f"Machine {owner} not found" if owner else "Cluster API has not made a Machine its owner yet"
        result.ready = ("False", WAITING_FOR_MACHINE, message)
        result.waits_for = "machine"
        return result
    cluster_name = (machine.get("spec") or {}).get("clusterName", "")
    if cluster is None or not infrastructure_provisioned(cluster):
        state = "not found" if cluster is None else "not provisioned yet"
        result.ready = ("False", WAITING_FOR_CLUSTER, f"the infrastructure of Cluster {cluster_name} is {state}")
        result.waits_for = "cluster"
        return result
    if not ((machine.get("spec") or {}).get("bootstrap") or {}).get("dataSecretName"):
        result.ready = ("False", WAITING_FOR_BOOTSTRAP, f"Machine {key(machine)[1]} has no bootstrap data yet")
        result.waits_for = "machine"
        return result
    if FINALIZER not in finalizers:
        result.add_finalizer = True
    if ours is None:
        result.create_claim = claim_body(metal_machine, machine)
        result.ready = ("False", WAITING_FOR_HOST, f"HostClaim {name} made; waiting for a host")
        result.waits_for = "claim"
        return result
    associated, reason, message = _associated(ours)
    if not associated:
        result.ready = ("False", WAITING_FOR_HOST, f"HostClaim {name}: {reason}" + (f": {message}" if message else ""))
        result.waits_for = "claim"
        return result
    pid = provider_id(ours, metal_machine)
    if (
        secret is not None
        and (secret.get("metadata") or {}).get("labels", {}).get(METADATA_LABEL) != (metal_machine["metadata"]["uid"])
    ):
        result.ready = ("False", NAME_TAKEN, f"Secret {namespace}/{metadata_name(metal_machine)} is not this machine's")
        result.waits_for = "secret"
        return result
    wanted_secret = metadata_secret(metal_machine, machine, pid)
    if secret is None or (secret.get("data") or {}) != wanted_secret["data"] or secret.get("type") != "Opaque":
        result.metadata = wanted_secret
    wanted_spec = claim_spec(metal_machine, machine, with_data=True)
    if (ours.get("spec") or {}) != wanted_spec:
        result.claim_spec = wanted_spec
    current_pid = (metal_machine.get("spec") or {}).get("providerID") or ""
    if not current_pid:
        result.provider_id = pid
    elif current_pid != pid:
        result.problems.append(f"spec.providerID {current_pid} is not the host's {pid}: it is left as it is")
    status, claim_reason, claim_message = _claim_ready(ours)
    was_provisioned = bool(((metal_machine.get("status") or {}).get("initialization") or {}).get("provisioned"))
    if status == "True":
        result.ready = ("True", PROVISIONED, f"HostClaim {name} is Ready")
        result.provisioned = True
    else:
        text = f"HostClaim {name} is not Ready ({claim_reason or 'Unknown'})" + (
            f": {claim_message}" if claim_message else ""
        )
        result.ready = ("False", PROVISIONING, text)
        result.provisioned = True if was_provisioned else None  # the contract's flag never goes back
        result.waits_for = "claim"
    result.addresses = addresses(machine, ours)
    return result


def _kept_ready(metal_machine: dict) -> tuple[str, str, str]:
    found = cond.find((metal_machine.get("status") or {}).get("conditions"), READY)
    if not found:
        return ("Unknown", IS_PAUSED, "paused before it was reconciled")
    return found["status"], found["reason"], found.get("message") or ""


def desired_status(metal_machine: dict, planned: Plan, timestamp: str) -> dict:
    """The machine's whole status after this run."""
    current = copy.deepcopy(metal_machine.get("status") or {})
    generation = metal_machine["metadata"].get("generation", 0)
    conditions = current.get("conditions") or []
    status, reason, message = planned.ready
    if planned.problems:
        message = "; ".join([message, *planned.problems]) if message else "; ".join(planned.problems)
    conditions = cond.set_condition(conditions, READY, status, reason, message, generation, timestamp)
    pause = ("True", IS_PAUSED, "Cluster API paused this machine") if planned.paused else ("False", NOT_PAUSED, "")
    conditions = cond.set_condition(conditions, PAUSED, *pause, generation, timestamp)
    current["conditions"] = conditions
    current["observedGeneration"] = generation
    if planned.paused:
        return current
    if planned.claim_name:
        current["hostClaim"] = planned.claim_name
    if planned.provisioned is not None:
        current["initialization"] = {"provisioned": planned.provisioned}
    if planned.addresses is not None:
        current["addresses"] = planned.addresses
    return current
