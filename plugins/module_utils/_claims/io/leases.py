# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each leased claim's lease in this run, decided once (lease_decisions, from the lists the run reads anyway) and
shared by the steps: the lease step (lease.py) notes it and releases the host at its end, the bind step never binds
an expired claim, the sync step never powers or images its host again. A lease's end waits for the tenant's blocking
CLAIM_EXPIRED hooks (their verdicts on the claim's namespace, written by the tenants side) within their grace.
I/O edge over _claims/pure/lease.py.
"""

from __future__ import annotations

import weakref

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import namespace_metadata
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, booking, lease
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import expiry_verdict

_DECISIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # run -> {claim key: (Decision, own hosts)}


def now_of(run):
    return lease.parse_time(run.timestamp)


def _leased(claim: dict) -> bool:
    return bool((claim.get("spec") or {}).get("lease") or (claim.get("status") or {}).get("lease"))


def caps_of(policies: list[dict], namespace: str, labels_of: dict) -> dict:
    """{infra namespace: cap} for a claim namespace (lease.caps), its Tenant's cap applied."""
    _authorized, decisions = evaluate_policies(policies, namespace, labels_of.get(namespace, {}))
    return lease.with_tenant_cap(lease.caps(policies, decisions), labels_of.get(namespace, {}))


def lease_decisions(run) -> dict:
    """{claim key: (lease.Decision, the hosts naming the claim)} for the run's live leased claims, once per run."""
    cached = _DECISIONS.get(run)
    if cached is not None:
        return cached
    claims = [
        c
        for c in run.claims()
        if _leased(c)
        and not c["metadata"].get("deletionTimestamp")
        and binding.claim_kind(c) == binding.DEFAULT_CLAIM_KIND
    ]
    found = {}
    if claims:
        now = now_of(run)
        hosts = run.kube.list(API_VERSION, "BareMetalHost")
        policies = run.kube.list(API_VERSION, "HostDeployPolicy")
        metadata_of = namespace_metadata(run.kube)
        labels_of = {name: meta.get("labels") or {} for name, meta in metadata_of.items()}
        for claim in claims:
            own = sorted((h for h in hosts if binding.consumed_by(h, claim)), key=binding.key)
            expired = bool(((claim.get("status") or {}).get("lease") or {}).get("expired"))
            bound = bool(own) and (expired or binding.committed(claim, own[0]))
            cap, booked_from = None, None
            tenant = lease.tenant_cap(labels_of.get(claim["metadata"]["namespace"], {}))
            if bound:
                cap = caps_of(policies, claim["metadata"]["namespace"], labels_of).get(binding.key(own[0])[0], False)
                booked_from = booking.booked_from(own[0], claim, now)
            decided = lease.decide(claim, bound, cap, now, tenant, booked_from)
            if decided.state == lease.EXPIRED and decided.newly and decided.start is not None:
                annotations = (metadata_of.get(claim["metadata"]["namespace"]) or {}).get("annotations")
                verdict = expiry_verdict(annotations, claim["metadata"].get("uid", ""), lease.format_time(decided.end))
                decided = lease.held(claim, decided, verdict, now)
            found[binding.key(claim)] = (decided, own if bound else [])
    _DECISIONS[run] = found
    return found


def decision(run, claim: dict):
    """The claim's lease.Decision in this run, or None."""
    entry = lease_decisions(run).get(binding.key(claim))
    return entry[0] if entry else None


def expired(run, claim: dict) -> bool:
    found = decision(run, claim)
    return found is not None and found.expired
