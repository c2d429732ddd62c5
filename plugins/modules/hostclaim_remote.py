#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: hostclaim_remote
short_description: Mirror HostClaims of kind remote into a hardware cluster, through each claim's own kubeconfig
version_added: 0.2.0
description:
  - For each HostClaim of C(spec.kind=remote) in O(claims) (or all), reads the kubeconfig Secret named by
    C(spec.remote.kubeconfigSecretRef) in the claim's own namespace (one in another namespace is refused unread)
    and, as that kubeconfig's identity only, keeps a HostClaim of the same name in the namespace its context names
    in the hardware cluster as the local claim says (image, online, hostSelector, customDeploy, failureDomain,
    kind from C(spec.remote.kind)), with the claim's userData/metaData/networkData Secrets copied beside it
    (C(<name>-userdata) etc.) and its C(reboot.metal3.io) annotations.
  - The remote claim's status comes back (conditions but Ready, poweredOn, hostUID, hardware; never hardwareData,
    which names an object of the other cluster), with the keys the hardware cluster copied onto it (its
    metadataCopy). Two conditions of its own, C(RemoteCluster) (is the hardware cluster answering) and
    C(Mirrored) (is the remote claim as the local one says, else why not), and C(Ready) over all of them.
  - A kubeconfig with exec or auth-provider plugins, file paths, insecure TLS, a proxy, impersonation or no
    namespace in its context is refused (C(KubeconfigRefused)), as is a namespace outside O(allowed_namespaces)
    or other than C(spec.remote.namespace) (C(RemoteNamespaceNotAllowed)). Its contents never appear in a
    status, an Event or this module's result.
  - Deleting the local claim deletes the remote one; the local finalizer C(metalclaim.io/remote) goes once the
    remote claim is gone (released by the hardware cluster). Claims of any other kind are not touched.
  - A hardware cluster is the tenant's choice and may never answer. Every request to it (discovery included) has
    5 s to connect and 10 s per read, with no retry and no redirect followed, and each claim 20 s there in all per
    run; then C(RemoteCluster) says it did not answer (C(Unreachable), the error's type only) and the claim's
    C(requeue_after) grows with the time it has not answered (5 s, then half that time, at most 300 s). A cluster
    that did not answer is asked once per run; claims whose cluster answered last time go first.
  - The contract (what crosses, which way) is in C(docs/remote.md).
author:
  - metalclaim maintainers (@metalclaim)
options:
  allowed_namespaces:
    description:
      - Regular expressions (full match) the namespace of a kubeconfig's context must match in the hardware
        cluster. Empty, any namespace the kubeconfig's identity may use.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - metalclaim.hostclaim.claims
  - metalclaim.hostclaim.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reads both clusters and reports what it would write; writes nothing in either.
  diff_mode:
    support: partial
    description: Shows what each write changes (or would, in check mode), only the fields that change; never a
      Secret's values. Costs no request.
    details: >-
      Shown: the local claim's finalizer, copied metadata and status fields (conditions by type), and in the
      hardware cluster (headed C((hardware cluster))) the remote claim and the data Secret copies. Not shown: the
      Events recorded on claims, and the C(lastUpdated) timestamp of a status write.
  idempotent:
    support: full
    description: With nothing new in either cluster, a second run writes nothing in either.
"""

EXAMPLES = r"""
- name: Mirror every remote HostClaim into its hardware cluster
  metalclaim.hostclaim.hostclaim_remote:

- name: Mirror the claims an event named, only into hardware namespaces named tenant-*
  metalclaim.hostclaim.hostclaim_remote:
    claims:
      - namespace: cluster-ns
        name: my-remote-host
    allowed_namespaces:
      - "tenant-.*"
"""

RETURN = r"""
claims:
  description: One entry per remote claim looked at.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The local claim's namespace.
      type: str
    name:
      description: The local claim's name (and the remote claim's).
      type: str
    state:
      description:
        - C(mirrored), C(refused) (see C(reason)), C(unreachable), C(deleting) (the remote claim is being released),
          C(released) (the local finalizer removed), C(gone) (nothing of ours left), C(conflict) or C(error).
      type: str
    reason:
      description: The C(Mirrored) condition's reason.
      type: str
    message:
      description: Why, when the claim is not mirrored.
      type: str
    requeue_after:
      description:
        - Seconds after which the claim should be looked at again (the hardware cluster is polled); for C(unreachable),
          the longer the hardware cluster has not answered, the longer (at most 300).
      type: float
    changed:
      description: Whether anything was written for this claim.
      type: bool
  sample:
    - namespace: cluster-ns
      name: my-remote-host
      state: mirrored
      reason: RemoteClaimSynced
      requeue_after: 2.0
      changed: true
local_writes:
  description: Writes of local HostClaims (finalizer, metadata, status) this run made; Events are not counted.
  returned: always
  type: int
remote_api_calls:
  description: Requests sent to the hardware clusters, by verb.
  returned: always
  type: dict
  sample: {"get": 4, "create": 1}
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
  description: Requests sent to the local API server, by verb.
  returned: always
  type: dict
  sample: {"list": 1, "get": 2, "patch": 1}
diff:
  description: With C(--diff), one entry per object written in either cluster (or, in check mode, that would be).
  returned: when diff mode is on
  type: list
  elements: dict
"""

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.module import CLAIMS_ARG_SPEC
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import StepFailure, run_module
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import now
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.io.mirror import RemoteRun, mirror_claims

ARG_SPEC = {**CLAIMS_ARG_SPEC, "allowed_namespaces": {"type": "list", "elements": "str", "default": []}}


def mirror(module, kube) -> dict:
    try:
        run = RemoteRun(
            kube,
            module.params["claims"],
            module.check_mode,
            module.params["allowed_namespaces"],
            now(),
            diff=module._diff,
        )
    except ValueError as error:
        raise StepFailure(str(error)) from error
    return mirror_claims(run)


def main():
    run_module(ARG_SPEC, mirror)


if __name__ == "__main__":
    main()
