#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostclaim_release
short_description: Release the BareMetalHosts of deleted HostClaims, cleaned, then let the claims go
version_added: 0.1.0
description:
  - "One step of the claim layer, run alone: releasing the hosts of deleted claims. For debugging that step, or a
    playbook of your own that wants only it (it drains the claims being deleted without binding new ones). No role
    uses this module: the C(metalclaim.hostclaim.claims) role (and the controller) runs the four steps (release,
    bind, secrets, sync) in one task with M(metalclaim.hostclaim.hostclaim_reconcile), which lists each kind once
    for the whole batch."
  - For each HostClaim being deleted that carries the C(metal3.io/hostclaim) finalizer (those in
    O(claims), or all), releases its BareMetalHost in this order.
  - First, the copied Secrets C(<host>-userdata), C(<host>-metadata) and C(<host>-networkdata) that the
    host's C(metalclaim.io/copies) annotation records are deleted, each by name with its recorded uid as a
    precondition (a Secret of such a name made by hand is never touched; no Secret beside the host is read
    or listed); then the host's C(image), C(userData), C(metaData) and C(networkData) and that record are
    cleared.
  - Then C(automatedCleaningMode) is forced to C(metadata), C(online) is set to false and the
    C(reboot.metal3.io[/<key>]) annotations are removed.
  - Once the host's provisioner reports it C(available) (or C(ready)) again, its C(consumerRef) is
    cleared. The claim's finalizer is removed last, so the claim is deleted.
  - A host whose C(consumerRef) names a HostClaim that no longer exists, or exists with another uid (its
    finalizer was removed by hand, say), is orphaned; it is released the same way, whatever O(claims) says,
    so the tenant's image and data never stay on it and it returns to the pool.
  - Does not block. A claim whose host is still being deprovisioned is reported as C(waiting),
    and the next run continues from where the host is.
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.claims
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports what would be released; writes nothing.
  diff_mode:
    support: partial
    description: Shows what each write changes, only the fields that change; never a Secret's values.
    details: >-
      Shown: each host scrubbed (image, data refs, the record of its copies, reboot annotations, C(online),
      C(automatedCleaningMode)) and its C(consumerRef) cleared, each copy deleted (its name and uid), the claim's
      finalizer removed, and orphaned claims' status fields. Not shown: the Events recorded on claims, and the
      C(lastUpdated) timestamp of a status write.
  idempotent:
    support: full
    description: Each run moves every deleted claim one step further; with none left, nothing changes.
"""

EXAMPLES = r"""
- name: Release the hosts of every deleted claim
  metalclaim.hostclaim.hostclaim_release:
  register: release

- name: Report claims still waiting for their host to be cleaned
  ansible.builtin.debug:
    msg: "{{ release.claims | selectattr('state', 'equalto', 'waiting') | map(attribute='message') | list }}"
"""

RETURN = r"""
claims:
  description: One entry per deleted claim considered.
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
      description: C(<namespace>/<name>) of its host, or null when it had none.
      type: str
    state:
      description:
        - C(released) (finalizer removed), C(waiting) (host being deprovisioned) or C(conflict).
        - "Node reuse: C(held) for a host held for the next claim with the released claim's key (the entry is
          that claim's, with C(after)), C(hold-ended) when this run ended its hold."
      type: str
    after:
      description: Seconds until the hold of its host ends (node reuse); the controller runs the key again then.
      type: float
      returned: when its host is held
    message:
      description: What it waits for.
      type: str
      returned: when waiting or in conflict
    changed:
      description: Whether anything was written for this claim.
      type: bool
orphans:
  description:
    - Hosts whose consumerRef names a HostClaim that no longer exists (or exists with another uid), released
      the same way as a deleted claim's host. Only the claim itself, read by name, proves it gone.
  returned: always
  type: list
  elements: dict
  contains:
    host:
      description: C(<namespace>/<name>) of the host.
      type: str
    consumer:
      description: C(<namespace>/<name>) of the vanished claim.
      type: str
    state:
      description: C(released) (consumerRef cleared), C(waiting) (host being deprovisioned) or C(conflict).
      type: str
pending:
  description: How many claims (and orphaned hosts) wait for their host to be deprovisioned.
  returned: always
  type: int
holds_ended:
  description: How many node reuse holds this run ended (their hosts free again, or to be cleaned first).
  returned: always
  type: int
errors:
  description:
    - The claims that failed in this run, each by itself (the rest of the batch went on), one entry per failure,
      sorted by claim. The controller retries these claims alone, with a growing delay.
    - C(step) is where it failed (C(release) for releasing its host, C(status) for its status write).
    - C(message) is what failed and the API server's answer (URLs and addresses taken out, at most 4 KiB).
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: cluster-ns
      name: my-hostclaim
      step: release
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

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.module import run_claim_step
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.release import release_claims


def main():
    run_claim_step(release_claims)


if __name__ == "__main__":
    main()
