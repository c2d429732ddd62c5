#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostdeploypolicy_check
short_description: Tell which infrastructure namespaces' HostDeployPolicies admit a tenant namespace, and why not
version_added: 0.1.0
description:
  - Evaluates every HostDeployPolicy (or those in O(infra_namespaces)) against a tenant namespace, or against
    the namespace of one HostClaim, and returns the infrastructure namespaces whose hosts it may claim,
    with one decision (reason and message) per policy.
  - "Semantics of C(spec.hostclaimNamespaces) (alias C(hostClaimNamespaces)): absent authorizes nothing;
    C({}) admits every namespace; otherwise every field present must hold: C(names) lists the namespace,
    C(nameMatches) is a Python regular expression that must match the B(whole) namespace name
    (C(prod) admits C(prod), not C(not-prod)), C(hasLabels) are labels the Namespace object must carry,
    with the given value when one is given."
  - A policy admits claims only for hosts in its own namespace; several policies OR together.
    An invalid regular expression invalidates that policy alone, with a message saying so.
  - When O(claim) is given and the claim sets C(spec.hostSelector.inNamespace), only that namespace is considered.
  - Read-only; never changes anything.
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: The module only reads.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
  idempotent:
    support: full
    description: Running it again with the same cluster state returns the same result.
options:
  namespace:
    description:
      - The tenant namespace to check (the namespace of O(claim) when that is given).
    type: str
    required: true
  claim:
    description:
      - Name of a HostClaim in O(namespace); its C(hostSelector.inNamespace) narrows the result.
    type: str
  infra_namespaces:
    description:
      - Consider only policies in these namespaces. Default is every namespace.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Which infrastructure namespaces may cluster-ns claim hosts from?
  metalclaim.hostclaim.hostdeploypolicy_check:
    namespace: cluster-ns
  register: admission

- name: Explain a claim that stays unbound
  metalclaim.hostclaim.hostdeploypolicy_check:
    namespace: cluster-ns
    claim: my-hostclaim
    kubeconfig: /etc/metalclaim/controller.kubeconfig
  register: admission

- name: Fail loudly when nothing admits the namespace
  ansible.builtin.assert:
    that: admission.authorized_namespaces | length > 0
    fail_msg: "{{ admission.message }}"
"""

RETURN = r"""
authorized_namespaces:
  description: Infrastructure namespaces whose hosts the namespace (or claim) may use, sorted.
  returned: always
  type: list
  elements: str
  sample: [infrahost]
decisions:
  description: One entry per policy considered.
  returned: always
  type: list
  elements: dict
  contains:
    policy:
      description: C(<namespace>/<name>) of the policy.
      type: str
    infra_namespace:
      description: The policy's namespace, where its hosts are.
      type: str
    admitted:
      description: Whether this policy admits the namespace.
      type: bool
    reason:
      description: >-
        C(Admitted), C(NoNamespaceRule), C(NameNotListed), C(NameDoesNotMatch), C(MissingLabel),
        C(LabelValueMismatch) or C(InvalidPolicy).
      type: str
    message:
      description: A sentence a tenant or an administrator can act on.
      type: str
  sample:
    - policy: infrahost/policy
      infra_namespace: infrahost
      admitted: true
      reason: Admitted
      message: admitted by infrahost/policy
message:
  description: Summary; when nothing admits the namespace, why not, policy by policy.
  returned: always
  type: str
"""

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.policy_check import check_namespace
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import StepFailure, run_module

ARGUMENT_SPEC = dict(
    namespace=dict(type="str", required=True),
    claim=dict(type="str"),
    infra_namespaces=dict(type="list", elements="str"),
)


def check(module, kube) -> dict:
    params = module.params
    try:
        return dict(
            changed=False, **check_namespace(kube, params["namespace"], params["claim"], params["infra_namespaces"])
        )
    except LookupError as error:
        raise StepFailure(str(error)) from None


def main():
    run_module(ARGUMENT_SPEC, check)


if __name__ == "__main__":
    main()
