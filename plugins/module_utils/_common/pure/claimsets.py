# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a HostClaimSet's member claims carry, shared by the set's step (_claimsets) and the binder (_claims). Pure.

A member is an ordinary HostClaim of the set's namespace whose controller owner reference is the set (kind, uid): the
one truth about membership, as a ReplicaSet's pods are its own. It also carries the set's name as a label (for
`kubectl get hostclaims -l`) and, when the set spreads its claims, the host label key to spread over as an
annotation, which the binder reads to rank a member's candidate hosts (_claims/pure/binding.py spread_counts).
"""

from __future__ import annotations

SET_KIND = "HostClaimSet"
SET_LABEL = "metalclaim.io/hostclaimset"
SPREAD_ANNOTATION = "metalclaim.io/spread-by"


def owner_set(claim: dict) -> dict | None:
    """The HostClaimSet owner reference marked controller of a claim, or None."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("kind") == SET_KIND
            and ref.get("controller")
            and str(ref.get("apiVersion", "")).startswith("metal3.io/")
        ):
            return ref
    return None


def spread_key(claim: dict) -> str:
    """The host label key a member claim of a set spreads over ("" when none)."""
    if owner_set(claim) is None:
        return ""
    return str(((claim.get("metadata") or {}).get("annotations") or {}).get(SPREAD_ANNOTATION) or "")
