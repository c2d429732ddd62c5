#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: metalclaim_cluster_reconcile
short_description: Report each Cluster API MetalClaimCluster's infrastructure as provisioned
version_added: 0.2.0
description:
  - The Cluster API infrastructure provider's cluster step (Cluster API v1beta2 contract). The hosts of a cluster
    come with its machines (each a HostClaim, see M(metalclaim.hostclaim.metalclaim_machine_reconcile)), so a
    C(MetalClaimCluster) (C(infrastructure.cluster.x-k8s.io/v1alpha1); those in O(clusters), or all) has nothing to
    make; once its owner C(Cluster) exists it is C(status.initialization.provisioned), and its
    C(spec.controlPlaneEndpoint), as the cluster admin gave it, is what Cluster API copies to the Cluster.
  - Writes the status (C(Ready), C(Paused) conditions) once, only when it changed. Paused (the Cluster's
    C(spec.paused), or C(cluster.x-k8s.io/paused) on the Cluster or this object), only C(Paused) changes.
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports the status it would write; writes nothing.
  diff_mode:
    support: full
    description: Shows the status fields that change.
  idempotent:
    support: full
    description: A second run with nothing changed writes nothing (RV(writes) is 0).
options:
  clusters:
    description:
      - The MetalClaimClusters to reconcile (C(namespace), C(name)). Default is every MetalClaimCluster.
    type: list
    elements: dict
    suboptions:
      namespace:
        description: Namespace of the cluster.
        type: str
        required: true
      name:
        description: Name of the cluster.
        type: str
        required: true
"""

EXAMPLES = r"""
- name: Reconcile every MetalClaimCluster
  metalclaim.hostclaim.metalclaim_cluster_reconcile:

- name: Reconcile one
  metalclaim.hostclaim.metalclaim_cluster_reconcile:
    clusters:
      - {namespace: cluster-ns, name: tenant-cluster}
"""

RETURN = r"""
clusters:
  description: One entry per cluster reconciled (and per cluster asked for that does not exist, state C(absent)).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The cluster's namespace.
      type: str
    name:
      description: The cluster's name.
      type: str
    state:
      description: The reason of its C(Ready) condition (C(Paused) when paused), C(absent), C(Conflict) or C(Error).
      type: str
    changed:
      description: Whether its status was (or, in check mode, would be) written.
      type: bool
  sample:
    - {namespace: cluster-ns, name: tenant-cluster, state: ControlPlaneEndpointGiven, changed: true}
outcomes:
  description: What this run says about each cluster (C(wait) until its owner Cluster exists).
  returned: always
  type: list
  elements: dict
  sample:
    - {namespace: cluster-ns, name: tenant-cluster, result: done, after: null, reason: ControlPlaneEndpointGiven}
writes:
  description: Requests sent that change something (0 on a settled run).
  returned: always
  type: int
api_calls:
  description: Requests sent, by verb.
  returned: always
  type: dict
diff:
  description: With C(--diff), the status fields written (or, in check mode, that would be), before and after.
  returned: when diff mode is on
  type: list
  elements: dict
"""

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.io.reconcile import (
    CapiRun,
    reconcile_clusters,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import run_module

ARGUMENT_SPEC = dict(
    clusters=dict(
        type="list",
        elements="dict",
        options=dict(namespace=dict(type="str", required=True), name=dict(type="str", required=True)),
    ),
)


def reconcile(module, kube) -> dict:
    run = CapiRun(kube, module.check_mode, diff=module._diff)
    return reconcile_clusters(run, module.params["clusters"])


def main():
    run_module(ARGUMENT_SPEC, reconcile)


if __name__ == "__main__":
    main()
