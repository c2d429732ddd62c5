#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostclaim_sync
short_description: Apply bound HostClaims' online, image and reboot requests to their hosts, and report back
version_added: 0.1.0
description:
  - "One step of the claim layer, run alone: applying claims' requests to their hosts and reporting back. For
    debugging that step, or a playbook of your own that wants only it. No role uses this module: the
    C(metalclaim.hostclaim.claims) role (and the controller) runs the four steps (release, bind, secrets, sync) in
    one task with M(metalclaim.hostclaim.hostclaim_reconcile), which lists each kind once for the whole batch."
  - "Claim to host: C(spec.online) (alias C(poweredOn)) becomes the host's C(online). C(spec.image) is set
    on a host that has none, and removing it deprovisions the host while the claim stays bound. A new
    image URL for a host that is provisioning or provisioned is not applied: remove the image, wait
    for C(Provisioned: available), then set the new one (M(metalclaim.hostclaim.hostclaim_secrets)
    reports this in C(Synchronization))."
  - "Reboots, as Metal3 defines them for a host that is C(provisioned) or C(externally provisioned):
    C(reboot.metal3.io) on the claim is put on the host, then dropped from the claim. Keyed
    C(reboot.metal3.io/<key>) annotations are mirrored, and removed from the host when the claim drops
    them (only those this module set). On a host in any other state nothing reaches the host: the
    request stays on the claim (applied once the host is provisioned, or cancelled by removing it) and
    M(metalclaim.hostclaim.hostclaim_secrets) reports C(RebootNotApplicable) in C(Synchronization)."
  - "A bound claim whose namespace no HostDeployPolicy of its host's namespace admits any more keeps its
    host (taking it away would destroy the tenant's workload) and power requests still apply, but a new
    image (which would provision the host anew) is not applied; C(Synchronization) says
    C(AuthorizationRevoked). Deleting the claim releases the host as usual."
  - "Firmware: a claim's C(spec.firmware.settings) still allowed by its host's policies are written to the host's
    HostFirmwareSettings (same name and namespace, made when missing) before the host's C(image) and C(online);
    C(status.firmware.settings) reports what the provisioner read back for those names. A setting no longer
    allowed is left out and reported as C(FirmwareSettingNotAllowed) in C(Synchronization). A claim that never
    asked for any costs no request."
  - "Host to claim: C(status.poweredOn), C(hostUID), C(lastUpdated), a non-secret C(hardware) summary
    (NIC names, MACs and IPs; CPU architecture, count and model; RAM; disk names and sizes) and the
    C(Provisioned) condition, whose reason is the host's provisioning state in lowerCamelCase
    (C(available), C(provisioned) as in the user guide; C(externallyProvisioned)).
    Nothing about the host's BMC ever reaches the claim."
  - "Host metadata (metadataCopy): the host's labels and annotations are copied onto the claim only where a
    HostDeployPolicy of the host's namespace that admits the claim's namespace lists patterns for them in
    C(spec.metadataCopy.labels) / C(annotations); nothing by default, several policies add up. A pattern is a
    Python regular expression that must match the whole key. Keys under C(metalclaim.io/) and C(reboot.metal3.io)
    are never copied. The copied keys are recorded in the claim's C(metalclaim.io/copied-metadata) annotation:
    only they follow the host and are removed once no longer matched; a key the tenant set itself is never
    overwritten or removed. A policy with an invalid pattern copies nothing and is reported in C(warnings)."
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.claims
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports what would change; writes nothing.
  diff_mode:
    support: partial
    description: Shows what each write changes, only the fields that change.
    details: >-
      Shown: each BareMetalHost's changed fields (C(online), C(image), reboot annotations), the claim's labels and
      annotations copied from its host or cleared of a one-shot reboot, and its status fields (conditions by type).
      Not shown: the Events recorded on claims, and the C(lastUpdated) timestamp of a status write.
  idempotent:
    support: full
    description: With nothing new on either side, a second run changes nothing.
"""

EXAMPLES = r"""
- name: Sync every bound claim with its host
  metalclaim.hostclaim.hostclaim_sync:
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
    provisioned:
      description: The reason of the C(Provisioned) condition (the host's provisioning state in lowerCamelCase).
      type: str
    message:
      description: Why part of the claim's spec was not applied.
      type: str
      returned: when something was refused
    metadata_copy_problems:
      description: Policies whose metadataCopy was ignored for this claim, and why (an invalid pattern).
      type: list
      elements: str
      returned: when there are some
    changed:
      description: Whether anything was written for this claim.
      type: bool
errors:
  description:
    - The claims that failed in this run, each by itself (the rest of the batch went on), one entry per failure,
      sorted by claim. The controller retries these claims alone, with a growing delay.
    - C(step) is where it failed (C(sync) for a bound claim's step, C(status) for its status write).
    - C(message) is what failed and the API server's answer (URLs and addresses taken out, at most 4 KiB).
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

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.bound import sync_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.module import run_claim_step


def main():
    run_claim_step(sync_claims)


if __name__ == "__main__":
    main()
