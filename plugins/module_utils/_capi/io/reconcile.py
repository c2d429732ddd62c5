# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""metalclaim_machine_reconcile and metalclaim_cluster_reconcile: Cluster API's infrastructure objects on HostClaims.
The I/O edge over _capi/pure/machine.py and cluster.py.

A CapiRun is the run kernel (_common/io/run.py): the MetalClaimMachines (or MetalClaimClusters) listed once, and per
namespace they are in its Machines, Clusters, HostClaims and the provider's metaData Secrets (by their label: no other
Secret of the tenant is read), each listed once. Per machine, in the plan's order: the finalizer, the claim made or
deleted (by uid), the metaData Secret, the claim's spec, spec.providerID, then the status once, only when it changed.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure import cluster as clusters
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure import machine as machines
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
    KubeError,
    RefusedError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import Run
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import (
    DONE,
    ERROR,
    RETRY,
    WAIT,
    Outcomes,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import status_patch

# An owned object's change brings the machine back; these are only the safety net for an event missed.
WAIT_AGAIN_SECONDS = 600.0
# A claim the API server refused (the namespace's quota, say: freed by no event of ours) is tried again this much later.
REFUSED_RETRY_SECONDS = 30.0


class CapiRun(Run):
    """A Run of the Cluster API provider's steps."""

    def __init__(self, kube, check_mode: bool, diff: bool = False):
        super().__init__(kube, cond.now(), check_mode, diff=diff, thread_name="capi")


def _chosen(run: CapiRun, kind: str, wanted: list[dict] | None) -> tuple[list[dict], list[dict]]:
    found = run.kube.list(machines.API_VERSION, kind)
    keys = {(w["namespace"], w["name"]) for w in wanted or []}
    chosen = sorted((o for o in found if wanted is None or machines.key(o) in keys), key=machines.key)
    present = {machines.key(o) for o in chosen}
    absent = [
        {"namespace": ns, "name": name, "state": "absent", "changed": False} for ns, name in sorted(keys - present)
    ]
    return chosen, absent


def _by_name(run: CapiRun, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
    for obj in run.kube.held(api_version, kind, namespace):
        if machines.key(obj)[1] == name:
            return copy.deepcopy(obj)
    return None


def _metadata_secret(run: CapiRun, namespace: str, name: str) -> dict | None:
    """The provider's metaData Secret of that name (listed by its label: no other Secret of the tenant is read)."""
    for secret in run.kube.held("v1", "Secret", namespace, label_selector=machines.METADATA_LABEL):
        if machines.key(secret)[1] == name:
            return copy.deepcopy(secret)
    return None


def _cluster_of(run: CapiRun, namespace: str, name: str) -> dict | None:
    return _by_name(run, machines.CAPI_API_VERSION, "Cluster", namespace, name) if name else None


def reconcile_machines(run: CapiRun, wanted: list[dict] | None) -> dict:
    chosen, results = _chosen(run, machines.MACHINE_KIND, wanted)
    results += run.each(lambda metal_machine: _guarded(run, metal_machine, _machine), chosen)
    return _finish(run, results, "machines")


def reconcile_clusters(run: CapiRun, wanted: list[dict] | None) -> dict:
    chosen, results = _chosen(run, machines.CLUSTER_KIND, wanted)
    results += run.each(lambda metal_cluster: _guarded(run, metal_cluster, _cluster), chosen)
    return _finish(run, results, "clusters")


def _finish(run: CapiRun, results: list[dict], name: str) -> dict:
    results.sort(key=lambda r: (r["namespace"], r["name"]))
    found = Outcomes()
    for entry in results:
        if entry.get("result") in (RETRY, ERROR):
            found.note(entry["namespace"], entry["name"], entry["result"], reason=entry.get("reason") or "")
        elif entry.get("refused"):
            found.note(entry["namespace"], entry["name"], WAIT, REFUSED_RETRY_SECONDS, "CreateRefused")
        elif entry.get("waits_for"):
            found.note(entry["namespace"], entry["name"], WAIT, WAIT_AGAIN_SECONDS, entry.get("state") or "")
        else:
            found.note(entry["namespace"], entry["name"], DONE, reason=entry.get("state") or "")
    return run.finish(
        {
            "changed": any(r["changed"] for r in results),
            name: results,
            "outcomes": found.listed(),
            "writes": run.api.writes(),
        }
    )


def _guarded(run: CapiRun, obj: dict, reconcile) -> dict:
    namespace, name = machines.key(obj)
    result = {"namespace": namespace, "name": name, "changed": False}
    try:
        return reconcile(run, obj, result)
    except ConflictError as error:  # changed under us (Cluster API writes these objects too): its event brings it back
        result.update(result=RETRY, state="Conflict", reason=str(error))
    except KubeError as error:
        result.update(result=ERROR, state="Error", reason=str(error))
    return result


def _machine(run: CapiRun, metal_machine: dict, result: dict) -> dict:
    namespace, name = machines.key(metal_machine)
    metal_machine.setdefault("apiVersion", machines.API_VERSION)
    metal_machine.setdefault("kind", machines.MACHINE_KIND)
    owner = machines.owner_machine(metal_machine)
    machine = _by_name(run, machines.CAPI_API_VERSION, "Machine", namespace, owner) if owner else None
    cluster_name = ((machine or {}).get("spec") or {}).get("clusterName") or (
        metal_machine["metadata"].get("labels") or {}
    ).get(machines.CLUSTER_NAME_LABEL, "")
    cluster = _cluster_of(run, namespace, cluster_name)
    claim = _by_name(run, metal3.API_VERSION, "HostClaim", namespace, name)
    secret = _metadata_secret(run, namespace, machines.metadata_name(metal_machine))
    planned = machines.plan(metal_machine, machine, cluster, claim, secret)
    writes = []
    if planned.add_finalizer or planned.remove_finalizer:
        updated = copy.deepcopy(metal_machine)
        finalizers = [f for f in updated["metadata"].get("finalizers") or [] if f != machines.FINALIZER]
        if planned.add_finalizer:
            finalizers.append(machines.FINALIZER)
        updated["metadata"]["finalizers"] = finalizers
        metal_machine = _write(run, machines.MACHINE_KIND, metal_machine, updated)
        writes.append("finalizer")
        if planned.remove_finalizer:  # the machine may be gone now: nothing left to write
            result.update(changed=True, writes=writes, state=planned.ready[1])
            return result
    if planned.create_claim is not None:
        try:
            made = planned.create_claim if run.check_mode else run.kube.create(planned.create_claim)
        except AlreadyExistsError:  # made meanwhile (by whom, the next run's plan says)
            planned.ready = ("False", machines.WAITING_FOR_HOST, f"HostClaim {name} was made meanwhile")
        except RefusedError as error:  # the namespace's quota, say
            message = cond.truncated(error.server_message or str(error), 2048)
            planned.ready = ("False", machines.WAITING_FOR_HOST, f"the API server refused HostClaim {name}: {message}")
            result["refused"] = message
        else:
            run.record("HostClaim", None, made)
            writes.append("claim")
            run.event(metal_machine, "Normal", "HostClaimCreated", f"made HostClaim {name}; waiting for a host")
    if planned.delete_claim is not None:
        uid = planned.delete_claim["metadata"].get("uid", "")
        if run.check_mode or run.kube.delete(metal3.API_VERSION, "HostClaim", name, namespace, uid):
            run.record("HostClaim", planned.delete_claim, None)
            writes.append("claim deleted")
            run.event(metal_machine, "Normal", "HostReleasing", f"deleted HostClaim {name}: its host is released")
    # The claim gets its data and image only once its metaData names the host it holds.
    secret_ready = planned.metadata is None or _write_secret(run, planned, metal_machine, writes) is not None
    if planned.claim_spec is not None and secret_ready:
        updated = copy.deepcopy(claim)
        updated["spec"] = planned.claim_spec
        _write(run, "HostClaim", claim, updated)
        writes.append("claim spec")
    if planned.provider_id:
        updated = copy.deepcopy(metal_machine)
        updated.setdefault("spec", {})["providerID"] = planned.provider_id
        metal_machine = _write(run, machines.MACHINE_KIND, metal_machine, updated)
        writes.append("providerID")
    status = machines.desired_status(metal_machine, planned, run.timestamp)
    patch = status_patch(metal_machine, status)
    if patch:
        if not run.check_mode:
            run.kube.patch_status(metal_machine, patch)
        run.record_status(machines.MACHINE_KIND, metal_machine, patch)
        writes.append("status")
    result.update(
        changed=bool(writes),
        writes=writes,
        state=planned.ready[1],
        ready=planned.ready[0],
        provider_id=(metal_machine.get("spec") or {}).get("providerID") or "",
        waits_for=planned.waits_for,
    )
    return result


def _write_secret(run: CapiRun, planned, metal_machine: dict, writes: list) -> dict | None:
    """Create or rewrite the machine's metaData Secret; None when its name is taken by a Secret not ours."""
    wanted = planned.metadata
    namespace, _name = machines.key(metal_machine)
    current = _metadata_secret(run, namespace, wanted["metadata"]["name"])
    try:
        if current is None:
            written = wanted if run.check_mode else run.kube.create(wanted)
        else:
            replacement = copy.deepcopy(wanted)
            replacement["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
            written = replacement if run.check_mode else run.kube.replace(replacement)
    except AlreadyExistsError:
        planned.ready = ("False", machines.NAME_TAKEN, f"Secret {namespace}/{wanted['metadata']['name']} is not ours")
        planned.waits_for = "secret"
        return None
    run.record("Secret", current, written, secret=True)
    writes.append("metaData")
    return written


def _write(run: CapiRun, kind: str, before: dict, after: dict) -> dict:
    written = after if run.check_mode else run.kube.replace(after)
    run.record(kind, before, written)
    return written


def _cluster(run: CapiRun, metal_cluster: dict, result: dict) -> dict:
    namespace, _name = machines.key(metal_cluster)
    metal_cluster.setdefault("apiVersion", machines.API_VERSION)
    metal_cluster.setdefault("kind", machines.CLUSTER_KIND)
    cluster = _cluster_of(run, namespace, clusters.owner_cluster(metal_cluster))
    catalog = run.kube.get(metal3.API_VERSION, metal3.CATALOG_KIND, metal3.CATALOG_NAME, namespace)
    status, waiting = clusters.desired_status(metal_cluster, cluster, run.timestamp, catalog)
    patch = status_patch(metal_cluster, status)
    if patch:
        if not run.check_mode:
            run.kube.patch_status(metal_cluster, patch)
        run.record_status(machines.CLUSTER_KIND, metal_cluster, patch)
    ready = cond.find(status["conditions"], machines.READY) or cond.find(status["conditions"], machines.PAUSED)
    result.update(changed=bool(patch), state=ready["reason"], waits_for="cluster" if waiting else "")
    return result
