"""Tenant hooks, the I/O edge, against hook servers on 127.0.0.1: one deadline per delivery (a hook trickling its
answer byte by byte is cut off there, over TLS too), a hook not reached is not called again in the run, a tenant's
hooks share a budget per run, credentials of another tenant are never read out, no proxy and no redirect."""

from __future__ import annotations

import base64
import select
import socket
import ssl
import threading
import time

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.io import hooks as io
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks as plan

MARGIN = 0.5  # what a delivery may take past its deadline (threads waking up on a busy machine)
BYTE_EVERY = 0.2  # a trickling hook's pace: well within any per-read timeout, so only a total deadline stops it


class Server:
    """A hook endpoint: each connection's request is read (headers, body) and recorded, then `handle` answers."""

    def __init__(self, handle, tls: ssl.SSLContext | None = None):
        self.handle = handle
        self.tls = tls
        self.requests: list[bytes] = []
        self.hung_up: list[float] = []  # when the caller went away in the middle of an answer (monotonic)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, path: str = "/hook") -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"

    def _serve(self):
        while not self.stopped:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(connection,), daemon=True).start()

    def _one(self, connection: socket.socket):
        try:
            if self.tls is not None:
                connection = self.tls.wrap_socket(connection, server_side=True)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = connection.recv(4096)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            while len(body) < length:
                body += connection.recv(4096)
            self.requests.append(head + b"\r\n\r\n" + body)
            self.handle(self, connection)
        except OSError:
            pass
        finally:
            connection.close()

    def trickle(self, connection: socket.socket, first: bytes, seconds: float = 20.0) -> None:
        """Send `first`, then one byte every BYTE_EVERY seconds until `seconds` passed or the caller hangs up."""
        connection.sendall(first)
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            connection.sendall(b"z")
            readable, _, _ = select.select([connection], [], [], BYTE_EVERY)
            if readable and not connection.recv(1):
                self.hung_up.append(time.monotonic())
                return

    def stop(self):
        self.stopped = True
        self.listener.close()


def answer(status: int, body: bytes = b"", headers: str = ""):
    def handle(server, connection):
        connection.sendall(
            f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{headers}Connection: close\r\n\r\n".encode() + body
        )

    return handle


def trickled_headers(server, connection):
    server.trickle(connection, b"HTTP/1.1 200 OK\r\nX-Slow: ")


def trickled_body(server, connection):
    server.trickle(connection, b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")


def silent(server, connection):
    time.sleep(10)


@pytest.fixture
def serve():
    servers: list[Server] = []

    def start(handle, tls=None) -> Server:
        servers.append(Server(handle, tls))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


class Kube:
    """The Secrets of the hooks namespace, by name; counts the reads."""

    def __init__(self, **secrets):
        self.secrets = secrets
        self.reads = 0

    def get(self, api_version, kind, name, namespace):
        assert (api_version, kind, namespace) == ("v1", "Secret", plan.CREDENTIALS_NAMESPACE)
        self.reads += 1
        if name not in self.secrets:
            raise KubeError(f"secrets {name!r} is forbidden")
        return self.secrets[name]


def credentials(tenant: str | None, **data) -> dict:
    return {
        "type": plan.CREDENTIALS_TYPE,
        "metadata": {"labels": {plan.TENANT_LABEL: tenant} if tenant else {}},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def hook(url: str, name: str = "h", tenant: str = "blue", timeout: float = 1.0, secret: str = "") -> plan.Hook:
    return plan.Hook(name, url, True, ("CREATE",), secret, timeout, tenant, "spec.hooks[0]")


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


# -- one deadline per delivery ---------------------------------------------------------------------------------


@pytest.mark.parametrize("handle", [trickled_headers, trickled_body, silent], ids=["headers", "body", "silent"])
def test_a_delivery_ends_at_its_deadline_however_the_hook_stalls(serve, handle):
    server = serve(handle)
    deliverer = io.Deliverer(Kube())
    detail, took = timed(lambda: deliverer.send(hook(server.url(), timeout=1), {"eventType": "CREATE"}))
    assert detail == "no answer within 1s"
    assert 1 - 0.05 <= took <= 1 + MARGIN, took
    if handle is not silent:  # the trickling hook saw the caller hang up at the deadline, not when it was done
        time.sleep(BYTE_EVERY * 2)
        assert len(server.hung_up) == 1


def test_a_delivery_over_tls_ends_at_its_deadline_too(serve, tmp_path):
    from metalclaim_dev.devenv.pki import CertificateAuthority

    authority = CertificateAuthority(tmp_path / "pki")
    pair = authority.issue("hook", "hook", server_names=("127.0.0.1",))
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(pair.cert, pair.key)
    trusting = ssl.create_default_context(cafile=str(authority.cert_path))
    deliverer = io.Deliverer(Kube(cred=credentials("blue", token="s3cr3t")), tls=trusting)

    fine = serve(answer(200), tls=serving)
    assert deliverer.send(hook(fine.url(), secret="cred"), {"eventType": "CREATE"}) == ""
    assert b"Authorization: Bearer s3cr3t" in fine.requests[0]
    assert f"Host: 127.0.0.1:{fine.port}".encode() in fine.requests[0]

    slow = serve(trickled_headers, tls=serving)
    detail, took = timed(lambda: deliverer.send(hook(slow.url(), name="slow"), {"eventType": "CREATE"}))
    assert detail == "no answer within 1s" and took <= 1 + MARGIN, (detail, took)
    # The system's trust store does not know the test's authority: refused, not sent.
    untrusted = io.Deliverer(Kube())
    detail = untrusted.send(hook(fine.url(), name="other"), {"eventType": "CREATE"})
    assert detail.startswith("not delivered:") and "CERTIFICATE_VERIFY_FAILED" in detail
    assert len(fine.requests) == 1


def test_an_answer_in_time_is_read_whatever_its_status(serve):
    deliverer = io.Deliverer(Kube())
    fine = serve(answer(200))
    assert deliverer.send(hook(fine.url()), {"eventType": "CREATE"}) == ""
    request = fine.requests[0]
    assert request.startswith(b"POST /hook HTTP/1.1\r\n") and request.endswith(b'\r\n\r\n{"eventType": "CREATE"}')
    assert b"Content-Type: application/json" in request and b"User-Agent: metalclaim-tenant-hooks/1" in request
    assert b"Authorization" not in request
    refusing = serve(answer(403, b"change freeze\x00 now"))
    assert deliverer.send(hook(refusing.url(), name="gate"), {}) == "answered 403: change freeze  now"


# -- what a stalled hook costs a run ---------------------------------------------------------------------------


def test_a_hook_not_reached_is_not_called_again_in_the_run_but_others_are(serve):
    slow = serve(silent)
    deliverer = io.Deliverer(Kube())
    assert deliverer.send(hook(slow.url()), {}) == "no answer within 1s"
    detail, took = timed(lambda: deliverer.send(hook(slow.url()), {}))
    assert detail == "not called again in this run: no answer within 1s" and took < 0.1
    assert len(slow.requests) == 1
    # Another hook of the tenant, and the same URL as another tenant's hook, are called.
    fine = serve(answer(200))
    assert deliverer.send(hook(fine.url(), name="other"), {}) == ""
    assert deliverer.send(hook(slow.url(), tenant="red"), {}) == "no answer within 1s"
    # A refused connection is not called again either; a refusal (not 200) is: the next claim may be allowed.
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    down = hook(f"http://127.0.0.1:{port}/h", name="down")
    assert deliverer.send(down, {}).startswith("not delivered: [Errno 111]")
    assert deliverer.send(down, {}).startswith("not called again in this run: not delivered:")
    refusing = serve(answer(403))
    assert deliverer.send(hook(refusing.url(), name="gate"), {}) == "answered 403"
    assert deliverer.send(hook(refusing.url(), name="gate"), {}) == "answered 403"
    assert deliverer.sent == 6


def test_a_tenants_hooks_share_a_budget_per_run(serve, monkeypatch):
    monkeypatch.setattr(plan, "TENANT_RUN_BUDGET_SECONDS", 1.5)
    slow = serve(trickled_body)
    deliverer = io.Deliverer(Kube())
    assert deliverer.send(hook(slow.url(), name="a"), {}) == "no answer within 1s"
    detail, took = timed(lambda: deliverer.send(hook(slow.url(), name="b"), {}))
    assert detail == "no answer within 0.5s" and took <= 0.5 + MARGIN  # what was left of the budget
    detail, took = timed(lambda: deliverer.send(hook(slow.url(), name="c"), {}))
    assert detail == "not called in this run: the tenant's hooks took their 1.5s" and took < 0.1
    # Another tenant's hooks have their own.
    assert deliverer.send(hook(serve(answer(200)).url(), tenant="red"), {}) == ""
    assert len(slow.requests) == 2


# -- credentials, proxies, redirects ----------------------------------------------------------------------------


def test_another_tenants_credentials_are_refused_and_nothing_is_sent(serve):
    server = serve(answer(200))
    kube = Kube(red=credentials("red", token="red-token"), nobody=credentials(None, token="t"))
    deliverer = io.Deliverer(kube)
    detail = deliverer.send(hook(server.url(), secret="red"), {})
    assert detail == (
        "spec.hooks[0].credentialsSecretRef: credentials Secret metalclaim-hooks/red is not labelled "
        "tenancy.metalclaim.io/tenant=blue: it is another tenant's (not used)"
    )
    assert "has no label" in deliverer.send(hook(server.url(), secret="nobody"), {})
    assert "not readable: secrets 'gone' is forbidden" in deliverer.send(hook(server.url(), secret="gone"), {})
    assert server.requests == [] and deliverer.sent == 0 and "red-token" not in deliverer.secrets
    # The owner's own hook gets it; the Secret was read once for the run.
    assert deliverer.send(hook(server.url(), tenant="red", secret="red"), {}) == ""
    assert b"Authorization: Bearer red-token" in server.requests[0] and kube.reads == 3


def test_no_proxy_and_no_redirect(serve, monkeypatch):
    for variable in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(variable, "http://127.0.0.1:1")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    elsewhere = serve(answer(200))
    moved = serve(answer(307, headers=f"Location: {elsewhere.url()}\r\n"))
    kube = Kube(cred=credentials("blue", token="s3cr3t"))
    deliverer = io.Deliverer(kube)
    assert deliverer.send(hook(moved.url("/a?b=c"), secret="cred"), {"eventType": "CREATE"}) == "answered 307"
    assert moved.requests[0].startswith(b"POST /a?b=c HTTP/1.1\r\n") and b"Bearer s3cr3t" in moved.requests[0]
    assert b'"eventType": "CREATE"' in moved.requests[0]
    assert elsewhere.requests == []
