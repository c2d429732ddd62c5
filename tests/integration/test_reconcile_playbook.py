"""playbooks/reconcile.yml: the claim layer's steps for a batch of claims, in one ansible-playbook run."""

from __future__ import annotations

import pytest

from tests.claimlayer import TENANT_A, condition
from tests.support import REPO_ROOT, run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = REPO_ROOT / "playbooks" / "reconcile.yml"


def reconcile(devenv, tmp_path, rack, name: str) -> dict:
    tasks = run_playbook(
        tmp_path / name, PLAYBOOK, devenv.kubeconfig("controller"), {"hostclaim_reconcile_claims": rack.claim_args()}
    )
    assert not any(t["failed"] for t in tasks), tasks
    return {t["task"]: t for t in tasks}


def test_one_run_binds_and_a_later_run_releases(devenv, rack, tmp_path):
    rack.policy()
    for index in range(3):
        rack.host(f"h{index}")
    for index in range(4):
        rack.claim(f"c{index}")
    first = reconcile(devenv, tmp_path, rack, "first")
    assert first["Summarize"]["msg"].startswith("3 bound, 1 waiting for a host")
    bound = [name for _namespace, name in rack.claims if rack.read_claim(name)["status"].get("hardwareData")]
    assert len(bound) == 3

    rack.api("tenant-a", "HostClaim").delete(name=bound[0], namespace=TENANT_A)
    second = reconcile(devenv, tmp_path, rack, "second")
    # The released host (never provisioned, still available) goes to the claim that was waiting.
    assert second["Release the hosts of deleted claims"]["claims"][0]["state"] == "released"
    waiting = next(name for _namespace, name in rack.claims if name not in bound)
    assert condition(rack.read_claim(waiting), "Association")["status"] == "True"
