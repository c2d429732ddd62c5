"""The tests' controller process starts again on fresh ports when one it picked free was taken meanwhile (a CI run
failed with "cannot listen on 127.0.0.1:30234: Address already in use": free_port checks a port, then lets go)."""

from __future__ import annotations

import socket
import sys

from metalclaim_dev import controllerproc

# A stand-in controller: binds the health port it is given and answers /readyz, or exits as the controller does
# when that port is taken.
FAKE = r"""
import http.server, sys
address = sys.argv[sys.argv.index("--health-probe-bind-address") + 1]
host, port = address.rsplit(":", 1)
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
try:
    server = http.server.HTTPServer((host, int(port)), Ready)
except OSError:
    print(f"metalclaim-controller: error: cannot listen on {address}: Address already in use", flush=True)
    sys.exit(1)
server.serve_forever()
"""


def test_a_port_taken_before_the_controller_binds_it_is_replaced(tmp_path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # bound, not listening: a connection is refused at once
    picks = iter([taken.getsockname()[1]] * 2)  # the first start's two ports: the health one is taken
    real = controllerproc.free_port
    monkeypatch.setattr(controllerproc, "free_port", lambda: next(picks, None) or real())
    try:
        process = controllerproc.ControllerProcess(
            None, tmp_path, kubeconfig_identity=None, command=(sys.executable, "-c", FAKE), ready_timeout=10
        )
        try:
            assert process.health_port != taken.getsockname()[1]
            assert process.get(process.health_port, "/readyz")[0] == 200
            assert "Address already in use" not in process.output()  # the fresh start's log alone
        finally:
            process.stop()
    finally:
        taken.close()
