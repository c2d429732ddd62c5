"""What `kubectl get` shows a tenant and an infra team: the CRDs' printer columns over real objects."""

from __future__ import annotations

import pytest

from metalclaim_dev.claimlayer import TENANT_A, step

pytestmark = pytest.mark.integration


def _table(devenv, identity: str, *args: str) -> list[dict]:
    """`kubectl get ...` as `identity`: one {COLUMN: value} per row."""
    lines = devenv.kubectl(identity, "get", *args).stdout.splitlines()
    header = lines[0].split()
    starts = [lines[0].index(f" {name}") + 1 if i else 0 for i, name in enumerate(header)]  # columns are aligned
    ends = [*starts[1:], None]
    return [{name: line[a:b].strip() for name, a, b in zip(header, starts, ends, strict=True)} for line in lines[1:]]


def test_a_tenant_sees_its_claims_host_and_provisioning_state(devenv, tmp_path, rack):
    rack.policy()
    rack.host("h0")
    rack.claim("columns")
    step("hostclaim_bind", devenv, tmp_path, rack)
    step("hostclaim_sync", devenv, tmp_path, rack)
    [row] = [r for r in _table(devenv, "tenant-a", "hostclaims", "-n", TENANT_A) if r["NAME"] == "columns"]
    assert list(row) == ["NAME", "ONLINE", "HOST", "STATE", "READY", "REASON", "LEASE-END", "AGE"]
    assert (row["ONLINE"], row["HOST"], row["STATE"]) == ("false", "h0", "available")

    rack.set_state("h0", "provisioning")  # as the provisioner would, once an image is set
    step("hostclaim_sync", devenv, tmp_path, rack)
    [row] = [r for r in _table(devenv, "tenant-a", "hostclaims", "-n", TENANT_A) if r["NAME"] == "columns"]
    assert row["STATE"] == "provisioning"


def test_a_policy_shows_what_it_admits_and_no_status_nobody_writes(devenv, rack):
    rack.policy({"names": [TENANT_A]})
    [row] = _table(devenv, "admin", "hostdeploypolicies", "-n", rack.namespace)
    assert list(row) == ["NAME", "NAMES", "MAX-LEASE", "PUBLIC-LABELS", "NAME-MATCHES", "AGE"]
    assert (row["NAME"], row["NAMES"], row["PUBLIC-LABELS"], row["NAME-MATCHES"]) == (
        "policy",
        f'["{TENANT_A}"]',
        "",
        "",
    )
