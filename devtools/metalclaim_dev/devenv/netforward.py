"""Forward TCP from this machine's 127.0.0.1:PORT to 127.0.0.1:PORT inside a network namespace.

    python -m metalclaim_dev.devenv.netforward --netns /proc/<pid>/ns/net --port P [--port Q ...]

The listening sockets are opened first, in the namespace this process starts in; then the process enters the
target namespace (setns), so every connection it makes from then on is to that namespace's loopback. Loopback
on both sides, nothing else. Logs are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import socket
import sys
import threading
import time

CLONE_NEWNET = 0x40000000
LOOPBACK = "127.0.0.1"


def log(event: str, **fields) -> None:
    sys.stderr.write(json.dumps({"ts": round(time.time(), 3), "event": event, **fields}, sort_keys=True) + "\n")
    sys.stderr.flush()


def enter_namespace(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({path}) failed")
    finally:
        os.close(fd)


def pump(source: socket.socket, destination: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            destination.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock, how in ((destination, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def serve(listener: socket.socket, port: int) -> None:
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection((LOOPBACK, port), timeout=10)
            upstream.settimeout(None)
        except OSError as error:
            log("connect-failed", port=port, error=str(error))
            client.close()
            continue
        done = threading.Barrier(3)

        def half(a, b, barrier=done):
            pump(a, b)
            barrier.wait()

        threading.Thread(target=half, args=(client, upstream), daemon=True).start()
        threading.Thread(target=half, args=(upstream, client), daemon=True).start()
        threading.Thread(
            target=lambda c=client, u=upstream, b=done: (b.wait(), c.close(), u.close()), daemon=True
        ).start()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--netns", required=True, help="the target namespace, e.g. /proc/<pid>/ns/net")
    parser.add_argument("--port", type=int, action="append", required=True)
    args = parser.parse_args(argv)
    listeners = []
    for port in args.port:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, port))
        listener.listen(64)
        listeners.append((listener, port))
    enter_namespace(args.netns)  # before any thread starts: threads inherit the namespace
    for listener, port in listeners:
        threading.Thread(target=serve, args=(listener, port), daemon=True).start()
        log("forwarding", port=port, netns=args.netns)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
