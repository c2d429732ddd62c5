"""The VM fleet's pure parts: domain XML and system records (metalclaim_dev.devenv.vms)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from metalclaim_dev.devenv import vms


def test_vm_systems_are_stable_and_address_the_forwarded_bmc(tmp_path):
    first, second = vms.vm_systems(tmp_path, 2, 4242)
    assert first.name == "mc-vm-00" and second.boot_mac == "52:54:00:6d:63:01"
    assert first.address == f"redfish+http://127.0.0.1:4242/redfish/v1/Systems/{first.uuid}"
    assert vms.vm_systems(tmp_path, 1, 1)[0].uuid == first.uuid  # the same VM, whatever the port
    assert Path(first.disk).parent == tmp_path / "disks" and Path(first.serial_log).parent == tmp_path / "serial"


def test_domains_use_tcg_unless_kvm_is_asked_for_and_log_the_serial_console(tmp_path, monkeypatch):
    (system,) = vms.vm_systems(tmp_path, 1, 1)
    monkeypatch.delenv("METALCLAIM_VM_KVM", raising=False)
    domain = ET.fromstring(vms.domain_xml(system, vms.kvm_wanted()))
    # libvirt advertises kvm where nested KVM is unusable: the type is always said explicitly.
    assert domain.get("type") == "qemu"
    assert domain.find("os").get("firmware") == "efi"  # libvirt picks the firmware: boot mode can switch
    assert domain.find("memory").text == str(vms.VM_MEMORY_MIB) and domain.find("vcpu").text == "1"
    devices = domain.find("devices")
    assert devices.find("interface").get("type") == "user"  # user-mode networking only
    assert devices.find("interface/mac").get("address") == system.boot_mac
    assert devices.find("serial/source").get("path") == system.serial_log
    assert devices.find("rng").get("model") == "virtio"  # or the deploy system stalls on entropy
    assert {d.get("device") for d in devices.findall("disk")} == {"disk", "cdrom"}
    assert ET.fromstring(vms.domain_xml(system, True)).get("type") == "kvm"


def test_redfish_requests_are_counted_per_vm_from_the_emulator_access_log():
    from metalclaim_dev.vmenv import SHARED, redfish_requests

    systems = [{"name": "mc-vm-00", "uuid": "u-0"}, {"name": "mc-vm-01", "uuid": "u-1"}]
    log = "\n".join(
        [
            '127.0.0.1 - - [24/Nov/2026 05:00:00] "GET /redfish/v1/ HTTP/1.1" 200 -',
            '127.0.0.1 - - [24/Nov/2026 05:00:00] "POST /redfish/v1/SessionService/Sessions HTTP/1.1" 201 -',
            '127.0.0.1 - - [24/Nov/2026 05:00:00] "GET /redfish/v1/Systems/u-0 HTTP/1.1" 200 -',
            '127.0.0.1 - - [24/Nov/2026 05:00:01] "POST /redfish/v1/Systems/u-0/VirtualMedia/Cd HTTP/1.1" 204 -',
            '127.0.0.1 - - [24/Nov/2026 05:00:01] "PATCH /redfish/v1/Systems/u-1 HTTP/1.1" 204 -',
            "some other emulator log line, not a request",
        ]
    )
    assert redfish_requests(log, systems) == {"mc-vm-00": 2, "mc-vm-01": 1, SHARED: 2}
    assert redfish_requests("", systems) == {"mc-vm-00": 0, "mc-vm-01": 0, SHARED: 0}
