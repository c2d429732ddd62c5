from __future__ import annotations

import hashlib

import pytest

from metalclaim.controller.scope import CLAIMS, PROVISIONER, Scope, parse_shard, parse_sides, shard_of


def test_sides_parse_in_order_once_each():
    assert parse_sides("claims") == (CLAIMS,)
    assert parse_sides(" provisioner , claims,claims") == (PROVISIONER, CLAIMS)


@pytest.mark.parametrize("text", ["", ",", "claim", "claims,bmc"])
def test_unknown_or_no_sides_are_refused_naming_the_flag(text):
    with pytest.raises(ValueError, match="--controllers"):
        parse_sides(text)


@pytest.mark.parametrize("text, expected", [("0/1", (0, 1)), ("2/4", (2, 4))])
def test_shard_parses(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["1/1", "-1/2", "3", "a/b", "0/0", "1/"])
def test_a_shard_outside_its_count_is_refused_naming_the_flag(text):
    with pytest.raises(ValueError, match="--shard"):
        parse_shard(text)


def test_every_namespace_belongs_to_exactly_one_shard_the_same_in_every_process():
    namespaces = [f"tenant-{index}" for index in range(400)]
    shards = [Scope(shard=(index, 4)) for index in range(4)]
    owners = [[s.shard[0] for s in shards if s.owns_namespace(ns)] for ns in namespaces]
    assert all(len(found) == 1 for found in owners)
    counts = [sum(1 for found in owners if found == [index]) for index in range(4)]
    assert min(counts) > 60  # spread, not all in one shard (400 / 4 = 100 expected)
    # sha256, not hash(): a fixed value, whatever PYTHONHASHSEED
    assert shard_of("cluster-ns", 4) == int.from_bytes(hashlib.sha256(b"cluster-ns").digest()[:8]) % 4


def test_one_shard_owns_everything_and_keeps_the_lease_name():
    assert Scope().owns_namespace("anything") and Scope().lease_name("metalclaim-controller") == "metalclaim-controller"
    assert Scope(shard=(1, 3)).lease_name("metalclaim-controller") == "metalclaim-controller-shard-1-of-3"


def test_the_tenants_side_is_opt_in():
    from metalclaim.controller.scope import DEFAULT_SIDES, TENANTS, Scope, parse_sides

    assert TENANTS not in Scope().sides and TENANTS not in DEFAULT_SIDES
    assert parse_sides("claims,tenants") == ("claims", "tenants")


def test_subjects_parse_or_are_refused():
    from metalclaim.controller.scope import parse_subject

    assert parse_subject("user:metalclaim-controller") == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "User",
        "name": "metalclaim-controller",
    }
    assert parse_subject("serviceaccount:metalclaim-system:metalclaim-controller") == {
        "kind": "ServiceAccount",
        "namespace": "metalclaim-system",
        "name": "metalclaim-controller",
    }
    for bad in ("robot:x", "user:", "serviceaccount:only-namespace"):
        with pytest.raises(ValueError):
            parse_subject(bad)
