# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_release: give the host of a deleted claim back, cleaned, then let the claim go. I/O edge.

Order matters: the host is first stripped of everything the tenant gave it (image,
data Secrets and their copies, reboot annotations) and told to power off and clean
its disks' metadata; only once its provisioner reports it `available` again, powered
off, and no longer marked in use (binding.why_not_given_back) is its consumerRef
cleared (so nobody can bind a warm or dirty host) and then the claim's finalizer
removed. The copies are those the host's record names (metalclaim.io/copies), deleted
by name with their recorded uid as a precondition; the host write that scrubs it drops
the record: no Secret beside the host is ever read or listed.

A host whose consumerRef names a HostClaim that no longer exists (or exists with another
uid: deleted and re-created) is orphaned: say its claim's finalizer was removed by hand.
It is released the same way, so the tenant's image and data never stay on it and it
returns to the pool.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io import reuse as reuse_io
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.giveback import (
    give_back_all,
    give_back_clean,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import step_each
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.binding import select_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.release import orphaned
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import ConflictError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    API_VERSION,
)


def release_claims(run) -> dict:
    kube = run.kube
    # Every claim and host as the run holds them, read and never changed here: what a step writes it copies first
    # (copying the thousand hosts of a rack in each run cost more than listing them).
    all_claims = kube.held(API_VERSION, "HostClaim")  # all of them: orphans are hosts whose claim is in none
    deleting = [
        copy.deepcopy(c)
        for c in select_claims(all_claims, run.wanted)
        if c["metadata"].get("deletionTimestamp") and binding.FINALIZER in (c["metadata"].get("finalizers") or [])
    ]
    hosts = kube.held(API_VERSION, "BareMetalHost")
    outcome = step_each(
        [(claim, hosts) for claim in deleting],
        lambda claim, all_hosts: _release(
            run, claim, [copy.deepcopy(h) for h in all_hosts if binding.consumed_by(h, claim)]
        ),
        on_error=lambda claim, error: run.failed(claim, error, "release"),
    )
    outcome["orphans"] = _release_orphans(run, hosts, {binding.key(c): c for c in all_claims})
    # Node reuse: holds whose time has come end; those still running report their end under the released claim's
    # key (in `claims`: the controller wakes that key then).
    holds = reuse_io.end_holds(run, hosts)
    outcome["holds_ended"] = sum(1 for r in holds if r["state"] == "hold-ended")
    outcome["claims"] = outcome["claims"] + holds
    outcome["changed"] = outcome["changed"] or any(r["changed"] for r in outcome["orphans"] + holds)
    outcome["pending"] = sum(1 for r in outcome["claims"] + outcome["orphans"] if r["state"] == "waiting")
    return outcome


def _release_orphans(run, hosts: list[dict], claims_by_key: dict) -> list[dict]:
    results = []
    for host in hosts:
        if not orphaned(host, claims_by_key):
            continue
        ref = binding.consumer(host)
        # The claim list may predate a claim created (and bound) since: only the claim itself,
        # read now, proves it gone. A uid never comes back, so a mismatch is final.
        current = run.kube.get(API_VERSION, "HostClaim", ref.get("name", ""), ref.get("namespace", ""))
        if current is not None and binding.consumed_by(host, current):
            continue
        host_ns, host_name = binding.key(host)
        result = {"host": f"{host_ns}/{host_name}", "consumer": f"{ref.get('namespace')}/{ref.get('name')}"}
        try:
            result.update(give_back_clean(run, copy.deepcopy(host), None))
        except ConflictError as error:
            # Written or deleted since we listed it (its provisioner, its namespace going away):
            # the next run starts again from what is there.
            result.update(state="conflict", message=str(error), changed=False)
        results.append(result)
    return results


def _release(run, claim: dict, own: list[dict]) -> dict:
    namespace, name = binding.key(claim)
    result = {"namespace": namespace, "name": name, "host": None, "changed": False}
    if not give_back_all(run, own, claim, result):
        return result
    result["state"] = "released"
    result["changed"] = True
    if result["host"]:
        run.event(claim, "Normal", "Released", f"BareMetalHost {result['host']} released")
    updated = copy.deepcopy(claim)
    updated["metadata"]["finalizers"] = [f for f in claim["metadata"]["finalizers"] if f != binding.FINALIZER]
    if not run.check_mode:
        run.kube.replace(updated)
    run.record("HostClaim", claim, updated)
    return result
