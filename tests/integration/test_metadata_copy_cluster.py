"""metadataCopy on the real API server: host labels/annotations reach the claim only where a policy opts in."""

from __future__ import annotations

import json

import pytest

from metalclaim_dev.claimlayer import TENANT_A, step

pytestmark = pytest.mark.integration

ZONE = "topology.kubernetes.io/zone"
OWNER = "infra.example/owner"


def test_policy_opted_in_keys_are_copied_followed_and_removed_tenant_keys_kept(devenv, rack, tmp_path):
    rack.policy(metadata_copy={"labels": ["topology\\.kubernetes\\.io/.*"], "annotations": ["infra\\.example/owner"]})
    # A second policy of the same namespace with an invalid pattern copies nothing, and says so.
    rack.policy(name="broken", metadata_copy={"labels": [".*", "rack-(["]})
    rack.host(
        "h1",
        labels={ZONE: "z1", "secret-rack": "r7"},
        annotations={OWNER: "team-x", "infra.example/owner-email": "x@example.org", "metalclaim.io/x": "y"},
    )
    # The tenant's own label of the same name as a copied one stays the tenant's.
    rack.claim("meta", labels={"app": "web", "infra-kind": "tenant-says"})
    step("hostclaim_bind", devenv, tmp_path, rack)

    first = step("hostclaim_sync", devenv, tmp_path, rack)
    assert first["changed"] is True
    problem = (
        f"HostDeployPolicy {rack.namespace}/broken: metadataCopy.labels[1] 'rack-([' is not a valid regular "
        "expression (unterminated character set at position 6); its metadataCopy is ignored"
    )
    assert first["claims"][0]["metadata_copy_problems"] == [problem]
    assert problem in first["warnings"]
    # The tenant reads its claim with its own identity.
    claim = rack.api("tenant-a", "HostClaim").get(name="meta", namespace=TENANT_A).to_dict()
    assert claim["metadata"]["labels"] == {"app": "web", "infra-kind": "tenant-says", ZONE: "z1"}
    annotations = claim["metadata"]["annotations"]
    assert annotations[OWNER] == "team-x"
    assert not {"infra.example/owner-email", "metalclaim.io/x"} & set(annotations)
    assert json.loads(annotations["metalclaim.io/copied-metadata"]) == {"annotations": [OWNER], "labels": [ZONE]}

    assert step("hostclaim_sync", devenv, tmp_path, rack)["changed"] is False

    # The infra team moves the host and drops the owner: the claim follows, the tenant's keys stay.
    rack.api("admin", "BareMetalHost").patch(
        body={"metadata": {"labels": {ZONE: "z2"}, "annotations": {OWNER: None}}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    step("hostclaim_sync", devenv, tmp_path, rack)
    claim = rack.read_claim("meta")
    assert claim["metadata"]["labels"] == {"app": "web", "infra-kind": "tenant-says", ZONE: "z2"}
    assert OWNER not in claim["metadata"]["annotations"]
    assert json.loads(claim["metadata"]["annotations"]["metalclaim.io/copied-metadata"]) == {"labels": [ZONE]}

    # The policy stops copying: every copied key goes, and the record with them.
    rack.api("admin", "HostDeployPolicy").patch(
        body={"spec": {"metadataCopy": None}},
        name="policy",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    step("hostclaim_sync", devenv, tmp_path, rack)
    claim = rack.read_claim("meta")
    assert claim["metadata"]["labels"] == {"app": "web", "infra-kind": "tenant-says"}
    assert "metalclaim.io/copied-metadata" not in (claim["metadata"].get("annotations") or {})


def test_nothing_is_copied_for_a_namespace_the_opting_policy_does_not_admit(devenv, rack, tmp_path):
    rack.policy()  # admits everyone, copies nothing
    rack.policy(name="copying", rule={"names": ["someone-else"]}, metadata_copy={"labels": [".*"]})
    rack.host("h1", labels={ZONE: "z1"})
    rack.claim("plain")
    step("hostclaim_bind", devenv, tmp_path, rack)
    step("hostclaim_sync", devenv, tmp_path, rack)
    claim = rack.read_claim("plain")
    assert (claim["metadata"].get("labels") or {}) == {}
    assert "metalclaim.io/copied-metadata" not in (claim["metadata"].get("annotations") or {})
