"""The Redfish client against the devenv's sushy-tools emulator, directly and through a fault proxy.

Figures (request counts, failure times) are printed; run with -s to see them.
"""

from __future__ import annotations

import logging
import random
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import redfish as rf
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.bmc_address import (
    parse_bmc_address,
)

from metalclaim_dev.devenv.redfish import DISK_BYTES
from metalclaim_dev.netfixtures import FaultProxy, FileServer
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration

FAST = {"timeout": 1.0, "retries": 1, "retry_delay": 0.5}  # for the fault tests: fail fast
SLACK = 1.5  # scheduling and process noise on a shared 2-core machine


@pytest.fixture(scope="module")
def fleet(devenv) -> dict:
    state = dict(devenv.state["redfish"])
    state["password"] = Path(state["password_file"]).read_text()
    return state


@pytest.fixture
def system(fleet) -> dict:
    """A random system of the fleet, Off, media ejected and boot override cleared before and after: the devenv is
    shared with other test files of this worker, which may leave a system on."""
    index = random.randrange(len(fleet["systems"]))
    chosen = dict(fleet["systems"][index], index=index)
    _settled(fleet, chosen)
    yield chosen
    _settled(fleet, chosen)


def _settled(fleet: dict, chosen: dict) -> None:
    with rf.RedfishClient(parse_bmc_address(chosen["address"]), fleet["username"], fleet["password"]) as client:
        for device in rf.MEDIA_TYPES:
            if client.media(device)["inserted"]:
                client.eject_media(device)
        client.clear_boot_override()
        if client.power_state() != "Off":
            client.set_power("ForceOff")
            eventually(lambda: client.power_state() == "Off", timeout=30, message=f"{chosen['name']} Off")


def connect(fleet: dict, address: str, password: str | None = None, **options) -> rf.RedfishClient:
    return rf.RedfishClient(
        parse_bmc_address(address), fleet["username"], fleet["password"] if password is None else password, **options
    )


@pytest.fixture
def proxy(fleet):
    with FaultProxy(fleet["endpoint"]) as proxy:
        yield proxy


def test_probe_reads_the_system_with_basic_auth_after_one_session_attempt(fleet, system):
    with connect(fleet, system["address"]) as client:
        started = time.monotonic()
        client.probe()
        elapsed = time.monotonic() - started
        # Root, the session attempt the emulator refuses (no session service), the system.
        assert client.request_log == [
            "GET /redfish/v1/",
            "POST /redfish/v1/SessionService/Sessions",
            f"GET /redfish/v1/Systems/{system['uuid']}",
        ]
        assert client.power_state() == "Off"
        assert client.requests == 3  # the probe's document answers the first read
        client.power_state()
        assert client.requests == 4  # later reads fetch it again
    print(f"\nprobe: {client.requests - 1} requests incl. session fallback, {elapsed * 1000:.0f} ms")


def test_wrong_password_is_a_credentials_error_without_the_password(fleet, system, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "not-" + fleet["password"]
    with connect(fleet, system["address"], password=wrong) as client, pytest.raises(rf.RedfishError) as raised:
        client.probe()
    error = raised.value
    assert (error.kind, error.temporary, error.status) == ("credentials", False, 401)
    assert "rejected the credentials" in str(error)
    secrets = rf.basic_auth_secrets(fleet["username"], wrong) + rf.basic_auth_secrets(
        fleet["username"], fleet["password"]
    )
    for secret in secrets:
        assert secret not in str(error)
        assert secret not in repr(error)
        assert secret not in caplog.text
    assert caplog.records, "sushy logged nothing: the log check above proved nothing"


def test_power_on_lands_later_and_is_polled(fleet, system):
    with connect(fleet, system["address"]) as client:
        client.set_power("On")
        started = time.monotonic()
        states = []

        def is_on() -> bool:
            states.append(client.power_state())
            return states[-1] == "On"

        eventually(is_on, timeout=20, interval=0.5, message=f"{system['name']} powered on")
        print(f"\npower On landed after {time.monotonic() - started:.1f} s, {len(states)} polls")
        client.set_power("ForceOff")
        off_since = time.monotonic()
        eventually(lambda: client.power_state() == "Off", timeout=20, interval=0.5, message="powered off")
        took = time.monotonic() - off_since
    print(f"power ForceOff landed after {took:.1f} s")


def test_inventory_has_the_fleet_nic_and_disk(fleet, system):
    with connect(fleet, system["address"]) as client:
        client.probe()
        before = client.requests
        hardware = client.inventory()
        requests = client.requests - before
    assert hardware["systemVendor"] == {"manufacturer": "Sushy Emulator"}
    # The fake driver serves a NIC's MAC only: the IP the fleet configures never reaches Redfish.
    assert hardware["nics"] == [{"name": system["boot_mac"], "mac": system["boot_mac"]}]
    assert [(d["name"], d["sizeBytes"]) for d in hardware["storage"]] == [("Disk 0", DISK_BYTES[system["index"] % 2])]
    # Processors, memory, BIOS version, model and serial: the fake driver has none, so none are reported.
    assert set(hardware) == {"systemVendor", "nics", "storage"}
    print(f"\ninventory: {requests} requests after probe")


def test_boot_once_to_cd_reads_back_cd(fleet, system):
    with connect(fleet, system["address"]) as client:
        client.set_boot_once("Cd", mode="UEFI")
        boot = client.boot_override()
        # The emulator stores the target and mode but always reports "Continuous".
        assert boot["target"] == "Cd" and boot["mode"] == "UEFI"
        assert boot["enabled"] in ("Once", "Continuous")
        client.clear_boot_override()
        assert client.boot_override()["target"] in ("None", "Hdd")


def test_insert_and_eject_media_served_from_loopback(fleet, system, tmp_path):
    with FileServer(tmp_path) as files, connect(fleet, system["address"]) as client:
        live = files.add("live.iso", b"\0" * 32768 + b"CD001")
        config = files.add("config-drive.iso", b"cidata")
        assert client.media() == {"inserted": False, "image": None}
        client.insert_media(live)
        client.insert_media(config, device=rf.MEDIA_CONFIG)
        assert ("GET", "/live.iso") in files.requests and ("GET", "/config-drive.iso") in files.requests
        assert client.media() == {"inserted": True, "image": live}
        assert client.media(rf.MEDIA_CONFIG) == {"inserted": True, "image": config}
        before = client.requests
        client.eject_media()
        eject_requests = client.requests - before
        assert client.media() == {"inserted": False, "image": None}
        assert client.media(rf.MEDIA_CONFIG)["inserted"]  # the other device is untouched
        client.eject_media(rf.MEDIA_CONFIG)
        assert client.media(rf.MEDIA_CONFIG) == {"inserted": False, "image": None}
    print(f"\neject: {eject_requests} request(s)")


def test_insert_of_a_missing_image_fails_clearly(fleet, system, tmp_path):
    with FileServer(tmp_path) as files, connect(fleet, system["address"]) as client:
        missing = files.url("no-such.iso")
        with pytest.raises(rf.RedfishError) as raised:
            client.insert_media(missing)
        assert ("GET", "/no-such.iso") in files.requests
        assert client.media()["inserted"] is False
    error = raised.value
    assert (error.kind, error.temporary, error.status) == ("rejected", False, 400)
    assert str(error).startswith(f"inserting {missing} into virtual media cd")
    assert "404" in str(error)


def test_tls_to_a_plain_http_bmc_fails_at_once(fleet, system):
    address = system["address"].replace("redfish+http://", "redfish+https://")
    with connect(fleet, address, verify_tls=False, **FAST) as client, pytest.raises(rf.RedfishError) as raised:
        client.probe()
    assert (raised.value.kind, client.requests) == ("unreachable", 1)  # sushy never retries TLS failures
    assert "TLS handshake failed" in str(raised.value)


def test_dead_bmc_fails_within_the_bound(fleet, system, proxy):
    address = proxy.address_for(system["address"])
    proxy.down()
    with connect(fleet, address, **FAST) as client:
        started = time.monotonic()
        with pytest.raises(rf.RedfishError) as raised:
            client.probe()
        elapsed = time.monotonic() - started
    bound = FAST["timeout"] * (FAST["retries"] + 1) + FAST["retry_delay"] * FAST["retries"]
    assert (raised.value.kind, raised.value.temporary) == ("unreachable", True)
    assert "connection refused" in str(raised.value)
    assert client.requests == FAST["retries"] + 1
    assert elapsed < bound + SLACK
    # The same BMC back up: the proxy is a fair stand-in for the emulator.
    proxy.passthrough()
    with connect(fleet, address, **FAST) as client:
        client.probe()
    print(f"\ndead BMC (connection refused): failed after {elapsed:.2f} s, bound {bound:.1f} s")


def test_bmc_answering_500_is_a_temporary_bmc_error(fleet, system, proxy):
    address = proxy.address_for(system["address"])
    with connect(fleet, address, **FAST) as client:
        client.probe()
        client.power_state()  # the probe's document is used up: the next read asks the BMC
        proxy.reset_counts()
        proxy.fail(500)
        with pytest.raises(rf.RedfishError) as raised:
            client.power_state()
    assert (raised.value.kind, raised.value.temporary, raised.value.status) == ("bmc", True, 500)
    # sushy re-sends a GET answered 5xx retries + 1 times.
    assert proxy.counts[f"GET /redfish/v1/Systems/{system['uuid']}"] == FAST["retries"] + 2
    print(f"\nHTTP 500 on a GET: {proxy.total} requests before giving up")


def test_transient_500_is_retried_away(fleet, system, proxy):
    with connect(fleet, proxy.address_for(system["address"]), **FAST) as client:
        client.probe()
        client.power_state()
        proxy.reset_counts()
        proxy.fail(503, method="GET", times=1)
        assert client.power_state() == "Off"
    assert proxy.total == 2


def test_slow_bmc_is_a_timeout(fleet, system, proxy):
    address = proxy.address_for(system["address"])
    with connect(fleet, address, **FAST) as client:
        client.probe()
        client.power_state()
        proxy.delay(FAST["timeout"] * 3)
        started = time.monotonic()
        with pytest.raises(rf.RedfishError) as raised:
            client.power_state()
        elapsed = time.monotonic() - started
    bound = FAST["timeout"] * (FAST["retries"] + 1) + FAST["retry_delay"] * FAST["retries"]
    assert (raised.value.kind, raised.value.temporary) == ("timeout", True)
    assert f"within {FAST['timeout']:g}s" in str(raised.value)
    assert elapsed < bound + SLACK
    print(f"\nslow BMC: timed out after {elapsed:.2f} s, bound {bound:.1f} s")


def test_credential_rotation_401_is_a_credentials_error(fleet, system, proxy, caplog):
    caplog.set_level(logging.DEBUG)
    with connect(fleet, proxy.address_for(system["address"]), **FAST) as client:
        client.probe()
        proxy.fail(401)
        with pytest.raises(rf.RedfishError) as raised:
            client.set_power("On")
    assert (raised.value.kind, raised.value.temporary, raised.value.status) == ("credentials", False, 401)
    assert str(raised.value).startswith("requesting power On")
    assert fleet["password"] not in str(raised.value) and fleet["password"] not in caplog.text


def test_live_iso_sequence_request_count(fleet, system, tmp_path, proxy):
    """The Redfish side of provisioning a live-iso host, counted at the client and at the wire."""
    with FileServer(tmp_path) as files, connect(fleet, proxy.address_for(system["address"])) as client:
        url = files.add("live.iso", b"live")
        client.probe()
        client.inventory()
        if client.media()["inserted"]:
            client.eject_media()
        client.insert_media(url)
        client.set_boot_once("Cd")
        assert client.boot_override()["target"] == "Cd"
        client.set_power("On")
        polls_before, states = client.requests, []

        def is_on() -> bool:
            states.append(client.power_state())
            return states[-1] == "On"

        eventually(is_on, timeout=20, interval=1.0, message="powered on")
        polls = client.requests - polls_before
        assert polls == len(states), client.request_log[polls_before:]  # one GET per poll, no sub-resources
        assert client.media() == {"inserted": True, "image": url}
        total = client.requests
    assert proxy.total == total  # the client's own count matches what crossed the wire
    fixed = total - polls
    assert fixed <= 20, client.request_log
    print(f"\nlive-iso: {total} requests ({fixed} fixed + {polls} power polls at 1 s)")
    for line, count in sorted(proxy.counts.items()):
        print(f"  {count:3d}  {line}")


# -- the test tooling itself (no emulator needed) ------------------------------------------------


def _get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def test_fault_proxy_modes_and_counts(tmp_path):
    with FileServer(tmp_path) as files, FaultProxy(files.url("")) as proxy:
        files.add("a.iso", b"A")
        files.add("b.iso", b"B")
        assert _get(f"{proxy.url}/a.iso") == (200, b"A")
        proxy.fail(500, times=1)
        status, body = _get(f"{proxy.url}/a.iso")
        assert status == 500 and b"fault injected" in body
        assert _get(f"{proxy.url}/a.iso") == (200, b"A")  # `times` used up: passing through again
        proxy.fail(401, path="/b")
        assert _get(f"{proxy.url}/a.iso")[0] == 200 and _get(f"{proxy.url}/b.iso")[0] == 401
        proxy.delay(0.6, method="GET")
        started = time.monotonic()
        assert _get(f"{proxy.url}/a.iso") == (200, b"A")
        assert time.monotonic() - started >= 0.6
        proxy.down()
        with pytest.raises(urllib.error.URLError) as refused:
            _get(f"{proxy.url}/a.iso")
        assert isinstance(refused.value.reason, ConnectionRefusedError)
        proxy.passthrough()
        assert _get(f"{proxy.url}/b.iso") == (200, b"B")
        assert proxy.counts == {"GET /a.iso": 5, "GET /b.iso": 2}  # refused connections never arrive
        assert proxy.total == 7
        proxy.reset_counts()
        assert proxy.total == 0
    assert files.requests.count(("GET", "/a.iso")) == 4  # the faulted ones never reached upstream
    assert proxy.address_for("redfish+http://127.0.0.1:1/redfish/v1/Systems/x") == (
        f"redfish+http://127.0.0.1:{proxy.port}/redfish/v1/Systems/x"
    )
