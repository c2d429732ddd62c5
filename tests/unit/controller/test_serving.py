"""The controller's HTTP servers on loopback (serving.py), the reviews faked: /metrics over TLS with a certificate
made in memory or read from a directory (and read again when it changes), each request answered by the guard's
verdict; the API server's side is tests/integration/test_metrics_auth.py."""

from __future__ import annotations

import http.client
import socket
import ssl
import time

import pytest
from cryptography import x509

from metalclaim.controller import serving
from metalclaim.controller.metricsauth import Guard
from metalclaim_dev.support import free_port

BODY = b"# HELP up 1\nup 1\n"


def reviews(tokens: dict[str, str], readers: set[str]):
    def token(body):
        user = tokens.get(body["spec"]["token"])
        return {"authenticated": True, "user": {"username": user}} if user else {"authenticated": False}

    def access(body):
        return {"allowed": body["spec"]["user"] in readers}

    return token, access


@pytest.fixture
def guard():
    token, access = reviews({"good": "prometheus", "other": "nobody"}, {"prometheus"})
    return Guard(token, access, time.monotonic)


def start(certificates, guard):
    port = free_port()
    server = serving.serve(f"127.0.0.1:{port}", {"/metrics": lambda: (200, "text/plain", BODY)}, certificates, guard)
    return server, port


def get(port: int, token: str | None = None, ca: bytes | None = None, path: str = "/metrics"):
    context = ssl.create_default_context(cadata=ca.decode()) if ca else ssl._create_unverified_context()
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = connection.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    finally:
        connection.close()


def test_the_self_signed_certificate_serves_metrics_to_a_reader_only(guard):
    server, port = start(serving.Certificates.self_signed(), guard)
    try:
        assert get(port, "good")[:2] == (200, BODY)
        status, body, headers = get(port)
        assert (status, body) == (401, b"Unauthorized\n")
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert get(port, "garbage")[0] == 401
        status, body, _headers = get(port, "other")
        assert status == 403 and b"'nobody' may not get /metrics" in body
        # Every path is behind the guard first: no unauthenticated 404 tells what is served.
        assert get(port, path="/other")[0] == 401
        assert get(port, "good", path="/other")[0] == 404
    finally:
        server.shutdown()


def test_a_client_speaking_no_tls_holds_up_no_one(guard):
    server, port = start(serving.Certificates.self_signed(), guard)
    try:
        silent = socket.create_connection(("127.0.0.1", port))  # connects, never says anything
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        with pytest.raises((ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)):
            plain.request("GET", "/metrics")
            plain.getresponse()
        assert get(port, "good")[0] == 200
        silent.close()
    finally:
        server.shutdown()


def test_the_self_signed_certificate_names_this_host_and_loopback():
    cert, key = serving.self_signed_pem(("metalclaim-metrics", "localhost", "127.0.0.1"), days=365)
    certificate = x509.load_pem_x509_certificate(cert)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["metalclaim-metrics", "localhost"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert lifetime.days == 365 and b"PRIVATE KEY" in key


def write_pair(directory, name: str) -> bytes:
    cert, key = serving.self_signed_pem((name, "127.0.0.1"))
    (directory / "tls.key").write_bytes(key)
    (directory / "tls.crt").write_bytes(cert)
    return cert


def test_a_certificate_directory_is_served_and_read_again_when_renewed(tmp_path, guard):
    first = write_pair(tmp_path, "first")
    server, port = start(serving.Certificates.from_dir(tmp_path), guard)
    try:
        assert get(port, "good", ca=first)[0] == 200  # verified against the CA a scraper would be given
        renewed = write_pair(tmp_path, "renewed")  # as cert-manager renews the Secret
        assert get(port, "good", ca=renewed)[0] == 200
        with pytest.raises(ssl.SSLCertVerificationError):
            get(port, "good", ca=first)
        (tmp_path / "tls.key").write_text("half written")  # a pair that does not load: the last one stays
        assert get(port, "good", ca=renewed)[0] == 200
    finally:
        server.shutdown()


def test_a_certificate_directory_without_the_pair_is_an_error_at_start(tmp_path):
    with pytest.raises(OSError):
        serving.Certificates.from_dir(tmp_path)
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(ssl.SSLError):
        serving.Certificates.from_dir(tmp_path)


def test_plain_http_when_told_and_no_server_at_0():
    port = free_port()
    server = serving.serve(f"127.0.0.1:{port}", {"/metrics": lambda: (200, "text/plain", BODY)})
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/metrics")
        assert connection.getresponse().read() == BODY
    finally:
        server.shutdown()
    assert serving.serve("0", {}) is None


def test_an_address_taken_or_malformed_says_which(guard):
    server, port = start(serving.Certificates.self_signed(), guard)
    try:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            serving.serve(f"127.0.0.1:{port}", {})
    finally:
        server.shutdown()
    with pytest.raises(ValueError, match="not an address"):
        serving.serve("127.0.0.1", {})
