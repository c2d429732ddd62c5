# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Redfish inventory (System, Processors, EthernetInterfaces, Storage) -> Metal3's status.hardware. Pure."""

from __future__ import annotations

import ipaddress
import re

_ARCHES = {
    "x86-64": "x86_64",
    "x86": "i686",
    "ia-64": "ia64",
    "arm-a64": "aarch64",
    "arm-a32": "armv7l",
    "mips64": "mips64",
    "powerisa": "ppc64le",
}
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


def hardware_from_redfish(
    system: dict,
    nics: list[dict] | None = None,
    processors: list[dict] | None = None,
    drives: list[dict] | None = None,
    simple_storage: list[dict] | None = None,
) -> dict:
    """Metal3's BareMetalHost status.hardware from Redfish documents (plain JSON dicts).

    `system` is the ComputerSystem; the others are the members of its EthernetInterfaces,
    Processors, Storage drives and SimpleStorage collections, or None where the BMC does not
    expose that section. RAM comes from the system's MemorySummary (as Ironic reads it).
    What the BMC does not say is left out, never guessed or zeroed.
    """
    hardware: dict = {}
    vendor = _pick(
        manufacturer=system.get("Manufacturer"),
        productName=system.get("Model"),
        serialNumber=system.get("SerialNumber"),
    )
    if vendor:
        hardware["systemVendor"] = vendor
    if _text(system.get("HostName")):
        hardware["hostname"] = _text(system["HostName"])
    if _text(system.get("BiosVersion")):
        hardware["firmware"] = {"bios": {"version": _text(system["BiosVersion"])}}
    cpu = _cpu(system, processors)
    if cpu:
        hardware["cpu"] = cpu
    ram = _ram_mebibytes(system)
    if ram is not None:
        hardware["ramMebibytes"] = ram
    if nics is not None:
        hardware["nics"] = [nic for nic in (_nic(doc) for doc in nics) if nic]
    disks = _disks(drives, simple_storage)
    if disks is not None:
        hardware["storage"] = disks
    return hardware


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _pick(**values) -> dict:
    return {key: _text(value) for key, value in values.items() if _text(value)}


def _cpu(system: dict, processors: list[dict] | None) -> dict:
    cpus = [p for p in processors or [] if p.get("ProcessorType") in (None, "CPU") and _enabled(p)]
    cpu: dict = {}
    if cpus:
        first = cpus[0]
        arch = _ARCHES.get(_text(first.get("InstructionSet")).lower())
        if arch:
            cpu["arch"] = arch
        if _text(first.get("Model")):
            cpu["model"] = _text(first["Model"])
        if _number(first.get("MaxSpeedMHz")):
            cpu["clockMegahertz"] = float(first["MaxSpeedMHz"])
        # Metal3 counts logical CPUs (threads), as Ironic's inspection reports them.
        cpu["count"] = sum(int(_number(p.get("TotalThreads")) or _number(p.get("TotalCores")) or 1) for p in cpus)
        return cpu
    summary = system.get("ProcessorSummary") or {}
    count = _number(summary.get("LogicalProcessorCount")) or _number(summary.get("Count"))
    if count:
        cpu["count"] = int(count)
        if _text(summary.get("Model")):
            cpu["model"] = _text(summary["Model"])
    return cpu


def _enabled(resource: dict) -> bool:
    # Absent sockets and empty DIMM slots are listed with State "Absent".
    return ((resource.get("Status") or {}).get("State") or "Enabled") != "Absent"


def _ram_mebibytes(system: dict) -> int | None:
    total_gib = _number((system.get("MemorySummary") or {}).get("TotalSystemMemoryGiB"))
    return round(total_gib * 1024) if total_gib else None


def _nic(doc: dict) -> dict:
    nic = _pick(name=doc.get("Id") or doc.get("Name"))
    mac = _text(doc.get("MACAddress")) or _text(doc.get("PermanentMACAddress"))
    if _MAC.match(mac):
        nic["mac"] = mac.lower()
    ip = _first_address(doc.get("IPv4Addresses")) or _first_address(doc.get("IPv6Addresses"))
    if ip:
        nic["ip"] = ip
    speed = _number(doc.get("SpeedMbps"))
    if speed:
        nic["speedGbps"] = int(speed // 1000)
    return nic if "mac" in nic or "ip" in nic else {}


def _first_address(entries) -> str:
    for entry in entries or []:
        address = _text((entry or {}).get("Address"))
        if not address or address in ("0.0.0.0", "::"):
            continue
        try:
            if ipaddress.ip_address(address).is_link_local:
                continue
        except ValueError:
            continue
        return address
    return ""


def _disks(drives: list[dict] | None, simple_storage: list[dict] | None) -> list[dict] | None:
    if drives is not None:
        return [_disk(d) for d in drives if _enabled(d)]
    if simple_storage is not None:
        return [_disk(d) for controller in simple_storage for d in controller.get("Devices") or [] if _enabled(d)]
    return None


def _disk(doc: dict) -> dict:
    disk = _pick(
        name=doc.get("Name") or doc.get("Id"),
        model=doc.get("Model"),
        vendor=doc.get("Manufacturer"),
        serialNumber=doc.get("SerialNumber"),
    )
    size = _number(doc.get("CapacityBytes"))
    if size is not None:
        disk["sizeBytes"] = int(size)
    media = _text(doc.get("MediaType")).upper()
    if _text(doc.get("Protocol")).upper() == "NVME":
        disk["type"], disk["rotational"] = "NVME", False
    elif media in ("HDD", "SSD"):
        disk["type"], disk["rotational"] = media, media == "HDD"
    return disk
