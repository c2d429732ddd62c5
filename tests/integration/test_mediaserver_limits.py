"""The media server under idle and trickling connections (issue 22): hosts on the provisioning network must not be
able to hold it by connecting and sending nothing, or a byte at a time.

Each figure is measured (connect burst, the server's threads and sockets from /proc, one download's time) and printed
with -s; nothing waits a guessed time.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import media

from metalclaim_dev.support import eventually

IDLE = 1000
ISO = bytes(range(256)) * (1440 * 4)  # a floppy-sized config drive, 1.44 MiB
DOWNLOAD_SECONDS = 1.0
MAX_THREADS = 100  # bounded: far below the connections held, whatever the worker count


@pytest.fixture
def nofile():
    """Room for the client sockets here (up to 2 * IDLE) and IDLE in the server (a child inherits the raised limit)."""
    needed = 3 * IDLE + 200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Server:
    def __init__(self, directory, *flags):
        self.directory = str(directory)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "metalclaim.mediaserver", "--dir", self.directory, "--port", "0", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.process.communicate(timeout=10)[1]
        parsed = urllib.parse.urlsplit(self.url)
        self.host, self.port = parsed.hostname, parsed.port
        self.own_sockets = self.sockets()  # listening (and any internal ones), before any client

    def threads(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))

    def sockets(self) -> int:
        """Sockets the server holds open, its own included."""
        count = 0
        with os.scandir(f"/proc/{self.process.pid}/fd") as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    count += os.readlink(entry.path).startswith("socket:")
        return count

    def download(self, path: str) -> tuple[int, bytes, float]:
        started = time.monotonic()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            return response.status, body, time.monotonic() - started
        finally:
            connection.close()

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.communicate()[1]


@pytest.fixture
def start(tmp_path):
    servers = []

    def start(*flags) -> tuple[Server, str]:
        server = Server(tmp_path / f"media-{len(servers)}", *flags)
        servers.append(server)
        token = media.publish(server.directory, "config-drive.iso", ISO)[0]
        return server, f"/media/{token}/config-drive.iso"

    yield start
    for server in servers:
        server.stop()


class Peak:
    """The server's highest thread count, sampled every 10 ms from /proc until stopped."""

    def __init__(self, server: Server):
        self.server, self.value, self._stop = server, server.threads(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._stop.wait(0.01):
            with contextlib.suppress(OSError, StopIteration):
                self.value = max(self.value, self.server.threads())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError, StopIteration):
            self.value = max(self.value, self.server.threads())
        return self.value


def connect_burst(host: str, port: int, count: int, timeout: float) -> tuple[list[socket.socket], float]:
    """`count` connections started at once (non-blocking); (the connected sockets, seconds until all connected)."""
    started = time.monotonic()
    pending, done = {}, []
    selector = selectors.DefaultSelector()
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            code = sock.connect_ex((host, port))
            if code == 0:
                done.append(sock)
            elif code in (errno.EINPROGRESS, errno.EAGAIN):
                pending[sock.fileno()] = sock
                selector.register(sock, selectors.EVENT_WRITE)
            else:
                sock.close()
                raise OSError(code, os.strerror(code))
        deadline = started + timeout
        while pending and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                sock = pending.pop(key.fd)
                selector.unregister(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    sock.close()
                    raise OSError(code, os.strerror(code))
                done.append(sock)
        elapsed = time.monotonic() - started
        if pending:
            raise AssertionError(f"{len(pending)} of {count} connections not established after {elapsed:.1f} s")
        return done, elapsed
    except BaseException:
        for sock in [*done, *pending.values()]:
            sock.close()
        raise
    finally:
        selector.close()


def closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)  # a socket with a timeout would wait for data first
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def hold_idle(server: Server, count: int, budget: float) -> tuple[list[socket.socket], int, float]:
    """Idle connections (nothing ever sent) until the server holds `count` of them or `budget` seconds pass: a burst,
    then one connection at a time for those the server never accepted (past a full listen backlog, a client can be
    left believing it is connected while the server never sees it). (client sockets, held by the server, seconds)."""
    started = time.monotonic()
    deadline = started + budget
    sockets, _ = connect_burst(server.host, server.port, count, timeout=budget)
    held = lambda: server.sockets() - server.own_sockets  # noqa: E731
    with contextlib.suppress(AssertionError):
        eventually(lambda: held() >= count, timeout=min(2.0, budget), interval=0.02, message="the burst accepted")
    while (missing := count - held()) > 0 and time.monotonic() < deadline:
        for _ in range(missing):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(OSError):
                sockets.append(socket.create_connection((server.host, server.port), timeout=remaining))
    return sockets, held(), time.monotonic() - started


def test_a_thousand_idle_connections_neither_block_a_download_nor_hold_threads(nofile, start):
    server, path = start()  # the defaults, as deployed
    threads_before = server.threads()
    peak = Peak(server)
    idle, held, connect_seconds = hold_idle(server, IDLE, budget=60)
    try:
        status, body, download_seconds = server.download(path)
        peak_threads = peak.stop()
        still_open = sum(not closed_by_peer(sock) for sock in idle)
    finally:
        peak.stop()
        for sock in idle:
            sock.close()
    figures = (
        f"idle connections held by the server: {held} of {IDLE} after {connect_seconds:.1f} s "
        f"({len(idle)} client sockets, {still_open} still open after the download); server threads {threads_before} "
        f"before, peak {peak_threads}; download of {len(ISO)} B: status {status} in {download_seconds:.3f} s"
    )
    print("\n" + figures)
    assert (status, body) == (200, ISO), figures
    problems = []
    if held < IDLE:
        problems.append(f"the server took only {held} of {IDLE} connections in {connect_seconds:.0f} s")
    if peak_threads > MAX_THREADS:
        problems.append(f"threads {peak_threads} > {MAX_THREADS}")
    if download_seconds >= DOWNLOAD_SECONDS:
        problems.append(f"download took {download_seconds:.3f} s >= {DOWNLOAD_SECONDS} s")
    assert not problems, f"{'; '.join(problems)} ({figures})"


def request_burst(host: str, port: int, count: int, path: str, timeout: float) -> tuple[dict, float]:
    """`count` clients connecting at once, each sending one request as soon as it is connected and reading the
    answer to its end (Connection: close); ({status line or error: clients}, seconds until the last answer)."""
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    started = time.monotonic()
    selector = selectors.DefaultSelector()
    answers, outcomes = {}, {}
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex((host, port))
            selector.register(sock, selectors.EVENT_WRITE)
            answers[sock] = b""
        deadline = started + timeout
        while selector.get_map() and time.monotonic() < deadline:
            for key, events in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                sock = key.fileobj
                try:
                    if events & selectors.EVENT_WRITE:
                        if code := sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                            raise OSError(code, os.strerror(code))
                        sock.sendall(request)  # a few dozen bytes into an empty send buffer
                        selector.modify(sock, selectors.EVENT_READ)
                        continue
                    chunk = sock.recv(65536)
                    if chunk:
                        answers[sock] += chunk
                        continue
                    outcome = answers[sock].split(b"\r\n", 1)[0].decode(errors="replace") or "closed unanswered"
                except OSError as error:
                    outcome = f"error {error.strerror or error}"
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                selector.unregister(sock)
        elapsed = time.monotonic() - started
        if selector.get_map():
            outcomes[f"unanswered after {timeout} s"] = len(selector.get_map())
        return outcomes, elapsed
    finally:
        for sock in answers:
            sock.close()
        selector.close()


def test_a_burst_of_clients_is_absorbed_by_the_listen_backlog(nofile, start):
    server, _path = start()
    outcomes, seconds = request_burst(server.host, server.port, 500, "/healthz", timeout=30)
    print(f"\n500 clients at once: {outcomes} in {seconds:.2f} s")
    assert outcomes == {"HTTP/1.1 200 OK": 500}
    # A SYN dropped at a full backlog is retried by the client after 1 s, then 3 s, 7 s...
    assert seconds < 5, f"500 clients answered in {seconds:.2f} s"


def test_idle_and_trickling_clients_are_dropped_and_the_cap_holds(nofile, start):
    server, path = start("--header-timeout", "1", "--max-connections", "100", "--workers", "4")
    idle, _ = connect_burst(server.host, server.port, 300, timeout=60)
    try:
        # Over the cap: the server holds at most 100 connections and still serves.
        cap = server.own_sockets + 100
        eventually(
            lambda: server.sockets() <= cap and sum(closed_by_peer(s) for s in idle) >= 200,
            timeout=30,
            interval=0.02,
            message="the cap",
        )
        status, body, seconds = server.download(path)
        assert (status, body) == (200, ISO)
        assert seconds < DOWNLOAD_SECONDS, f"download took {seconds:.3f} s at the connection cap"
        # Idle connections are all dropped after the head timeout (1 s, plus slack for a loaded machine).
        dropped = lambda: all(closed_by_peer(s) for s in idle)  # noqa: E731
        eventually(dropped, timeout=10, interval=0.02, message="every idle connection dropped")
        left = lambda: server.sockets() == server.own_sockets  # noqa: E731
        eventually(left, timeout=10, interval=0.02, message="no connection left")
    finally:
        for sock in idle:
            sock.close()
    # A trickling head is dropped once the head timeout has passed in total, although each byte comes within it.
    request = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 10_000
    with socket.create_connection((server.host, server.port), timeout=10) as trickler:
        connected = time.monotonic()
        dropped_after = None
        for byte in request:
            with contextlib.suppress(OSError):  # once dropped, the reset may come here
                trickler.sendall(bytes([byte]))
            if closed_by_peer(trickler):
                dropped_after = time.monotonic() - connected
                break
            trickler.setblocking(True)
            time.sleep(0.05)  # the trickle itself, not a wait for the server
    print(f"\ntrickling client dropped after {dropped_after} s (header timeout 1 s)")
    assert dropped_after is not None and 0.9 < dropped_after < 1 + 5, f"trickler dropped after {dropped_after}"
    assert server.threads() <= 1 + 4  # the selector thread and at most the 4 workers


def test_healthz_and_every_flag_documented(start):
    server, _path = start()
    status, body, _seconds = server.download("/healthz")
    assert (status, body) == (200, b"ok\n")
    from metalclaim import mediaserver

    parser = mediaserver.parser()
    options = [action for action in parser._actions if action.option_strings and action.dest != "help"]
    assert {"--header-timeout", "--io-timeout", "--max-connections", "--workers", "--backlog"} <= {
        flag for action in options for flag in action.option_strings
    }
    undocumented = [action.option_strings[0] for action in options if not (action.help or "").strip()]
    assert not undocumented, f"flags without help: {undocumented}"
    assert "METALCLAIM_MEDIASERVER_" in parser.format_help()


def test_flags_come_from_the_environment(tmp_path):
    environment = {**os.environ, "METALCLAIM_MEDIASERVER_HEADER_TIMEOUT": "not-a-number"}
    result = subprocess.run(
        [sys.executable, "-m", "metalclaim.mediaserver", "--dir", str(tmp_path), "--port", "0"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2 and "header-timeout" in result.stderr, result.stderr
