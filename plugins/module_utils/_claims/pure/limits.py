# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How much of a claim's metadata the claim layer copies onto its host. Pure.

Reboot requests (``reboot.metal3.io[/<key>]``) are the only annotations a claim hands to its host, each keyed one
twice (its own annotation, and its name in the list of keys the claim layer set). The API server refuses an object
whose annotations total over 256 KiB, and nothing but that bounds a claim's own: a tenant may put ~250 KiB of
reboot requests on a claim that its host could never take. So at most REBOOT_REQUESTS_MAX requests, of at most
REBOOT_BYTES_MAX bytes together (names and values), reach a host. Over either, the claim's changes to its requests
do not reach the host (those already there stay, except the ones the claim dropped: removing a keyed request always
reaches the host) and Synchronization says RebootRequestsTooLarge, naming both figures; the rest of the claim (power,
image, data Secrets) is applied as usual.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.sync import REBOOT_KEYS_ANNOTATION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import REBOOT_ANNOTATION

REBOOT_REQUESTS_TOO_LARGE = "RebootRequestsTooLarge"
REBOOT_REQUESTS_MAX = 32
REBOOT_BYTES_MAX = 8192


def is_reboot_request(key: str) -> bool:
    return key == REBOOT_ANNOTATION or key.startswith(REBOOT_ANNOTATION + "/")


def reboot_requests(annotations: dict | None) -> dict:
    """The reboot requests among `annotations`."""
    return {key: value for key, value in (annotations or {}).items() if is_reboot_request(key)}


def reboot_requests_problem(annotations: dict | None) -> tuple[str, str] | None:
    """(reason, message) when the claim's reboot requests are more, or larger, than a host may take; else None."""
    requests = reboot_requests(annotations)
    size = sum(len(key.encode()) + len(str(value or "").encode()) for key, value in requests.items())
    if len(requests) <= REBOOT_REQUESTS_MAX and size <= REBOOT_BYTES_MAX:
        return None
    return (
        REBOOT_REQUESTS_TOO_LARGE,
        f"metadata.annotations: {len(requests)} reboot.metal3.io requests of {size} bytes together; at most "
        f"{REBOOT_REQUESTS_MAX} requests of at most {REBOOT_BYTES_MAX} bytes reach a host, so none of their changes "
        "is applied (removing a keyed request still is) until the claim is within both",
    )


def held_requests(claim_annotations: dict | None, host_annotations: dict | None) -> dict:
    """The claim's annotations with its reboot requests replaced by the keyed ones the claim layer already put on the
    host and the claim still holds, with the host's values: what the sync plan is made from when the claim's
    requests are over the limits, so the host's requests stay as they are, but for those the claim dropped."""
    host_annotations = host_annotations or {}
    claim_requests = reboot_requests(claim_annotations)
    ours = set(filter(None, host_annotations.get(REBOOT_KEYS_ANNOTATION, "").split(",")))
    held = {key: value for key, value in (claim_annotations or {}).items() if not is_reboot_request(key)}
    held.update({key: host_annotations[key] for key in ours if key in claim_requests and key in host_annotations})
    return held


def restored(planned: dict, claim_annotations: dict | None) -> dict:
    """The claim annotations a plan made from held_requests() wants, with the claim's own reboot requests back (a
    plan never copies a reboot request from a host onto a claim)."""
    annotations = {key: value for key, value in planned.items() if not is_reboot_request(key)}
    annotations.update(reboot_requests(claim_annotations))
    return annotations
