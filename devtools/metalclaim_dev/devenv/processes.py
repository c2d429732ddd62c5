"""Start, watch and stop the devenv's server processes.

Each server runs in its own session (process group) so stopping it also stops
anything it spawned; pids outlive the Python process that started them, so all
checks work from a pid alone.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

LOOPBACK = "127.0.0.1"


class DevenvError(RuntimeError):
    pass


# Listeners of our own (etcd, the API server, the emulator, controllers' endpoints) get ports below the kernel's
# ephemeral range: a port from bind(0) comes from that range, where any outgoing connection (another lane's pip, an
# API client) may take it between the check and the listener's bind ("address already in use": etcd failed so in CI).
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
OWN_PORTS_LOWEST = 10000
_PICK = random.SystemRandom()  # the OS's randomness: no seed a test sets makes two processes pick alike


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, picked at random below the ephemeral range (bind(0) where none is known)."""
    try:
        highest = int(EPHEMERAL_RANGE_FILE.read_text().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        highest = 0
    for _attempt in range(200 if highest > OWN_PORTS_LOWEST else 0):
        port = _PICK.randint(OWN_PORTS_LOWEST, highest)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def spawn(
    argv: list[str],
    log_file: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=cwd,
        )
    return proc.pid


def _reap(pid: int) -> None:
    # Our own exited child stays a zombie (and a group member) until collected.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def alive(pid: int) -> bool:
    """Whether the process (not a zombie) still runs."""
    _reap(pid)
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def group_alive(pgid: int) -> bool:
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_group(pgid: int, timeout: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left."""
    for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            _reap(pgid)
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not group_alive(pgid):
                return
            time.sleep(0.05)
    raise DevenvError(f"process group {pgid} survived SIGKILL")


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until(check: Callable[[], bool], what: str, timeout: float, pid: int, log_file: Path) -> None:
    """Poll check() until it holds; fail early, with the log's tail, if the process dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            raise DevenvError(f"{what} exited during start-up; last log lines:\n{log_tail(log_file)}")
        if check():
            return
        time.sleep(0.1)
    raise DevenvError(f"{what} not ready after {timeout:.0f}s; last log lines:\n{log_tail(log_file)}")


# Loopback only: never route through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_ok(url: str, context: ssl.SSLContext | None = None, headers: Mapping[str, str] | None = None) -> bool:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        handlers = [urllib.request.HTTPSHandler(context=context)] if context else []
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), *handlers) if handlers else _OPENER
        with opener.open(request, timeout=2) as response:
            return response.status == 200
    except urllib.error.HTTPError as error:
        error.close()
        return False
    except OSError:
        return False
