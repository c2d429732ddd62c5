"""The provisioner on real VMs: libvirtd + QEMU (TCG) behind sushy-tools' libvirt driver (metalclaim_dev.devenv.vms).

One VM for the module (VMs are heavy; the 2 cores are shared), its own control plane and namespaces, so the file
runs alone or beside others. The tests run in order on that VM: registration and inspection, then a live ISO.
If the VM environment cannot start, every test fails with the reason: never a skip.
Each phase's duration is printed on stderr (shown with pytest's capture on) and written to <devenv>/vm-phases.json.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from metalclaim_dev.devenv import vms
from metalclaim_dev.devenv.images import build_marker_iso
from metalclaim_dev.site import settle
from metalclaim_dev.support import eventually
from metalclaim_dev.vmenv import vm_environment, vm_site

HOST = "vm-0"
LIVE_ISO_MARKER = "metalclaim-live-iso-marker-7f3c"


@pytest.fixture(scope="module")
def vm_env(tmp_path_factory, pytestconfig):
    yield from vm_environment(tmp_path_factory, pytestconfig, "vms")


@pytest.fixture(scope="module")
def site(vm_env, tmp_path_factory):
    yield from vm_site(vm_env, tmp_path_factory, "vm-site")


def vm(vm_env) -> dict:
    return vm_env.state["vms"]["systems"][0]


def serial_text(vm_env) -> str:
    path = Path(vm(vm_env)["serial_log"])
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_vm_is_registered_and_inspected_as_libvirt_reports_it(vm_env, site):
    started = time.monotonic()
    site.host(HOST, 0)
    host = settle(site, HOST, "available")
    vm_env.state["phases"].record("register + inspect", started)
    hardware = site.api("HardwareData").get(name=HOST, namespace=site.namespace).to_dict()["spec"]["hardware"]
    assert hardware["cpu"]["count"] == 1
    assert hardware["ramMebibytes"] == vms.VM_MEMORY_MIB
    assert [nic["mac"] for nic in hardware["nics"]] == [vm(vm_env)["boot_mac"]]
    assert sorted(disk["sizeBytes"] for disk in hardware["storage"]) == [vms.VM_DATA_DISK_BYTES, vms.VM_DISK_BYTES]
    assert host["status"]["hardware"]["ramMebibytes"] == vms.VM_MEMORY_MIB
    # What an infra team sees with kubectl.
    table = vm_env.kubectl("infra", "get", "hardwaredata", "-n", site.namespace).stdout
    header, row = table.splitlines()[:2]
    columns = dict(zip(header.split(), row.split(), strict=True))
    assert columns["CPUS"] == "1" and columns["RAM-MIB"] == str(vms.VM_MEMORY_MIB), table


def test_a_live_iso_boots_and_prints_its_marker_on_the_serial_console(vm_env, site):
    iso = build_marker_iso(LIVE_ISO_MARKER)
    shutil.copy(iso, Path(vm_env.state["vms"]["images_dir"]) / "live.iso")
    assert LIVE_ISO_MARKER not in serial_text(vm_env)
    started = time.monotonic()
    site.api("BareMetalHost").patch(
        body={
            "spec": {
                "online": True,
                "image": {"url": f"{vm_env.state['vms']['images_url']}/live.iso", "format": "live-iso"},
            }
        },
        name=HOST,
        namespace=site.namespace,
        content_type="application/merge-patch+json",
    )
    host = settle(site, HOST, "provisioned", redfish_timeout=30)  # the driver copies the ISO within the request
    assert host["status"]["poweredOn"] is True
    vm_env.state["phases"].record("live-iso: provisioned", started)
    eventually(lambda: LIVE_ISO_MARKER in serial_text(vm_env), timeout=120, interval=1, message="the live ISO's marker")
    vm_env.state["phases"].record("live-iso: marker on serial", started)
