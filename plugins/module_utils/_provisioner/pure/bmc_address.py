# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Metal3 Redfish BMC addresses: parsing, and URLs with their credentials taken out for messages.

Pure. Nothing here puts a user:password@ part into a message.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

# Metal3 BMC address schemes this client serves -> driver; "+http"/"+https" pick the transport.
DRIVERS = ("redfish", "redfish-virtualmedia")
SYSTEMS_PREFIX = "/redfish/v1/Systems/"
ROOT_PATH = "/redfish/v1"


class BmcAddressError(ValueError):
    """A BMC address this client cannot use; the message never contains credentials."""


@dataclass(frozen=True)
class BmcAddress:
    driver: str  # "redfish" or "redfish-virtualmedia"
    scheme: str  # "https" (redfish:// and +https) or "http"
    host: str  # IPv6 without brackets
    port: int | None
    system_path: str  # "/redfish/v1/Systems/<id>", or "" for the BMC's only system

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def root_url(self) -> str:
        return f"{self.scheme}://{self.netloc}{ROOT_PATH}"


def redact_url(url: str) -> str:
    """The URL without any user:password@ part (for messages); unparsable input is elided."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. a bad IPv6 literal; userinfo ends at the last "@" before the path
        return re.sub(r"//[^/?#]*@", "//", url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def parse_bmc_address(address: str) -> BmcAddress:
    """Parse a Metal3 Redfish BMC address; any userinfo in it is dropped (credentials come from the Secret)."""
    if not isinstance(address, str) or not address.strip():
        raise BmcAddressError("the BMC address is empty")
    shown = redact_url(address.strip())
    try:
        parts = urlsplit(address.strip())
        port = parts.port
    except ValueError as error:
        raise BmcAddressError(f"BMC address {shown}: {_strip_userinfo_text(str(error))}") from None
    if not parts.scheme or "://" not in address:
        raise BmcAddressError(f"BMC address {shown} has no scheme (expected one of {', '.join(_schemes())})")
    driver, _plus, transport = parts.scheme.lower().partition("+")
    if driver not in DRIVERS or transport not in ("", "http", "https"):
        raise BmcAddressError(
            f"BMC address scheme {parts.scheme!r} is not supported (expected one of {', '.join(_schemes())})"
        )
    host = parts.hostname or ""
    if not host:
        raise BmcAddressError(f"BMC address {shown} has no host")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BmcAddressError(f"BMC address {shown}: {host!r} is not a valid IPv6 address") from None
    if parts.query or parts.fragment:
        raise BmcAddressError(f"BMC address {shown} has a query or fragment; a Redfish address has neither")
    if port == 0:
        raise BmcAddressError(f"BMC address {shown}: port 0 is not a port")
    return BmcAddress(
        driver=driver,
        scheme=transport or "https",
        host=host,
        port=port,
        system_path=_system_path(parts.path, shown),
    )


def _schemes() -> list[str]:
    return [f"{driver}{suffix}://" for driver in DRIVERS for suffix in ("", "+http", "+https")]


def _system_path(path: str, shown: str) -> str:
    path = re.sub("/+", "/", path).rstrip("/")
    if path in ("", ROOT_PATH, "/redfish"):
        return ""
    if not path.startswith(SYSTEMS_PREFIX) or "/" in path[len(SYSTEMS_PREFIX) :]:
        raise BmcAddressError(f"BMC address {shown}: the path must be {SYSTEMS_PREFIX}<system id> or empty")
    return path


def _strip_userinfo_text(text: str) -> str:
    # urllib's port errors quote the netloc, userinfo included.
    return re.sub(r"[^\s/'\"@]+@", "", text)
