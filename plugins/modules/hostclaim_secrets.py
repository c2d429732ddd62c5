#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostclaim_secrets
short_description: Copy bound HostClaims' userData, metaData and networkData Secrets beside their hosts
version_added: 0.1.0
description:
  - "One step of the claim layer, run alone: copying claims' data Secrets beside their hosts. For debugging that
    step, or a playbook of your own that wants only it. No role uses this module: the C(metalclaim.hostclaim.claims)
    role (and the controller) runs the four steps (release, bind, secrets, sync) in one task with
    M(metalclaim.hostclaim.hostclaim_reconcile), which lists each kind once for the whole batch."
  - For each bound HostClaim (those in O(claims), or all), copies the Secrets named by C(spec.userData),
    C(spec.metaData) and C(spec.networkData) into the namespace of the claim's BareMetalHost as
    C(<host>-userdata), C(<host>-metadata) and C(<host>-networkdata). The host owns the copies
    (the tenant's Secret is never touched), and the host's own C(userData)/C(metaData)/C(networkData)
    refs point at them.
  - The copy's data key is the role (C(userData), C(metaData), C(networkData)), taken from the source's
    key of the same name or, failing that, its C(value) key. Copies follow changes of the source.
    A copy is deleted when the claim drops its reference.
  - A reference to a Secret outside the claim's own namespace is refused and never read, with
    C(Synchronization) False, reason C(CrossNamespaceReference). Only the referenced Secrets of the
    claim's namespace are read, one GET per Secret per run however many claims name it.
  - "No Secret in an infrastructure namespace is ever read, listed, watched or patched (the BMC credentials
    live there): the copies are only created, replaced (PUT) and deleted. What was written is recorded on
    the host, in its annotation C(metalclaim.io/copies) (per role, the copy's uid and a digest of its data,
    type and labels), in the same host write that sets its data refs. A copy is written when its digest
    differs from the recorded one (created when nothing is recorded) and deleted by name with the recorded
    uid as a precondition, so a Secret put under that name since is never deleted."
  - "A Secret of a copy's name that the claim layer did not make (not labelled C(metalclaim.io/copy-of-claim),
    say made by hand by the infrastructure team) is never overwritten nor deleted: the create finds the name
    taken, the replace that follows is refused by the API server (the ValidatingAdmissionPolicy
    C(metalclaim-secret-copy-on-create) in C(config/admission): a Secret becomes a copy only when created),
    and C(Synchronization) is False, reason C(CopyNameTaken). The claim layer tries again on every run."
  - "The trade-off of never reading there: a copy deleted or edited by hand in the infrastructure namespace is
    not noticed until the claim's data changes or the record is removed. To force a re-copy, remove the
    host's annotation (C(kubectl annotate baremetalhost <host> metalclaim.io/copies-)): the next run writes
    every copy again."
  - "C(Synchronization) also reports what of the claim's spec the host cannot take now: C(AuthorizationRevoked)
    (no HostDeployPolicy admits the claim's namespace any more), C(ImageChangeRejected), C(RebootNotApplicable)
    (see M(metalclaim.hostclaim.hostclaim_sync))."
  - Nothing of the tenant's reaches a host before the binding is committed (the claim's status names the host).
  - "A referenced Secret is refused with C(<Role>SecretSyncFailure) and a message naming the field when it
    is missing; has no usable key (absent, empty or not base64); is not of type C(Opaque) (a
    C(kubernetes.io/service-account-token), C(dockerconfigjson), C(tls) or other typed Secret holds credentials
    that must not be shipped to an infrastructure namespace by accident); or holds more than the role's
    limit once decoded: C(userData) 512 KiB (cloud-init or Ignition with embedded certificates),
    C(metaData) and C(networkData) 64 KiB each (small maps; OpenStack's config drive, whose layout Metal3
    uses, caps user data at 64 KiB). The message never carries the Secret's content."
  - In every refusal the host keeps its last good copy. When all is well, C(Synchronization) is True,
    reason C(ConfigurationSynced).
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.claims
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports what would be copied, updated or deleted; writes nothing.
  diff_mode:
    support: partial
    description: Shows what each write changes, only the fields that change; never a Secret's values.
    details: >-
      Shown: each copy created, updated or deleted beside a host, its C(data) redacted to keys and sizes (C(<redacted,
      123 bytes>)); what an update replaces is never read, so its before side is the recorded C(digest), and a
      deletion shows the copy's name and uid only; the host's C(userData), C(metaData) and C(networkData) refs and
      its C(metalclaim.io/copies) record; the claim's status fields (conditions by type). Not shown: the Events
      recorded on claims, and the C(lastUpdated) timestamp of a status write.
  idempotent:
    support: full
    description: With sources unchanged, a second run changes nothing.
"""

EXAMPLES = r"""
- name: Copy the data Secrets of every bound claim
  metalclaim.hostclaim.hostclaim_secrets:

- name: After a tenant changed a claim's metaData
  metalclaim.hostclaim.hostclaim_secrets:
    claims:
      - namespace: cluster-ns
        name: my-hostclaim
"""

RETURN = r"""
claims:
  description: One entry per bound claim considered.
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
    host:
      description: C(<namespace>/<name>) of its host.
      type: str
    copies:
      description: The copies now beside the host, as C(<namespace>/<name>).
      type: list
      elements: str
    synchronized:
      description: Whether every reference could be copied.
      type: bool
    message:
      description: What could not be copied, and why.
      type: str
      returned: when not synchronized
    changed:
      description: Whether anything was written for this claim.
      type: bool
errors:
  description:
    - The claims that failed in this run, each by itself (the rest of the batch went on), one entry per failure,
      sorted by claim. The controller retries these claims alone, with a growing delay.
    - C(step) is where it failed (C(secrets) for copying its data Secrets, C(status) for its status write).
    - C(message) is what failed and the API server's answer (URLs and addresses taken out, at most 4 KiB).
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: cluster-ns
      name: my-hostclaim
      step: secrets
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

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.bound import sync_secrets
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.module import run_claim_step


def main():
    run_claim_step(sync_secrets)


if __name__ == "__main__":
    main()
