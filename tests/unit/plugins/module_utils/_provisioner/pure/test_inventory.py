"""Redfish inventory -> Metal3 status.hardware, checked against the BareMetalHost CRD's schema."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import inventory as rf

REPO = Path(__file__).resolve().parents[6]
UUID = "b2729411-0624-57d9-8e06-6d4b42658969"


SYSTEM = {
    "Id": "System.Embedded.1",
    "Manufacturer": "Dell Inc.",
    "Model": "PowerEdge R650",
    "SerialNumber": "CN7016",
    "BiosVersion": "1.6.5",
    "HostName": "node-1",
    "ProcessorSummary": {"Count": 2, "LogicalProcessorCount": 64, "Model": "Intel Xeon Gold 6338"},
    "MemorySummary": {"TotalSystemMemoryGiB": 256},
}
PROCESSORS = [
    {
        "Id": "CPU.Socket.1",
        "ProcessorType": "CPU",
        "InstructionSet": "x86-64",
        "Model": "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
        "MaxSpeedMHz": 4000,
        "TotalCores": 32,
        "TotalThreads": 64,
        "Status": {"State": "Enabled"},
    },
    {"Id": "CPU.Socket.2", "ProcessorType": "CPU", "TotalCores": 32, "TotalThreads": 64},
    {"Id": "CPU.Socket.3", "ProcessorType": "CPU", "Status": {"State": "Absent"}},
    {"Id": "Video.Embedded.1", "ProcessorType": "GPU", "TotalCores": 1024},
]
NICS = [
    {
        "Id": "NIC.Integrated.1-1-1",
        "MACAddress": "B0:7B:25:DE:1A:2C",
        "SpeedMbps": 25000,
        "IPv4Addresses": [{"Address": "0.0.0.0"}, {"Address": "192.0.2.10"}],
        "IPv6Addresses": [{"Address": "fe80::1"}],
    },
    {
        "Id": "NIC.Integrated.1-2-1",
        "PermanentMACAddress": "b0:7b:25:de:1a:2d",
        "IPv6Addresses": [{"Address": "fe80::2"}],
    },
    {"Id": "NIC.Slot.3-1", "MACAddress": "", "IPv6Addresses": [{"Address": "2001:db8::7"}]},
    {"Id": "iDRAC", "MACAddress": "not-a-mac"},
]
DRIVES = [
    {
        "Id": "Disk.Bay.0",
        "Name": "Solid State Disk 0:1:0",
        "Model": "MZ7LH480",
        "Manufacturer": "SAMSUNG",
        "SerialNumber": "S45PNA0M",
        "CapacityBytes": 479559942144,
        "MediaType": "SSD",
        "Protocol": "SATA",
    },
    {"Id": "Disk.Direct.0", "Name": "PCIe SSD", "CapacityBytes": 1600321314816, "Protocol": "NVMe", "MediaType": "SSD"},
    {"Id": "Disk.Bay.1", "Name": "Physical Disk 1", "CapacityBytes": 4000787030016, "MediaType": "HDD"},
    {"Id": "Disk.Bay.2", "Name": "Empty bay", "Status": {"State": "Absent"}},
]


def test_full_inventory_maps_to_metal3_hardware():
    hardware = rf.hardware_from_redfish(SYSTEM, nics=NICS, processors=PROCESSORS, drives=DRIVES)
    assert hardware == {
        "systemVendor": {"manufacturer": "Dell Inc.", "productName": "PowerEdge R650", "serialNumber": "CN7016"},
        "hostname": "node-1",
        "firmware": {"bios": {"version": "1.6.5"}},
        "cpu": {
            "arch": "x86_64",
            "model": "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
            "clockMegahertz": 4000.0,
            "count": 128,
        },
        "ramMebibytes": 262144,
        "nics": [
            {"name": "NIC.Integrated.1-1-1", "mac": "b0:7b:25:de:1a:2c", "ip": "192.0.2.10", "speedGbps": 25},
            {"name": "NIC.Integrated.1-2-1", "mac": "b0:7b:25:de:1a:2d"},
            {"name": "NIC.Slot.3-1", "ip": "2001:db8::7"},
        ],
        "storage": [
            {
                "name": "Solid State Disk 0:1:0",
                "model": "MZ7LH480",
                "vendor": "SAMSUNG",
                "serialNumber": "S45PNA0M",
                "sizeBytes": 479559942144,
                "type": "SSD",
                "rotational": False,
            },
            {"name": "PCIe SSD", "sizeBytes": 1600321314816, "type": "NVME", "rotational": False},
            {"name": "Physical Disk 1", "sizeBytes": 4000787030016, "type": "HDD", "rotational": True},
        ],
    }


def test_thin_inventory_leaves_sections_out():
    # What the sushy-tools fake driver serves: a manufacturer, NICs without IPs, nothing else.
    system = {"Id": UUID, "Manufacturer": "Sushy Emulator", "ProcessorSummary": {}, "MemorySummary": {}}
    nics = [{"Id": "52:54:00:00:00:01", "MACAddress": "52:54:00:00:00:01"}]
    assert rf.hardware_from_redfish(system, nics=nics) == {
        "systemVendor": {"manufacturer": "Sushy Emulator"},
        "nics": [{"name": "52:54:00:00:00:01", "mac": "52:54:00:00:00:01"}],
    }
    assert rf.hardware_from_redfish({"Id": "1"}) == {}
    # An exposed but empty section is reported empty, not absent.
    assert rf.hardware_from_redfish({"Id": "1"}, nics=[], drives=[]) == {"nics": [], "storage": []}


def test_summaries_stand_in_for_missing_collections():
    hardware = rf.hardware_from_redfish(SYSTEM)
    assert hardware["cpu"] == {"count": 64, "model": "Intel Xeon Gold 6338"}
    assert hardware["ramMebibytes"] == 262144
    system = dict(SYSTEM, ProcessorSummary={"Count": 2}, MemorySummary={"TotalSystemMemoryGiB": 15.5})
    hardware = rf.hardware_from_redfish(system)
    assert hardware["cpu"] == {"count": 2} and hardware["ramMebibytes"] == 15872


def test_simple_storage_is_used_when_storage_is_absent():
    simple = [{"Devices": [{"Name": "SATA disk", "CapacityBytes": 1000, "Manufacturer": "ACME"}, {"Name": "DVD"}]}]
    assert rf.hardware_from_redfish({"Id": "1"}, simple_storage=simple)["storage"] == [
        {"name": "SATA disk", "vendor": "ACME", "sizeBytes": 1000},
        {"name": "DVD"},
    ]
    assert rf.hardware_from_redfish({"Id": "1"}, drives=[], simple_storage=simple)["storage"] == []


def test_odd_values_are_ignored_not_copied():
    system = {"Manufacturer": "  ", "Model": 42, "MemorySummary": {"TotalSystemMemoryGiB": -1}}
    processors = [{"InstructionSet": "RISC-V", "TotalThreads": True, "MaxSpeedMHz": "fast"}]
    assert rf.hardware_from_redfish(system, processors=processors) == {"cpu": {"count": 1}}


def _strict(schema: dict) -> dict:
    """The CRD's schema as JSON Schema with unknown fields refused, like strict field validation."""
    schema = copy.deepcopy(schema)
    nodes = [schema]
    while nodes:
        node = nodes.pop()
        if isinstance(node, dict):
            if "properties" in node:
                node.setdefault("additionalProperties", False)
            nodes.extend(node.values())
        elif isinstance(node, list):
            nodes.extend(node)
    return schema


def test_mapped_inventory_fits_the_bmh_crd():
    crd = yaml.safe_load((REPO / "config" / "crd" / "metal3.io_baremetalhosts.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = _strict(version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["hardware"])
    full = rf.hardware_from_redfish(SYSTEM, nics=NICS, processors=PROCESSORS, drives=DRIVES)
    jsonschema.validate(full, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**full, "cpus": 1}, schema)  # the check itself refuses unknown fields
