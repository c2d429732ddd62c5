"""Pure parts of the Redfish client: BMC addresses, error classification, inventory mapping."""

from __future__ import annotations

import json

import pytest
import requests
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import redfish as rf
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.bmc_address import (
    parse_bmc_address,
)
from sushy import exceptions as sushy_exc

PASSWORD = "s3cret-Pa55word"
UUID = "b2729411-0624-57d9-8e06-6d4b42658969"


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


def test_client_methods_refuse_unknown_names_before_any_request():
    client = rf.RedfishClient(parse_bmc_address("redfish+http://127.0.0.1:9/"), "admin", PASSWORD)
    with pytest.raises(ValueError, match="unknown power action 'Off'"):
        client.set_power("Off")
    with pytest.raises(ValueError, match="unknown virtual media device 'floppy'"):
        client.media("floppy")
    assert client.requests == 0
