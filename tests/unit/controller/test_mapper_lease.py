"""A lease entering its warning or ending wakes the tenants whose hooks want claim events (CLAIM_EXPIRING,
CLAIM_EXPIRED, and the blocking CLAIM_EXPIRED hooks' asking); the claim layer's other status writes do not."""

from metalclaim.controller.mapper import claim_changed_for_tenants

TENANT = {
    "metadata": {"name": "t"},
    "spec": {"tenantName": "t", "hooks": [{"name": "h", "eventTypes": ["CLAIM_EXPIRING"]}]},
}


def claim(reason: str, expired: bool = False, message: str = "") -> dict:
    lease = {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z", **({"expired": True} if expired else {})}
    return {
        "metadata": {"namespace": "t-work", "name": "c1", "uid": "u1"},
        "status": {
            "hardwareData": {"name": "h1"},
            "lease": lease,
            "conditions": [{"type": "Lease", "status": "True", "reason": reason, "message": message}],
        },
    }


def test_a_lease_entering_its_warning_or_ending_wakes_the_tenant():
    keys = claim_changed_for_tenants(claim("LeaseActive"), claim("LeaseEnding"), [TENANT])
    assert list(keys.keys) == [("tenant", "", "t")]
    keys = claim_changed_for_tenants(claim("LeaseExpiryHeld"), claim("LeaseExpired", expired=True), [TENANT])
    assert list(keys.keys) == [("tenant", "", "t")]


def test_a_message_change_wakes_no_tenant():
    keys = claim_changed_for_tenants(claim("LeaseEnding", message="a"), claim("LeaseExpiryHeld", message="b"), [TENANT])
    assert not keys.keys
