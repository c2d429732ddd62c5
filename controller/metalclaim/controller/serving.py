"""The controller's HTTP servers: the probes (plain HTTP, the kubelet's) and /metrics (HTTPS behind a token and a
right, unless --metrics-secure=false), with what /metrics needs: its serving certificate and the two reviews.

I/O only; who may read /metrics is decided in metricsauth (pure). Each connection is served on a thread of its own
(its TLS handshake too, so one slow client holds up no other), and gives up after CONNECTION_TIMEOUT of silence.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import ipaddress
import json
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from .metricsauth import Guard, ReviewFailed

CONNECTION_TIMEOUT = 30.0  # seconds a connection may stay silent (its handshake included)
REVIEW_TIMEOUT = 10.0  # seconds a TokenReview or SubjectAccessReview may take
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"  # a kubernetes.io/tls Secret's keys, as cert-manager writes them
SELF_SIGNED_DAYS = 365
SELF_SIGNED_NAME = "metalclaim-metrics"

Route = Callable[[], tuple[int, str, bytes]]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    certificates: Certificates | None = None

    def finish_request(self, request, client_address):
        """On the connection's own thread: its TLS handshake first (a client that speaks no TLS is dropped)."""
        if self.certificates is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(CONNECTION_TIMEOUT)
        try:
            secured = self.certificates.context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(secured, client_address)
        finally:
            secured.close()


def serve(
    address: str,
    routes: dict[str, Route],
    certificates: Certificates | None = None,
    guard: Guard | None = None,
    log: Callable[..., None] | None = None,
) -> http.server.ThreadingHTTPServer | None:
    """Serve GET `routes` at `address` (host:port, "" or "0": not at all); over TLS with `certificates`; each request
    first checked by `guard` (its verdict's status and message when not 200)."""
    if address in ("0", ""):
        return None
    host, _colon, port = address.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"{address}: not an address (host:port, or :port for every interface)")

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = CONNECTION_TIMEOUT

        def do_GET(self):
            path = self.path.split("?")[0]
            if guard is not None:
                verdict = guard.check(self.headers.get("Authorization"), "get", path)
                if verdict.status != 200:
                    if verdict.status == 500 and log is not None:
                        log("metrics_review_failed", path=path, reason=verdict.message)
                    headers = {"WWW-Authenticate": 'Bearer realm="metrics"'} if verdict.status == 401 else {}
                    self._send(verdict.status, "text/plain; charset=utf-8", f"{verdict.message}\n".encode(), headers)
                    return
            route = routes.get(path)
            if route is None:
                self.send_error(404)
                return
            self._send(*route())

        def _send(self, status: int, content_type: str, body: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):  # probes every few seconds, scrapes every 15: not worth a log line
            pass

    try:
        server = _Server((host or "0.0.0.0", int(port)), Handler)
    except OSError as error:
        raise OSError(f"cannot listen on {address}: {error.strerror or error}") from None
    server.certificates = certificates
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    return server


# -- the serving certificate -------------------------------------------------------------------------------------


class Certificates:
    """The TLS context of the metrics server: from a directory (tls.crt, tls.key; loaded again when either file
    changes, as a mounted Secret does when cert-manager renews it) or self-signed, made in memory at start."""

    def __init__(self, directory: Path | None = None, pem: bytes | None = None):
        self.directory = directory
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._context = _context(pem) if pem is not None else None
        if directory is not None:
            self._context = self._load()  # at start, what is wrong with the files is an error (the caller's)

    @classmethod
    def from_dir(cls, directory: str | Path) -> Certificates:
        return cls(directory=Path(directory))

    @classmethod
    def self_signed(cls, names: tuple[str, ...] | None = None) -> Certificates:
        cert, key = self_signed_pem(names or (SELF_SIGNED_NAME, "localhost", socket.gethostname(), "127.0.0.1", "::1"))
        return cls(pem=cert + key)

    def context(self) -> ssl.SSLContext:
        if self.directory is not None and self._files_stamp() != self._stamp:
            with self._lock, contextlib.suppress(OSError, ssl.SSLError, ValueError):
                # A pair that does not load (yet) leaves the last one served; the next connection looks again.
                self._context = self._load()
        assert self._context is not None
        return self._context

    def _files_stamp(self) -> tuple:
        stamp = []
        for name in (CERT_FILE, KEY_FILE):
            try:
                status = (self.directory / name).stat()
            except OSError:
                return ()
            stamp.append((status.st_ino, status.st_mtime_ns, status.st_size))
        return tuple(stamp)

    def _load(self) -> ssl.SSLContext:
        stamp = self._files_stamp()
        context = _server_context()
        context.load_cert_chain(str(self.directory / CERT_FILE), str(self.directory / KEY_FILE))
        self._stamp = stamp
        return context


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _context(pem: bytes) -> ssl.SSLContext:
    """A server context from a certificate and key in memory: ssl loads only from a path, so from an anonymous
    in-memory file (memfd: nothing on disk, also on a read-only root), else a private temporary one, removed at once."""
    context = _server_context()
    if hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir():
        fd = os.memfd_create("metalclaim-metrics-tls", os.MFD_CLOEXEC)
        with os.fdopen(fd, "wb") as file:
            file.write(pem)
            file.flush()
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        return context
    with tempfile.NamedTemporaryFile(suffix=".pem") as file:  # mode 0600
        file.write(pem)
        file.flush()
        context.load_cert_chain(file.name)
    return context


def self_signed_pem(names: tuple[str, ...], days: int = SELF_SIGNED_DAYS) -> tuple[bytes, bytes]:
    """(certificate, key) in PEM: an ECDSA P-256 key and a certificate for `names` (DNS names or IP addresses),
    self-signed, valid from an hour ago for `days`. Scrapers verify nothing of it (insecureSkipVerify); a CA they
    trust needs --metrics-cert-dir."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    alternative: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternative.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


# -- the reviews, on the API server ------------------------------------------------------------------------------


class ApiReviews:
    """TokenReviews and SubjectAccessReviews created as the controller's own identity (its ClusterRole grants
    `create` on both); each returns the review's status, or raises ReviewFailed."""

    def __init__(self, api_client, timeout: float = REVIEW_TIMEOUT):
        from kubernetes import client

        self.authentication = client.AuthenticationV1Api(api_client)
        self.authorization = client.AuthorizationV1Api(api_client)
        self.timeout = timeout

    def token(self, body: dict) -> dict:
        from kubernetes import client

        return self._status(body, self.authentication.create_token_review, client.V1TokenReview)

    def access(self, body: dict) -> dict:
        from kubernetes import client

        return self._status(body, self.authorization.create_subject_access_review, client.V1SubjectAccessReview)

    def _status(self, body: dict, create, model) -> dict:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = create(model.model_validate(body), _preload_content=False, _request_timeout=self.timeout)
            return json.loads(response.data).get("status") or {}
        except ApiException as error:
            raise ReviewFailed(f"{body['kind']}: {error.status} {error.reason}") from None
        except (HTTPError, OSError, ValueError) as error:
            raise ReviewFailed(f"{body['kind']}: {type(error).__name__}: {error}") from None
