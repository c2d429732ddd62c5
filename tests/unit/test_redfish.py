"""Pure parts of the Redfish client: BMC addresses, error classification, inventory mapping."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import requests
import yaml
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _redfish as rf
from sushy import exceptions as sushy_exc

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-Pa55word"
UUID = "b2729411-0624-57d9-8e06-6d4b42658969"


# -- addresses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected", "root_url"),
    [
        (
            f"redfish://10.0.0.5/redfish/v1/Systems/{UUID}",
            ("redfish", "https", "10.0.0.5", None, f"/redfish/v1/Systems/{UUID}"),
            "https://10.0.0.5/redfish/v1",
        ),
        (
            "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1",
            ("redfish", "http", "127.0.0.1", 8000, "/redfish/v1/Systems/1"),
            "http://127.0.0.1:8000/redfish/v1",
        ),
        (
            "redfish+https://bmc.example.com:8443/redfish/v1/Systems/System.Embedded.1/",
            ("redfish", "https", "bmc.example.com", 8443, "/redfish/v1/Systems/System.Embedded.1"),
            "https://bmc.example.com:8443/redfish/v1",
        ),
        (
            "redfish-virtualmedia://[fd00::5]/redfish/v1/Systems/1",
            ("redfish-virtualmedia", "https", "fd00::5", None, "/redfish/v1/Systems/1"),
            "https://[fd00::5]/redfish/v1",
        ),
        (
            "redfish-virtualmedia+http://[::1]:8000/redfish/v1/Systems/abc",
            ("redfish-virtualmedia", "http", "::1", 8000, "/redfish/v1/Systems/abc"),
            "http://[::1]:8000/redfish/v1",
        ),
        (
            "REDFISH-VIRTUALMEDIA+HTTPS://bmc:443",
            ("redfish-virtualmedia", "https", "bmc", 443, ""),
            "https://bmc:443/redfish/v1",
        ),
        ("redfish://bmc", ("redfish", "https", "bmc", None, ""), "https://bmc/redfish/v1"),
        ("redfish://bmc/", ("redfish", "https", "bmc", None, ""), "https://bmc/redfish/v1"),
        ("redfish://bmc/redfish/v1/", ("redfish", "https", "bmc", None, ""), "https://bmc/redfish/v1"),
    ],
)
def test_every_address_form_parses(address, expected, root_url):
    parsed = rf.parse_bmc_address(address)
    assert (parsed.driver, parsed.scheme, parsed.host, parsed.port, parsed.system_path) == expected
    assert parsed.root_url == root_url


def test_userinfo_is_dropped_from_the_address():
    parsed = rf.parse_bmc_address(f"redfish+http://admin:{PASSWORD}@127.0.0.1:8000/redfish/v1/Systems/1")
    assert parsed == rf.BmcAddress("redfish", "http", "127.0.0.1", 8000, "/redfish/v1/Systems/1")
    assert PASSWORD not in repr(parsed) and PASSWORD not in parsed.root_url


@pytest.mark.parametrize(
    ("address", "names"),
    [
        ("ipmi://10.0.0.5", "'ipmi'"),
        ("idrac-redfish://10.0.0.5/redfish/v1/Systems/1", "'idrac-redfish'"),
        ("redfish+ftp://10.0.0.5", "'redfish+ftp'"),
        ("http://10.0.0.5/redfish/v1/Systems/1", "'http'"),
        ("10.0.0.5", "no scheme"),
        ("", "empty"),
        ("redfish:///redfish/v1/Systems/1", "no host"),
        ("redfish://bmc:99999/", "out of range"),
        ("redfish://bmc:http/", "Port could not be cast"),
        ("redfish://bmc/redfish/v1/Managers/1", "/redfish/v1/Systems/<system id>"),
        ("redfish://bmc/redfish/v1/Systems/1/Bios", "/redfish/v1/Systems/<system id>"),
        ("redfish://bmc/redfish/v1/Systems/1?x=1", "query"),
        ("redfish://[fe80::zz]/", "'fe80::zz'"),
    ],
)
def test_bad_addresses_name_the_problem(address, names):
    with pytest.raises(rf.BmcAddressError, match=None) as raised:
        rf.parse_bmc_address(address)
    assert names.lower() in str(raised.value).lower()
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    "address",
    [
        f"ipmi://admin:{PASSWORD}@10.0.0.5",
        f"redfish://admin:{PASSWORD}@bmc:99999/",
        f"redfish://admin:{PASSWORD}@bmc/redfish/v1/Managers/1",
        f"redfish://admin:{PASSWORD}@bmc:port/",
        f"redfish://admin:{PASSWORD}@/redfish/v1/Systems/1",
        f"redfish://admin:{PASSWORD}@[fe80::zz]/",
    ],
)
def test_address_errors_never_show_credentials(address):
    with pytest.raises(rf.BmcAddressError) as raised:
        rf.parse_bmc_address(address)
    assert PASSWORD not in str(raised.value)
    assert "admin" not in str(raised.value)


def test_redact_url_strips_userinfo_only():
    assert rf.redact_url(f"http://u:{PASSWORD}@files:8080/a.iso?x=1") == "http://files:8080/a.iso?x=1"
    assert rf.redact_url("http://files/a.iso") == "http://files/a.iso"
    assert rf.redact_url(f"http://u:{PASSWORD}@[zz]/a.iso") == "http://[zz]/a.iso"  # unparsable, still stripped


# -- errors -----------------------------------------------------------------------------------


class FakeResponse:
    def __init__(self, status: int, body: dict | None = None):
        self.status_code = status
        self._body = body

    def json(self):
        if self._body is None:
            raise ValueError("no JSON")
        return self._body


def http_error(status: int, message: str | None = None):
    body = {"error": {"code": "Base.1.0.GeneralError", "message": message}} if message else None
    try:
        sushy_exc.raise_for_response("GET", "http://127.0.0.1:1/redfish/v1/Systems/1", FakeResponse(status, body))
    except sushy_exc.HTTPError as error:
        return error
    raise AssertionError(f"{status} raised nothing")


def connection_error(cause: Exception):
    try:
        try:
            raise cause
        except requests.exceptions.RequestException as inner:
            raise sushy_exc.ConnectionError(url="http://127.0.0.1:1/redfish/v1/", error=inner) from None
    except sushy_exc.ConnectionError as error:
        error.__context__ = cause  # what sushy's `raise` inside `except` leaves
        return error


@pytest.mark.parametrize(
    ("error", "kind", "temporary", "status", "text"),
    [
        (http_error(401), "credentials", False, 401, "rejected the credentials (HTTP 401)"),
        (http_error(403), "credentials", False, 403, "HTTP 403"),
        (http_error(404), "not-found", False, 404, "not found"),
        (http_error(500, "Internal failure"), "bmc", True, 500, "the BMC failed (HTTP 500): Internal failure"),
        (http_error(503), "bmc", True, 503, "HTTP 503"),
        (http_error(400, "Cannot download virtual media: got error 404"), "rejected", False, 400, "got error 404"),
        (http_error(409, "busy"), "rejected", False, 409, "HTTP 409"),
        (http_error(405), "unsupported", False, 405, "not supported"),
        (
            connection_error(requests.exceptions.ConnectionError("[Errno 111] Connection refused")),
            "unreachable",
            True,
            None,
            "cannot reach the BMC at 127.0.0.1:1 (connection refused)",
        ),
        (
            connection_error(requests.exceptions.ReadTimeout("Read timed out. (read timeout=2)")),
            "timeout",
            True,
            None,
            "no answer from the BMC at 127.0.0.1:1 within 2s",
        ),
        (
            connection_error(requests.exceptions.ConnectTimeout("connect timeout")),
            "timeout",
            True,
            None,
            "no answer",
        ),
        (sushy_exc.MissingAttributeError(attribute="Boot", resource="/x"), "unsupported", False, None, "Boot"),
        (sushy_exc.MissingActionError(action="#ComputerSystem.Reset", resource="/x"), "unsupported", False, None, ""),
        (
            sushy_exc.InvalidParameterValueError(parameter="target", value="Usb", valid_values="Cd, Hdd"),
            "unsupported",
            False,
            None,
            "Usb",
        ),
        (
            sushy_exc.UnknownDefaultError(entity="ComputerSystem", error="count"),
            "not-found",
            False,
            None,
            "exactly one system",
        ),
        (json.JSONDecodeError("Expecting value", "<html>", 0), "bmc", True, None, "not valid Redfish"),
    ],
)
def test_errors_are_classified(error, kind, temporary, status, text):
    mapped = rf.classify_error(error, "reading the system", "127.0.0.1:1", timeout=2)
    assert (mapped.kind, mapped.temporary, mapped.status) == (kind, temporary, status)
    assert str(mapped).startswith("reading the system: ")
    assert text in str(mapped)


def test_programming_errors_are_not_classified():
    assert rf.classify_error(KeyError("x"), "reading") is None
    assert rf.classify_error(TypeError("x"), "reading") is None
    assert rf.classify_error(ValueError("x"), "reading") is None


def test_long_bmc_texts_are_shortened():
    mapped = rf.classify_error(http_error(500, "x" * 5000), "reading")
    assert len(str(mapped)) < 300 and str(mapped).endswith("...")


def test_scrub_removes_password_and_basic_token():
    secrets = rf.basic_auth_secrets("admin", PASSWORD)
    token = secrets[2]
    text = f"failed with {PASSWORD} and Authorization: Basic {token} for admin:{PASSWORD}"
    scrubbed = rf.scrub(text, secrets)
    assert PASSWORD not in scrubbed and token not in scrubbed
    assert rf.basic_auth_secrets("admin", "") == ()


# -- inventory --------------------------------------------------------------------------------

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


def test_client_methods_refuse_unknown_names_before_any_request():
    client = rf.RedfishClient(rf.parse_bmc_address("redfish+http://127.0.0.1:9/"), "admin", PASSWORD)
    with pytest.raises(ValueError, match="unknown power action 'Off'"):
        client.set_power("Off")
    with pytest.raises(ValueError, match="unknown virtual media device 'floppy'"):
        client.media("floppy")
    assert client.requests == 0
