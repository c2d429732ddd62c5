# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tenant hooks, the I/O edge: read a hook's credentials Secret, POST a payload. Decisions are in _tenancy.pure.hooks.

Requests go straight to the hook's URL (http.client, not urllib): no proxy from the environment (credentials would
pass through it) and no redirect followed (a redirect would carry the Authorization header elsewhere; a 3xx is an
answer other than 200).

Each delivery has one deadline, the hook's timeoutSeconds, for everything: the name lookup, the connection, TLS,
the request and the whole answer. A socket timeout alone bounds each read, and a hook sending one byte a second
never lets one time out; so a watchdog shuts the delivery's socket down when the deadline passes, and whatever
read was blocked returns at once. A hook that was not reached, or did not answer in time, is not called again in
the same run, and a tenant's hooks share TENANT_RUN_BUDGET_SECONDS per run: these bound what one tenant's hooks
add to a run. Tenants are reconciled side by side (reconcile.TenantRun.each), and a Deliverer given the run's lock
lets it go while it waits for a hook, so the other tenants go on meanwhile.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks as plan

USER_AGENT = "metalclaim-tenant-hooks/1"


class _Expired(Exception):
    """The delivery's deadline passed."""


class _Watchdog:
    """Shuts the delivery's socket down at its deadline, so a read blocked on a trickling hook returns at once."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        """Seconds left; raises _Expired when none."""
        left = self.deadline - time.monotonic()
        if left <= 0 or self.expired:
            raise _Expired()
        return left

    def watch(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._socket = sock
            if self.expired:
                raise _Expired()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._socket is not None:
                # The TCP connection itself (for TLS too, under the SSL object): a blocked read gets EOF.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self._socket, socket.SHUT_RDWR)

    def stop(self) -> None:
        """Before the socket is closed: the timer never touches it afterwards."""
        self._timer.cancel()
        with self._lock:
            self._socket = None


def _resolve(host: str, port: int, watchdog: _Watchdog) -> list[tuple]:
    """getaddrinfo within the deadline (a name lookup has no socket to shut down: it runs aside and is left)."""
    try:  # an address needs no lookup
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass
    found: list = []

    def lookup():
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as error:
            found.append(error)

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(watchdog.left())
    if not found:
        raise _Expired()
    if isinstance(found[0], OSError):
        raise found[0]
    return found[0]


class _Connection(http.client.HTTPConnection):
    """One request to a hook, bounded by its watchdog from the name lookup to the last byte of the answer."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, watchdog: _Watchdog):
        self.default_port = 443 if tls is not None else 80  # the Host header leaves the default port out
        super().__init__(host, port, timeout=watchdog.left())
        self._tls = tls
        self._watchdog = watchdog

    def connect(self):
        error: OSError | None = None
        for family, type_, proto, _name, address in _resolve(self.host, self.port, self._watchdog):
            sock = socket.socket(family, type_, proto)
            try:
                self._watchdog.watch(sock)
                sock.settimeout(self._watchdog.left())
                sock.connect(address)
            except OSError as failed:
                self._watchdog.watch(None)
                sock.close()
                error = failed
                continue
            except _Expired:
                self._watchdog.watch(None)
                sock.close()
                raise
            self.sock = sock
            break
        else:
            raise error or OSError(f"no address for {self.host}")
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            self._watchdog.watch(None)  # the plain socket is handed over to the TLS one
            self.sock = self._tls.wrap_socket(self.sock, server_hostname=self.host, do_handshake_on_connect=False)
            self._watchdog.watch(self.sock)
            self.sock.do_handshake()


_DEFAULT_TLS: list[ssl.SSLContext] = []


def _default_tls() -> ssl.SSLContext:
    """The system's trust store, verifying the hook's certificate and name; loaded once per process."""
    if not _DEFAULT_TLS:
        _DEFAULT_TLS.append(ssl.create_default_context())
    return _DEFAULT_TLS[0]


def post(url: str, body: bytes, headers: dict[str, str], seconds: float, tls: ssl.SSLContext | None = None):
    """POST `body` to `url` within `seconds` in all: (status, the answer's first bytes). Raises _Expired at the
    deadline, OSError (and http.client.HTTPException, ValueError) when the hook cannot be reached or answers
    something that is not HTTP."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    context = (tls or _default_tls()) if secure else None
    watchdog = _Watchdog(seconds)
    connection = None
    try:
        connection = _Connection(parts.hostname, port, context, watchdog)
        connection.request("POST", path, body=body, headers=headers)
        answer = connection.getresponse()
        status, text = answer.status, answer.read(plan.ANSWER_EXCERPT * 4)
        if watchdog.expired:  # cut short: the headers or the body ended at the shutdown, not where the hook ended them
            raise _Expired()
        return status, text
    except (OSError, http.client.HTTPException, ValueError):
        if watchdog.expired:
            raise _Expired() from None
        raise
    finally:
        watchdog.stop()
        if connection is not None:
            connection.close()


class Deliverer:
    """Sends hook payloads for one run; every message it returns has the credentials it used redacted."""

    def __init__(self, kube, tls: ssl.SSLContext | None = None, lock: threading.Lock | None = None):
        self.kube = kube
        self.tls = tls  # the default (system trust) when None
        # The run's lock, held by the caller of send() and let go only while the hook is being called (its state
        # below is touched under it); None: no lock.
        self.lock = lock
        self._read: dict[str, tuple[dict | None, str]] = {}  # Secret name -> (Secret, why not readable)
        self._unreachable: dict[tuple[str, str], str] = {}  # (tenant, hook) -> why, for the rest of the run
        self._spent: dict[str, float] = {}  # tenant -> seconds its hooks took this run
        self.secrets: list[str] = []  # every credential value seen this run, for redaction
        self.sent = 0

    def _authorization(self, hook: plan.Hook) -> tuple[str, str]:
        if not hook.credentials:
            return "", ""
        if hook.credentials not in self._read:
            try:
                secret = self.kube.get("v1", "Secret", hook.credentials, plan.CREDENTIALS_NAMESPACE)
            except KubeError as error:
                self._read[hook.credentials] = (None, f"{plan.credentials_where(hook)} not readable: {error}")
            else:
                self._read[hook.credentials] = (secret, "")
        secret, problem = self._read[hook.credentials]
        if problem:
            return "", problem
        header, values, problem = plan.authorization(secret, hook)
        self.secrets += [v for v in values if v not in self.secrets]
        return header, problem

    @contextlib.contextmanager
    def _waiting(self):
        """The run's lock let go meanwhile (the other tenants go on), taken again before anything else is done."""
        if self.lock is None:
            yield
            return
        self.lock.release()
        try:
            yield
        finally:
            self.lock.acquire()

    def send(self, hook: plan.Hook, body: dict) -> str:
        """POST `body` to the hook: "" when it answered 200, else why not (credentials redacted)."""
        header, problem = self._authorization(hook)
        if problem:
            return plan.redact(problem, self.secrets)
        key = (hook.tenant, hook.name)
        if key in self._unreachable:
            return f"not called again in this run: {self._unreachable[key]}"
        left = plan.TENANT_RUN_BUDGET_SECONDS - self._spent.get(hook.tenant, 0.0)
        if left <= 0:
            return f"not called in this run: the tenant's hooks took their {plan.TENANT_RUN_BUDGET_SECONDS:g}s"
        seconds = min(hook.timeout, left)
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        if header:
            headers["Authorization"] = header
        self.sent += 1
        started = time.monotonic()
        try:
            with self._waiting():
                status, text = post(hook.url, json.dumps(body, sort_keys=True).encode(), headers, seconds, self.tls)
        except (_Expired, TimeoutError):
            self._unreachable[key] = f"no answer within {round(seconds, 1):g}s"
            return self._unreachable[key]
        except (OSError, http.client.HTTPException, ValueError) as error:
            self._unreachable[key] = plan.redact(f"not delivered: {error}", self.secrets)
            return self._unreachable[key]
        finally:
            self._spent[hook.tenant] = self._spent.get(hook.tenant, 0.0) + time.monotonic() - started
        if status == 200:
            return ""
        detail = plan.excerpt(text)
        return plan.redact(f"answered {status}" + (f": {detail}" if detail else ""), self.secrets)
