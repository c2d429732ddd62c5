# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A lease's end held by the tenant's blocking CLAIM_EXPIRED hooks (lease.held, tenancy.expiry_verdict)."""

import datetime
import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import lease
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import tenancy

T0 = datetime.datetime(2030, 1, 1, 10, 0, 0, tzinfo=datetime.UTC)
END = "2030-01-01T10:01:00Z"


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def bound_claim(conditions=()):
    return {
        "metadata": {"name": "c", "namespace": "t-work", "uid": "u1"},
        "spec": {"lease": {"duration": "1m"}},
        "status": {"lease": {"start": "2030-01-01T10:00:00Z", "end": END}, "conditions": list(conditions)},
    }


def approvals(claims: dict, grace: int = 60) -> dict:
    return {tenancy.EXPIRY_APPROVALS_ANNOTATION: json.dumps({"graceSeconds": grace, "claims": claims})}


def test_no_hook_no_hold():
    assert tenancy.expiry_verdict({}, "u1", END) is None
    found = lease.decide(bound_claim(), True, None, at(61))
    assert lease.held(bound_claim(), found, None, at(61)) is found


def test_a_lease_past_its_end_is_held_until_the_hooks_allow_that_end_within_the_grace():
    claim = bound_claim()
    found = lease.decide(claim, True, None, at(61))
    assert found.state == lease.EXPIRED
    verdict = tenancy.expiry_verdict(approvals({}), "u1", END)
    assert verdict == (60, "waiting for the tenant's blocking CLAIM_EXPIRED hook(s) to allow the end")
    held = lease.held(claim, found, verdict, at(61))
    assert held.state == lease.HELD and not held.expired
    assert held.after == 59
    assert held.lease_status == {"start": "2030-01-01T10:00:00Z", "end": END}
    ((type_, status, reason, message),) = held.conditions
    assert (type_, status, reason) == ("Lease", "True", lease.LEASE_EXPIRY_HELD)
    assert "until 2030-01-01T10:02:00Z at the latest" in message
    assert held.newly == lease.LEASE_EXPIRY_HELD
    # The next run: the same message (nothing written), no second Event.
    again = bound_claim(conditions=[{"type": "Lease", "status": "True", "reason": lease.LEASE_EXPIRY_HELD}])
    assert lease.held(again, lease.decide(again, True, None, at(70)), verdict, at(70)).newly == ""
    # The grace passed: it ends anyway.
    assert lease.held(claim, lease.decide(claim, True, None, at(120)), verdict, at(120)).state == lease.EXPIRED


def test_a_refusal_is_told_and_an_allowance_of_another_end_does_not_count():
    refused = {"u1": {"name": "c", "end": END, "allowed": False, "message": "backup running", "nextAskAt": END}}
    assert tenancy.expiry_verdict(approvals(refused), "u1", END) == (60, "backup running")
    other = {"u1": {"name": "c", "end": "2030-01-01T09:00:00Z", "allowed": True}}
    assert tenancy.expiry_verdict(approvals(other), "u1", END)[0] == 60
    allowed = {"u1": {"name": "c", "end": END, "allowed": True}}
    assert tenancy.expiry_verdict(approvals(allowed), "u1", END) is None


def test_an_unreadable_or_overlong_grace_is_the_longest():
    assert tenancy.expiry_approvals({tenancy.EXPIRY_APPROVALS_ANNOTATION: "[1]"}) == {
        "graceSeconds": tenancy.EXPIRY_GRACE_MAX_SECONDS,
        "claims": {},
    }
    assert tenancy.expiry_approvals(approvals({}, grace=10**6))["graceSeconds"] == tenancy.EXPIRY_GRACE_MAX_SECONDS


def test_an_expired_unbound_or_already_recorded_lease_is_never_held():
    verdict = (60, "waiting")
    recorded = bound_claim()
    recorded["status"]["lease"]["expired"] = True
    found = lease.decide(recorded, False, None, at(61))
    assert lease.held(recorded, found, verdict, at(61)) is found
    unbound = {"metadata": {"uid": "u1"}, "spec": {"lease": {"end": END}}, "status": {}}
    found = lease.decide(unbound, False, None, at(61))
    assert lease.held(unbound, found, verdict, at(61)) is found


def test_the_reasons_the_tenants_side_reads_are_the_lease_conditions():
    assert tenancy.LEASE_CONDITION == lease.LEASE
    assert tenancy.LEASE_ENDING_REASON == lease.LEASE_ENDING
    assert tenancy.LEASE_EXPIRY_HELD_REASON == lease.LEASE_EXPIRY_HELD
