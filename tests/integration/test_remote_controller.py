"""Remote claims and kind routing with the controller as a process: two controllers serving different claim kinds
on one cluster leave each other's claims alone, and a claim of kind remote goes through a second control plane (the
hardware cluster, its own claim-side controller) and back with nobody running a playbook, across that cluster's
API server stopping and starting again.

test_remote.py drives the same mirroring as Ansible tasks.
"""

# ruff: noqa: F811 (the hardware fixtures are imported, then named as test arguments)
from __future__ import annotations

import pytest

from tests.claimlayer import TENANT_A
from tests.controllerproc import ControllerProcess, associated, claim_side, runs_of
from tests.remotecluster import (  # noqa: F401 (fixtures)
    HardwareTenant,
    WorkloadTenant,
    condition,
    hardware,
    hardware_clients,
    hardware_rack,
)
from tests.support import eventually

pytestmark = pytest.mark.integration
REACTION = 30  # seconds: a run is ~1-3 s of ansible-runner, a remote claim is polled every 2 s until Ready
REMOTE_FINALIZER = "metalclaim.io/remote"
CLAIM_LAYER_FINALIZER = "metal3.io/hostclaim"
MIRROR_CONDITIONS = {"RemoteCluster", "Mirrored"}


@pytest.fixture
def hw_tenant(hardware, hardware_clients):
    tenant = HardwareTenant(hardware, hardware_clients)
    yield tenant
    tenant.cleanup()


@pytest.fixture
def tenant(clients):
    tenant = WorkloadTenant(clients)
    yield tenant
    tenant.cleanup()


def _status(claim: dict | None, type_: str) -> str | None:
    return condition(claim or {}, type_).get("status")


def _finalizers(claim: dict) -> list[str]:
    return claim["metadata"].get("finalizers") or []


def _condition_types(claim: dict) -> set[str]:
    return {c["type"] for c in (claim.get("status") or {}).get("conditions") or []}


def test_two_controllers_serving_different_kinds_leave_each_others_claims_alone(
    devenv, rack, hw_tenant, tenant, tmp_path
):
    """One controller serves baremetal, the other remote, on the same cluster and tenant namespace: each binds or
    mirrors its own claims, never runs a playbook for the other's, and writes nothing on them; a claim of a kind
    neither serves stays untouched (no finalizer, condition or Event)."""
    rack.policy()
    rack.host("h1")
    baremetal = ControllerProcess(devenv, tmp_path / "baremetal", *claim_side(rack))
    remote = ControllerProcess(devenv, tmp_path / "remote", "--controllers", "claims", "--kinds", "remote")
    try:
        local = f"local-{tenant.suffix}"
        rack.claim(local)
        mirrored = tenant.claim("mirrored", tenant.kubeconfig_secret(hw_tenant.kubeconfig()))
        unserved = f"vm-{tenant.suffix}"
        rack.claim(unserved, kind="vm")
        eventually(
            lambda: associated(rack, local), timeout=REACTION, message=f"{local} associated\n{baremetal.output()}"
        )
        eventually(
            lambda: _status(tenant.read(mirrored), "Mirrored") == "True" and hw_tenant.claim(mirrored) is not None,
            timeout=REACTION,
            message=f"{mirrored} mirrored\n{remote.output()}",
        )
        # The remote claim is polled (every 2 s until Ready): a few more remote runs while the local claim stays
        # as the baremetal controller left it.
        settled = rack.read_claim(local)["metadata"]["resourceVersion"]
        eventually(
            lambda: runs_of(remote, f"remote/{TENANT_A}/{mirrored}") >= 3,
            timeout=REACTION,
            message=f"{mirrored} polled\n{remote.output()}",
        )
        assert rack.read_claim(local)["metadata"]["resourceVersion"] == settled

        for name in (local, mirrored, unserved):
            assert runs_of(baremetal, f"remote/{TENANT_A}/{name}") == 0, baremetal.output()
            assert runs_of(remote, f"claim/{TENANT_A}/{name}") == 0, remote.output()
        for name in (mirrored, unserved):
            assert runs_of(baremetal, f"claim/{TENANT_A}/{name}") == 0, baremetal.output()

        local_claim = rack.read_claim(local)
        assert REMOTE_FINALIZER not in _finalizers(local_claim)
        assert not MIRROR_CONDITIONS & _condition_types(local_claim), local_claim["status"]
        mirrored_claim = tenant.read(mirrored)
        assert _finalizers(mirrored_claim) == [REMOTE_FINALIZER]
        assert "Association" not in _condition_types(mirrored_claim), mirrored_claim["status"]
        untouched = rack.read_claim(unserved)
        assert not _finalizers(untouched) and not (untouched.get("status") or {}).get("conditions"), untouched
        assert tenant.events(unserved) == []
        assert runs_of(remote, f"remote/{TENANT_A}/{unserved}") == 0
    finally:
        baremetal.stop()
        remote.stop()
