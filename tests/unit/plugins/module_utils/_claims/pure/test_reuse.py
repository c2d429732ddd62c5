# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import copy
import datetime
import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, reuse
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.release import scrubbed_spec
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    IN_USE_ANNOTATION,
    UNCLEANED_ANNOTATION,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies

T0 = datetime.datetime(2030, 1, 1, 10, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def claim(name="c", namespace="t", key="md-0", uid=None):
    spec = {"nodeReuse": {"key": key}} if key is not None else {}
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid or f"uid-{name}"}, "spec": spec}


def host(name="h1", namespace="infra", annotations=None, consumer=None, cleaning="metadata"):
    spec = {"online": False, "automatedCleaningMode": cleaning}
    if consumer is not None:
        spec["consumerRef"] = binding.claim_ref(consumer)
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": spec,
        "status": {"provisioning": {"state": "available"}, "poweredOn": False},
    }


def policy(name="p", namespace="infra", reuse_spec=None, names=("t", "u")):
    spec = {"hostclaimNamespaces": {"names": list(names)}}
    if reuse_spec is not None:
        spec["nodeReuse"] = reuse_spec
    return {"metadata": {"namespace": namespace, "name": name}, "spec": spec}


def uid_of(namespace: str) -> str:
    """The uid of the namespace object named `namespace` (a namespace of that name made again has another)."""
    return f"ns-uid-{namespace}"


T_UID = uid_of("t")


def ns(of: dict) -> str:
    return uid_of(of["metadata"]["namespace"])


def held_host(for_claim, offer=None, now=T0, **kwargs):
    offer = offer or reuse.Offer(60, True)
    released = host(**kwargs)
    return reuse.held(released, for_claim, offer, now, ns(for_claim))[0]


def test_the_key_is_read_and_a_bad_one_refused():
    assert reuse.reuse_key(claim(key="md-0")) == "md-0"
    assert reuse.reuse_key(claim(key=None)) is None
    for bad in ("MD", "-a", "a" * 64, "", 3):
        with pytest.raises(reuse.ReuseError, match=r"spec\.nodeReuse\.key"):
            reuse.reuse_key(claim(key=bad))


def test_offers_take_the_longest_hold_and_clean_when_any_cleans():
    policies = [
        policy("a", reuse_spec={"maxHoldDuration": "10m", "clean": False}),
        policy("b", reuse_spec={"maxHoldDuration": "1h", "clean": False}),
        policy("c", namespace="other", reuse_spec={"maxHoldDuration": "5m"}),
        policy("d", namespace="none"),
        policy("e", namespace="broken", reuse_spec={"maxHoldDuration": "soon"}),
        policy("f", namespace="not-us", reuse_spec={"maxHoldDuration": "1h"}, names=("x",)),
    ]
    _authorized, decisions = evaluate_policies(policies, "t", {})
    assert reuse.offers(policies, decisions) == {"infra": reuse.Offer(3600, False), "other": reuse.Offer(300, True)}
    policies.append(policy("g", reuse_spec={"maxHoldDuration": "1m", "clean": True}))
    _authorized, decisions = evaluate_policies(policies, "t", {})
    assert reuse.offers(policies, decisions)["infra"] == reuse.Offer(3600, True)


def test_only_a_keyed_claim_where_reuse_is_offered_is_held():
    offer = reuse.Offer(60, True)
    assert reuse.to_hold(claim(), offer) == offer
    assert reuse.to_hold(claim(), None) is None
    assert reuse.to_hold(claim(key=None), offer) is None
    assert reuse.to_hold(claim(key="BAD"), offer) is None


def test_the_release_scrub_cleans_unless_the_offer_says_not():
    bound = host(consumer=claim())
    bound["spec"]["image"] = {"url": "http://x"}
    scrub = scrubbed_spec(bound)
    assert reuse.scrubbed(scrub, reuse.Offer(60, True), claim("c1"), T0, T_UID) == scrub
    assert reuse.scrubbed(scrub, None, claim("c1"), T0, T_UID) == scrub
    kept = reuse.scrubbed(scrub, reuse.Offer(60, False), claim("c1"), T0, T_UID)
    assert kept["spec"]["automatedCleaningMode"] == "disabled" and "image" not in kept["spec"]
    # Marked held uncleaned in the same write (the host-fields guard allows "disabled" only so).
    assert reuse.hold_of(kept) == reuse.Hold("t", "md-0", "c1", at(60), False, T_UID)
    later = T0 + datetime.timedelta(seconds=30)
    assert reuse.scrubbed(kept, reuse.Offer(60, False), claim("c1"), later, T_UID) == kept  # idempotent


def test_a_mark_that_does_not_say_uncleaned_for_the_claim_is_replaced_at_the_scrub():
    scrub = scrubbed_spec(host(consumer=claim()))
    for forged in (reuse.Hold("t", "md-0", "c1", at(999), True), reuse.Hold("other", "md-0", "c1", at(5), False)):
        scrub["metadata"]["annotations"] = {reuse.HOLD_ANNOTATION: forged.encoded()}
        kept = reuse.scrubbed(scrub, reuse.Offer(60, False), claim("c1"), T0, T_UID)
        assert reuse.hold_of(kept) == reuse.Hold("t", "md-0", "c1", at(60), False, T_UID)


def test_a_held_host_is_marked_for_its_namespace_key_and_end():
    marked, hold = reuse.held(host(), claim("c1"), reuse.Offer(90, True), T0, T_UID)
    assert hold == reuse.Hold("t", "md-0", "c1", at(90), True, T_UID)
    assert reuse.hold_of(marked) == hold
    data = json.loads(marked["metadata"]["annotations"][reuse.HOLD_ANNOTATION])
    assert data == {
        "namespace": "t",
        "namespaceUID": T_UID,
        "key": "md-0",
        "claim": "c1",
        "until": "2030-01-01T10:01:30Z",
        "cleaned": True,
    }
    assert hold.seconds_left(at(30)) == 60 and hold.seconds_left(at(100)) == 0
    _uncleaned, hold = reuse.held(host(cleaning="disabled"), claim("c1"), reuse.Offer(90, False), T0, T_UID)
    assert hold.cleaned is False


def test_only_the_same_namespace_and_key_take_a_held_host_until_its_end():
    marked = held_host(claim("c1"))
    assert reuse.may_take(marked, claim("c2"), at(10), T_UID)
    assert reuse.preferred(marked, claim("c2"), at(10), T_UID)
    assert not reuse.may_take(marked, claim("c2", namespace="u"), at(10), uid_of("u"))  # same key, another namespace
    assert not reuse.may_take(marked, claim("c2", key=None), at(10), T_UID)  # same namespace, no key
    assert not reuse.may_take(marked, claim("c2", key="md-1"), at(10), T_UID)  # another key
    assert not reuse.may_take(marked, claim("c2", key="BAD"), at(10), T_UID)
    assert not reuse.may_take(marked, claim("c2"), at(60), T_UID)  # ended: nobody until its mark goes
    assert reuse.may_take(host(), claim("c2", key=None), at(10), T_UID) and not reuse.preferred(
        host(), claim("c2"), at(10), T_UID
    )


def test_a_broken_mark_holds_for_nobody_and_ends_with_cleaning():
    broken = host(annotations={reuse.HOLD_ANNOTATION: "{not json"})
    assert not reuse.may_take(broken, claim(), T0, T_UID)
    ended = reuse.ended(broken, T0)
    assert reuse.HOLD_ANNOTATION not in ended["metadata"]["annotations"]
    assert IN_USE_ANNOTATION in ended["metadata"]["annotations"]


def test_binding_prefers_the_host_held_for_the_claim_and_skips_those_held_for_others():
    held_for_us = held_host(claim("old"), name="h-held")
    held_for_them = held_host(claim("old", namespace="u"), name="h-theirs")
    hosts = [host("h-a"), host("h-b"), held_for_them, held_for_us]
    plan = binding.plan(claim("new"), hosts, ["infra"], now=at(5), namespace_uid=T_UID)
    assert plan.action == "bind"
    assert binding.key(plan.candidates[0])[1] == "h-held"
    assert "h-theirs" not in [binding.key(h)[1] for h in plan.candidates]
    other = binding.plan(claim("new", key=None), hosts, ["infra"], now=at(5), namespace_uid=T_UID)
    assert sorted(binding.key(h)[1] for h in other.candidates) == ["h-a", "h-b"]
    attacker = binding.plan(
        claim("new", namespace="u2"), [held_for_us], ["infra"], now=at(5), namespace_uid=uid_of("u2")
    )
    assert attacker.action == "refuse" and attacker.reason == binding.NO_HOST
    assert "h-held" not in attacker.message and "infra" not in attacker.message


def test_the_binding_write_drops_the_mark():
    marked = held_host(claim("old"))
    assert reuse.HOLD_ANNOTATION not in reuse.taken(marked)["metadata"]["annotations"]
    plain = host()
    assert reuse.taken(plain) is plain


def test_a_hold_ends_at_its_time_cleaning_only_what_was_not_cleaned():
    cleaned = held_host(claim("old"))
    assert reuse.ended(cleaned, at(59)) is None
    done = reuse.ended(cleaned, at(60))
    assert done["metadata"]["annotations"] == {} and done["spec"] == cleaned["spec"]
    assert reuse.ended(done, at(61)) is None  # idempotent
    dirty = held_host(claim("old"), offer=reuse.Offer(60, False), cleaning="disabled")
    to_clean = reuse.ended(dirty, at(60))
    assert to_clean["spec"]["automatedCleaningMode"] == "metadata"
    assert json.loads(to_clean["metadata"]["annotations"][IN_USE_ANNOTATION])["consumer"] == ""
    assert binding.why_not_free(to_clean) is not None  # nobody binds it before its provisioner cleans it
    assert reuse.ended(host(), at(60)) is None


def test_the_condition_tells_the_tenant_what_release_does_without_naming_the_host():
    offered = reuse.condition(claim(), reuse.Offer(600, True), reused=False)
    assert offered[:3] == (reuse.NODE_REUSE, "True", reuse.REUSE_OFFERED)
    assert "10m0s" in offered[3] and "wiped" in offered[3]
    reused = reuse.condition(claim(), reuse.Offer(600, False), reused=True)
    assert reused[:3] == (reuse.NODE_REUSE, "True", reuse.REUSED_HOST) and "not wiped" in reused[3]
    refused = reuse.condition(claim(), None, reused=False)
    assert refused[:3] == (reuse.NODE_REUSE, "False", reuse.REUSE_NOT_OFFERED)
    assert reuse.condition(claim(key=None), None, reused=False) is None
    assert reuse.condition(claim(key="X"), None, reused=False)[2] == reuse.REUSE_INVALID
    for found in (offered, reused, refused):
        assert "infra" not in found[3] and "h1" not in found[3]


def test_a_namespace_made_again_under_the_same_name_takes_no_held_host():
    """Issue 40: the hold matched the namespace by name, so a namespace deleted and created again (or another
    tenant's child namespace of the same name: `a` + `b-c` and `a-b` + `c`) inherited the host and its disks."""
    marked = held_host(claim("old"), offer=reuse.Offer(60, False), cleaning="disabled")
    assert reuse.may_take(marked, claim("new"), at(5), T_UID)
    assert not reuse.may_take(marked, claim("new"), at(5), "ns-uid-t-made-again")
    assert not reuse.may_take(marked, claim("new"), at(5), "")  # unknown namespace object: never
    legacy = host(annotations={reuse.HOLD_ANNOTATION: reuse.Hold("t", "md-0", "old", at(60), True).encoded()})
    assert not reuse.may_take(legacy, claim("new"), at(5), T_UID)  # a hold naming no uid is for nobody


def test_the_uncleaned_mark_outlives_the_hold_and_only_cleaning_ends_it():
    """Issue 40: removing the hold annotation by hand (the guide said so, to end a hold early) sent tenant A's
    uncleaned disks to tenant B. The scrub also marks the host uncleaned; whatever ends the hold, a host so
    marked binds to nobody but the hold's own namespace object, and is cleaned before the pool."""
    scrub = scrubbed_spec(host(consumer=claim("c1")))
    kept = reuse.scrubbed(scrub, reuse.Offer(60, False), claim("c1"), T0, T_UID)
    mark = reuse.uncleaned_of(kept)
    assert mark == reuse.Uncleaned("t", T_UID, "c1", "2030-01-01T10:00:00Z")
    assert reuse.scrubbed(scrub, reuse.Offer(60, True), claim("c1"), T0, T_UID) == scrub  # cleaned: no mark
    released, hold = reuse.held(kept, claim("c1"), reuse.Offer(60, False), T0, T_UID)
    assert hold.cleaned is False and reuse.uncleaned_of(released) == mark
    assert reuse.may_take(released, claim("c2"), at(5), T_UID)  # the hold's own
    assert reuse.may_take(reuse.taken(released), claim("c2"), at(5), T_UID) is False  # hold gone: nobody
    # The hold mark removed by hand: nobody takes it, and ending it cleans it.
    by_hand = copy.deepcopy(released)
    del by_hand["metadata"]["annotations"][reuse.HOLD_ANNOTATION]
    for anyone in (claim("b", namespace="u", key=None), claim("c2"), claim("c3", key=None)):
        assert not reuse.may_take(by_hand, anyone, at(5), ns(anyone))
    plan = binding.plan(claim("b", namespace="u", key=None), [by_hand], ["infra"], now=at(5), namespace_uid="x")
    assert plan.reason == binding.NO_HOST
    to_clean = reuse.ended(by_hand, at(5))
    assert to_clean["spec"]["automatedCleaningMode"] == "metadata"
    assert IN_USE_ANNOTATION in to_clean["metadata"]["annotations"]
    assert reuse.uncleaned_of(to_clean) == mark  # the provisioner's cleaning takes it off, nothing else
    assert reuse.ended(to_clean, at(6)) is None  # idempotent
    # A hold whose mark says cleaned, on a host marked uncleaned: cleaned first all the same.
    lying = copy.deepcopy(by_hand)
    lying["metadata"]["annotations"][reuse.HOLD_ANNOTATION] = reuse.Hold(
        "t", "md-0", "c1", at(1), True, T_UID
    ).encoded()
    assert IN_USE_ANNOTATION in reuse.ended(lying, at(2))["metadata"]["annotations"]
    broken = host(annotations={UNCLEANED_ANNOTATION: "{"})
    assert not reuse.may_take(broken, claim("c2", key=None), at(5), T_UID)
    assert reuse.may_take(host(), claim("c2", key=None), at(5), T_UID)


def test_where_leases_are_capped_no_reuse_is_offered_and_the_condition_says_why():
    """Issue 40: a lease ending into a hold, taken by the next leased claim with the key, kept a host past
    maxLeaseDuration one claim at a time. Where leases are capped for the namespace, the host returns to the pool."""
    offer = reuse.Offer(600, True)
    assert reuse.under_lease_cap(offer, None) == offer
    assert reuse.under_lease_cap(offer, 3600) is None
    said = reuse.condition(claim(), None, reused=False, capped=True)
    assert said[:3] == (reuse.NODE_REUSE, "False", reuse.REUSE_NOT_OFFERED)
    assert "maxLeaseDuration" in said[3] and "infra" not in said[3]
