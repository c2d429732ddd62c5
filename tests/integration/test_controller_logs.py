"""The controller's output with its API server down (issue 38): every line it writes, on stdout and stderr, is one of
its JSON log lines, its runner children's included; urllib3's retry warnings are not among them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from metalclaim_dev.support import REPO_ROOT, eventually, free_port

pytestmark = pytest.mark.integration
SHIPPED_MEDIA_URL = "http://metalclaim-media.metalclaim-system.svc:8082"  # config/manager's, its namespace expanded


def _kubeconfig(path, port: int) -> str:
    """A kubeconfig for an API server on a loopback port nothing listens on."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "down", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "not-a-token"}}],
                "contexts": [{"name": "down", "context": {"cluster": "down", "user": "u"}}],
                "current-context": "down",
            }
        )
    )
    return str(path)


class _Lines:
    """A pipe's lines as they come (a thread each): a stream left unread would block the process on a full pipe."""

    def __init__(self, pipe, name: str):
        self.lines: list[str] = []
        self.name = name
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe) -> None:
        for line in pipe:
            self.lines.append(line.rstrip("\n"))

    def join(self) -> list[str]:
        self._thread.join(30)
        return self.lines


def test_every_line_against_an_unreachable_api_server_is_a_json_log_line(tmp_path):
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", free_port())
    argv = [
        *(sys.executable, "-m", "metalclaim.controller", "--kubeconfig", kubeconfig),
        *("--controllers", "claims,provisioner", "--infra-namespaces", "infrahost"),
        # Standby runs (no leader election: they start at once): the runner children (ansible-runner,
        # ansible-playbook) write to the same stderr.
        *("--standby", "true", "--private-data-dir", str(tmp_path / "runner")),
        *("--metrics-bind-address", "0", "--health-probe-bind-address", "0"),
        *("--media-url", SHIPPED_MEDIA_URL),
    ]
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections"), "PYTHONWARNINGS": "default"}
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    out, err = _Lines(process.stdout, "stdout"), _Lines(process.stderr, "stderr")

    def events(name: str) -> int:
        return sum(1 for line in list(err.lines) if f'"event": "{name}"' in line)

    try:
        # The reflectors fail their first request twice each (so they backed off and tried again), and a standby run,
        # started by a runner child, failed (its report is the child's last word).
        eventually(
            lambda: events("discovery_failed") >= 12 and events("standby_failed") >= 1,
            timeout=90,
            interval=0.2,
            message="the reflectors' and a standby run's failures",
        )
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    lines = [(stream.name, line) for stream in (out, err) for line in stream.join()]
    print(f"\n{len(lines)} lines in all ({len(out.lines)} on stdout) before SIGTERM's stop")
    for stream, line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        assert isinstance(record, dict) and isinstance(record.get("event"), str), f"{stream}: {line!r}"
    records = [json.loads(line) for _stream, line in lines]
    assert not [r for r in records if str(r.get("message", "")).startswith("Retrying (")]  # DEBUG, not shown at INFO
    # The provisioner side said at start that no BMC can fetch its media.
    warned = [r for r in records if r["event"] == "media_unreachable"]
    assert len(warned) == 1 and "--media-url" in warned[0]["problem"], warned
    assert "stopped" in [r["event"] for r in records]
