# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Cluster API cluster's infrastructure on shared hosts: the MetalClaimCluster. Pure.

Cluster API's v1beta2 infrastructure cluster contract (contracts/infra-cluster.md): the hosts come with the
machines (each a HostClaim), so the cluster has nothing to make; it is provisioned once Cluster API owns it, and
reports the `controlPlaneEndpoint` the cluster admin gave (a load balancer or virtual IP of its own), which Cluster
API copies to the Cluster. Paused (the Cluster's `spec.paused`, or `cluster.x-k8s.io/paused` on either), only its
`Paused` condition changes.

Failure domains are what the namespace's HostCatalog shows of the hosts its policies publish (their
`catalog.publicLabels`): the values of the failure-domain label (Cluster API's, else the zone label) among its
classes. So a tenant learns no more than its catalog already says, and the infra team decides, by publishing the
label or not, whether a cluster can spread its machines. Cluster API copies them to the Cluster; a Machine placed in
one asks its HostClaim for it (`spec.failureDomain`), and the binder prefers hosts labelled so.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure.machine import (
    IS_PAUSED,
    NOT_PAUSED,
    PAUSED,
    READY,
    capi_owner,
    paused,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3

WAITING_FOR_CLUSTER = "WaitingForClusterOwner"
ENDPOINT_GIVEN = "ControlPlaneEndpointGiven"
NO_ENDPOINT = "NoControlPlaneEndpoint"


def owner_cluster(metal_cluster: dict) -> str:
    return capi_owner(metal_cluster, "Cluster")


def failure_domains(catalog: dict | None) -> list[dict]:
    """The failure domains the namespace's HostCatalog publishes (its classes' failure-domain label values), each one
    eligible for control plane machines, in name order; none without a catalog or the label."""
    found = set()
    for entry in ((catalog or {}).get("status") or {}).get("classes") or []:
        labels = entry.get("labels") or {}
        value = next((labels[label] for label in metal3.FAILURE_DOMAIN_LABELS if labels.get(label)), "")
        if value and value != metal3.CATALOG_HIDDEN:
            found.add(value)
    return [{"name": name, "controlPlane": True} for name in sorted(found)]


def desired_status(
    metal_cluster: dict, cluster: dict | None, timestamp: str, catalog: dict | None = None
) -> tuple[dict, bool]:
    """(the cluster's whole status after this run, whether it waits for its owner Cluster); `catalog` the namespace's
    HostCatalog, or None."""
    current = copy.deepcopy(metal_cluster.get("status") or {})
    generation = metal_cluster["metadata"].get("generation", 0)
    conditions = current.get("conditions") or []
    is_paused = paused(metal_cluster, cluster)
    pause = ("True", IS_PAUSED, "Cluster API paused this cluster") if is_paused else ("False", NOT_PAUSED, "")
    conditions = cond.set_condition(conditions, PAUSED, *pause, generation, timestamp)
    waiting = False
    if not is_paused:
        endpoint = (metal_cluster.get("spec") or {}).get("controlPlaneEndpoint") or {}
        if cluster is None:
            owner = owner_cluster(metal_cluster)
            message = f"Cluster {owner} not found" if owner else "Cluster API has not made a Cluster its owner yet"
            ready = ("False", WAITING_FOR_CLUSTER, message)
            waiting = True
        elif endpoint.get("host"):
            ready = ("True", ENDPOINT_GIVEN, f"control plane endpoint {endpoint['host']}:{endpoint.get('port', 0)}")
            current["initialization"] = {"provisioned": True}
        else:
            ready = ("True", NO_ENDPOINT, "no spec.controlPlaneEndpoint: the Cluster's own, or its control plane's")
            current["initialization"] = {"provisioned": True}
        conditions = cond.set_condition(conditions, READY, *ready, generation, timestamp)
        domains = failure_domains(catalog)
        if domains:
            current["failureDomains"] = domains
        else:
            current.pop("failureDomains", None)
    current["conditions"] = conditions
    current["observedGeneration"] = generation
    return current, waiting
