"""A fleet of fake BMCs: sushy-tools' Redfish emulator with its fake driver.

Every system the emulator serves is a plain record in its sqlite state, so a
fleet needs no libvirt and no VMs; power changes land 1-11 s after they are
requested, like a slow real BMC.
"""

from __future__ import annotations

import base64
import os
import pprint
import secrets
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt  # already a sushy-tools dependency

from .processes import LOOPBACK, http_ok, spawn, stop_process_group, wait_until

LISTEN_IP = LOOPBACK
STATE_DIR_NAME = "redfish-state"  # under the workdir; wiped on every start
# One namespace for the project so host UUIDs are stable across runs and ports.
_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "devenv.metalclaim")
# NIC IPs are 192.0.2.<10+i> (TEST-NET-1, never contacted); .254 is the last.
MAX_HOSTS = 245
# The fake driver serves power, boot and NICs only; disks come from the emulator's static
# storage driver, one controller with one drive per system (medium hosts even, large odd).
STORAGE_ID = "1"
DISK_BYTES = (480_103_981_056, 1_920_383_410_176)
# Virtual media: a CD for boot ISOs and a removable device for config drives (sushy-tools' own pair).
VMEDIA_DEVICES = {
    "Cd": {"Name": "Virtual CD", "MediaTypes": ["CD", "DVD"]},
    "Floppy": {"Name": "Virtual Removable Media", "MediaTypes": ["Floppy", "USBStick"]},
}


@dataclass(frozen=True)
class RedfishSystem:
    name: str
    uuid: str
    boot_mac: str
    address: str  # Metal3 BMC address


@dataclass(frozen=True)
class RedfishFleet:
    endpoint: str
    username: str
    password: str = field(repr=False)  # keep it out of reprs and test output
    systems: tuple[RedfishSystem, ...]
    pid: int
    state_dir: str
    log_file: str


def fleet_systems(n_hosts: int, port: int) -> tuple[RedfishSystem, ...]:
    if not 1 <= n_hosts <= MAX_HOSTS:
        raise ValueError(f"n_hosts must be in 1..{MAX_HOSTS}, got {n_hosts}")
    systems = []
    for i in range(n_hosts):
        name = f"host-{i}"
        system_uuid = str(uuid.uuid5(_UUID_NAMESPACE, name))
        # 0x52 has the locally-administered bit set and the multicast bit clear.
        mac = f"52:54:00:{i >> 16 & 0xFF:02x}:{i >> 8 & 0xFF:02x}:{i & 0xFF:02x}"
        address = f"redfish+http://{LISTEN_IP}:{port}/redfish/v1/Systems/{system_uuid}"
        systems.append(RedfishSystem(name, system_uuid, mac, address))
    return tuple(systems)


def write_emulator_config(
    workdir: Path,
    systems: tuple[RedfishSystem, ...],
    username: str,
    password: str,
) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    state_dir = workdir / STATE_DIR_NAME
    # Fake systems are only seeded into an empty state DB, so start fresh.
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir()

    # The emulator accepts bcrypt ($2a$/$2b$/$2y$) only and re-checks it on
    # every request; cost 4 keeps a busy fleet fast for a random throwaway secret.
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd = workdir / "redfish-htpasswd"
    htpasswd.unlink(missing_ok=True)  # so the 0600 mode below always applies
    htpasswd.touch(mode=0o600)
    htpasswd.write_text(f"{username}:{digest}\n")

    config = {
        "SUSHY_EMULATOR_LISTEN_IP": LISTEN_IP,
        "SUSHY_EMULATOR_AUTH_FILE": str(htpasswd),
        "SUSHY_EMULATOR_STATE_DIR": str(state_dir),
        "SUSHY_EMULATOR_FEATURE_SET": "full",
        "SUSHY_EMULATOR_FAKE_DRIVER": True,
        "SUSHY_EMULATOR_FAKE_SYSTEMS": [
            {
                "uuid": s.uuid,
                "name": s.name,
                "power_state": "Off",
                "boot_mode": "UEFI",
                # True would PUT every change to EXTERNAL_NOTIFICATION_URL.
                "external_notifier": False,
                "nics": [{"mac": s.boot_mac, "ip": f"192.0.2.{10 + i}"}],
            }
            for i, s in enumerate(systems)
        ],
        "SUSHY_EMULATOR_VMEDIA_DEVICES": VMEDIA_DEVICES,
        "SUSHY_EMULATOR_VMEDIA_VERIFY_SSL": False,
        # Without an entry for a system its Storage collection answers 500.
        "SUSHY_EMULATOR_STORAGE": {
            s.uuid: [
                {
                    "Id": STORAGE_ID,
                    "Name": "Local Storage Controller",
                    "StorageControllers": [{"MemberId": "0", "Name": "Contoso Integrated RAID", "SpeedGbps": 12}],
                    "Drives": [f"disk-{i}"],
                }
            ]
            for i, s in enumerate(systems)
        },
        "SUSHY_EMULATOR_DRIVES": {
            (s.uuid, STORAGE_ID): [
                {"Id": f"disk-{i}", "Name": "Disk 0", "CapacityBytes": DISK_BYTES[i % 2], "Protocol": "SATA"}
            ]
            for i, s in enumerate(systems)
        },
    }
    lines = [f"{key} = {pprint.pformat(value)}\n" for key, value in config.items()]
    config_path = workdir / "redfish-emulator.conf.py"
    config_path.write_text("# Generated by metalclaim_dev.devenv.redfish\n" + "".join(lines))
    return config_path


def start_fleet(
    workdir: Path,
    n_hosts: int,
    port: int,
    username: str = "admin",
    password: str | None = None,
    python: str = sys.executable,
    timeout: float = 30,
) -> RedfishFleet:
    if password is None:
        password = secrets.token_urlsafe(24)  # random per fleet
    systems = fleet_systems(n_hosts, port)
    config = write_emulator_config(workdir, systems, username, password)
    log_file = workdir / "redfish.log"
    cmd = [
        python,
        "-m",
        "sushy_tools.emulator.main",
        "--config",
        str(config),
        "--interface",
        LISTEN_IP,
        "--port",
        str(port),
    ]
    # The emulator reads this at import time, before --config; never inherit one.
    env = {k: v for k, v in os.environ.items() if k != "SUSHY_EMULATOR_CONFIG"}
    # Virtual-media inserts download the ISO to TMPDIR: keep it inside the fleet.
    env["TMPDIR"] = str(workdir / STATE_DIR_NAME)
    log_file.unlink(missing_ok=True)  # one log per start: tails stay relevant
    pid = spawn(cmd, log_file, env=env, cwd=workdir)
    endpoint = f"http://{LISTEN_IP}:{port}"
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    try:
        wait_until(
            lambda: http_ok(f"{endpoint}/redfish/v1/Systems", headers={"Authorization": f"Basic {token}"}),
            "Redfish emulator",
            timeout,
            pid,
            log_file,
        )
    except BaseException:
        stop_fleet(pid)
        raise
    return RedfishFleet(
        endpoint=endpoint,
        username=username,
        password=password,
        systems=systems,
        pid=pid,
        state_dir=str(workdir / STATE_DIR_NAME),
        log_file=str(log_file),
    )


def stop_fleet(pid: int, timeout: float = 10) -> None:
    """Stop the emulator's process group (no error if it is already gone)."""
    stop_process_group(pid, timeout)
