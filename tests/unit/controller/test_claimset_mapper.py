"""HostClaimSet events -> keys: a set's spec (a scale too) wakes it, its status does not; a member claim's count
changes wake its set, another owner's claims never do."""

from __future__ import annotations

from metalclaim.controller import mapper


def claim_set(generation=1, status=None, deleting=False) -> dict:
    meta = {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": generation}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"replicas": 3}, "status": status or {}}


def member(association=None, owner="web", kind="HostClaimSet", **meta) -> dict:
    owners = [{"apiVersion": "metal3.io/v1alpha1", "kind": kind, "name": owner, "uid": "set-uid", "controller": True}]
    conditions = [{"type": "Association", "status": association}] if association else []
    metadata = {"name": "web-0", "namespace": "ns", "uid": "c", "ownerReferences": owners, **meta}
    return {"metadata": metadata, "status": {"conditions": conditions}}


def test_a_set_made_or_scaled_is_a_key_its_status_and_deletion_are_not():
    assert mapper.claimset_changed(None, claim_set()).keys == [("claimset", "ns", "web")]
    assert mapper.claimset_changed(claim_set(1), claim_set(2)).keys == [("claimset", "ns", "web")]
    assert mapper.claimset_changed(claim_set(2), claim_set(2, status={"replicas": 3})).dropped
    assert mapper.claimset_changed(claim_set(), None).dropped  # the garbage collector takes its claims


def test_a_member_made_bound_or_gone_wakes_its_set():
    key = [("claimset", "ns", "web")]
    assert mapper.claim_changed_for_sets(None, member()).keys == key
    assert mapper.claim_changed_for_sets(member("False"), member("True")).keys == key
    assert mapper.claim_changed_for_sets(member("True"), None).keys == key
    assert mapper.claim_changed_for_sets(member("True"), member("True", labels={"x": "y"})).keys == []


def test_claims_of_other_owners_wake_no_set():
    assert mapper.claim_changed_for_sets(None, member(kind="ReplicaSet")).keys == []
    plain = {"metadata": {"name": "c", "namespace": "ns"}}
    assert mapper.claim_changed_for_sets(None, plain).keys == []
