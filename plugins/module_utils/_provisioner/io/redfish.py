# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The BMC edge: a small sushy client and the classification of its failures.

Addresses (_provisioner/pure/bmc_address.py) and the inventory mapping
(_provisioner/pure/inventory.py) are pure; RedfishClient is the only code that talks to a
BMC, always through sushy. Nothing here ever puts a BMC password or an Authorization header
into a message, a log line or a returned value.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import traceback
from urllib.parse import urlsplit

try:
    import requests
    import sushy
    from requests.adapters import HTTPAdapter
    from sushy import auth as sushy_auth
    from sushy import connector as sushy_connector
    from sushy import exceptions as sushy_exc
    from sushy import utils as sushy_utils
    from sushy.resources.system import bios as sushy_bios

    SUSHY_IMPORT_ERROR = None
except ImportError:  # reported by the module through missing_required_lib
    SUSHY_IMPORT_ERROR = traceback.format_exc()
    sushy = sushy_exc = sushy_auth = sushy_connector = sushy_utils = sushy_bios = requests = None
    HTTPAdapter = object

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.bmc_address import (
    BmcAddress,
    redact_url,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.inventory import (
    hardware_from_redfish,
)

LOG = logging.getLogger(__name__)


# Virtual media devices by the name callers use -> Redfish MediaTypes that device accepts.
MEDIA_CD = "cd"  # the boot ISO (live-iso, or the deploy ramdisk)
MEDIA_CONFIG = "config"  # the config drive: the removable (USB stick or floppy) device beside the CD
MEDIA_TYPES = {MEDIA_CD: ("CD", "DVD"), MEDIA_CONFIG: ("USBStick", "Floppy")}

RESET_ACTIONS = ("On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart")

# RedfishError kinds; `temporary` says whether trying again later can help.
KIND_CREDENTIALS = "credentials"
KIND_UNREACHABLE = "unreachable"
KIND_TIMEOUT = "timeout"
KIND_BMC = "bmc"
KIND_UNSUPPORTED = "unsupported"
KIND_NOT_FOUND = "not-found"
KIND_REJECTED = "rejected"  # a 4xx other than 401/403/404: the BMC refused this request as sent
TEMPORARY_KINDS = frozenset((KIND_UNREACHABLE, KIND_TIMEOUT, KIND_BMC))

_DETAIL_LIMIT = 200  # BMC error texts can be long; a message stays one readable line


# -- errors -----------------------------------------------------------------------------------


class RedfishError(Exception):
    """A BMC request that failed, with a short credential-free message naming what was attempted.

    kind: credentials | unreachable | timeout | bmc | unsupported | not-found | rejected
    temporary: worth retrying later (unreachable, timeout, bmc) rather than needing a human.
    status: the HTTP status the BMC answered, when it answered.
    """

    def __init__(self, kind: str, message: str, status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.temporary = kind in TEMPORARY_KINDS
        self.status = status


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` with every secret (and the basic-auth token built from them) replaced by ***."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def basic_auth_secrets(username: str, password: str) -> tuple[str, ...]:
    """What could leak a password: itself, user:password, and its base64 Authorization token."""
    if not password:
        return ()
    pair = f"{username}:{password}"
    return (password, pair, base64.b64encode(pair.encode()).decode())


def classify_error(
    error: BaseException, action: str, where: str = "", timeout: float | None = None
) -> RedfishError | None:
    """The RedfishError for a sushy/requests failure while doing `action` (None: not a BMC failure).

    `where` names the BMC (host:port) for connection failures; messages carry the HTTP status
    and the BMC's own short error text, never a URL's userinfo or request headers.
    """
    if isinstance(error, RedfishError):
        return error
    if sushy_exc is None:
        return None
    if isinstance(error, sushy_exc.HTTPError):
        status = error.status_code
        detail = _short(error.detail)
        suffix = f": {detail}" if detail else ""
        if isinstance(error, sushy_exc.AccessError):
            return RedfishError(KIND_CREDENTIALS, f"{action}: the BMC rejected the credentials (HTTP {status})", status)
        if isinstance(error, sushy_exc.ResourceNotFoundError):
            return RedfishError(KIND_NOT_FOUND, f"{action}: not found on the BMC (HTTP {status})", status)
        if status is not None and status >= 500:
            return RedfishError(KIND_BMC, f"{action}: the BMC failed (HTTP {status}){suffix}", status)
        if status in (405, 501):
            return RedfishError(KIND_UNSUPPORTED, f"{action}: not supported by the BMC (HTTP {status})", status)
        return RedfishError(KIND_REJECTED, f"{action}: the BMC refused the request (HTTP {status}){suffix}", status)
    if isinstance(error, sushy_exc.ConnectionError):
        at = f" at {where}" if where else ""
        if _caused_by(error, requests.exceptions.Timeout):
            within = f" within {timeout:g}s" if timeout else ""
            return RedfishError(KIND_TIMEOUT, f"{action}: no answer from the BMC{at}{within}")
        return RedfishError(KIND_UNREACHABLE, f"{action}: cannot reach the BMC{at} ({_connection_reason(error)})")
    if isinstance(error, sushy_exc.UnknownDefaultError):
        return RedfishError(
            KIND_NOT_FOUND, f"{action}: the BMC does not have exactly one system; the address must name one"
        )
    if isinstance(
        error, (sushy_exc.MissingAttributeError, sushy_exc.MissingActionError, sushy_exc.InvalidParameterValueError)
    ):
        return RedfishError(KIND_UNSUPPORTED, f"{action}: not supported by the BMC ({_short(error.message)})")
    if isinstance(error, (sushy_exc.SushyError, json.JSONDecodeError)):
        # Malformed answers: sushy's own parsing errors, or a body that is not JSON.
        return RedfishError(KIND_BMC, f"{action}: the BMC sent an answer that is not valid Redfish")
    return None


def _caused_by(error: BaseException, types) -> bool:
    # sushy raises its ConnectionError while handling the requests exception: it is the context.
    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, types):
            return True
        current = current.__cause__ or current.__context__
    return "timed out" in str(error).lower()


def _connection_reason(error: BaseException) -> str:
    text = str(error).lower()
    if "refused" in text:
        return "connection refused"
    if "reset" in text or "aborted" in text or "remotedisconnected" in text:
        return "connection closed by the BMC"
    if "certificate" in text or "ssl" in text:
        return "TLS handshake failed"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "unknown host name"
    return "connection failed"


def _short(text) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


# -- the client -------------------------------------------------------------------------------


class _CountingAdapter(HTTPAdapter):
    """Counts every request sushy sends, failed connection attempts included."""

    def __init__(self, record):
        super().__init__()
        self._record = record

    def send(self, request, *args, **kwargs):
        self._record(request.method, urlsplit(request.url).path)
        return super().send(request, *args, **kwargs)


class RedfishClient:
    """One BMC system over sushy: session auth with fallback to basic, bounded timeouts and retries.

    No I/O happens before the first call. `timeout` bounds each connect and each read;
    a request is sent at most `retries` + 1 times when the connection fails or times out,
    `retry_delay` seconds apart, so a dead BMC fails within about
    timeout * (retries + 1) + retry_delay * retries. (sushy also re-sends a GET answered 5xx,
    retries + 1 times.) The system document and virtual media devices are cached; reads
    that report changing state (power, boot, media) re-read it, but not twice in a row.
    """

    def __init__(
        self,
        address: BmcAddress,
        username: str,
        password: str,
        *,
        verify_tls: bool = True,
        timeout: float = 10.0,
        retries: int = 1,
        retry_delay: float = 0.5,
    ):
        if SUSHY_IMPORT_ERROR is not None:
            raise RedfishError(KIND_UNSUPPORTED, "the sushy Python package is not installed")
        self.address = address
        self.requests = 0  # every HTTP request sent, retries and failed attempts included
        self.request_log: list[str] = []  # "METHOD /path" per request, in order
        self._username = username
        self._secrets = basic_auth_secrets(username, password)
        self._timeout = timeout
        self._retries = max(0, int(retries))
        self._retry_delay = retry_delay
        self._verify = verify_tls
        self._password = password
        self._connector = None
        self._auth = None
        self._root = None
        self._system = None
        self._system_unread = False  # fetched since the last state read: no need to fetch again
        self._media: dict = {}
        self._bios = None  # the BIOS resource the last bios() read, for the set_bios() of the same step

    # -- public operations ----------------------------------------------------------------
    def probe(self) -> None:
        """Connect and read the system; a wrong password fails here (basic auth fails on first use).

        The document read here serves the next power_state()/boot_override() without a request.
        """
        self._read_system("reading the system")
        self._system_unread = True

    def power_state(self) -> str:
        system = self._read_system("reading the power state")
        if system.power_state is None:
            raise RedfishError(KIND_UNSUPPORTED, f"reading the power state of {self.target}: the BMC reports none")
        return system.power_state.value

    def set_power(self, action: str) -> None:
        """Request a power change; it lands later on real BMCs and the emulator: poll power_state()."""
        if action not in RESET_ACTIONS:
            raise ValueError(f"unknown power action {action!r} (expected one of {', '.join(RESET_ACTIONS)})")
        with self._failures(f"requesting power {action}"):
            self._get_system().reset_system(sushy.ResetType(action))
        self._system_unread = False

    def boot_override(self) -> dict:
        """The boot override as the BMC reports it (the emulator always says "Continuous")."""
        boot = self._read_system("reading the boot override").boot
        return {
            "target": _value(boot.target),
            "enabled": _value(boot.enabled),
            "mode": _value(boot.mode),
        }

    def set_boot_once(self, target: str = "Cd", mode: str | None = "UEFI") -> None:
        with self._failures(f"setting a one-time boot from {target}"):
            self._get_system().set_system_boot_options(
                target=sushy.BootSource(target),
                enabled=sushy.BootSourceOverrideEnabled.ONCE,
                mode=sushy.BootSourceOverrideMode(mode) if mode else None,
            )
        self._system_unread = False

    def clear_boot_override(self) -> None:
        """Disable the override; where the BMC needs a target too, point it at the disk (its default)."""
        with self._failures("clearing the boot override"):
            system = self._get_system()
            allowed = {_value(v) for v in system.get_allowed_system_boot_source_values()}
            target = next((t for t in ("None", "Hdd") if t in allowed), None)
            system.set_system_boot_options(
                target=sushy.BootSource(target) if target else None,
                enabled=sushy.BootSourceOverrideEnabled.DISABLED,
            )
        self._system_unread = False

    def inventory(self) -> dict:
        """status.hardware in Metal3's shape; sections the BMC does not expose are absent."""
        action = "reading the hardware inventory"
        system = self._read_system(action)
        with self._failures(action):
            sections = {
                "nics": self._section(lambda: [m.json for m in system.ethernet_interfaces.get_members()]),
                "processors": self._section(lambda: [m.json for m in system.processors.get_members()]),
                "drives": self._section(
                    lambda: [d.json for s in system.storage.get_members() for d in s.drives], server_errors=True
                ),
            }
            if sections["drives"] is None:
                sections["simple_storage"] = self._section(
                    lambda: [m.json for m in system.simple_storage.get_members()], server_errors=True
                )
        return hardware_from_redfish(system.json, **sections)

    def bios(self) -> tuple[dict, dict]:
        """(current, pending) BIOS attributes as text: the ones in effect, and the ones the BMC applies at the next
        boot (its Settings object; the emulator applies a change at once, so there both agree). Two GETs: the BIOS
        resource is made afresh (sushy's cached one would be fetched twice after a system re-read)."""
        with self._failures("reading the BIOS attributes"):
            system = self._get_system()
            path = sushy_utils.get_sub_resource_path_by(system, "Bios")
            bios = sushy_bios.Bios(self._connect()._conn, path, redfish_version=system.redfish_version)
            self._bios = bios
            return _texts(bios.attributes), _texts(bios.pending_attributes or {})

    def set_bios(self, attributes: dict) -> None:
        """Ask for these BIOS attributes at the next boot: one PATCH of the Settings object the last bios() read named
        (a GET of the BIOS first, without one)."""
        names = ", ".join(sorted(attributes))
        with self._failures(f"setting BIOS attributes {names}"):
            bios, self._bios = self._bios, None
            if bios is None:
                system = self._get_system()
                path = sushy_utils.get_sub_resource_path_by(system, "Bios")
                bios = sushy_bios.Bios(self._connect()._conn, path, redfish_version=system.redfish_version)
            bios.set_attributes(dict(attributes))

    def media(self, device: str = MEDIA_CD) -> dict:
        """{"inserted": bool, "image": URL or None} of the virtual media `device` ("cd" or "config")."""
        _check_device(device)
        with self._failures(f"reading virtual media {device}"):
            media = self._media_device(device, fresh=True)
            return {"inserted": bool(media.inserted), "image": media.image or None}

    def insert_media(self, url: str, device: str = MEDIA_CD) -> None:
        """Insert `url` (the BMC downloads it; an unreachable or missing image fails the insert)."""
        _check_device(device)
        with self._failures(f"inserting {redact_url(url)} into virtual media {device}"):
            self._media_device(device).insert_media(url, inserted=True, write_protected=True)

    def eject_media(self, device: str = MEDIA_CD) -> None:
        _check_device(device)
        with self._failures(f"ejecting virtual media {device}"):
            self._media_device(device).eject_media()

    def close(self) -> None:
        """End the Redfish session (if one was made) and the HTTP session."""
        if self._auth is not None:
            with contextlib.suppress(Exception):  # closing is best effort: the BMC may be gone
                self._auth.close()
        if self._connector is not None:
            self._connector.close()
        self._auth = self._connector = self._root = self._system = self._bios = None
        self._media = {}

    def __enter__(self) -> RedfishClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------
    @property
    def target(self) -> str:
        """The system this client drives, for messages: its path, or the BMC's only system."""
        return self.address.system_path or f"the system of {self.address.netloc}"

    @contextlib.contextmanager
    def _failures(self, action: str):
        """Turn sushy/requests failures into RedfishError with a scrubbed, credential-free message."""
        try:
            yield
        except RedfishError:
            raise
        except Exception as error:
            mapped = classify_error(error, f"{action} on {self.address.netloc}", timeout=self._timeout)
            if mapped is None:
                raise
            message = scrub(str(mapped), self._secrets)
            raise RedfishError(mapped.kind, message, mapped.status) from None

    def _record(self, method: str, path: str) -> None:
        self.requests += 1
        self.request_log.append(f"{method} {path}")

    def _connect(self):
        if self._root is not None:
            return self._root
        connector = sushy_connector.Connector(
            self.address.root_url,
            verify=self._verify,
            # sushy sends a request this many times on connection errors and timeouts...
            server_side_retries=self._retries + 1,
            # ...and waits this long in between; 0 would mean its default of 2 s.
            server_side_retries_delay=self._retry_delay or 0.001,
            default_request_timeout=self._timeout,
            connect_timeout=self._timeout,
        )
        adapter = _CountingAdapter(self._record)
        # The connector owns a plain requests.Session; mounting is the only hook that sees every attempt.
        connector._session.mount("http://", adapter)
        connector._session.mount("https://", adapter)
        auth = sushy_auth.SessionOrBasicAuth(username=self._username, password=self._password)
        try:
            # Reads the service root, then tries a session and falls back to basic auth.
            root = sushy.Sushy(self.address.root_url, auth=auth, connector=connector)
        except BaseException:
            connector.close()
            raise
        self._connector, self._auth, self._root = connector, auth, root
        return root

    def _get_system(self):
        if self._system is None:
            root = self._connect()
            self._system = root.get_system(self.address.system_path or None)
            self._system_unread = True
        return self._system

    def _read_system(self, action: str):
        """The system document, re-read unless nothing was read from it since it was fetched."""
        with self._failures(action):
            fetched = self._system is None
            system = self._get_system()
            if not fetched and not self._system_unread:
                _reread(system)
            self._system_unread = False
            return system

    def _section(self, read, server_errors: bool = False):
        """A section's documents, or None when the BMC does not expose it.

        The emulator answers 500 for Storage it has no configuration for; with server_errors
        a 5xx there also means "not exposed" rather than failing the whole inventory.
        """
        absent = (sushy_exc.MissingAttributeError, sushy_exc.ResourceNotFoundError)
        try:
            return read()
        except absent:
            return None
        except sushy_exc.ServerSideError:
            if server_errors:
                LOG.debug("BMC %s failed to serve an optional inventory section", self.address.netloc)
                return None
            raise

    def _media_device(self, device: str, fresh: bool = False):
        media = self._media.get(device)
        if media is None:
            media = self._find_media(device)
            self._media[device] = media
        elif fresh:
            _reread(media)
        return media

    def _find_media(self, device: str):
        wanted = set(MEDIA_TYPES[device])
        system = self._get_system()
        # Redfish 1.11+ puts virtual media under the system; older BMCs only under its manager.
        if "VirtualMedia" in system.json:
            collections = [system.virtual_media]
        else:
            collections = [manager.virtual_media for manager in system.managers]
        for collection in collections:
            for member in collection.get_members():
                if wanted & {_value(t) for t in member.media_types}:
                    return member
        raise RedfishError(
            KIND_UNSUPPORTED, f"the BMC of {self.target} has no virtual media device for {'/'.join(sorted(wanted))}"
        )


def _reread(resource) -> None:
    """GET the resource again, only it: sub-resources are marked stale and re-read when used.

    (sushy's refresh(force=True) re-reads every cached sub-resource at once, which made a
    power poll cost a dozen requests once inventory and virtual media had been read.)
    """
    resource.invalidate()
    resource.refresh(force=False)


def _texts(attributes) -> dict:
    # BIOS attributes come as JSON strings, numbers or booleans; settings compare as text (firmware.as_text).
    return {str(k): ("true" if v is True else "false" if v is False else str(v)) for k, v in (attributes or {}).items()}


def _check_device(device: str) -> None:
    if device not in MEDIA_TYPES:
        raise ValueError(f"unknown virtual media device {device!r} (expected one of {', '.join(MEDIA_TYPES)})")


def _value(member):
    """An enum member's Redfish string (sushy maps strings to enums); None stays None."""
    return getattr(member, "value", member)
