#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostclaimset_reconcile
short_description: Keep each HostClaimSet's member HostClaims at its replicas, as a ReplicaSet keeps its pods
version_added: 0.2.0
description:
  - For each C(HostClaimSet) (C(metal3.io/v1alpha1), namespaced; those in O(claimsets), or all), makes the member
    HostClaims its C(spec.replicas) asks from C(spec.template), in the set's own namespace, named C(<set>-<n>) with
    n the smallest numbers no HostClaim of the namespace has, each controlled by the set (an owner reference with
    C(controller) true, so the garbage collector deletes them with the set) and labelled C(metalclaim.io/hostclaimset).
  - On scale-down it deletes the surplus by a fixed rule - first the members the claim layer has not looked at yet,
    then those waiting for a host, then bound ones not Ready, then Ready ones; within each the newest first. A deleted
    member's host is released by the claim layer as for any deleted claim.
  - A HostClaim whose controller owner reference is not the set is never counted, changed or deleted. Template
    changes apply to the claims made afterwards.
  - With C(spec.spreadBy) (a host label key), each member carries it in the annotation C(metalclaim.io/spread-by)
    and the binder ranks a member's candidates by how many hosts the set's other members hold in each value of that
    label, fewest first.
  - Member claims are ordinary HostClaims - the namespace's ResourceQuota (C(count/hostclaims.metal3.io)) and the
    tenant's C(maxBoundHosts) apply to them; a create the API server refuses stops the set's creates for the run
    and shows in its C(Scaled) condition (C(CreateRefused)); it is tried again 30 seconds later.
  - Writes the set's status (C(replicas), C(boundReplicas), C(readyReplicas), C(waitingReplicas),
    C(releasingReplicas), C(selector), conditions C(Scaled), C(Bound), C(Ready)) once, only when it changed.
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports the claims it would make and delete and the status it would write; writes nothing.
  diff_mode:
    support: full
    description:
      - Shows each claim made or deleted and the fields of each set's status that change (or would, in check mode).
        Costs no request. With a diff, sets are reconciled one at a time, in name order.
  idempotent:
    support: full
    description: A second run with nothing changed writes nothing (RV(writes) is 0).
options:
  claimsets:
    description:
      - The HostClaimSets to reconcile (C(namespace), C(name)). Default is every HostClaimSet.
    type: list
    elements: dict
    suboptions:
      namespace:
        description: Namespace of the set.
        type: str
        required: true
      name:
        description: Name of the set.
        type: str
        required: true
"""

EXAMPLES = r"""
- name: Reconcile every HostClaimSet
  metalclaim.hostclaim.hostclaimset_reconcile:
  register: claimsets

- name: Reconcile one set, showing what it would do
  metalclaim.hostclaim.hostclaimset_reconcile:
    claimsets:
      - {namespace: cluster-ns, name: workers}
  check_mode: true
  diff: true
"""

RETURN = r"""
claimsets:
  description: One entry per set reconciled (and per set asked for that does not exist, state C(absent)).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The set's namespace.
      type: str
    name:
      description: The set's name.
      type: str
    state:
      description: The reason of its C(Scaled) condition, C(Deleting), C(absent), C(Conflict) or C(Error).
      type: str
    changed:
      description: Whether anything was (or, in check mode, would be) written for it.
      type: bool
    created:
      description: The member claims made.
      type: list
      elements: str
    deleted:
      description: The member claims deleted (scale-down).
      type: list
      elements: str
    replicas:
      description: Its members not being deleted, after the run.
      type: int
    bound:
      description: Members holding a host.
      type: int
    ready:
      description: Members whose C(Ready) condition is True.
      type: int
    waiting:
      description: Members not holding a host.
      type: int
    refused:
      description: The API server's answer to a create it refused (empty if none).
      type: str
  sample:
    - namespace: cluster-ns
      name: workers
      state: ScaledToReplicas
      changed: true
      created: [workers-0, workers-1, workers-2]
      deleted: []
      replicas: 3
      bound: 0
      ready: 0
      waiting: 3
      refused: ""
outcomes:
  description:
    - What this run says about each set, one entry per set (the controller reads these, see docs/architecture.md).
      C(result) is C(done), C(wait) with C(after) 30 after a refused create, C(retry) after a conflict or C(error).
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: cluster-ns
      name: workers
      result: done
      after: null
      reason: ScaledToReplicas
writes:
  description: Requests sent that change something (0 on a settled run).
  returned: always
  type: int
api_calls:
  description: Requests sent, by verb.
  returned: always
  type: dict
diff:
  description: With C(--diff), one entry per object written (or, in check mode, that would be), before and after.
  returned: when diff mode is on
  type: list
  elements: dict
"""

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claimsets.io.reconcile import (
    ClaimSetRun,
    reconcile_claimsets,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import run_module

ARGUMENT_SPEC = dict(
    claimsets=dict(
        type="list",
        elements="dict",
        options=dict(namespace=dict(type="str", required=True), name=dict(type="str", required=True)),
    ),
)


def reconcile(module, kube) -> dict:
    run = ClaimSetRun(kube, module.check_mode, diff=module._diff)
    return reconcile_claimsets(run, module.params["claimsets"])


def main():
    run_module(ARGUMENT_SPEC, reconcile)


if __name__ == "__main__":
    main()
