# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import datetime

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, lease
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.outcomes import claim_outcomes
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import desired_status

T0 = datetime.datetime(2030, 1, 1, 10, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def claim(spec_lease=None, status_lease=None, association_since=None, conditions=()):
    status = {"conditions": list(conditions)}
    if status_lease is not None:
        status["lease"] = status_lease
    if association_since:
        status["conditions"].append(
            {
                "type": "Association",
                "status": "True",
                "reason": "BareMetalHostAssociated",
                "lastTransitionTime": association_since,
            }
        )
    spec = {} if spec_lease is None else {"lease": spec_lease}
    return {"metadata": {"namespace": "t", "name": "c", "uid": "u", "generation": 1}, "spec": spec, "status": status}


def policy(name, namespace, cap=None, names=("t",)):
    spec = {"hostclaimNamespaces": {"names": list(names)}}
    if cap is not None:
        spec["maxLeaseDuration"] = cap
    return {"metadata": {"namespace": namespace, "name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("text", "seconds"), [("90m", 5400), ("2h30m", 9000), ("45s", 45), ("1h0m5s", 3605), ("0h1s", 1)]
)
def test_durations_are_read_as_go_spells_them(text, seconds):
    assert lease.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "1d", "1.5h", "h", "10", "1m1h", None, 5])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(lease.LeaseError):
        lease.parse_duration(text)


def test_format_duration_and_time():
    assert lease.format_duration(9000) == "2h30m0s"
    assert lease.format_duration(59) == "59s"
    assert lease.format_time(lease.parse_time("2030-01-01T11:00:00+01:00")) == "2030-01-01T10:00:00Z"


def test_exactly_one_of_duration_and_end():
    with pytest.raises(lease.LeaseError):
        lease.asked(claim({"duration": "1h", "end": "2030-01-01T00:00:00Z"}))
    assert lease.asked(claim()) is None
    assert lease.asked(claim({"duration": "1h"})).duration == 3600


def test_caps_per_infra_namespace_the_largest_and_none_wins():
    policies = [
        policy("a", "infra-1", "1h"),
        policy("b", "infra-1", "2h"),
        policy("c", "infra-2", "1h"),
        policy("d", "infra-2"),
        policy("e", "infra-3", "30m"),
        policy("f", "infra-4", "5h", names=("other",)),
        policy("g", "infra-5", "bogus"),
    ]
    _authorized, decisions = evaluate_policies(policies, "t", {})
    assert lease.caps(policies, decisions) == {"infra-1": 7200, "infra-2": None, "infra-3": 1800, "infra-5": 0}


def test_a_duration_lease_starts_at_the_binding_and_warns_a_tenth_before_its_end():
    started = lease.started(claim({"duration": "1h"}), T0)
    assert started.lease_status == {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z"}
    assert started.after == 3240  # 54 min: the warning
    assert started.conditions[0][:3] == ("Lease", "True", "LeaseActive")


def test_the_warning_is_at_most_fifteen_minutes_before_the_end():
    assert lease.warning_start(T0, at(10 * 3600)) == at(10 * 3600 - 900)
    assert lease.warning_start(T0, at(20)) == at(18)


def bound_claim(duration="1h", **kw):
    return claim({"duration": duration}, {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z"}, **kw)


def test_active_then_ending_then_expired_with_deadlines():
    active = lease.decide(bound_claim(), True, None, at(60))
    assert (active.state, active.after, active.newly) == (lease.ACTIVE, 3180, "")
    ending = lease.decide(bound_claim(), True, None, at(3300))
    assert (ending.state, ending.after, ending.newly) == (lease.ENDING, 300, lease.LEASE_ENDING)
    assert ending.conditions[0][:3] == ("Lease", "True", "LeaseEnding")
    assert "6m0s left at 2030-01-01T10:54:00Z" in ending.conditions[0][3]
    warned = bound_claim(conditions=[{"type": "Lease", "status": "True", "reason": "LeaseEnding"}])
    assert lease.decide(warned, True, None, at(3301)).newly == ""  # one Event, not one per run
    done = lease.decide(bound_claim(), True, None, at(3600))
    assert (done.state, done.newly, done.after) == (lease.EXPIRED, lease.LEASE_EXPIRED, None)
    assert done.lease_status["expired"] is True
    reasons = {t: r for t, _s, r, _m in done.conditions}
    assert reasons == {"Lease": "LeaseExpired", "Association": "LeaseExpired", "Provisioned": "LeaseExpired"}


def test_the_same_run_twice_decides_the_same_messages():
    one = lease.decide(bound_claim(), True, None, at(3300))
    two = lease.decide(bound_claim(), True, None, at(3400))
    assert one.conditions == two.conditions and one.lease_status == two.lease_status


def test_an_expired_lease_stays_expired_whatever_the_spec_says_after():
    expired = claim(
        {"duration": "100h"}, {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z", "expired": True}
    )
    found = lease.decide(expired, False, None, at(7200))
    assert found.expired and found.newly == ""
    assert found.lease_status["end"] == "2030-01-01T11:00:00Z"


def test_extension_within_the_cap_moves_the_end():
    extended = lease.decide(bound_claim("90m"), True, 7200, at(3300))
    assert extended.state == lease.ACTIVE
    assert extended.lease_status["end"] == "2030-01-01T11:30:00Z"


def test_extension_over_the_cap_keeps_the_end_and_says_so():
    refused = lease.decide(bound_claim("3h"), True, 7200, at(60))
    assert refused.lease_status["end"] == "2030-01-01T11:00:00Z"
    status, reason, message = refused.conditions[0][1:]
    assert (status, reason) == ("False", lease.LEASE_OVER_CAP)
    assert "at most 2h0m0s" in message and "still ends at 2030-01-01T11:00:00Z" in message


def test_no_extension_once_no_policy_admits_the_namespace():
    refused = lease.decide(bound_claim("3h"), True, False, at(60))
    assert refused.conditions[0][2] == lease.LEASE_OVER_CAP
    assert refused.lease_status["end"] == "2030-01-01T11:00:00Z"


def test_no_extension_past_another_claims_booking_of_the_host():
    """Issue 40: tenant A extended across tenant B's accepted booking, and B's claim was never bound."""
    booked = at(2 * 3600)  # B's booking starts at 12:00; A's lease ends at 11:00
    within = lease.decide(bound_claim("2h"), True, None, at(60), booked_from=booked)
    assert within.lease_status["end"] == "2030-01-01T12:00:00Z" and within.conditions[0][1] == "True"
    for spec in ({"duration": "3h"}, {"end": "2099-01-01T00:00:00Z"}, None):
        asked = claim(spec, {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z"})
        refused = lease.decide(asked, True, None, at(60), booked_from=booked)
        assert refused.lease_status == {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z"}, spec
        status, reason, message = refused.conditions[0][1:]
        assert (status, reason) == ("False", lease.LEASE_HOST_BOOKED), spec
        assert "booked the host from 2030-01-01T12:00:00Z" in message
        assert "still ends at 2030-01-01T11:00:00Z" in message
        assert "t/" not in message and "infra" not in message  # no namespace, host or claim named
    shorter = lease.decide(bound_claim("30m"), True, None, at(60), booked_from=booked)
    assert shorter.lease_status["end"] == "2030-01-01T10:30:00Z"
    # A booking that could not be read (booking.booked_from says now): no extension, the end kept.
    unreadable = lease.decide(bound_claim("90m"), True, None, at(60), booked_from=at(60))
    assert unreadable.conditions[0][2] == lease.LEASE_HOST_BOOKED


def test_a_lease_added_to_a_bound_claim_starts_at_its_binding():
    added = lease.decide(claim({"duration": "2h"}, association_since="2030-01-01T09:00:00Z"), True, None, at(0))
    assert added.lease_status == {"start": "2030-01-01T09:00:00Z", "end": "2030-01-01T11:00:00Z"}


def test_a_lease_removed_without_a_cap_removes_the_condition_and_the_field():
    removed = lease.decide(
        claim(None, {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z"}), True, None, at(0)
    )
    assert removed.state == lease.NONE and removed.lease_status is None
    status = desired_status(
        {"metadata": {"generation": 1}, "status": {"conditions": [{"type": "Lease", "status": "True"}]}},
        {"lease": None},
        removed.conditions,
        "2030-01-01T10:00:00Z",
    )
    assert [c["type"] for c in status["conditions"]] == ["Ready"]


def test_an_unbound_claim_whose_end_passed_is_expired_and_never_bound():
    late = lease.decide(claim({"end": "2030-01-01T10:00:00Z"}), False, None, at(1))
    assert late.expired and "no host was bound" in late.conditions[0][3]
    waiting = lease.decide(claim({"end": "2030-01-01T10:00:10Z"}), False, None, at(1))
    assert (waiting.state, waiting.after) == (lease.UNBOUND, 9)


HOST = {
    "metadata": {"namespace": "infra-1", "name": "h1", "uid": "h", "labels": {}},
    "spec": {},
    "status": {"provisioning": {"state": "available"}, "poweredOn": False},
}


def test_plan_refuses_a_lease_over_every_cap_without_naming_namespaces():
    refused = binding.plan(
        claim({"duration": "3h"}), [HOST], ["infra-1", "infra-2"], lease_caps={"infra-1": 3600, "infra-2": 7200}, now=T0
    )
    assert (refused.action, refused.reason) == ("refuse", lease.LEASE_OVER_CAP)
    assert "at most 2h0m0s" in refused.message and "infra" not in refused.message


def test_plan_requires_a_lease_where_a_cap_is_set():
    refused = binding.plan(claim(), [HOST], ["infra-1"], lease_caps={"infra-1": 3600}, now=T0)
    assert (refused.action, refused.reason) == ("refuse", lease.LEASE_REQUIRED)


def test_plan_binds_within_the_cap_or_where_none_is_set():
    assert (
        binding.plan(claim({"duration": "1h"}), [HOST], ["infra-1"], lease_caps={"infra-1": 3600}, now=T0).action
        == "bind"
    )
    assert binding.plan(claim(), [HOST], ["infra-1"], lease_caps={"infra-1": None}, now=T0).action == "bind"
    # the hosts of a namespace whose cap is too short are not candidates
    uncapped = {**HOST, "metadata": {**HOST["metadata"], "namespace": "infra-2", "name": "h2", "uid": "h2"}}
    narrowed = binding.plan(
        claim({"duration": "2h"}),
        [HOST, uncapped],
        ["infra-1", "infra-2"],
        lease_caps={"infra-1": 3600, "infra-2": None},
        now=T0,
    )
    assert narrowed.action == "bind" and [h["metadata"]["name"] for h in narrowed.candidates] == ["h2"]


def test_plan_says_the_lease_when_only_hosts_it_is_too_long_for_would_suit():
    caps = {"infra-1": 3600, "infra-2": None}
    # infra-2 admits the namespace without a cap but has no host: only a shorter lease would bind the claim
    over = binding.plan(claim({"duration": "2h"}), [HOST], ["infra-1", "infra-2"], lease_caps=caps, now=T0)
    assert (over.action, over.reason) == ("refuse", lease.LEASE_OVER_CAP)
    assert "at most 1h0m0s" in over.message and "infra" not in over.message and "h1" not in over.message
    required = binding.plan(claim(), [HOST], ["infra-1", "infra-2"], lease_caps=caps, now=T0)
    assert (required.reason, "infra" in required.message) == (lease.LEASE_REQUIRED, False)
    # a host of infra-2 that suits it, even one in use, will be free one day: then no free host is the reason
    taken = {
        **HOST,
        "metadata": {**HOST["metadata"], "namespace": "infra-2", "name": "h2", "uid": "h2"},
        "spec": {"consumerRef": {"kind": "HostClaim", "namespace": "t", "name": "other"}},
    }
    waiting = binding.plan(claim({"duration": "2h"}), [HOST, taken], ["infra-1", "infra-2"], lease_caps=caps, now=T0)
    assert (waiting.action, waiting.reason) == ("refuse", binding.NO_HOST)
    # a host of infra-1 that does not match the selector is no reason either
    elsewhere = {**HOST, "metadata": {**HOST["metadata"], "labels": {"size": "small"}}}
    picky = claim({"duration": "2h"})
    picky["spec"]["hostSelector"] = {"matchLabels": {"size": "large"}}
    unmatched = binding.plan(picky, [elsewhere], ["infra-1", "infra-2"], lease_caps=caps, now=T0)
    assert unmatched.reason == binding.NO_HOST


def test_the_lease_deadline_survives_a_wait_outcome():
    result = {
        "lease": {"claims": [{"namespace": "t", "name": "c", "lease": "active", "after": 30.0, "changed": False}]},
        "bind": {"claims": [{"namespace": "t", "name": "c", "action": "keep", "host": "i/h", "changed": False}]},
        "bound": {"claims": [{"namespace": "t", "name": "c", "state": "waiting", "changed": False}]},
    }
    [outcome] = claim_outcomes(result)
    assert outcome["after"] == 30.0 and outcome["result"] in ("done", "wait")
