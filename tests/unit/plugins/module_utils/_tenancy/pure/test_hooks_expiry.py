# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CLAIM_EXPIRING and CLAIM_EXPIRED: when they are told, and what the blocking CLAIM_EXPIRED hooks are asked."""

from datetime import UTC, datetime

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks

NOW = datetime(2030, 1, 1, 10, 0, 30, tzinfo=UTC)
END = "2030-01-01T10:01:00Z"


def claim(host="h1", reason="LeaseActive", expired=False, end=END, uid="u1"):
    status = {"conditions": [{"type": "Lease", "status": "True", "reason": reason}], "lease": {"end": end}}
    if host:
        status["hardwareData"] = {"name": host}
    if expired:
        status["lease"]["expired"] = True
        status["conditions"] = [{"type": "Lease", "status": "False", "reason": "LeaseExpired"}]
    return {"metadata": {"namespace": "t-work", "name": "c1", "uid": uid}, "status": status}


def tenant(*hook_list, **spec):
    return {"metadata": {"name": "t"}, "spec": {"tenantName": "t", "hooks": list(hook_list), **spec}}


def test_expiring_is_told_once_per_end_and_expired_before_released():
    events, record = hooks.claim_events([], [claim()])
    assert [e for e, _ in events] == ["CLAIM_BOUND"]
    events, record = hooks.claim_events(record, [claim(reason="LeaseEnding")])
    assert [e for e, _ in events] == ["CLAIM_EXPIRING"]
    assert events[0][1]["leaseEnd"] == END
    assert hooks.claim_events(record, [claim(reason="LeaseExpiryHeld")])[0] == []  # the same end: told already
    extended = "2030-01-01T11:00:00Z"
    assert hooks.claim_events(record, [claim(end=extended)])[0] == []  # extended, out of its warning
    events, record = hooks.claim_events(record, [claim(expired=True, host="")])
    assert [(e, f["hostName"]) for e, f in events] == [("CLAIM_EXPIRED", "h1"), ("CLAIM_RELEASED", "h1")]
    assert hooks.claim_events(record, [claim(expired=True, host="")]) == ([], record)  # told once
    events, _ = hooks.claim_events(record, [])
    assert events == []  # deleted once released: nothing more


def test_the_payload_carries_the_lease_end_and_no_host_before_binding():
    facts = hooks.claim_facts(claim(host="", reason="LeaseActive"))
    assert not facts["expiring"]  # an unbound claim is never in its warning
    body = hooks.payload("CLAIM_EXPIRING", tenant(), "Deployed", claim=hooks.claim_facts(claim(reason="LeaseEnding")))
    assert body["claim"]["leaseEnd"] == END and body["claim"]["hostName"] == "h1"


def test_blocking_expired_hooks_are_asked_from_the_warning_and_again_after_a_refusal():
    gate = {"name": "gate", "url": "http://x/", "blockingCall": True, "eventTypes": ["CLAIM_EXPIRED"]}
    assert hooks.asks_before_expiry(tenant(gate))
    assert not hooks.validate(tenant(gate))
    ending = claim(reason="LeaseEnding")
    assert hooks.expiries_to_ask({}, [claim()], NOW) == []
    assert hooks.expiries_to_ask({}, [ending], NOW) == [ending]
    refused = hooks.expiry_verdict_after(None, ending, "no", NOW)
    assert refused["end"] == END and refused["allowed"] is False and refused["attempts"] == 1
    assert hooks.expiries_to_ask({"u1": refused}, [ending], NOW) == []  # within its backoff
    assert hooks.seconds_until_reask({"u1": refused}, NOW) == 2.0
    allowed = hooks.expiry_verdict_after(refused, ending, "", NOW)
    assert allowed == {"name": "c1", "allowed": True, "end": END}
    assert hooks.expiries_to_ask({"u1": allowed}, [ending], NOW) == []
    extended = claim(reason="LeaseEnding", end="2030-01-01T11:00:00Z")
    assert hooks.expiries_to_ask({"u1": allowed}, [extended], NOW) == [extended]  # a new end: asked anew
    assert hooks.expiry_verdict_after(refused, extended, "no", NOW)["attempts"] == 1
    assert hooks.expiry_verdicts_kept({"u1": allowed}, [claim(expired=True)]) == {}
    assert hooks.expiry_verdicts_kept({"u1": allowed}, [ending]) == {"u1": allowed}


def test_expiring_and_expired_are_told_to_every_subscribed_hook():
    gate = {"name": "gate", "url": "http://x/", "blockingCall": True, "eventTypes": ["CLAIM_EXPIRED"]}
    told = {"name": "told", "url": "http://x/", "eventTypes": ["CLAIM_EXPIRING", "CLAIM_EXPIRED"]}
    assert [h.name for h in hooks.notified(tenant(gate, told), "CLAIM_EXPIRED")] == ["gate", "told"]
    assert [h.name for h in hooks.notified(tenant(gate, told), "CLAIM_EXPIRING")] == ["told"]


def test_the_grace_is_at_most_fifteen_minutes():
    assert hooks.expiry_grace(tenant()) == 900
    assert hooks.expiry_grace(tenant(leaseExpiryGrace="90s")) == 90
    assert hooks.expiry_grace(tenant(leaseExpiryGrace="1h")) == 900
    assert hooks.expiry_grace(tenant(leaseExpiryGrace="soon")) == 900
