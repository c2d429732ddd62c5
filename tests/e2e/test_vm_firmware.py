"""Firmware (BIOS) settings on a VM behind sushy-tools' libvirt driver: applied, read back, reported, reset.

The libvirt driver keeps BIOS attributes in the domain's XML (its defaults: ProcTurboMode Enabled, QuietBoot true...)
and applies a change at once, where a real server applies it at its next boot; the provisioner reads the Settings
object too, so a change already pending is not sent twice. Why VMs and not the driver over libvirt's in-process
test:///default (no daemon, no VM): there the driver's virtual media insert fails (the test driver has no
virStorageVolUpload, measured with sushy-tools 2.2.0), so no provisioning gets past its first boot.

One VM, its own control plane; the claim layer and bmh_redfish run as the controller's identities, the claim as the
tenant, the policy as the infra team (metalclaim_dev.vmenv.vm_site). Run with `make e2e` (after make vm-setup).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from metalclaim_dev.devenv.images import build_marker_iso
from metalclaim_dev.site import TENANT, settle
from metalclaim_dev.vmenv import vm_environment, vm_site

pytestmark = pytest.mark.minutes(2)

HOST = "vm-0"
BASELINE = "provisioner.metalclaim.io/firmware-baseline"
ASKED = {"ProcTurboMode": "Disabled", "QuietBoot": "false"}
DEFAULTS = {"ProcTurboMode": "Enabled", "QuietBoot": "true"}  # the driver's DEFAULT_BIOS_ATTRIBUTES


@pytest.fixture(scope="module")
def vm_env(tmp_path_factory, pytestconfig):
    yield from vm_environment(tmp_path_factory, pytestconfig, "vm-firmware")


@pytest.fixture(scope="module")
def site(vm_env, tmp_path_factory):
    yield from vm_site(vm_env, tmp_path_factory, "fw-site")


def bios(site) -> dict:
    bmc = site.bmc(0)
    try:
        return bmc.bios()[0]
    finally:
        bmc.close()


def bios_requests(vm_env) -> int:
    return (Path(vm_env.state["vms"]["root"]) / "redfish.log").read_text(errors="replace").count("/BIOS")


def rounds_until(site, done, rounds: int = 10) -> None:
    for _round in range(rounds):
        site.reconcile_and_provision(wait=20, redfish_timeout=30)  # the driver copies the ISO within the request
        if done():
            return
    raise AssertionError(f"not done after {rounds} rounds: {site.read(HOST).get('status')}")


def test_settings_are_applied_before_the_boot_read_back_and_reset_at_deprovisioning(vm_env, site):
    site.host(HOST, 0)
    settle(site, HOST, "available")
    assert {k: bios(site)[k] for k in ASKED} == DEFAULTS
    site.api("HostDeployPolicy", identity="infra").patch(
        body={"spec": {"firmware": {"allowedSettings": [{"name": k, "values": [v]} for k, v in ASKED.items()]}}},
        name="policy",
        namespace=site.namespace,
        content_type="application/merge-patch+json",
    )
    shutil.copy(build_marker_iso("metalclaim-firmware-marker"), Path(vm_env.state["vms"]["images_dir"]) / "live.iso")
    image = {"url": f"{vm_env.state['vms']['images_url']}/live.iso", "format": "live-iso"}
    before = bios_requests(vm_env)
    started = time.monotonic()
    site.claim("fw", image=image, online=True, firmware={"settings": ASKED})
    rounds_until(site, lambda: site.state(HOST) == "provisioned" and (site.read_claim("fw")["status"].get("firmware")))
    print(
        f"\nfirmware: claim to provisioned in {time.monotonic() - started:.1f}s, {bios_requests(vm_env) - before} "
        "BIOS requests"
    )
    assert {k: bios(site)[k] for k in ASKED} == ASKED  # on the BMC
    host = site.read(HOST)
    assert json.loads(host["metadata"]["annotations"][BASELINE]) == DEFAULTS  # the infra defaults, remembered
    hfs = site.api("HostFirmwareSettings", identity="infra").get(name=HOST, namespace=site.namespace).to_dict()
    assert hfs["spec"]["settings"] == ASKED
    assert {k: hfs["status"]["settings"][k] for k in ASKED} == ASKED
    assert {c["type"]: c["status"] for c in hfs["status"]["conditions"]} == {"Valid": "True", "ChangeDetected": "False"}
    claim = site.api("HostClaim", identity="tenant-a").get(name="fw", namespace=TENANT).to_dict()
    assert claim["status"]["firmware"] == {"settings": ASKED}  # what the tenant sees, nothing else of the BIOS

    before = bios_requests(vm_env)
    site.api("HostClaim", identity="tenant-a").delete(name="fw", namespace=TENANT)
    rounds_until(site, lambda: site.read_claim("fw") is None)
    print(f"firmware: release to available, {bios_requests(vm_env) - before} BIOS requests")
    assert site.state(HOST) == "available"
    assert {k: bios(site)[k] for k in ASKED} == DEFAULTS  # back to the infra defaults
    assert BASELINE not in (site.read(HOST)["metadata"].get("annotations") or {})
    hfs = site.api("HostFirmwareSettings", identity="infra").get(name=HOST, namespace=site.namespace).to_dict()
    assert hfs["spec"]["settings"] == {}
    assert {k: hfs["status"]["settings"][k] for k in ASKED} == DEFAULTS


def test_an_attribute_the_bmc_does_not_have_is_a_provisioning_error_naming_it(vm_env, site):
    site.api("HostDeployPolicy", identity="infra").patch(
        body={"spec": {"firmware": {"allowedSettings": [{"name": "SriovGlobalEnable", "values": ["Enabled"]}]}}},
        name="policy",
        namespace=site.namespace,
        content_type="application/merge-patch+json",
    )
    image = {"url": f"{vm_env.state['vms']['images_url']}/live.iso", "format": "live-iso"}
    site.claim("sriov", image=image, online=True, firmware={"settings": {"SriovGlobalEnable": "Enabled"}})
    rounds_until(site, lambda: (site.read(HOST).get("status") or {}).get("errorType") == "provisioning error", 4)
    host = site.read(HOST)
    assert "SriovGlobalEnable" in host["status"]["errorMessage"], host["status"]
    assert host["status"]["poweredOn"] is False  # nothing booted
    assert "SriovGlobalEnable" not in bios(site)
    site.api("HostClaim", identity="tenant-a").delete(name="sriov", namespace=TENANT)
    rounds_until(site, lambda: site.read_claim("sriov") is None)
