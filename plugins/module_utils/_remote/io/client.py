# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client of a hardware cluster: every request bounded, discovery included. I/O edge.

A remote claim's kubeconfig names a server the tenant chose: it may accept connections and never answer. The
Kubernetes client has no timeout of its own (its discovery requests pass none at all), retries a read that timed
out three times and follows redirects. Here every request, discovery's too, goes through one pool manager that
sends it with connect and read timeouts cut to what is left of the claim's deadline, no retry and no redirect
(a redirect would send the controller wherever the tenant's server says), and refuses to start once the deadline
has passed. A server that trickles bytes defeats a read timeout (it is per read): `hard_deadline` also arms a
timer (SIGALRM, the module's main thread) that ends the request at the deadline wherever it is.

Discovery is kept in memory for the client's life, never in the library's default cache file per server in the
temporary directory (one more file for every server a tenant names, shared by every tenant naming it).
"""

from __future__ import annotations

import collections
import contextlib
import signal
import threading
import time

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    TRANSPORT_ERRORS,
    WRITERS,
    Kube,
    KubeConfigError,
    KubeError,
)

try:
    import urllib3
    from kubernetes import __version__ as KUBERNETES_VERSION
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.discovery import LazyDiscoverer

    class DeadlineExceeded(urllib3.exceptions.TimeoutError):
        """The claim's time in the hardware cluster is up (a transport error, as a timeout is)."""

    class _BoundedPoolManager(urllib3.PoolManager):
        def __init__(self, remaining, connect: float, read: float, **kwargs):
            super().__init__(**kwargs)
            self._remaining = remaining
            self._connect = connect
            self._read = read

        def request(self, method, url, *args, **kw):
            # What the kubernetes client's REST layer calls for every request: its own timeout and retries
            # give way to the claim's deadline, none, and no redirect is followed.
            left = self._remaining()
            if left <= 0:
                raise DeadlineExceeded("the deadline has passed")
            kw["timeout"] = urllib3.Timeout(connect=min(self._connect, left), read=min(self._read, left))
            kw["retries"] = False
            kw["redirect"] = False
            return super().request(method, url, *args, **kw)

    class _MemoryDiscoverer(LazyDiscoverer):
        """LazyDiscoverer whose cache lives only in this client: never read from nor written to a file."""

        def _Discoverer__init_cache(self, refresh=False):  # the base class's private __init_cache
            self._cache = {"library_version": KUBERNETES_VERSION}
            self._load_server_info()
            self.discover()

        def _write_cache(self):
            pass

except ImportError:  # reported by the module through missing_required_lib
    ApiException = Exception

    class DeadlineExceeded(Exception):
        pass


# Seconds: to connect (TCP and the TLS handshake) and for each read of an answer; a claim's whole time in its
# hardware cluster per run (every request of it, discovery included).
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0
CLAIM_DEADLINE = 20.0
# A run's whole time with hardware clusters: three claims' deadlines; the claims not begun by then wait for the next
# run (claims whose cluster answered last time go first, so the ones that never answer are those left).
RUN_BUDGET = 3 * CLAIM_DEADLINE
# The hard deadline (hard_deadline) fires this long after the claim's deadline: the socket timeouts, cut to it,
# normally end a request first.
HARD_DEADLINE_GRACE = 1.0
# Clients (each with its connections and discovered resources) kept at once in a run, least recently used
# dropped first: a batch naming many servers does not hold a client for each.
CLIENTS_KEPT = 8


class Deadline:
    """A claim's time in its hardware cluster: `start` it per claim; `remaining` seconds, never below 0."""

    def __init__(self, seconds: float = CLAIM_DEADLINE, clock=time.monotonic):
        self.seconds = seconds
        self._clock = clock
        self._ends = clock() + seconds

    def start(self) -> None:
        self._ends = self._clock() + self.seconds

    def remaining(self) -> float:
        return max(0.0, self._ends - self._clock())

    def passed(self) -> bool:
        return self.remaining() <= 0


class RemoteKube(Kube):
    """A Kube for one hardware cluster, from a checked kubeconfig alone (no environment variable, file or
    in-cluster account), every request bounded by `deadline` (connect builds the client and discovers: wrap it,
    as each request, in hard_deadline)."""

    @classmethod
    def connect(
        cls,
        kubeconfig: dict,
        deadline: Deadline,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
    ) -> RemoteKube:
        kube = cls.__new__(cls)
        configuration = kube_client.Configuration()
        try:
            kube_config.load_kube_config_from_dict(config_dict=kubeconfig, client_configuration=configuration)
            configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, WRITERS)
            api_client = kube_client.ApiClient(configuration)
            library = api_client.rest_client.pool_manager
            api_client.rest_client.pool_manager = _BoundedPoolManager(
                deadline.remaining, connect_timeout, read_timeout, headers=library.headers, **library.connection_pool_kw
            )
            library.clear()
            kube._api_client = api_client
            kube._dynamic = DynamicClient(api_client, discoverer=_MemoryDiscoverer)  # discovery: requests
        except TRANSPORT_ERRORS as error:
            kube.close()
            raise KubeError(f"no answer from the API server ({type(error).__name__})") from error
        except ApiException as error:
            kube.close()
            raise KubeError(f"discovery refused: {error.status} {error.reason}") from error
        except kube_config.ConfigException as error:
            raise KubeConfigError(f"the kubeconfig cannot be loaded ({type(error).__name__})") from error
        # What Kube.__init__ sets besides the client (tests/unit/.../_remote/io/test_client.py compares them).
        kube._timeout = (connect_timeout, read_timeout)
        kube._resources = {}
        kube._resources_lock = threading.Lock()
        kube.calls = collections.Counter()
        kube.requests = collections.Counter()
        return kube

    def close(self) -> None:
        """Its connections closed (a client dropped from the run's cache, or left after a deadline)."""
        api_client = getattr(self, "_api_client", None)
        if api_client is not None:
            with contextlib.suppress(Exception):
                api_client.close()


class Clients:
    """A run's remote clients by key, at most `kept` of them, least recently used dropped (and closed) first."""

    def __init__(self, kept: int = CLIENTS_KEPT):
        self.kept = kept
        self._clients: collections.OrderedDict = collections.OrderedDict()

    def get(self, key):
        client = self._clients.get(key)
        if client is not None:
            self._clients.move_to_end(key)
        return client

    def put(self, key, client) -> None:
        self._clients[key] = client
        self._clients.move_to_end(key)
        while len(self._clients) > self.kept:
            _key, dropped = self._clients.popitem(last=False)
            _close(dropped)

    def drop(self, key) -> None:
        client = self._clients.pop(key, None)
        if client is not None:
            _close(client)

    def __len__(self) -> int:
        return len(self._clients)


def _close(client) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        close()


class _Alarm:
    armed = False


def _expired(_signum, _frame):
    if _Alarm.armed:
        _Alarm.armed = False
        raise DeadlineExceeded("the deadline has passed")


@contextlib.contextmanager
def hard_deadline(seconds: float):
    """Ends what runs inside at `seconds` (+ HARD_DEADLINE_GRACE) by raising DeadlineExceeded, wherever it is (a
    read trickled byte by byte): SIGALRM, in the main thread only (elsewhere the socket timeouts alone bound it)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expired)
    _Alarm.armed = True
    signal.setitimer(signal.ITIMER_REAL, max(0.0, seconds) + HARD_DEADLINE_GRACE)
    try:
        yield
    finally:
        _Alarm.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
