"""The media server as a process: serves published media only, takes each callback once, never lists."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import urllib.parse

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import media
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import media_protocol as protocol

ISO = bytes(range(256)) * 40  # 10 KiB with a recognisable pattern


class Server:
    def __init__(self, directory):
        self.directory = str(directory)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "metalclaim.mediaserver", "--dir", self.directory, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.process.stderr.read()
        parsed = urllib.parse.urlsplit(self.url)
        self.host, self.port = parsed.hostname, parsed.port

    def request(self, method, path, body=None, headers=None):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            connection.putrequest(method, path, skip_accept_encoding=True)  # the path goes out byte for byte
            for name, value in (headers or {}).items():
                connection.putheader(name, value)
            if body is not None:
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        return self.process.communicate(timeout=10)[1]


@pytest.fixture
def server(tmp_path):
    server = Server(tmp_path / "media-dir")
    yield server
    if server.process.poll() is None:
        server.stop()


@pytest.fixture
def published(server):
    token = media.publish(server.directory, "config-drive.iso", ISO)[0]
    return token, f"/media/{token}/config-drive.iso"


def test_published_media_are_served_with_ranges(server, published):
    path = published[1]
    status, headers, body = server.request("GET", path)
    assert (status, body) == (200, ISO)
    assert headers["Content-Length"] == str(len(ISO)) and headers["Accept-Ranges"] == "bytes"
    status, headers, body = server.request("HEAD", path)
    assert (status, body, headers["Content-Length"]) == (200, b"", str(len(ISO)))
    status, headers, body = server.request("GET", path, headers={"Range": "bytes=100-199"})
    assert (status, body, headers["Content-Range"]) == (206, ISO[100:200], f"bytes 100-199/{len(ISO)}")
    status, headers, body = server.request("GET", path, headers={"Range": "bytes=-16"})
    assert (status, body) == (206, ISO[-16:])
    status, headers, _body = server.request("GET", path, headers={"Range": f"bytes={len(ISO)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(ISO)}"


def test_nothing_else_is_served(server, published, tmp_path):
    token, path = published
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    os.symlink(outside, os.path.join(server.directory, "media", token, "link.iso"))
    linked_token = protocol.new_token()
    os.symlink(os.path.join(server.directory, "media", token), os.path.join(server.directory, "media", linked_token))
    os.makedirs(os.path.join(server.directory, "media", token, "subdir"))
    probes = [
        "/",
        "/media",
        "/media/",
        f"/media/{token}",
        f"/media/{token}/",
        f"/media/{token}/subdir",
        f"/media/{protocol.new_token()}/config-drive.iso",  # unknown token
        f"/media/{token[:-1]}/config-drive.iso",  # prefix of a real token
        f"/media/{token}/../../../../etc/passwd",
        f"/media/{token}/..%2F..%2F..%2Fsecret.txt",
        f"/media/{token}%2Fconfig-drive.iso",
        f"/media/{token}/%2e%2e/{token}/config-drive.iso",
        f"/media/{token}/./config-drive.iso",
        f"/media//{token}/config-drive.iso",
        f"/media/{token}/link.iso",  # symlinked file
        f"/media/{linked_token}/config-drive.iso",  # symlinked token directory
        f"/callbacks/{token}.json",
    ]
    for probe in probes:
        status, _headers, body = server.request("GET", probe)
        assert status == 404, probe
        assert b"secret" not in body and ISO[:64] not in body
    assert server.request("GET", path + "?x=1")[0] == 200  # a query string changes nothing
    for method in ("PUT", "DELETE", "OPTIONS"):
        assert server.request(method, path, body=b"")[0] == 404


def test_callback_is_taken_once_for_a_live_token(server, published):
    token = published[0]
    callback = f"/callback/{token}"
    report = json.dumps({"status": "success", "message": "qcow2 image written"}).encode()
    headers = {"Content-Type": "application/json"}
    assert server.request("POST", f"/callback/{protocol.new_token()}", report, headers)[0] == 404
    assert server.request("POST", callback, b'{"status": "maybe"}', headers)[0] == 400
    assert server.request("POST", callback, b"{not json", headers)[0] == 400
    oversized = json.dumps({"status": "success", "message": "x" * protocol.CALLBACK_MAX_BYTES}).encode()
    assert server.request("POST", callback, oversized, headers)[0] == 413
    assert media.callback_result(server.directory, token) is None  # refused bodies leave no trace

    assert server.request("POST", callback, report, headers)[0] == 200
    second = json.dumps({"status": "failure", "message": "forged"}).encode()
    assert server.request("POST", callback, second, headers)[0] == 409
    result = media.callback_result(server.directory, token)
    assert (result["status"], result["message"]) == ("success", "qcow2 image written")

    media.withdraw(server.directory, token)
    assert server.request("GET", f"/media/{token}/config-drive.iso")[0] == 404
    assert server.request("POST", callback, report, headers)[0] == 404
    assert media.callback_result(server.directory, token) is None


def test_logs_are_json_lines_without_tokens(server, published):
    token, path = published
    server.request("GET", path)
    server.request("POST", f"/callback/{token}", b'{"status": "success"}')
    server.request("GET", f"/media/{token}/../x")
    stderr = server.stop()
    records = [json.loads(line) for line in stderr.splitlines()]
    assert {"listening", "request", "callback", "stopped"} <= {record["event"] for record in records}
    assert token not in stderr
    assert token[:6] in stderr  # enough to correlate with the provisioner's own redacted logs
