"""The devenv's BMC fleet: a real sushy-tools emulator (fake driver) on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sushy
from sushy import auth as sushy_auth
from sushy import exceptions as sushy_exc

from metalclaim_dev.devenv.processes import free_port
from metalclaim_dev.devenv.redfish import DISK_BYTES, RedfishFleet, fleet_systems, start_fleet, stop_fleet

pytestmark = pytest.mark.integration

N_HOSTS = 3


def _client(fleet: RedfishFleet, password: str | None = None) -> sushy.Sushy:
    auth = sushy_auth.BasicAuth(fleet.username, fleet.password if password is None else password)
    return sushy.Sushy(f"{fleet.endpoint}/redfish/v1", auth=auth)


def _eventually(check: Callable[[], bool], timeout: float = 20) -> bool:
    # Fake-driver power changes land 1-11 s later: poll rather than guess a sleep.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedfishFleet]:
    fleet = start_fleet(tmp_path_factory.mktemp("redfish"), N_HOSTS, free_port())
    yield fleet
    stop_fleet(fleet.pid)


def test_fleet_systems_is_pure_and_stable() -> None:
    systems = fleet_systems(N_HOSTS, 8000)
    assert systems == fleet_systems(N_HOSTS, 8000)
    assert [s.name for s in systems] == ["host-0", "host-1", "host-2"]
    assert len({s.uuid for s in systems}) == len({s.boot_mac for s in systems}) == N_HOSTS
    # The port only shows up in the address; identities survive a port change.
    assert [s.uuid for s in fleet_systems(N_HOSTS, 9000)] == [s.uuid for s in systems]
    assert systems[1].address == f"redfish+http://127.0.0.1:8000/redfish/v1/Systems/{systems[1].uuid}"
    assert all(int(s.boot_mac.split(":")[0], 16) & 0b11 == 0b10 for s in systems)  # local, unicast


def test_password_not_in_repr_or_config(fleet: RedfishFleet) -> None:
    assert fleet.password not in repr(fleet)
    workdir = Path(fleet.log_file).parent
    for path in workdir.glob("redfish*"):
        if path.is_file():
            assert fleet.password.encode() not in path.read_bytes(), path


def test_systems_match_fleet(fleet: RedfishFleet) -> None:
    systems = _client(fleet).get_system_collection().get_members()
    assert len(systems) == N_HOSTS
    by_uuid = {s.uuid: s for s in systems}
    for expected in fleet.systems:
        system = by_uuid[expected.uuid]
        assert system.name == expected.name
        assert system.identity == expected.uuid
        assert system.path == expected.address.removeprefix(f"redfish+{fleet.endpoint}")
        assert [nic.mac_address for nic in system.ethernet_interfaces.get_members()] == [expected.boot_mac]
        assert system.boot.mode == sushy.BootSourceOverrideMode.UEFI
        assert system.power_state == sushy.PowerState.OFF


def test_virtual_media_cd_and_config_drive_device_are_available(fleet: RedfishFleet) -> None:
    system = _client(fleet).get_system(fleet.systems[0].address.removeprefix(f"redfish+{fleet.endpoint}"))
    media = {m.identity: m for m in system.virtual_media.get_members()}
    assert sorted(media) == ["Cd", "Floppy"]
    assert sushy.VirtualMediaType.CD in media["Cd"].media_types
    assert sushy.VirtualMediaType.USB_STICK in media["Floppy"].media_types
    assert not any(m.inserted for m in media.values())


def test_every_system_has_its_own_disk(fleet: RedfishFleet) -> None:
    client = _client(fleet)
    for index, expected in enumerate(fleet.systems):
        system = client.get_system(expected.address.removeprefix(f"redfish+{fleet.endpoint}"))
        drives = [drive for storage in system.storage.get_members() for drive in storage.drives]
        assert [(d.identity, d.capacity_bytes) for d in drives] == [(f"disk-{index}", DISK_BYTES[index % 2])]


def test_unauthenticated_request_gets_401(fleet: RedfishFleet) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as exc_info:
        opener.open(f"{fleet.endpoint}/redfish/v1/Systems", timeout=5)
    exc_info.value.close()
    assert exc_info.value.code == 401


def test_wrong_password_is_rejected(fleet: RedfishFleet) -> None:
    with pytest.raises(sushy_exc.AccessError):
        _client(fleet, password="not-" + fleet.password).get_system_collection()


def test_power_on_is_eventually_reflected(fleet: RedfishFleet) -> None:
    system = _client(fleet).get_system(fleet.systems[1].address.removeprefix(f"redfish+{fleet.endpoint}"))
    system.reset_system(sushy.ResetType.ON)

    def is_on() -> bool:
        system.refresh()
        return system.power_state == sushy.PowerState.ON

    assert _eventually(is_on), f"{fleet.systems[1].name} never powered on"


def test_stop_fleet_leaves_no_process(tmp_path: Path) -> None:
    fleet = start_fleet(tmp_path, 1, free_port())
    stop_fleet(fleet.pid)
    with pytest.raises(ProcessLookupError):
        os.kill(fleet.pid, 0)
    with pytest.raises(ProcessLookupError):
        os.killpg(fleet.pid, 0)
    stop_fleet(fleet.pid)  # idempotent: already gone is fine


def test_start_fails_fast_with_log_tail_when_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        with pytest.raises(RuntimeError, match="Address already in use"):
            start_fleet(tmp_path, 1, squatter.getsockname()[1], timeout=20)
