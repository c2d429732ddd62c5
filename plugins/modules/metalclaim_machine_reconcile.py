#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: metalclaim_machine_reconcile
short_description: Give each Cluster API MetalClaimMachine a host through a HostClaim of its namespace
version_added: 0.2.0
description:
  - The Cluster API infrastructure provider's machine step (Cluster API v1beta2 contract). For each
    C(MetalClaimMachine) (C(infrastructure.cluster.x-k8s.io/v1alpha1); those in O(machines), or all) whose owner
    C(Machine) has bootstrap data and whose C(Cluster)'s infrastructure is provisioned, makes one C(HostClaim) of the
    same name and namespace, controlled by the machine, C(consumerRef) the machine, labelled with the cluster's name,
    carrying the machine's C(hostSelector), C(kind), C(lease), C(nodeReuse) and C(firmware) and the Machine's
    C(failureDomain).
  - Once the claim holds a host, writes the machine's metaData Secret C(<machine>-metadata) (C(local-hostname) the
    Machine's name, C(providerid) C(metal3://<host namespace>/<host>/<machine>)), then gives the claim its data (the
    bootstrap Secret as userData, that metaData, the machine's networkData), its image and C(online) true, and sets the
    machine's C(spec.providerID).
  - When the claim is Ready, sets C(status.initialization.provisioned) and C(status.addresses) (the Machine's name as
    C(Hostname), each NIC IP the claim shows as C(InternalIP)). Writes the status (C(Ready), C(Paused) conditions) once,
    only when it changed.
  - A paused machine (the Cluster's C(spec.paused), or C(cluster.x-k8s.io/paused) on the Cluster or the machine) gets
    only its C(Paused) condition written. A deleted machine's claim is deleted (its host is released, powered off and
    cleaned, by the claim layer) and its finalizer removed once the claim is gone.
  - A HostClaim or Secret of the machine's names that the machine does not control is never changed (C(NameTaken)).
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports what it would make, change and delete and the status it would write; writes nothing.
  diff_mode:
    support: full
    description: Shows each object written (a Secret's values never); machines are then reconciled one at a time.
  idempotent:
    support: full
    description: A second run with nothing changed writes nothing (RV(writes) is 0).
options:
  machines:
    description:
      - The MetalClaimMachines to reconcile (C(namespace), C(name)). Default is every MetalClaimMachine.
    type: list
    elements: dict
    suboptions:
      namespace:
        description: Namespace of the machine.
        type: str
        required: true
      name:
        description: Name of the machine.
        type: str
        required: true
"""

EXAMPLES = r"""
- name: Reconcile every MetalClaimMachine
  metalclaim.hostclaim.metalclaim_machine_reconcile:
  register: machines

- name: Reconcile one machine, showing what it would do
  metalclaim.hostclaim.metalclaim_machine_reconcile:
    machines:
      - {namespace: cluster-ns, name: workers-abc12}
  check_mode: true
  diff: true
"""

RETURN = r"""
machines:
  description: One entry per machine reconciled (and per machine asked for that does not exist, state C(absent)).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The machine's namespace.
      type: str
    name:
      description: The machine's name (and its HostClaim's).
      type: str
    state:
      description: The reason of its C(Ready) condition, C(absent), C(Conflict) or C(Error).
      type: str
    changed:
      description: Whether anything was (or, in check mode, would be) written for it.
      type: bool
    writes:
      description: What was written, in order (C(finalizer), C(claim), C(metaData), C(claim spec), C(providerID),
        C(status), C(claim deleted)).
      type: list
      elements: str
    provider_id:
      description: The machine's C(spec.providerID) after the run (empty before its claim holds a host).
      type: str
  sample:
    - namespace: cluster-ns
      name: workers-abc12
      state: Provisioned
      changed: true
      writes: [status]
      provider_id: metal3://infrahost/bm-0/workers-abc12
outcomes:
  description:
    - What this run says about each machine (the controller reads these, see docs/architecture.md). C(wait) while it
      waits for another object (its claim, Machine, Cluster), C(retry) after a conflict, C(error) otherwise failed.
  returned: always
  type: list
  elements: dict
  sample:
    - {namespace: cluster-ns, name: workers-abc12, result: done, after: null, reason: Provisioned}
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

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.io.reconcile import (
    CapiRun,
    reconcile_machines,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import run_module

ARGUMENT_SPEC = dict(
    machines=dict(
        type="list",
        elements="dict",
        options=dict(namespace=dict(type="str", required=True), name=dict(type="str", required=True)),
    ),
)


def reconcile(module, kube) -> dict:
    run = CapiRun(kube, module.check_mode, diff=module._diff)
    return reconcile_machines(run, module.params["machines"])


def main():
    run_module(ARGUMENT_SPEC, reconcile)


if __name__ == "__main__":
    main()
