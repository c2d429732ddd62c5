#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostclaim_reconcile
short_description: Run every HostClaim step (release, bind, secrets, sync) for a batch of claims in one go
version_added: 0.1.0
description:
  - Runs, in this order and in one process, what M(metalclaim.hostclaim.hostclaim_release),
    M(metalclaim.hostclaim.hostclaim_bind), M(metalclaim.hostclaim.hostclaim_secrets) and
    M(metalclaim.hostclaim.hostclaim_sync) do, with the same semantics, for the claims in O(claims) (or all).
  - Between the release and the binding, the leases (HostClaim C(spec.lease), HostDeployPolicy
    C(spec.maxLeaseDuration)); a lease's end releases its claim's host as a deletion does, the claim staying.
  - Each kind (HostClaims, BareMetalHosts, HostDeployPolicies, Namespaces) is listed once for the whole run,
    and each tenant Secret a claim references is read once (no Secret of an infrastructure namespace is ever
    read, the copies are known from the hosts' records, see M(metalclaim.hostclaim.hostclaim_secrets));
    later steps see what earlier ones wrote. The secrets and sync steps run as one pass, so a bound
    claim's host is written at most once.
  - Each claim's status (every condition, then C(Ready)) is computed from what all the steps found and
    written once, at the end, only when it differs; a tenant watching a claim sees one update per run and
    no transient C(Ready). One exception, a claim this run binds, has its status written as soon as its host
    is taken (that write commits the binding, before anything of the tenant's reaches the host), then at the
    end only if a later step changed it. A second run with nothing new writes nothing.
  - One claim's failure is its own. A request that fails for one claim (an API error other than a conflict, say a
    403 on a Secret of a namespace the controller may not read or a 422 on a write, or an internal error) gives that
    claim C(Synchronization) False, reason C(ReconcileError), quoting the request and the answer (URLs and
    addresses taken out, cut short), and the other claims of the batch are reconciled as usual. When the API server
    refuses a claim's status itself, a minimal one is written (C(Ready) False, reason C(StatusRefused)). Such a
    claim is listed in RV(errors), and the task does not fail; only a failure of the whole run (a list the run
    needs, the API server unreachable) fails it. An Event the API server refuses (its namespace is being deleted,
    say) is a warning.
  - Condition messages are cut to the API server's 32768 bytes; at most 32 reboot requests (8 KiB together) of a
    claim reach its host, more gives C(Synchronization) False, reason C(RebootRequestsTooLarge).
  - This is what C(playbooks/reconcile.yml) runs; the step modules remain for running one step alone.
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.claims
  - metalclaim.hostclaim.k8s_auth
  - metalclaim.hostclaim.standby
attributes:
  check_mode:
    support: full
    description: Each step reports what it would do on the state read at the start; nothing is written.
  diff_mode:
    support: partial
    description: Shows what each step's writes change, only the fields that change; never a Secret's values.
    details: >-
      Shown: what M(metalclaim.hostclaim.hostclaim_release), M(metalclaim.hostclaim.hostclaim_bind),
      M(metalclaim.hostclaim.hostclaim_secrets) and M(metalclaim.hostclaim.hostclaim_sync) show, in that order, each
      claim's status once. Not shown: the Events recorded on claims, and the C(lastUpdated) timestamp of a status
      write.
  idempotent:
    support: full
    description: With nothing new on either side, a second run changes nothing.
"""

EXAMPLES = r"""
- name: Reconcile every HostClaim
  metalclaim.hostclaim.hostclaim_reconcile:
  register: reconcile

- name: Reconcile the claims an event named
  metalclaim.hostclaim.hostclaim_reconcile:
    claims:
      - namespace: cluster-ns
        name: my-hostclaim
"""

RETURN = r"""
release:
  description: What M(metalclaim.hostclaim.hostclaim_release) returns.
  returned: always
  type: dict
lease:
  description:
    - The leases (HostClaim C(spec.lease)), one entry per leased claim (C(lease) its state, C(after) the seconds to
      its next deadline, C(state) C(released) or C(waiting) for a claim whose lease ended). At its end a claim's
      host is released as a deleted claim's; the claim stays, its C(Lease) condition C(LeaseExpired), and is never
      bound again.
  returned: always
  type: dict
bind:
  description: What M(metalclaim.hostclaim.hostclaim_bind) returns.
  returned: always
  type: dict
bound:
  description:
    - What M(metalclaim.hostclaim.hostclaim_secrets) and M(metalclaim.hostclaim.hostclaim_sync) return, in one
      list, one entry per bound claim (C(copies), C(synchronized), C(provisioned), C(message)).
  returned: always
  type: dict
summary:
  description: Counts for a log line.
  returned: always
  type: dict
  contains:
    bound:
      description: Claims with a host after this run.
      type: int
    waiting_for_host:
      description: Claims that want a host and have none.
      type: int
    releases_pending:
      description: Deleted claims whose host is still being deprovisioned.
      type: int
    orphans_released:
      description: Hosts of vanished claims given back to the pool this run.
      type: int
    leases_expired:
      description: Claims whose lease has ended (their host released, or being released).
      type: int
    not_synchronized:
      description: Bound claims whose data Secrets or image change could not be applied.
      type: int
    conflicts:
      description: Claims another reconcile was writing at the same time (it handles them).
      type: int
    list_calls:
      description: List requests made to the API server.
      type: int
  sample:
    bound: 3
    waiting_for_host: 1
    releases_pending: 0
    orphans_released: 0
    leases_expired: 0
    not_synchronized: 0
    conflicts: 0
    list_calls: 5
errors:
  description:
    - The claims that failed in this run, each by itself (the rest of the batch was reconciled), one entry per
      failure, sorted by claim. The controller retries these claims alone, with a growing delay.
    - C(step) is where it failed (C(release), C(bind), C(sync) for a bound claim's step, C(status) for its status
      write); C(message) what failed and the API server's answer (URLs and addresses taken out, at most 4 KiB).
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: cluster-ns
      name: my-hostclaim
      step: sync
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
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.reconcile import reconcile_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import STANDBY_ARG_SPEC


def main():
    run_claim_step(reconcile_claims, STANDBY_ARG_SPEC)


if __name__ == "__main__":
    main()
