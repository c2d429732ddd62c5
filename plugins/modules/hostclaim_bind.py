#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostclaim_bind
short_description: Bind HostClaims to free, matching, authorized BareMetalHosts
version_added: 0.1.0
description:
  - "One step of the claim layer, run alone: binding claims to hosts. For debugging that step, or a playbook of your
    own that wants only it (in check mode with C(--diff), it previews which host each waiting claim would get). No
    role uses this module: the C(metalclaim.hostclaim.claims) role (and the controller) runs the four steps
    (release, bind, secrets, sync) in one task with M(metalclaim.hostclaim.hostclaim_reconcile), which lists each
    kind once for the whole batch."
  - For each HostClaim (those in O(claims), or all), finds its BareMetalHost or binds it to one and
    reports the outcome in the claim's C(status) (C(hardwareData), C(hostUID), the C(Association)
    and C(Ready) conditions) and as Kubernetes Events on the claim.
  - "A host is a candidate when a HostDeployPolicy in its namespace admits the claim's namespace
    (see M(metalclaim.hostclaim.hostdeploypolicy_check)), C(spec.hostSelector.inNamespace) (if set) is
    its namespace, its labels match C(matchLabels) and C(matchExpressions), and it is free: no
    C(consumerRef), not being deleted, not paused (C(baremetalhost.metal3.io/paused)), no error,
    provisioning state C(available) or C(ready). Hosts labelled C(topology.kubernetes.io/zone) equal
    to the claim's C(failureDomain) come first. A claim asking firmware settings (C(spec.firmware.settings))
    is bound only where a policy of the host's namespace admitting it lists each setting with that value in
    C(spec.firmware.allowedSettings); otherwise C(Association) says C(FirmwareSettingNotAllowed)."
  - The host's C(spec.consumerRef) is the truth. A host whose consumerRef names the claim is its
    host (recovery after a crash); a claim status naming any other host is cleared.
  - Binding is a two-phase commit. The host's consumerRef is written first, guarded by the host's
    resourceVersion; on a conflict (another binder got there first) the next candidate is tried.
    Then the claim's status naming the host is written, guarded by the claim's resourceVersion (the
    commit). Of two binders that took two hosts for one claim, the first status write wins and the other
    gives its host back. Each claim ranks equal candidates in its own order, so concurrent binders
    rarely collide.
  - Claims are taken oldest first. When another binder is found binding the same claim (it took a host
    for it first), this one leaves that claim to it, reads claims and hosts again and goes on from a
    random point of the claims left, so that concurrent runs over the same claims spread out instead
    of colliding on every claim.
  - A claim carries the C(metal3.io/hostclaim) finalizer before it is bound, so that deleting it waits for
    M(metalclaim.hostclaim.hostclaim_release); from its creation where the install role applied the
    finalizer-on-create admission policy (Kubernetes 1.36 and later), else this module adds it first.
  - Claims whose C(spec.kind) is not C(baremetal), and claims being deleted, are left alone.
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.claims
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports what would be bound and written; writes nothing.
  diff_mode:
    support: partial
    description: Shows what each write changes, only the fields that change.
    details: >-
      Shown: each host's C(consumerRef) set (or cleared, for a host given back), the claim's finalizer when the
      binder writes it (without the finalizer-on-create admission policy), and its status fields (conditions by type).
      Not shown: the Events recorded on claims, and the C(lastUpdated) timestamp of a status write.
  idempotent:
    support: full
    description: A second run with nothing new to bind changes nothing.
"""

EXAMPLES = r"""
- name: Bind every unbound claim
  metalclaim.hostclaim.hostclaim_bind:
  register: binding

- name: Bind the claims an event named
  metalclaim.hostclaim.hostclaim_bind:
    claims:
      - namespace: cluster-ns
        name: my-hostclaim
    kubeconfig: /etc/metalclaim/controller.kubeconfig
"""

RETURN = r"""
claims:
  description: One entry per claim considered.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The claim's namespace.
      type: str
    name:
      description: The claim's name.
      type: str
    action:
      description: C(keep) (already bound), C(bind), C(refuse), C(skip) or C(conflict) (another binder holds it).
      type: str
    host:
      description: C(<namespace>/<name>) of its host, or null when unbound.
      type: str
    reason:
      description: Why it is unbound or skipped (the Association condition's reason).
      type: str
      returned: when unbound or skipped
    message:
      description: Why, in words.
      type: str
      returned: when unbound
    changed:
      description: Whether anything was written for this claim.
      type: bool
  sample:
    - namespace: cluster-ns
      name: my-hostclaim
      action: bind
      host: infrahost/bm-00
      changed: true
bound:
  description: How many of the claims have a host after this run.
  returned: always
  type: int
unbound:
  description: How many of the claims wanted a host and have none.
  returned: always
  type: int
conflicts:
  description: How many claims another binder was writing at the same time (it binds them; a later run sees its result).
  returned: always
  type: int
errors:
  description:
    - The claims that failed in this run, each by itself (the rest of the batch went on), one entry per failure,
      sorted by claim. The controller retries these claims alone, with a growing delay.
    - C(step) is where it failed (C(bind) for binding it, C(status) for its status write).
    - C(message) is what failed and the API server's answer (URLs and addresses taken out, at most 4 KiB).
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: cluster-ns
      name: my-hostclaim
      step: bind
      message: "cannot get Secret my-userdata in namespace cluster-ns: 403 Forbidden"
diff:
  description:
    - With C(--diff) (in check mode too, what would change), one entry per object written, C(before) and C(after)
      holding only the fields that change (a Secret's values redacted). Empty when nothing changes.
  returned: when diff mode is on
  type: list
  elements: dict
  sample:
    - before_header: BareMetalHost rack-1/h1
      after_header: BareMetalHost rack-1/h1
      before: {"spec": {"online": false}}
      after: {"spec": {"online": true}}
status_writes:
  description: HostClaim status writes this run made (at most one per claim; none when nothing changed).
  returned: always
  type: int
outcomes:
  description:
    - What this run says about each claim it reconciled, one entry per claim (the controller reads these; see
      docs/architecture.md). C(result) is C(done) (nothing left to do), C(wait) (for another object's change),
      C(retry) (a temporary failure such as a conflict, backed off) or C(error) (this claim failed
      by itself, backed off).
    - C(after), when set, is when to look again, in seconds; C(reason) says why, briefly.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: cluster-ns
      name: my-hostclaim
      result: wait
      after: null
      reason: NoBareMetalHost
api_calls:
  description:
    - Requests this run sent to the API server, by verb (C(list), C(get), C(create), C(replace), C(patch),
      C(delete)).
  returned: always
  type: dict
  sample: {"get": 2, "list": 5}
"""

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.bind import bind_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.module import run_claim_step


def main():
    run_claim_step(bind_claims)


if __name__ == "__main__":
    main()
