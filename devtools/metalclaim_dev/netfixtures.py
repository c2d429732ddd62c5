"""Loopback HTTP test tooling: a file server for ISOs and a fault-injecting proxy for BMCs.

    with FileServer(tmp_path) as files:
        url = files.add("live.iso", b"...")         # or write into tmp_path, then files.url("live.iso")
        client.insert_media(url)                     # the emulator downloads it from 127.0.0.1
        assert ("GET", "/live.iso") in files.requests

    with FaultProxy(fleet_endpoint) as proxy:        # "http://127.0.0.1:<emulator port>"
        address = proxy.address_for(system_address)  # same BMC address, through the proxy
        proxy.fail(500)                              # every request answers 500 ...
        proxy.fail(401, method="GET", times=1)       # ... or only the next GET answers 401
        proxy.delay(5)                               # answers (from the emulator) 5 s late
        proxy.down()                                 # connection refused, as a dead BMC
        proxy.passthrough()                          # back to normal
        proxy.counts["GET /redfish/v1/Systems/x"]    # requests the proxy received, per method+path

Both listen on 127.0.0.1 only, on a free port, serve from daemon threads, and stop on close().

    with MediaServer(tmp_path / "media") as media:  # the media server's own process, as the devenv runs it
        media.dir, media.url                         # bmh_redfish's media_dir and media_url
        post_json(callback_url, {"status": "success"})  # as the image writer calls back
"""

from __future__ import annotations

import functools
import http.client
import http.server
import json
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

LOOPBACK = "127.0.0.1"
# Per RFC 9110 these describe one connection and are never forwarded.
_HOP_BY_HOP = frozenset(
    (
        *("connection", "keep-alive", "proxy-authenticate", "proxy-authorization"),
        *("te", "trailer", "transfer-encoding", "upgrade"),
        "content-length",  # recomputed for the body actually sent
    )
)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a delayed handler must not hold up close()


class _Background:
    """An HTTP server on 127.0.0.1 served from a daemon thread."""

    def __init__(self, handler, port: int = 0):
        self._server = _Server((LOOPBACK, port), handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _QuietHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, format, *args):  # test output stays readable
        pass


# -- file server ------------------------------------------------------------------------------


class FileServer:
    """Serves the files of `directory` over HTTP on 127.0.0.1 (GET/HEAD, no listing needed)."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request, in order
        owner = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format, *args):
                pass

            def send_head(self):
                owner.requests.append((self.command, urlsplit(self.path).path))
                return super().send_head()

        self._background = _Background(functools.partial(Handler, directory=str(self.directory)))
        self.port = self._background.port

    def url(self, name: str) -> str:
        return f"http://{LOOPBACK}:{self.port}/{quote(name)}"

    def add(self, name: str, data: bytes) -> str:
        """Write `data` as `name` in the served directory; returns its URL."""
        (self.directory / name).write_bytes(data)
        return self.url(name)

    def close(self) -> None:
        self._background.close()

    def __enter__(self) -> FileServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# -- fault proxy ------------------------------------------------------------------------------


@dataclass
class _Fault:
    kind: str  # "status" or "delay"
    status: int = 0
    seconds: float = 0.0
    method: str | None = None
    path: str | None = None  # substring of the request path
    remaining: int | None = None  # None: until changed

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method.upper() == method) and (self.path is None or self.path in path)


class FaultProxy:
    """A reverse proxy on 127.0.0.1:<free port> in front of `upstream` ("http://host:port").

    Modes (each replaces the previous one): passthrough(), fail(status), delay(seconds), down().
    fail/delay take optional filters: method ("GET", "POST"...), path (a substring of the
    request path) and times (fault only that many matching requests, then pass through).
    `counts` counts every request the proxy received, per "METHOD /path", faulted or not
    (refused connections never reach it); reset_counts() clears it.
    """

    def __init__(self, upstream: str, upstream_timeout: float = 120.0):
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be an http://host:port URL, got {upstream!r}")
        self._upstream = (parts.hostname, parts.port or 80)
        self._upstream_timeout = upstream_timeout
        self._lock = threading.Lock()
        self._fault: _Fault | None = None
        self._closing = threading.Event()  # wakes delayed requests on close()
        self.counts: Counter[str] = Counter()
        self._background: _Background | None = _Background(self._handler_class())
        self.port = self._background.port
        self._placeholder: socket.socket | None = None
        self.url = f"http://{LOOPBACK}:{self.port}"

    # -- modes ----------------------------------------------------------------------------
    def passthrough(self) -> None:
        self._set(None)

    def fail(self, status: int = 500, *, method: str | None = None, path: str | None = None, times=None) -> None:
        """Answer `status` (500, 503, 401...) with a Redfish error body instead of forwarding."""
        self._set(_Fault("status", status=status, method=method, path=path, remaining=times))

    def delay(self, seconds: float, *, method: str | None = None, path: str | None = None, times=None) -> None:
        """Wait `seconds`, then forward: a slow BMC (a client with a shorter timeout gives up)."""
        self._set(_Fault("delay", seconds=seconds, method=method, path=path, remaining=times))

    def down(self) -> None:
        """Stop listening: connections are refused, as by a BMC that is off the network or dead."""
        with self._lock:
            self._fault = None
            if self._background is None:
                return
            self._background.close()
            self._background = None
            # Keep the port bound but not listening: connects are refused and nobody else takes it.
            self._placeholder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._placeholder.bind((LOOPBACK, self.port))

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()

    def address_for(self, bmc_address: str) -> str:
        """A Metal3 BMC address (redfish+http://host:port/...) rewritten to go through this proxy."""
        parts = urlsplit(bmc_address)
        return urlunsplit(parts._replace(netloc=f"{LOOPBACK}:{self.port}"))

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            if self._background is not None:
                self._background.close()
                self._background = None
            if self._placeholder is not None:
                self._placeholder.close()
                self._placeholder = None

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------
    def _set(self, fault: _Fault | None) -> None:
        with self._lock:
            self._fault = fault
            if self._background is None and not self._closing.is_set():
                self._placeholder.close()
                self._placeholder = None
                self._background = _Background(self._handler_class(), self.port)

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        with self._lock:
            self.counts[f"{method} {path}"] += 1
            fault = self._fault
            if fault is None or not fault.matches(method, path):
                return None
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._fault = None
            return fault

    def _forward(self, method: str, target: str, headers: dict, body: bytes):
        connection = http.client.HTTPConnection(*self._upstream, timeout=self._upstream_timeout)
        try:
            connection.request(method, target, body=body or None, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def _handler_class(self):
        proxy = self

        class Handler(_QuietHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = urlsplit(self.path).path
                fault = proxy._take_fault(self.command, path)
                if fault is not None and fault.kind == "status":
                    return self._answer_error(fault.status)
                if fault is not None and fault.kind == "delay" and proxy._closing.wait(fault.seconds):
                    return None  # closing: drop the connection
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                headers["Host"] = "{}:{}".format(*proxy._upstream)
                try:
                    status, response_headers, data = proxy._forward(self.command, self.path, headers, body)
                except OSError:
                    return self._answer_error(502)
                kept = [(name, value) for name, value in response_headers if name.lower() not in _HOP_BY_HOP]
                return self._send(status, kept, data)

            def _answer_error(self, status: int):
                message = f"fault injected by the test proxy: HTTP {status}"
                data = json.dumps(
                    {
                        "error": {
                            "code": "Base.1.0.GeneralError",
                            "message": message,
                            "@Message.ExtendedInfo": [{"MessageId": "Base.1.0.GeneralError", "Message": message}],
                        }
                    }
                ).encode()
                headers = [("Content-Type", "application/json")]
                if status == 401:
                    headers.append(("WWW-Authenticate", 'Basic realm="fault-proxy"'))
                return self._send(status, headers, data)

            def _send(self, status: int, headers: list, data: bytes):
                """One answer, then the connection closes (no keep-alive to reason about in tests)."""
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                self.close_connection = True

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = _handle

        return Handler


def post_json(url: str, body: dict) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    urllib.request.urlopen(request, timeout=5).read()


class MediaServer:
    """The media server (metalclaim.mediaserver) as its own process on 127.0.0.1: config drives out, the image
    writer's callbacks in. Its log is <directory>.log."""

    def __init__(self, directory: Path):
        from metalclaim_dev.devenv.processes import free_port

        self.dir = str(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{free_port()}"
        self._log = directory.parent / f"{directory.name}.log"
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> MediaServer:
        from metalclaim_dev.devenv.processes import wait_until

        port = self.url.rsplit(":", 1)[1]
        argv = [sys.executable, "-m", "metalclaim.mediaserver", "--dir", self.dir, "--listen", "127.0.0.1"]
        with self._log.open("w") as out:
            self._process = subprocess.Popen([*argv, "--port", port], stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(self._answers, "media server", 15, self._process.pid, self._log)
        except BaseException:
            self.close()
            raise
        return self

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(self.url + "/", timeout=1)
        except urllib.error.HTTPError:
            return True  # 404 on / is the expected answer: it is up
        except OSError:
            return False
        return True

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(10)

    def __exit__(self, *exc) -> None:
        self.close()


class HookListener:
    """Tenant hook endpoints on 127.0.0.1, recording each POST (path, headers, arrival time).

    /trickle-* trickles a 200's header one byte a second (every socket read gets a byte in time) until the caller
    hangs up or trickle_seconds pass; /slow-* answers 200 after slow_seconds; any other path at once.
    """

    def __init__(self, trickle_seconds: float = 0.0, slow_seconds: float = 0.0):
        self.requests: list[dict] = []
        self.trickles: list[dict] = []  # per trickled answer: started, ended (the caller went away), bytes sent
        self.trickle_seconds = trickle_seconds
        self.slow_seconds = slow_seconds
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                listener.requests.append(
                    {"path": self.path, "headers": dict(self.headers.items()), "at": time.monotonic()}
                )
                if self.path.startswith("/trickle"):
                    listener._trickle(self.connection)
                    self.close_connection = True
                    return
                if self.path.startswith("/slow"):
                    time.sleep(listener.slow_seconds)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _trickle(self, connection: socket.socket) -> None:
        record = {"started": time.monotonic(), "ended": None, "sent": 0}
        self.trickles.append(record)
        try:
            connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while time.monotonic() - record["started"] < self.trickle_seconds:
                connection.sendall(b"z")
                record["sent"] += 1
                readable, _, _ = select.select([connection], [], [], 1.0)
                if readable and not connection.recv(1):
                    break  # the caller hung up: its deadline ran out
            else:
                connection.sendall(b"\r\nContent-Length: 0\r\n\r\n")
        except OSError:
            pass  # the caller hung up
        record["ended"] = time.monotonic()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[dict]:
        return [r for r in self.requests if r["path"] == path]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
