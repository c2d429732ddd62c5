"""Remote claims and kind routing with the controller as a process: two controllers serving different claim kinds
on one cluster leave each other's claims alone, and a claim of kind remote goes through a second control plane (the
hardware cluster, its own claim-side controller) and back with nobody running a playbook, across that cluster's
API server stopping and starting again.

test_remote.py drives the same mirroring as Ansible tasks.
"""

# ruff: noqa: F811 (the hardware fixtures are imported, then named as test arguments)
from __future__ import annotations

import time

import pytest

from metalclaim_dev.claimlayer import TENANT_A
from metalclaim_dev.controllerproc import ControllerProcess, associated, claim_side, runs_of
from metalclaim_dev.controllerproc import provisioner as provisioner_side
from metalclaim_dev.devenv.controlplane import start_apiserver, stop_apiserver
from metalclaim_dev.remotecluster import (  # noqa: F401 (fixtures)
    HardwareTenant,
    WorkloadTenant,
    condition,
    hardware,
    hardware_clients,
    hardware_rack,
    hw_tenant,
    tenant,
)
from metalclaim_dev.site import Site
from metalclaim_dev.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.minutes(2)]
REACTION = 30  # seconds: a run is ~1-3 s of ansible-runner, a remote claim is polled every 2 s until Ready
REMOTE_FINALIZER = "metalclaim.io/remote"
MIRROR_CONDITIONS = {"RemoteCluster", "Mirrored"}


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
    neither serves stays untouched (no finalizer, condition or Event). A remote claim's kubeconfig Secret is
    watched: created after the claim, it brings the refused claim back; a hardware namespace outside
    --remote-allowed-namespaces is refused."""
    rack.policy()
    rack.host("h1")
    baremetal = ControllerProcess(devenv, tmp_path / "baremetal", *claim_side(rack))
    remote = ControllerProcess(
        devenv,
        tmp_path / "remote",
        *("--controllers", "claims", "--kinds", "remote", "--remote-allowed-namespaces", f"{hw_tenant.namespace},x-.*"),
    )
    try:
        local = f"local-{tenant.suffix}"
        rack.claim(local)
        # Its kubeconfig Secret comes after it: refused (no timer), then brought back by the Secret's event.
        mirrored = tenant.claim("mirrored", f"hw-kubeconfig-{tenant.suffix}")
        unserved = f"vm-{tenant.suffix}"
        rack.claim(unserved, kind="vm")
        eventually(
            lambda: condition(tenant.read(mirrored) or {}, "Mirrored").get("reason") == "KubeconfigMissing",
            timeout=REACTION,
            message=f"{mirrored} refused\n{remote.output()}",
        )
        tenant.kubeconfig_secret(hw_tenant.kubeconfig())
        # The operator's allowed hardware namespaces (--remote-allowed-namespaces) reach the runs.
        elsewhere = tenant.claim("elsewhere", tenant.kubeconfig_secret(hw_tenant.kubeconfig("hw-other"), "other"))
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
        refused = condition(tenant.read(elsewhere), "Mirrored")
        assert refused.get("reason") == "RemoteNamespaceNotAllowed", refused
        untouched = rack.read_claim(unserved)
        assert not _finalizers(untouched) and not (untouched.get("status") or {}).get("conditions"), untouched
        assert tenant.events(unserved) == []
        assert runs_of(remote, f"remote/{TENANT_A}/{unserved}") == 0
    finally:
        baremetal.stop()
        remote.stop()


def _stage_times(started: float, stages: dict, message: str, timeout: float = REACTION) -> dict:
    """Seconds from `started` until each check first held (checked in turn, about 10 times a second)."""
    seen: dict = {}
    while len(seen) < len(stages):
        assert time.monotonic() - started < timeout, f"{[s for s in stages if s not in seen]} not reached\n{message}"
        for stage, check in stages.items():
            if stage not in seen and check():
                seen[stage] = time.monotonic() - started
        time.sleep(0.1)
    return seen


def _timed(check, timeout: float, message: str) -> float:
    started = time.monotonic()
    eventually(check, timeout=timeout, message=message)
    return time.monotonic() - started


def test_a_remote_claim_through_the_hardware_cluster_and_its_outage(
    devenv, hardware, hardware_clients, rack, hw_tenant, tenant, tmp_path
):
    """Both clusters run a controller, nobody runs a playbook: a remote claim is mirrored, bound by the hardware
    cluster's claim side and associated locally; the hardware cluster's API server stops (the local claim says
    it is unreachable) and starts again (it converges); deleting the local claim releases the remote one. The
    latency create -> Association=True is printed beside a baremetal claim's on the workload cluster."""
    rack.policy()
    rack.host("h1")
    hw_rack = hardware_rack(hardware_clients, hw_tenant)
    hardware_side = ControllerProcess(hardware, tmp_path / "hardware", *claim_side(hw_rack))
    workload = ControllerProcess(devenv, tmp_path / "workload", *claim_side(rack), "--kinds", "baremetal,remote")
    argv = None
    try:
        local = f"local-{tenant.suffix}"
        created = time.monotonic()
        rack.claim(local)
        eventually(lambda: associated(rack, local), timeout=REACTION, message=f"{local}\n{workload.output()}")
        single = time.monotonic() - created

        secret = tenant.kubeconfig_secret(hw_tenant.kubeconfig())
        created = time.monotonic()
        name = tenant.claim("remote", secret, hostSelector={"matchLabels": {"infra-kind": hw_rack.kind}})
        stages = _stage_times(
            created,
            {
                "mirrored there": lambda: hw_tenant.claim(name) is not None,
                "bound there": lambda: _status(hw_tenant.claim(name), "Association") == "True",
                "associated here": lambda: _status(tenant.read(name), "Association") == "True",
            },
            f"{name} associated\n{workload.output()}\n{hardware_side.output()}",
        )
        shown = ", ".join(f"{stage} {seconds:.2f} s" for stage, seconds in stages.items())
        print(
            f"\ncreate -> Association=True: baremetal {single:.2f} s, remote {stages['associated here']:.2f} s "
            f"({shown})",
            end="",
        )
        claim = tenant.read(name)
        assert claim["status"]["hostUID"] == hw_rack.read_host("h0")["metadata"]["uid"]
        assert _status(claim, "RemoteCluster") == "True" and _status(claim, "Mirrored") == "True"

        stopping = time.monotonic()
        argv = stop_apiserver(hardware.state)
        down = (
            time.monotonic()
            - stopping
            + _timed(
                lambda: condition(tenant.read(name), "RemoteCluster").get("reason") == "Unreachable",
                REACTION,
                f"{name} unreachable\n{workload.output()}",
            )
        )
        assert _status(tenant.read(name), "RemoteCluster") == "False"
        start_apiserver(hardware.state, argv)
        hardware.save()  # the new pid, for `devenv down` and later health checks
        argv = None
        back = _timed(
            lambda: all(_status(tenant.read(name), t) == "True" for t in ("RemoteCluster", "Mirrored", "Association")),
            REACTION,
            f"{name} converged\n{workload.output()}",
        )
        print(f"; hardware API server stopped -> Unreachable {down:.2f} s, started -> converged {back:.2f} s", end="")

        tenant.api("HostClaim").delete(name=name, namespace=TENANT_A)
        released = _timed(
            lambda: tenant.read(name) is None and hw_tenant.claim(name) is None,
            REACTION,
            f"{name} released\n{workload.output()}\n{hardware_side.output()}",
        )
        print(f"; delete -> released in both clusters {released:.2f} s")
        assert not (hw_rack.read_host("h0")["spec"].get("consumerRef"))
    finally:
        if argv is not None:  # leave the hardware cluster healthy for the tests after this one
            start_apiserver(hardware.state, argv)
            hardware.save()
        workload.stop()
        hardware_side.stop()
        hw_rack.cleanup()


def test_a_remote_claim_is_provisioned_by_the_hardware_clusters_fleet_and_released_clean(
    devenv, hardware, hardware_clients, rack, hw_tenant, tenant, files, tmp_path
):
    """The guide's life cycle from the workload cluster: a remote claim with a live ISO and online true ends
    Provisioned and powered on here, because the hardware cluster's claim side bound it and its provisioner
    provisioned the host over Redfish; deleting it deprovisions the host there, back to available."""
    iso_url = files.add("live.iso", b"live iso for a remote claim\n" * 64)
    site = Site(hardware, hardware_clients, tmp_path / "site")
    site.host("h0", 0)
    provisioner = provisioner_side(hardware, tmp_path / "hw-provisioner", site.namespace)
    hardware_claims = ControllerProcess(
        hardware, tmp_path / "hw-claims", "--infra-namespaces", site.namespace, "--controllers", "claims"
    )
    workload = ControllerProcess(devenv, tmp_path / "workload", *claim_side(rack), "--kinds", "remote")

    def logs() -> str:
        return f"workload:\n{workload.output()}\nhardware claims:\n{hardware_claims.output()}\n{provisioner.output()}"

    try:
        eventually(lambda: site.state("h0") == "available", timeout=90, message=f"h0 available\n{logs()}")
        secret = tenant.kubeconfig_secret(hw_tenant.kubeconfig())
        created = time.monotonic()
        name = tenant.claim(
            "live",
            secret,
            hostSelector={"matchLabels": {"infra-kind": site.kind}},
            image={"url": iso_url, "format": "live-iso"},
            online=True,
        )

        def provisioned_here() -> bool:
            claim = tenant.read(name) or {}
            return _status(claim, "Provisioned") == "True" and (claim.get("status") or {}).get("poweredOn") is True

        eventually(provisioned_here, timeout=120, message=f"{name} provisioned\n{logs()}")
        print(f"\nremote claim create -> Provisioned and powered on here: {time.monotonic() - created:.1f} s", end="")
        assert site.state("h0") == "provisioned"
        assert tenant.read(name)["status"]["hostUID"] == site.read("h0")["metadata"]["uid"]

        tenant.api("HostClaim").delete(name=name, namespace=TENANT_A)
        deleted = time.monotonic()
        eventually(
            lambda: tenant.read(name) is None and hw_tenant.claim(name) is None and site.state("h0") == "available",
            timeout=120,
            message=f"{name} released\n{logs()}",
        )
        print(f"; delete -> released, host deprovisioned and available: {time.monotonic() - deleted:.1f} s", end="")
        assert not site.read("h0")["spec"].get("consumerRef")
    finally:
        workload.stop()
        hardware_claims.stop()
        provisioner.stop()
        site.cleanup()
        site.reset_fleet()  # the hardware fleet is shared by this module's tests
