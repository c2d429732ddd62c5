#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: tenant_reconcile
short_description: Onboard and remove tenants - bring each Tenant's namespaces, access, policies and quota to its spec
version_added: 0.2.0
description:
  - For each C(Tenant) (C(tenancy.metalclaim.io/v1alpha1), cluster-scoped; those in O(tenants), or all), creates
    what its spec asks and nothing else - its child namespaces C(<tenantName>-<child>), a RoleBinding there giving
    the admin group (default C(<tenantName>-tenant-admin)) the C(metalclaim-tenant) ClusterRole (HostClaims,
    Secrets, Events of that namespace only), a RoleBinding giving the claim side (O(claim_side_subjects)) read
    access to the Secrets claims reference, a ResourceQuota C(count/hostclaims.metal3.io) and
    C(count/hostclaimsets.metal3.io) when C(spec.quota.maxHostClaims) or C(maxHostClaimSets) is set, a
    HostDeployPolicy C(tenant-<tenantName>) in each host pool's namespace naming the child namespaces (and requiring
    their label C(tenancy.metalclaim.io/tenant=<tenantName>)), and the
    C(tenancy.metalclaim.io/reserved-for) annotation on each exclusive host.
  - Every object it makes carries the label C(tenancy.metalclaim.io/tenant=<tenantName>); an object of a name it
    wants without that label (a namespace or policy made by hand, or another tenant's) is never taken over. The
    whole spec is checked first (names, the required prefix, namespaces and policies owned elsewhere, host pools and
    exclusive hosts that do not exist, a host another C(enforceExclusive) tenant holds); a refused spec writes
    nothing but the Tenant's status (C(Accepted=False), the reason naming the field).
  - States as TAPMS - C(New) (nothing applied yet), C(Deploying), C(Deployed), C(Deleting); one condition per step
    (C(Accepted), C(Namespaces), C(Access), C(HostPools), C(Quota), C(ExclusiveHosts), C(Deletion)) and C(Ready);
    C(status.objects) lists what was made.
  - A Tenant being deleted is taken apart in order, one stage per run - the HostClaims of its namespaces are
    deleted and waited for (the claim layer releases their hosts), then its namespaces, then its policies and
    reservations, and the finalizer C(tenancy.metalclaim.io/tenant) goes last. RV(requeue) names the tenants
    waiting on a stage.
  - Hooks (C(spec.hooks)) are POSTed a JSON payload (C(eventType), C(tenantSpec) with the state; for claim events
    the claim's namespace, name, host name, lease end and conditions). A blocking hook is asked before a creation,
    update or deletion and anything but 200 in time stops it (nothing written but the status, condition C(Hooks) or
    C(Deletion) with reason C(HookRefused)); it is asked again after a backoff. Non-blocking hooks are told after the
    change; a failed delivery stays in C(status.hooks.pending) and is retried by later runs once due. Each delivery
    has one deadline, C(timeoutSeconds), for the connection, the request and the whole answer; a hook not reached
    in time is not called again in the run, and one tenant's hooks take at most 30 seconds of a run. Credentials
    come from a Secret of type C(tenancy.metalclaim.io/hook-credentials) in the namespace C(metalclaim-hooks),
    labelled C(tenancy.metalclaim.io/tenant) with the tenant's name (another tenant's is never used), and appear in
    no result, status or message. Check mode calls no hook.
  - A lease entering its warning is told as C(CLAIM_EXPIRING), its end as C(CLAIM_EXPIRED). Blocking C(CLAIM_EXPIRED)
    hooks are asked about a lease's end from its warning on; their verdicts go on the claim's namespace
    (annotation C(tenancy.metalclaim.io/expiry-approvals), with C(spec.leaseExpiryGrace)), where the claim layer reads
    them; it releases the host once they allow that end, or the grace (at most 15 minutes) after it.
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports the writes it would make (RV(tenants[].writes)); writes nothing.
  diff_mode:
    support: full
    description:
      - Shows what each write changes (or would, in check mode), only the fields that change - the Tenant's
        finalizer and status, its namespaces, RoleBindings, quota, policies and host reservations; a deleted
        object whole. Hooks are called, not written, and are not in it. Costs no request.
      - With a diff, Tenants are reconciled one at a time (their entries in name order).
  idempotent:
    support: full
    description: A second run with nothing changed writes nothing (RV(writes) is 0).
options:
  tenants:
    description:
      - Names of the Tenants to reconcile. Default is every Tenant.
    type: list
    elements: str
  required_prefix:
    description:
      - A prefix every C(spec.tenantName) must start with (TAPMS's namespace-manager prefix); a Tenant without it
        is refused. Empty means none.
    type: str
    default: ""
  claim_side_subjects:
    description:
      - RBAC subjects of the controller's claim side, bound to C(metalclaim-tenant-secrets-reader) in each child
        namespace so it can read the Secrets claims there reference. Empty binds nobody.
    type: list
    elements: dict
    default:
      - kind: ServiceAccount
        name: metalclaim-controller
        namespace: metalclaim-system
"""

EXAMPLES = r"""
- name: Reconcile every Tenant
  metalclaim.hostclaim.tenant_reconcile:
  register: onboarding

- name: Reconcile two tenants, whose names must start with vcluster-
  metalclaim.hostclaim.tenant_reconcile:
    tenants: [vcluster-blue, vcluster-green]
    required_prefix: vcluster-

- name: Outside the cluster, with the claim side running as a user
  metalclaim.hostclaim.tenant_reconcile:
    kubeconfig: /etc/metalclaim/admin.kubeconfig
    claim_side_subjects:
      - {apiGroup: rbac.authorization.k8s.io, kind: User, name: metalclaim-controller}
"""

RETURN = r"""
tenants:
  description: One entry per Tenant reconciled (and per name in O(tenants) that does not exist, state C(absent)).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The Tenant's name.
      type: str
    state:
      description: C(New), C(Deploying), C(Deployed), C(Deleting), or C(absent).
      type: str
    changed:
      description: Whether anything was (or, in check mode, would be) written for it.
      type: bool
    requeue:
      description: Whether it waits on something (a deletion stage, a failed write) and should be run again.
      type: bool
    reason:
      description: When refused or deleting, the condition reason.
      type: str
      returned: when refused or deleting
    message:
      description: When refused or deleting, why, naming the field.
      type: str
      returned: when refused or deleting
    writes:
      description: Each object written, C({action, kind, namespace, name}).
      type: list
      elements: dict
    requeue_after:
      description: Seconds until a hook is due again (a blocking hook's backoff, the next retry of a delivery, a
        refused binding or lease end asked about again).
      type: float
      returned: when a hook is due again later
    binding_hooks_asked:
      description: The blocking C(CLAIM_BOUND) hooks' answers this run, C({allowed, refused}) (claims asked about).
      type: dict
      returned: when a claim's binding was asked about
    expiry_hooks_asked:
      description: The blocking C(CLAIM_EXPIRED) hooks' answers this run, C({allowed, refused}) (leases in their
        warning, or held past their end, asked about).
      type: dict
      returned: when a lease's end was asked about
    deliveries:
      description: Each non-blocking delivery tried, C({hook, eventType, delivered, error}) (credentials redacted).
      type: list
      elements: dict
      returned: when a delivery was tried
  sample:
    - name: blue
      state: Deployed
      changed: true
      requeue: false
      writes: [{action: create, kind: Namespace, namespace: "", name: blue-slurm}]
requeue:
  description: Names of the tenants to run again.
  returned: always
  type: list
  elements: str
writes:
  description: Requests sent that change something (0 on a settled run).
  returned: always
  type: int
outcomes:
  description:
    - What this run says about each Tenant it reconciled, one entry per Tenant (C(namespace) is empty, as Tenants are
      cluster-scoped; the controller reads these, see docs/architecture.md). C(result) is C(done) or C(wait) (a
      deletion stage, a hook's backoff or next delivery), with C(after) the seconds until it is looked at again.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: ""
      name: blue
      result: wait
      after: 8.0
      reason: HookRefused
hook_requests:
  description: Requests sent to hooks (0 on a settled run).
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

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import run_module
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.io.reconcile import (
    TenantRun,
    reconcile_tenants,
)

ARGUMENT_SPEC = dict(
    tenants=dict(type="list", elements="str"),
    required_prefix=dict(type="str", default=""),
    claim_side_subjects=dict(
        type="list",
        elements="dict",
        default=[{"kind": "ServiceAccount", "name": "metalclaim-controller", "namespace": "metalclaim-system"}],
    ),
)


def reconcile(module, kube) -> dict:
    params = module.params
    run = TenantRun(
        kube, module.check_mode, params["required_prefix"], params["claim_side_subjects"], diff=module._diff
    )
    return reconcile_tenants(run, params["tenants"])


def main():
    run_module(ARGUMENT_SPEC, reconcile)


if __name__ == "__main__":
    main()
