"""playbooks/install.yml (role metalclaim.hostclaim.hostclaim_install) on the real API server."""

from __future__ import annotations

import pytest

from tests.support import REPO_ROOT, run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = REPO_ROOT / "playbooks" / "install.yml"


def test_install_is_idempotent_for_a_cluster_admin(devenv, tmp_path):
    first = run_playbook(tmp_path / "first", PLAYBOOK, devenv.kubeconfig("admin"))
    assert first and not any(r["failed"] for r in first), first
    second = run_playbook(tmp_path / "second", PLAYBOOK, devenv.kubeconfig("admin"))
    assert not any(r["failed"] for r in second), second
    # Every CRD and role is already as the manifests say: a second run changes nothing.
    assert [r for r in second if r.get("changed")] == []


def test_install_can_leave_metal3_crds_to_metal3(devenv, tmp_path):
    results = run_playbook(tmp_path, PLAYBOOK, devenv.kubeconfig("admin"), {"hostclaim_install_metal3_crds": False})
    applied = [item["item"] for r in results for item in r.get("results", []) if r["task"].startswith("Apply the CRDs")]
    assert applied == ["metal3.io_hostclaims.yaml", "metal3.io_hostdeploypolicies.yaml"]


def test_infra_team_cannot_install_crds(devenv, tmp_path):
    results = run_playbook(tmp_path, PLAYBOOK, devenv.kubeconfig("infra"))
    assert results[-1]["failed"] is True
    assert "forbidden" in str(results[-1]).lower()
