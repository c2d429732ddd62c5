"""The controller's media endpoint: per-host config drives for BMCs, and the image writer's callback.

    python -m metalclaim.mediaserver --dir D [--listen 127.0.0.1] [--port P]

GET/HEAD /media/<token>/<filename>   a published file (Range supported), nothing else: no listing,
                                     no symlinks, no encoded or dotted paths
POST /callback/<token>               {"status": "success"|"failure", "message": "..."}, once per token,
                                     only while the token's media exist

The directory is written by the collection's plugins/module_utils/_provisioner/io/media.py. This server keeps its
own copy of the few layout names below instead of importing it: the controller package is installed
and run without the collection on sys.path, and a server that imports it would break exactly there.
tests/unit/plugins/module_utils/_provisioner/io/test_media.py checks that both copies agree.
Logs are JSON lines on stderr; a token appears in them only as its first 6 characters.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import secrets
import signal
import stat
import sys
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


class Handler(BaseHTTPRequestHandler):
    server_version = "metalclaim-media"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    store: MediaStore  # set on the server class

    def log_message(self, format, *args):  # BaseHTTPRequestHandler's signature
        log("http", client=self.client_address[0], message=redact(format % args))

    def log_request(self, code="-", size="-"):
        code = code.value if isinstance(code, HTTPStatus) else code
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


def make_server(directory: str, listen: str, port: int) -> ThreadingHTTPServer:
    os.makedirs(os.path.join(directory, MEDIA_SUBDIR), mode=0o700, exist_ok=True)
    os.makedirs(os.path.join(directory, CALLBACK_SUBDIR), mode=0o700, exist_ok=True)
    handler = type("MediaHandler", (Handler,), {"store": MediaStore(directory)})
    server = ThreadingHTTPServer((listen, port), handler)
    server.daemon_threads = True
    return server


def _stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="metalclaim-mediaserver", description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument(
        "--dir",
        required=True,
        help="the media directory (layout: plugins/module_utils/_provisioner/io/media.py)",
    )
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port; the URL printed says which")
    args = parser.parse_args(argv)
    server = make_server(args.dir, args.listen, args.port)
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
    print(url, flush=True)
    log("listening", url=url, dir=os.path.abspath(args.dir))
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
