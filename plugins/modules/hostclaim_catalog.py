#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostclaim_catalog
short_description: Write each tenant namespace's HostCatalog - which kinds of hosts it may claim, how many are free
version_added: 0.2.0
description:
  - For each tenant namespace that a C(HostDeployPolicy) with C(spec.catalog) admits (those in O(catalogs), or all),
    keeps one C(HostCatalog) (C(metal3.io/v1alpha1), namespaced) named C(hosts), which the namespace's tenants may read
    and never write.
  - Its status lists classes of hosts - the values of the host labels the admitting policies list in
    C(spec.catalog.publicLabels) (their union) - each with C(total), C(free) (a claim could bind it now), C(bound) (a
    HostClaim holds it) and C(booked) (accepted bookings ahead, C(spec.lease.start), on its hosts whose start is to
    come), the totals, a one-line C(summary) and a C(Ready) condition. The hosts counted are those of the infra
    namespaces of those policies, narrowed as the namespace's claims are (the tenant's host pools; hosts reserved for
    another tenant are left out).
  - A catalog never holds a host's name, namespace, BMC address or boot MAC; a public label whose value is one of those
    is shown as C(HIDDEN) and the Ready condition's reason is C(ValuesHidden).
  - The status is written only when a count or the condition changed (C(lastUpdated) is when that happened); a
    catalog whose namespace no policy with a catalog admits any more is deleted. A HostCatalog this module did not make
    (another name, or without the label C(app.kubernetes.io/managed-by=metalclaim)) is never touched.
  - The controller runs it at most once per C(--catalog-interval) per namespace, however many host events come.
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports the catalogs it would make, update and delete; writes nothing.
  diff_mode:
    support: full
    description:
      - Shows each catalog made or deleted and the status fields that change (or would, in check mode). Costs no
        request. With a diff, namespaces are reconciled one at a time, in name order.
  idempotent:
    support: full
    description: A second run with nothing changed writes nothing (RV(writes) is 0).
options:
  catalogs:
    description:
      - The catalogs to reconcile (C(namespace), C(name)); a name other than C(hosts) is no catalog of ours (state
        C(absent)). Default is every namespace that gets a catalog, and every catalog of ours.
    type: list
    elements: dict
    suboptions:
      namespace:
        description: The tenant namespace.
        type: str
        required: true
      name:
        description: The catalog's name, C(hosts).
        type: str
        required: true
"""

EXAMPLES = r"""
- name: Write every tenant namespace's catalog
  metalclaim.hostclaim.hostclaim_catalog:
  register: catalogs

- name: Show what one namespace's catalog would say
  metalclaim.hostclaim.hostclaim_catalog:
    catalogs:
      - {namespace: cluster-ns, name: hosts}
  check_mode: true
  diff: true
"""

RETURN = r"""
catalogs:
  description: One entry per catalog reconciled (and per catalog asked for that is not written, state C(absent)).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The tenant namespace.
      type: str
    name:
      description: The catalog's name.
      type: str
    state:
      description: >-
        The reason of its C(Ready) condition (C(Counted), C(ValuesHidden), C(TooManyClasses)); C(Withdrawn) (deleted:
        no policy with a catalog admits the namespace now), C(absent), C(Conflict) or C(Error).
      type: str
    changed:
      description: Whether anything was (or, in check mode, would be) written for it.
      type: bool
    classes:
      description: The classes of hosts it lists.
      type: int
    total:
      description: Hosts counted.
      type: int
    free:
      description: Hosts a claim of the namespace could bind now.
      type: int
    bound:
      description: Hosts a HostClaim holds (any namespace's).
      type: int
    booked:
      description: Accepted bookings ahead whose start is to come (any namespace's).
      type: int
  sample:
    - namespace: cluster-ns
      name: hosts
      state: Counted
      changed: true
      classes: 2
      total: 5
      free: 3
      bound: 2
      booked: 0
outcomes:
  description:
    - What this run says about each catalog, one entry per catalog (the controller reads these, see
      docs/architecture.md). C(result) is C(done), C(retry) after a conflict, or C(error).
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: cluster-ns
      name: hosts
      result: done
      after: null
      reason: Counted
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

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._catalog.io.reconcile import (
    CatalogRun,
    reconcile_catalogs,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import run_module

ARGUMENT_SPEC = dict(
    catalogs=dict(
        type="list",
        elements="dict",
        options=dict(namespace=dict(type="str", required=True), name=dict(type="str", required=True)),
    ),
)


def reconcile(module, kube) -> dict:
    run = CatalogRun(kube, module.check_mode, diff=module._diff)
    return reconcile_catalogs(run, module.params["catalogs"])


def main():
    run_module(ARGUMENT_SPEC, reconcile)


if __name__ == "__main__":
    main()
