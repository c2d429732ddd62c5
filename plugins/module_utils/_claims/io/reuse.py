# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node reuse in a claim run: what the policies offer a claim, the end of the holds. I/O edge over
_claims/pure/reuse.py.

The release path (giveback.py) asks offer_on_release before it scrubs a claim's host and marks the host held in the
write that clears its consumerRef; the bind step (bind.py) lets only the claims a hold names take a held host and
notes each bound claim's NodeReuse condition; the release step (release.py) ends the holds whose time has come
(end_holds), each in one host write, and reports when the next one ends: the released claim's key comes back then.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.leases import now_of
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import (
    namespace_labels,
    namespace_metadata,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, lease, reuse
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import ConflictError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies


def offer_and_cap(run, claim: dict, infra_namespace: str) -> tuple[reuse.Offer | None, int | None]:
    """(what the policies of `infra_namespace` offer the claim's namespace, None where leases are capped for it
    there; that lease cap, None for none). Lists read once per run (the run's client keeps them)."""
    namespace = claim["metadata"]["namespace"]
    policies = run.kube.list(API_VERSION, "HostDeployPolicy")
    labels = namespace_labels(run.kube).get(namespace, {})
    _authorized, decisions = evaluate_policies(policies, namespace, labels)
    cap = lease.with_tenant_cap(lease.caps(policies, decisions), labels).get(infra_namespace)
    return reuse.under_lease_cap(reuse.offers(policies, decisions).get(infra_namespace), cap), cap


def offer_for(run, claim: dict, infra_namespace: str) -> reuse.Offer | None:
    """What the policies of `infra_namespace` offer the claim's namespace (None: no reuse there)."""
    return offer_and_cap(run, claim, infra_namespace)[0]


def namespace_uid(run, claim: dict) -> str:
    """The uid of the claim's namespace ("" when it is gone: a hold for it would be for nobody)."""
    return (namespace_metadata(run.kube).get(claim["metadata"]["namespace"]) or {}).get("uid", "")


def offer_on_release(run, claim: dict | None, host: dict) -> reuse.Offer | None:
    """The offer that applies when `claim`'s host is released (None: it returns to the pool, as it does when the
    claim's namespace is gone: nobody could take the hold)."""
    if claim is None:
        return None
    try:
        if reuse.reuse_key(claim) is None:
            return None
    except reuse.ReuseError:
        return None
    if not namespace_uid(run, claim):
        return None
    return reuse.to_hold(claim, offer_for(run, claim, binding.key(host)[0]))


def condition(run, claim: dict, host: dict, took_held: bool) -> tuple | None:
    """The bound claim's NodeReuse condition, or (NodeReuse, None, ...) to drop one it no longer asks for, or None.
    A claim once bound to a held host keeps saying so (its status, not the host, remembers it)."""
    previous = cond.find((claim.get("status") or {}).get("conditions"), reuse.NODE_REUSE) or {}
    try:
        asks = reuse.reuse_key(claim) is not None
    except reuse.ReuseError:
        asks = True
    if not asks:
        return (reuse.NODE_REUSE, None, "", "") if previous else None
    reused = took_held or previous.get("reason") == reuse.REUSED_HOST
    offer, cap = offer_and_cap(run, claim, binding.key(host)[0])
    return reuse.condition(claim, offer, reused, capped=cap is not None)


def end_holds(run, hosts: list[dict]) -> list[dict]:
    """End every hold whose time has come (one host write each); one entry per hold, those still running with
    `after` (seconds to their end) under the released claim's key, so the controller wakes that key then. A run
    that holds none of those keys (the first after a restart: the released claim is gone, its deadline with the old
    process) also carries the soonest end on its oldest claim, so some key always comes back at a hold's end."""
    now = now_of(run)
    results = []
    for host in hosts:
        hold, mark = reuse.hold_of(host), reuse.uncleaned_of(host)
        if (hold is None and mark is None) or binding.consumer(host):
            continue
        host_ns, host_name = binding.key(host)
        owner = hold or mark  # a host marked uncleaned whose hold mark is gone: its hold ended, cleaned first
        entry = {"namespace": owner.namespace, "name": owner.claim, "host": f"{host_ns}/{host_name}", "changed": False}
        updated = reuse.ended(host, now)
        if updated is None:
            if hold is not None and not hold.ended(now):
                entry.update(state="held", after=hold.seconds_left(now))
                results.append(entry)
            continue  # to be cleaned already: its provisioner takes the marks off
        entry.update(state="hold-ended", changed=True, cleaning=mark is not None or not hold.cleaned)
        if not run.check_mode:
            try:
                run.kube.replace(updated)
            except ConflictError as error:  # its provisioner wrote it since: the next run starts again from it
                entry.update(state="conflict", message=str(error), changed=False)
                results.append(entry)
                continue
        run.record("BareMetalHost", host, updated)
        results.append(entry)
    running = [r for r in results if r["state"] == "held"]
    asked = {(w["namespace"], w["name"]) for w in run.wanted or []}
    carriers = run.claims()
    if running and carriers and not any((r["namespace"], r["name"]) in asked for r in running):
        namespace, name = binding.key(carriers[0])
        soonest = min(r["after"] for r in running)
        results.append({"namespace": namespace, "name": name, "state": "held", "after": soonest, "changed": False})
    return results
