"""Metal3 Redfish BMC addresses: every form Metal3 accepts, clear errors, never a credential in them."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import bmc_address as rf

PASSWORD = "s3cret-Pa55word"
UUID = "b2729411-0624-57d9-8e06-6d4b42658969"


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
