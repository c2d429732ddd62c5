"""The hardware cluster's client (issue 22): every request bounded, discovery's too, no redirect followed, the
discovery cache never on disk, and a trickling answer cut at the claim's deadline. Against loopback HTTP servers
(a few lines of http.server each), no Kubernetes."""

from __future__ import annotations

import http.server
import json
import socket
import tempfile
import threading
import time

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube, KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.io import client as c

API = {
    "/version": {"major": "1", "minor": "36", "gitVersion": "v1.36.3"},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "verbs": []}
        ],
    },
    "/api/v1/namespaces": {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {}, "items": []},
}


class _Server:
    """A loopback HTTP server: a tiny API server (API), plus /redirect, /silent and /trickle; `hits` are the paths
    asked, in order."""

    def __init__(self, redirect_to: str = ""):
        self.hits: list[str] = []
        self.stop = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?", 1)[0]
                server.hits.append(path)
                if path.endswith("/redirect"):
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif path.endswith("/silent"):
                    server.stop.wait(30)
                elif path.endswith("/trickle"):  # an answer that never ends, a byte at a time, each in time
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    while not server.stop.wait(0.05):
                        try:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        except OSError:
                            return
                elif path in API:
                    body = json.dumps(API[path]).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, *_args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    elsewhere = _Server()  # where a redirect points: it must never be asked
    api = _Server(redirect_to=f"{elsewhere.url}/api/v1/namespaces")
    api.elsewhere = elsewhere
    yield api
    api.close()
    elsewhere.close()


@pytest.fixture
def tmpdir_as_tempdir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def kubeconfig(url: str) -> dict:
    # Plain HTTP here, so no certificate is needed: the kubeconfig check (https only) is _remote/pure's.
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hw", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "hw", "context": {"cluster": "hw", "user": "u", "namespace": "ns"}}],
        "current-context": "hw",
    }


def _silent_listener():
    listener = socket.create_server(("127.0.0.1", 0))
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    return listener, held


def test_discovery_of_a_server_that_accepts_and_never_answers_ends_with_the_deadline():
    """Before issue 22, the client's discovery had no timeout: this hung until the job limit (30 minutes)."""
    listener, _held = _silent_listener()
    started = time.monotonic()
    with pytest.raises(KubeError) as raised:
        c.RemoteKube.connect(kubeconfig(f"http://127.0.0.1:{listener.getsockname()[1]}"), c.Deadline(0.5))
    assert 0.4 < time.monotonic() - started < 3
    assert type(raised.value.__cause__).__name__ == "ReadTimeoutError"  # one try: no retry of the read
    assert str(listener.getsockname()[1]) not in str(raised.value)
    listener.close()


def test_each_read_is_bounded_by_the_read_timeout_and_not_retried(server):
    kube = c.RemoteKube.connect(kubeconfig(server.url), c.Deadline(30), read_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(KubeError) as raised:
        kube.get("v1", "Namespace", "silent")
    assert time.monotonic() - started < 2
    assert type(raised.value.__cause__).__name__ == "ReadTimeoutError"
    assert server.hits.count("/api/v1/namespaces/silent") == 1


def test_no_request_starts_once_the_deadline_has_passed(server):
    now = [0.0]
    deadline = c.Deadline(5, clock=lambda: now[0])
    kube = c.RemoteKube.connect(kubeconfig(server.url), deadline)
    assert kube.list("v1", "Namespace") == []
    asked = len(server.hits)
    now[0] = 6.0
    with pytest.raises(KubeError) as raised:
        kube.list("v1", "Namespace")
    assert isinstance(raised.value.__cause__, c.DeadlineExceeded)
    assert len(server.hits) == asked
    deadline.start()  # the next claim: its own time
    assert kube.list("v1", "Namespace") == []


def test_a_redirect_is_not_followed(server):
    kube = c.RemoteKube.connect(kubeconfig(server.url), c.Deadline(30))
    with pytest.raises(KubeError):
        kube.get("v1", "Namespace", "redirect")
    assert server.elsewhere.hits == []


def test_a_trickling_answer_is_cut_at_the_deadline_in_the_main_thread(server, monkeypatch):
    """Each byte comes within the read timeout: only the hard deadline ends the request."""
    monkeypatch.setattr(c, "HARD_DEADLINE_GRACE", 0.1)
    kube = c.RemoteKube.connect(kubeconfig(server.url), c.Deadline(30), read_timeout=5)
    started = time.monotonic()
    with pytest.raises(KubeError) as raised, c.hard_deadline(0.5):
        kube.get("v1", "Namespace", "trickle")
    assert 0.5 <= time.monotonic() - started < 3
    assert isinstance(raised.value.__cause__, c.DeadlineExceeded)
    # Disarmed afterwards: nothing fires later.
    time.sleep(0.3)


def test_the_hard_deadline_does_nothing_once_left():
    with c.hard_deadline(0.05):
        pass
    time.sleep(1.2)  # past the deadline and its grace: no DeadlineExceeded raised here


def test_discovery_stays_in_memory_where_the_library_writes_a_file_per_server(server, tmpdir_as_tempdir):
    kube = c.RemoteKube.connect(kubeconfig(server.url), c.Deadline(30))
    assert kube.list("v1", "Namespace") == []
    assert list(tmpdir_as_tempdir.iterdir()) == []
    library = Kube.from_kubeconfig_dict(kubeconfig(server.url))
    assert [p.name.startswith("osrcp-") for p in tmpdir_as_tempdir.iterdir()] == [True]
    # The same attributes as the library-built Kube (its methods use them), plus the client to close.
    assert set(vars(kube)) == set(vars(library)) | {"_api_client"}
    kube.close()


def test_the_clients_of_a_run_are_bounded_least_recently_used_first():
    class Closing:
        def __init__(self):
            self.closed = False

        def close(self):
            self.closed = True

    clients = c.Clients(kept=3)
    made = {key: Closing() for key in "abcde"}
    for key in "abc":
        clients.put(key, made[key])
    assert clients.get("a") is made["a"]  # a used: b is now the least recent
    clients.put("d", made["d"])
    assert clients.get("b") is None and made["b"].closed
    clients.put("e", made["e"])
    assert clients.get("c") is None and made["c"].closed
    assert len(clients) == 3 and not made["a"].closed
    clients.drop("a")
    assert made["a"].closed and len(clients) == 2
