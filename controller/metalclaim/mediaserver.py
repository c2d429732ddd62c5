"""The controller's media endpoint: per-host config drives for BMCs, and the image writer's callback.

    python -m metalclaim.mediaserver --dir D [--listen 127.0.0.1] [--port P] (--help: the limits)

GET/HEAD /media/<token>/<filename>   a published file (Range supported), nothing else: no listing,
                                     no symlinks, no encoded or dotted paths
POST /callback/<token>               {"status": "success"|"failure", "message": "..."}, once per token,
                                     only while the token's media exist
GET/HEAD /healthz                    200 "ok"

Hosts on the provisioning network reach this server, so no client may hold it: a connection waiting for its
request head costs a socket in one selector thread, never a thread; the head must arrive complete within
--header-timeout (in total, however slowly it trickles); --workers threads serve complete requests;
--max-connections bounds the sockets held (beyond it the connection that has waited longest for its head is
dropped); the listen backlog (--backlog) absorbs a burst of connects.

The directory is written by the collection's plugins/module_utils/_provisioner/io/media.py. This server keeps its
own copy of the few layout names below instead of importing it: the controller package is installed
and run without the collection on sys.path, and a server that imports it would break exactly there.
tests/unit/plugins/module_utils/_provisioner/io/test_media.py checks that both copies agree.
Logs are JSON lines on stderr; a token appears in them only as its first 6 characters.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import heapq
import io
import itertools
import json
import os
import queue
import re
import resource
import secrets
import selectors
import signal
import socket
import stat
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

# Kept in step with plugins/module_utils/_provisioner/pure/media_protocol.py
# (tests/unit/plugins/module_utils/_provisioner/io/test_media.py compares them).
MEDIA_SUBDIR = "media"
CALLBACK_SUBDIR = "callbacks"
CALLBACK_SUFFIX = ".json"
TOKEN_PATTERN = r"[A-Za-z0-9_-]{43}"
FILENAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
CALLBACK_MAX_BYTES = 64 * 1024
CALLBACK_STATUSES = ("success", "failure")

# Matched against the raw request path: no percent-decoding happens, so "%2F" or "%2e%2e" never match.
MEDIA_ROUTE = re.compile(rf"/{MEDIA_SUBDIR}/(?P<token>{TOKEN_PATTERN})/(?P<filename>{FILENAME_PATTERN})")
CALLBACK_ROUTE = re.compile(rf"/callback/(?P<token>{TOKEN_PATTERN})")
TOKEN_IN_TEXT = re.compile(r"(?<![A-Za-z0-9_-])([A-Za-z0-9_-]{6})[A-Za-z0-9_-]{37}(?![A-Za-z0-9_-])")
CHUNK = 1024 * 1024
HEALTH_PATH = "/healthz"
# http.server's own limits are one line of 64 KiB and 100 headers; a head over this is answered 431.
MAX_HEAD_BYTES = 64 * 1024 + 4096
ENV_PREFIX = "METALCLAIM_MEDIASERVER_"


def redact(text: str) -> str:
    """Shorten every token-shaped word to its first 6 characters."""
    return TOKEN_IN_TEXT.sub(r"\1...", text)


def log(event: str, **fields) -> None:
    record = {"ts": round(time.time(), 3), "event": event, **fields}
    sys.stderr.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stderr.flush()


def parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """(first, last) for one satisfiable byte range, None to send the whole file, "unsatisfiable" for 416.

    Several ranges are answered with the whole file, which RFC 9110 allows."""
    if not header:
        return None
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not match or match.group(1) == match.group(2) == "":
        return None
    first_text, last_text = match.groups()
    if first_text == "":  # suffix range: the last N bytes
        length = int(last_text)
        if length == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - length), size - 1
    first = int(first_text)
    last = size - 1 if last_text == "" else min(int(last_text), size - 1)
    if first >= size or last < first:
        return "unsatisfiable"
    return first, last


def validate_callback(body: bytes) -> dict:
    """The callback as stored; raises ValueError with a short reason."""
    try:
        report = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError("body is not UTF-8 JSON") from error
    if not isinstance(report, dict):
        raise ValueError("body must be a JSON object")
    unknown = set(report) - {"status", "message"}
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
    if report.get("status") not in CALLBACK_STATUSES:
        raise ValueError(f"status must be one of {', '.join(CALLBACK_STATUSES)}")
    message = report.get("message", "")
    if not isinstance(message, str):
        raise ValueError("message must be a string")
    return {"status": report["status"], "message": message}


class MediaStore:
    """The directory, opened so that no symlink or non-regular file is ever followed or served."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def _token_dir_fd(self, token: str) -> int:
        media_fd = os.open(os.path.join(self.root, MEDIA_SUBDIR), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            return os.open(token, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=media_fd)
        finally:
            os.close(media_fd)

    def open_media(self, token: str, filename: str):
        """(file object, size) or None."""
        try:
            dir_fd = self._token_dir_fd(token)
        except OSError:
            return None
        try:
            fd = os.open(filename, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError:
            return None
        finally:
            os.close(dir_fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        return os.fdopen(fd, "rb"), info.st_size

    def token_exists(self, token: str) -> bool:
        try:
            os.close(self._token_dir_fd(token))
            return True
        except OSError:
            return False

    def record_callback(self, token: str, report: dict) -> bool:
        """Store the report unless one exists; False when it did. Atomic: link() refuses an existing name."""
        directory = os.path.join(self.root, CALLBACK_SUBDIR)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        final = os.path.join(directory, token + CALLBACK_SUFFIX)
        temporary = os.path.join(directory, f".{secrets.token_hex(8)}.tmp")
        data = json.dumps({**report, "received_at": time.time()}).encode()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.link(temporary, final)
        except OSError as error:
            if error.errno == errno.EEXIST:
                return False
            raise
        finally:
            os.unlink(temporary)
        if not self.token_exists(token):  # withdrawn meanwhile: leave nothing behind
            with contextlib.suppress(FileNotFoundError):
                os.unlink(final)
        return True


class _Reader:
    """The request's input for http.server: the bytes the server's selector already read (a complete head, perhaps
    more), then the socket, every read bounded by one deadline for the whole request (`deadline`, monotonic).
    What is left unread after the request (a pipelined next one) is `pending`."""

    def __init__(self, sock: socket.socket, data: bytes, deadline: float, io_timeout: float):
        self.sock, self.pending, self.deadline, self.io_timeout = sock, bytearray(data), deadline, io_timeout

    def _fill(self) -> bool:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request read deadline passed")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(CHUNK)
        finally:
            self.sock.settimeout(self.io_timeout)  # each write of the response has its own
        self.pending += chunk
        return bool(chunk)

    def readline(self, limit: int = -1) -> bytes:
        start = 0
        while True:
            end = self.pending.find(b"\n", start)
            if end >= 0 and (limit < 0 or end < limit):
                size = end + 1
                break
            if 0 <= limit <= len(self.pending):
                size = limit
                break
            start = len(self.pending)
            if not self._fill():
                size = len(self.pending)
                break
        return self._take(size)

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self.pending) < size) and self._fill():
            pass
        return self._take(len(self.pending) if size < 0 else min(size, len(self.pending)))

    def _take(self, size: int) -> bytes:
        data = bytes(self.pending[:size])
        del self.pending[:size]
        return data

    def close(self) -> None:
        pass


class _Writer(io.BufferedIOBase):
    """The response's output: each write is one sendall, bounded by the socket's timeout (--io-timeout)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.sock.sendall(data)
        return len(data)


class Handler(BaseHTTPRequestHandler):
    """One request whose head the server has already read; the server keeps or closes the connection after it."""

    server_version = "metalclaim-media"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    store: MediaStore  # set on the server class

    def __init__(self, sock: socket.socket, client_address, server: MediaServer, head: bytes):
        self.head = head
        super().__init__(sock, client_address, server)

    def setup(self):
        self.connection = self.request
        self.connection.settimeout(self.server.io_timeout)
        deadline = time.monotonic() + self.server.io_timeout
        self.rfile = _Reader(self.connection, self.head, deadline, self.server.io_timeout)
        self.wfile = _Writer(self.connection)

    def handle(self):
        self.close_connection = True
        self.handle_one_request()

    def finish(self):
        pass  # the socket stays the server's

    def log_message(self, format, *args):  # BaseHTTPRequestHandler's signature
        log("http", client=self.client_address[0], message=redact(format % args))

    def log_request(self, code="-", size="-"):
        code = code.value if isinstance(code, HTTPStatus) else code
        if code == HTTPStatus.OK and self._path() == HEALTH_PATH:
            return  # probes every few seconds: not worth a line
        log("request", client=self.client_address[0], request=redact(self.requestline), status=code, size=size)

    def _plain(self, status: HTTPStatus, text: str = "", headers: dict | None = None) -> None:
        body = (text or status.phrase).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _serve(self, with_body: bool) -> None:
        if self._path() == HEALTH_PATH:
            self._plain(HTTPStatus.OK, "ok")
            return
        match = MEDIA_ROUTE.fullmatch(self._path())
        opened = match and self.store.open_media(match["token"], match["filename"])
        if not opened:
            self._plain(HTTPStatus.NOT_FOUND)
            return
        handle, size = opened
        with handle:
            wanted = parse_range(self.headers.get("Range"), size)
            if wanted == "unsatisfiable":
                self._plain(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, headers={"Content-Range": f"bytes */{size}"})
                return
            first, last = wanted if wanted else (0, size - 1)
            length = last - first + 1
            self.send_response(HTTPStatus.PARTIAL_CONTENT if wanted else HTTPStatus.OK)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Cache-Control", "no-store")
            if wanted:
                self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
            self.end_headers()
            if not with_body:
                return
            handle.seek(first)
            remaining = length
            while remaining > 0:
                chunk = handle.read(min(CHUNK, remaining))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)

    def do_GET(self):
        self._serve(with_body=True)

    def do_HEAD(self):
        self._serve(with_body=False)

    def do_POST(self):
        match = CALLBACK_ROUTE.fullmatch(self._path())
        length_header = self.headers.get("Content-Length")
        if not match or not self.store.token_exists(match["token"]):
            self.close_connection = True  # the body, if any, stays unread
            self._plain(HTTPStatus.NOT_FOUND)
            return
        token = match["token"]
        if length_header is None or not length_header.isdigit():
            self.close_connection = True
            self._plain(HTTPStatus.LENGTH_REQUIRED)
            return
        if int(length_header) > CALLBACK_MAX_BYTES:
            self.close_connection = True
            self._plain(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"callback body over {CALLBACK_MAX_BYTES} bytes")
            return
        body = self.rfile.read(int(length_header))
        try:
            report = validate_callback(body)
        except ValueError as error:
            self._plain(HTTPStatus.BAD_REQUEST, str(error))
            return
        if not self.store.record_callback(token, report):
            self._plain(HTTPStatus.CONFLICT, "a result was already reported for this token")
            return
        log("callback", token=redact(token), status=report["status"])
        self._plain(HTTPStatus.OK, "recorded")

    def _not_found(self):
        self.close_connection = True
        self._plain(HTTPStatus.NOT_FOUND)

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_found


class _Waiting:
    """A connection waiting for its request head, in the selector."""

    __slots__ = ("address", "buffer", "deadline", "sock")

    def __init__(self, sock: socket.socket, address, buffer: bytes, deadline: float):
        self.sock, self.address, self.buffer, self.deadline = sock, address, bytearray(buffer), deadline


def _head_end(buffer: bytearray, start: int) -> int:
    """The index just past the blank line ending a request head, or -1."""
    ends = [(found + len(mark)) for mark in (b"\n\r\n", b"\n\n") if (found := buffer.find(mark, start)) >= 0]
    return min(ends) if ends else -1


def _answer_and_close(sock: socket.socket, status: HTTPStatus, headers: str = "") -> None:
    """A short answer from the selector thread (never blocks: a fresh socket's send buffer takes it), then close."""
    body = f"{status.phrase}\n".encode()
    head = f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n"
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(head.encode() + body)
    sock.close()


class MediaServer:
    """One selector thread accepts connections and reads request heads; `workers` threads serve complete requests.

    A connection costs a thread only while a request of it is served: idle and trickling clients cost a socket each,
    at most `max_connections` (the oldest waiting for a head is dropped for a new one; when every connection is
    being served a new one is answered 503), for at most `header_timeout` seconds from their connection or the end
    of their previous response. A request reads its body within `io_timeout` in total; each write of the response
    (up to 1 MiB) must go through within `io_timeout`."""

    def __init__(
        self,
        handler: type[Handler],
        listen: str,
        port: int,
        *,
        header_timeout: float = 10.0,
        io_timeout: float = 30.0,
        max_connections: int = 4096,
        workers: int = 64,
        backlog: int = 4096,
    ):
        self.handler = handler
        self.header_timeout, self.io_timeout = header_timeout, io_timeout
        self.max_connections, self.workers, self.backlog = max_connections, workers, backlog
        family = socket.AF_INET6 if ":" in listen else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind((listen, port))
            self.socket.listen(backlog)  # the kernel caps it at net.core.somaxconn
            self.socket.setblocking(False)
        except OSError:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._waiting: collections.OrderedDict[socket.socket, _Waiting] = collections.OrderedDict()  # oldest first
        self._deadlines: list = []  # heap of (deadline, n, sock); stale entries are skipped
        self._sequence = itertools.count()
        self._busy = 0  # connections queued for or held by a worker
        self._accept_paused_until = 0.0
        self._returned: queue.SimpleQueue = queue.SimpleQueue()  # from workers: (sock, address, pending) or None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle_workers = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self.dropped: collections.Counter = collections.Counter()  # reason -> connections, logged every 10 s
        self._dropped_logged_at = time.monotonic()

    # -- the selector thread -----------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        self._stopped.clear()
        self._selector.register(self.socket, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_reader, selectors.EVENT_READ, "wake")
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                self._expire(now)
                self._resume_accepting(now)
                timeout = min(1.0, self._deadlines[0][0] - now) if self._deadlines else 1.0
                if self._accept_paused_until:
                    timeout = min(timeout, self._accept_paused_until - now)
                for key, _events in self._selector.select(max(0.0, timeout)):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(BlockingIOError):
                            self._wake_reader.recv(4096)
                    else:
                        self._read(key.data)
                self._take_returned()
                self._log_dropped(time.monotonic(), force=False)
        finally:
            for sock in (self.socket, self._wake_reader):
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(sock)
            self._stopped.set()

    def _accept(self) -> None:
        for _ in range(1024):  # then look at the other sockets too
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if self._waiting:  # make room: the connection that has waited longest for its head
                        self._drop(next(iter(self._waiting.values())), "descriptors")
                        continue
                    self._pause_accepting(error)
                    return
                continue  # ECONNABORTED and the like: that client is gone
            sock.setblocking(False)
            # Headers and body go out as separate writes: without this, Nagle holds the body until the client's
            # delayed ACK (40 ms per request on a kept-alive connection, as BMCs reading virtual media use).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if len(self._waiting) + self._busy >= self.max_connections:
                if not self._waiting:  # every connection is being served: refuse, briefly
                    self.dropped["refused at the connection cap"] += 1
                    _answer_and_close(sock, HTTPStatus.SERVICE_UNAVAILABLE, "Retry-After: 1\r\n")
                    continue
                self._drop(next(iter(self._waiting.values())), "connection cap")
            self._wait(_Waiting(sock, address, b"", time.monotonic() + self.header_timeout))

    def _pause_accepting(self, error: OSError) -> None:
        """Out of descriptors with no connection to drop: the backlog keeps the clients for a moment."""
        self.dropped[f"accept paused ({errno.errorcode.get(error.errno, error.errno)})"] += 1
        self._selector.unregister(self.socket)
        self._accept_paused_until = time.monotonic() + 0.1

    def _resume_accepting(self, now: float) -> None:
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self.socket, selectors.EVENT_READ, "accept")

    def _wait(self, waiting: _Waiting) -> None:
        """Into the selector until its head is complete, unless it already is (pipelined)."""
        if self._dispatch_if_complete(waiting, 0):
            return
        self._waiting[waiting.sock] = waiting
        self._selector.register(waiting.sock, selectors.EVENT_READ, waiting)
        heapq.heappush(self._deadlines, (waiting.deadline, next(self._sequence), waiting.sock))

    def _read(self, waiting: _Waiting) -> None:
        try:
            chunk = waiting.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._forget(waiting)
            waiting.sock.close()
            return
        searched = max(0, len(waiting.buffer) - 2)
        waiting.buffer += chunk
        if self._dispatch_if_complete(waiting, searched):
            self._forget(waiting)

    def _dispatch_if_complete(self, waiting: _Waiting, searched: int) -> bool:
        """Hand a complete head to a worker (True), answer 431 to one too large (True), or wait for more (False)."""
        buffer = waiting.buffer
        if buffer[:1] in (b"\r", b"\n"):  # empty lines before a request line are ignored (RFC 9112 2.2)
            stripped = buffer.lstrip(b"\r\n")
            del buffer[: len(buffer) - len(stripped)]
            searched = 0
        end = _head_end(buffer, searched)
        if end < 0:
            if len(buffer) <= MAX_HEAD_BYTES:
                return False
            self.dropped["head too large"] += 1
            _answer_and_close(waiting.sock, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
            return True
        self._busy += 1
        self._jobs.put((waiting.sock, waiting.address, bytes(buffer)))
        if not self._idle_workers.acquire(blocking=False) and len(self._threads) < self.workers:
            thread = threading.Thread(target=self._work, name=f"media-worker-{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()
        return True

    def _forget(self, waiting: _Waiting) -> None:
        del self._waiting[waiting.sock]
        self._selector.unregister(waiting.sock)

    def _drop(self, waiting: _Waiting, reason: str) -> None:
        self.dropped[reason] += 1
        self._forget(waiting)
        waiting.sock.close()

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _n, sock = heapq.heappop(self._deadlines)
            waiting = self._waiting.get(sock)
            if waiting is not None and waiting.deadline == deadline:
                self._drop(waiting, "header timeout")

    def _take_returned(self) -> None:
        while True:
            try:
                returned = self._returned.get_nowait()
            except queue.Empty:
                return
            self._busy -= 1
            if returned is not None:
                sock, address, pending = returned
                sock.setblocking(False)
                self._wait(_Waiting(sock, address, pending, time.monotonic() + self.header_timeout))

    def _log_dropped(self, now: float, force: bool) -> None:
        if self.dropped and (force or now - self._dropped_logged_at >= 10):
            log("dropped", connections=dict(self.dropped), held=len(self._waiting) + self._busy)
            self.dropped.clear()
            self._dropped_logged_at = now

    # -- the workers -------------------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._serve_one(*job)
            self._idle_workers.release()

    def _serve_one(self, sock: socket.socket, address, head: bytes) -> None:
        returned = None
        try:
            sock.setblocking(True)
            handler = self.handler(sock, address, self, head)
            if not handler.close_connection and not self._stopping.is_set():
                returned = (sock, address, bytes(handler.rfile.pending))
        except Exception as error:  # a client gone or too slow, mostly; never the worker's end
            reason = "timeout" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
            log("connection error", client=address[0], error=redact(reason))
        finally:
            if returned is None:
                with contextlib.suppress(OSError):
                    sock.close()
            self._returned.put(returned)
            with contextlib.suppress(OSError):
                self._wake_writer.send(b"x")

    # -- stopping ----------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop serve_forever (from another thread) and wait for it."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"x")
        self._stopped.wait()

    def server_close(self) -> None:
        self._stopping.set()
        self._log_dropped(time.monotonic(), force=True)
        for sock in list(self._waiting):
            sock.close()
        self._waiting.clear()
        for _thread in self._threads:
            self._jobs.put(None)
        self._selector.close()
        for sock in (self.socket, self._wake_reader, self._wake_writer):
            sock.close()


def make_server(directory: str, listen: str, port: int, **limits) -> MediaServer:
    """The server, bound and listening; `limits` are MediaServer's keyword arguments."""
    os.makedirs(os.path.join(directory, MEDIA_SUBDIR), mode=0o700, exist_ok=True)
    os.makedirs(os.path.join(directory, CALLBACK_SUBDIR), mode=0o700, exist_ok=True)
    handler = type("MediaHandler", (Handler,), {"store": MediaStore(directory)})
    return MediaServer(handler, listen, port, **limits)


def _stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _env(flag: str, default):
    return os.environ.get(ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper(), default)


def _positive(type_):
    def convert(text):
        value = type_(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text}: must be above 0")
        return value

    convert.__name__ = type_.__name__  # argparse names it in "invalid ... value"
    return convert


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="metalclaim-mediaserver",
        description=__doc__.split("\n", maxsplit=1)[0],
        epilog="Every flag may also be given as an environment variable: --header-timeout is "
        f"{ENV_PREFIX}HEADER_TIMEOUT. Flags win over variables.",
    )

    def add(flag, help_text, default=None, type_=str, **kwargs):
        suffix = "" if default is None else " (default: %(default)s)"
        p.add_argument(flag, default=_env(flag, default), type=type_, help=help_text + suffix, **kwargs)

    add(
        "--dir",
        "the media directory (layout: plugins/module_utils/_provisioner/io/media.py); required, here or as "
        f"{ENV_PREFIX}DIR",
        required=_env("--dir", None) is None,
    )
    add("--listen", "address to listen on (0.0.0.0 or :: for every interface)", "127.0.0.1")
    add("--port", "port to listen on; 0 picks a free port, the URL printed says which", 0, int)
    add(
        "--header-timeout",
        "seconds a client has to send a complete request head, in total however slowly it comes, counted from its "
        "connection or from the end of its previous response (an idle keep-alive connection is closed then)",
        10.0,
        _positive(float),
    )
    add(
        "--io-timeout",
        "seconds a request being served may take to send its body (in total), and each 1 MiB of the response to be "
        "taken by the client",
        30.0,
        _positive(float),
    )
    add(
        "--max-connections",
        "connections held at most, idle ones included; beyond it the one that has waited longest for its request "
        "head is dropped, or a new one answered 503 when every one is being served (also kept below the open-file "
        "limit)",
        4096,
        _positive(int),
    )
    add("--workers", "threads serving requests at once; more complete requests wait for one", 64, _positive(int))
    add(
        "--backlog",
        "listen backlog: connections the kernel completes before they are accepted, for a burst (capped by "
        "net.core.somaxconn)",
        4096,
        _positive(int),
    )
    return p


def _room_for(max_connections: int, workers: int) -> int:
    """Raise the open-file limit toward what the cap needs; the connections it leaves room for."""
    reserve = 2 * workers + 64  # each worker may open a media file; stdio, the selector, the listening socket
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_connections + reserve
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return max_connections
    return max(1, soft - reserve)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    max_connections = _room_for(args.max_connections, args.workers)
    if max_connections < args.max_connections:
        log("limited", max_connections=max_connections, reason="open-file limit (RLIMIT_NOFILE)")
    limits = {
        "header_timeout": args.header_timeout,
        "io_timeout": args.io_timeout,
        "max_connections": max_connections,
        "workers": args.workers,
        "backlog": args.backlog,
    }
    server = make_server(args.dir, args.listen, args.port, **limits)
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
    print(url, flush=True)
    log("listening", url=url, dir=os.path.abspath(args.dir), **limits)
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
