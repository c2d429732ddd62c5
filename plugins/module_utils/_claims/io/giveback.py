# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Giving a host back clean: the release path of a deleted claim's host (release.py), an orphaned host's, and a
host whose claim's lease ended (lease.py). I/O edge; see release.py for the order and why.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io import reuse as reuse_io
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.leases import now_of
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, firmware, reuse
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.release import scrubbed_spec
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.secrets import (
    copied_secret_name,
    recorded_copies,
    refused_as_no_copy,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import RefusedError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    API_VERSION,
    FIRMWARE_SETTINGS_KIND,
)


def give_back_clean(run, host: dict, claim: dict | None) -> dict:
    """Delete our copies and scrub the host; once it is free again, clear its consumerRef. A claim asking for node
    reuse where its host's policies offer it (reuse_io.offer_on_release): cleaned as they say, and marked held in the
    write that clears the consumerRef (`after`: seconds to the hold's end)."""
    kube, check_mode = run.kube, run.check_mode
    offer = reuse_io.offer_on_release(run, claim, host)
    host_ns, host_name = binding.key(host)
    result = {"changed": False}
    # The copies the host records, each only if it still is the Secret we wrote (its uid): a Secret
    # of a copy's name that we did not make is never deleted. Before the scrub, which drops the
    # record: a run stopped in between deletes them again (gone: nothing to do) next time.
    for role, record in sorted(recorded_copies(host).items()):
        if not record["uid"]:
            continue  # nothing proves the Secret of that name is ours
        name = copied_secret_name(host_name, role)
        result["changed"] = True
        if not check_mode:
            try:
                kube.delete("v1", "Secret", name, host_ns, uid=record["uid"])
            except RefusedError as error:  # labelled ours no more: not ours to delete
                if not refused_as_no_copy(error.server_message):
                    raise
        shown = {"metadata": {"name": name, "namespace": host_ns, "uid": record["uid"]}}
        run.record("Secret", shown, None, secret=True)
    owner_uid = reuse_io.namespace_uid(run, claim) if offer is not None else ""
    scrubbed = reuse.scrubbed(scrubbed_spec(host), offer, claim, now_of(run), owner_uid)
    # No settings asked any more, before the scrub starts deprovisioning. Only while the scrub is to come: the HFS
    # is emptied before it, so a host already scrubbed (waiting to be given back) costs no read each run.
    if scrubbed != host and firmware.involved(claim):
        hfs = kube.get(API_VERSION, FIRMWARE_SETTINGS_KIND, host_name, host_ns)
        emptied = firmware.desired(hfs, host, {})
        if emptied is not None:
            result["changed"] = True
            if not check_mode:
                kube.replace(emptied)
            run.record(FIRMWARE_SETTINGS_KIND, hfs, emptied)
    if scrubbed != host:
        result["changed"] = True
        before = host
        if not check_mode:
            host = kube.replace(scrubbed)
        run.record("BareMetalHost", before, scrubbed)
    waiting_for = binding.why_not_given_back(host)
    if waiting_for:
        result["state"] = "waiting"
        result["message"] = f"waiting for BareMetalHost {host_ns}/{host_name} {waiting_for}"
        if result["changed"] and claim is not None:
            run.event(claim, "Normal", "Releasing", result["message"])
        return result
    released = copy.deepcopy(host)
    released["spec"].pop("consumerRef", None)
    result["changed"] = True
    result["state"] = "released"
    if offer is not None:
        now = now_of(run)
        released, hold = reuse.held(released, claim, offer, now, owner_uid)
        result["after"] = hold.seconds_left(now)
    if not check_mode:
        kube.replace(released)
    run.record("BareMetalHost", host, released)
    return result


def give_back_all(run, hosts: list[dict], claim: dict, result: dict) -> bool:
    """Give each of the claim's hosts back clean, in order, noting in `result` the host (its last one), whether
    anything changed, a hold's end (`after`) and, when a host is not yet off or free, state `waiting` with why. True
    once all are back."""
    for host in hosts:
        host_ns, host_name = binding.key(host)
        result["host"] = f"{host_ns}/{host_name}"
        step = give_back_clean(run, host, claim)
        result["changed"] = result["changed"] or step["changed"]
        if step["state"] == "waiting":
            result.update(state="waiting", message=step["message"])
            return False
        if step.get("after") is not None:  # held for node reuse: the key comes back at the hold's end
            result["after"] = step["after"]
    return True
