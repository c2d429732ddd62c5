"""What the benches share: racks of hosts, the controller as a process, a claim watcher, the floor F, /proc readings.

Imported by bench/run.py (make bench), bench/bind.py and bench/provision.py; adds the checkout's
controller package and tests/ (netfixtures: the counting Redfish proxy) to sys.path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes import watch as kube_watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "controller", REPO / ".collections"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.machine import (  # noqa: E402
    OURS,
    PROVISIONER_ANNOTATION,
)

from metalclaim_dev.devenv.env import infra_namespace_bindings, tenant_namespace_bindings  # noqa: E402
from metalclaim_dev.netfixtures import FaultProxy  # noqa: E402

METAL3 = "metal3.io/v1alpha1"
TENANCY = "tenancy.metalclaim.io/v1alpha1"
TENANT_LABEL = "tenancy.metalclaim.io/tenant"
GROUP, VERSION = "metal3.io", "v1alpha1"
COLLECTIONS = REPO / ".collections"


# -- clients ------------------------------------------------------------------------------------


def api(client, kind, api_version=METAL3):
    return client.resources.get(api_version=api_version, kind=kind)


def api_client(kubeconfig: str, pool: int = 4) -> kube_client.ApiClient:
    configuration = kube_client.Configuration()
    kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    return kube_client.ApiClient(configuration)


def dynamic(kubeconfig: str, pool: int = 4) -> DynamicClient:
    return DynamicClient(api_client(kubeconfig, pool))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- figures ------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def distribution(values: list[float]) -> dict:
    """n, p50, p90, p99, max, mean of `values` (seconds); {"n": 0} when there are none."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": percentile(values, 0.5),
        "p90": percentile(values, 0.9),
        "p99": percentile(values, 0.99),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


# -- the emulated fleet: one bench rack of hosts without BMCs (bind.py, the claim side alone) -----------


def namespace(admin, name: str, labels: dict | None = None) -> None:
    api(admin, "Namespace", "v1").create(
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
    )


def delete_namespaces(
    admin, names: list[str], kinds: tuple = ("HostClaim", "BareMetalHost"), wait: float = 180
) -> None:
    """Finalizers of the bench's claims and hosts dropped, then the namespaces deleted; waits up to `wait` s for them
    to go (a claim side started next serves every claim namespace: it must not find the last scenario's claims)."""
    for name in names:
        for kind in kinds:
            resource = api(admin, kind)
            try:
                items = resource.get(namespace=name).items
            except ApiException:
                continue
            for item in items:
                if item.metadata.finalizers:
                    with contextlib.suppress(ApiException):
                        resource.patch(
                            body={"metadata": {"finalizers": None}},
                            name=item.metadata.name,
                            namespace=name,
                            content_type="application/merge-patch+json",
                        )
        with contextlib.suppress(ApiException):
            api(admin, "Namespace", "v1").delete(name=name)
    deadline = time.monotonic() + wait
    while wait and time.monotonic() < deadline:
        left = [n for n in names if _exists(admin, n)]
        if not left:
            return
        time.sleep(0.5)


def delete_tenants(admin, names: list[str], wait: float = 0.0) -> None:
    """Delete the Tenants. With `wait`, their tenants side takes each apart (claims, namespaces, policies) and this
    waits up to `wait` s for them to go; without (a scenario's cleanup, its controller stopped), their finalizers are
    dropped and the namespaces they made deleted here."""
    tenants = api(admin, "Tenant", TENANCY)
    for name in names:
        if not wait:
            with contextlib.suppress(ApiException):
                tenants.patch(
                    body={"metadata": {"finalizers": None}}, name=name, content_type="application/merge-patch+json"
                )
        with contextlib.suppress(ApiException):
            tenants.delete(name=name)
    if not wait:
        made = api(admin, "Namespace", "v1").get(label_selector=TENANT_LABEL).items
        delete_namespaces(admin, [n.metadata.name for n in made if n.metadata.labels[TENANT_LABEL] in names], wait=0)
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        left = {t.metadata.name for t in tenants.get().items} & set(names)
        if not left:
            return
        time.sleep(0.5)
    raise TimeoutError(f"{len(left)} Tenants still there after {wait:.0f}s")


def _exists(admin, name: str) -> bool:
    try:
        api(admin, "Namespace", "v1").get(name=name)
        return True
    except ApiException:
        return False


class Rack:
    """An infrastructure namespace of `hosts` available hosts (no BMC: the claim side alone binds them), a
    HostDeployPolicy admitting `tenants` tenant namespaces, each with the claim side's Secret rights."""

    def __init__(self, admin, hosts: int, tenants: int = 1, prefix: str = "bench", threads: int = 8):
        self.admin = admin
        self.tag = uuid.uuid4().hex[:6]
        self.namespace = f"{prefix}-rack-{self.tag}"
        self.tenants = [f"{prefix}-t{index}-{self.tag}" for index in range(tenants)]
        for name in (self.namespace, *self.tenants):
            namespace(admin, name)
        for binding in [*infra_namespace_bindings(self.namespace)] + [
            b for tenant in self.tenants for b in tenant_namespace_bindings(tenant)
        ]:
            api(admin, "RoleBinding", "rbac.authorization.k8s.io/v1").create(body=binding)
        api(admin, "HostDeployPolicy").create(
            body={
                "apiVersion": METAL3,
                "kind": "HostDeployPolicy",
                "metadata": {"name": "p", "namespace": self.namespace},
                "spec": {"hostclaimNamespaces": {"names": self.tenants}},
            }
        )
        self.hosts = 0
        self.torn_down = False
        self.add_hosts(hosts, threads)

    def add_hosts(self, count: int, threads: int = 8) -> None:
        bmh = api(self.admin, "BareMetalHost")

        def one(index: int) -> None:
            name = f"h{index:04d}"
            bmh.create(
                body={
                    "apiVersion": METAL3,
                    "kind": "BareMetalHost",
                    "metadata": {"name": name, "namespace": self.namespace, "labels": {"infra-kind": self.tag}},
                    "spec": {
                        "online": False,
                        "bmc": {"address": "redfish+http://127.0.0.1:9/x", "credentialsName": "x"},
                    },
                }
            )
            bmh.status.patch(
                body={"status": {"provisioning": {"state": "available"}}},
                name=name,
                namespace=self.namespace,
                content_type="application/merge-patch+json",
            )

        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(one, range(self.hosts, self.hosts + count)))
        self.hosts += count

    def claim_body(self, namespace_: str, name: str, spec: dict | None = None) -> dict:
        return {
            "apiVersion": METAL3,
            "kind": "HostClaim",
            "metadata": {"name": name, "namespace": namespace_},
            "spec": {"online": False, "hostSelector": {"matchLabels": {"infra-kind": self.tag}}, **(spec or {})},
        }

    def teardown(self, wait: float = 180) -> None:
        if not self.torn_down:
            self.torn_down = True
            delete_namespaces(self.admin, [*self.tenants, self.namespace], wait=wait)


def setup(admin, hosts: int, claims: int) -> tuple[str, str, str]:
    """(rack, tenant, kind): `hosts` available hosts labelled infra-kind=<kind>, a policy, `claims` claims
    named c0000... in the one tenant namespace (bench/bind.py's sizes)."""
    rack = Rack(admin, hosts, 1)
    claim = api(admin, "HostClaim")
    for index in range(claims):
        claim.create(body=rack.claim_body(rack.tenants[0], f"c{index:04d}"))
    return rack.namespace, rack.tenants[0], rack.tag


def teardown(admin, rack: str, tenant: str) -> None:
    delete_namespaces(admin, [tenant, rack], wait=0)


def double_bindings(admin, rack: str) -> dict:
    """Hosts and claims that disagree about a binding: a claim named by two hosts' consumerRef, a claim whose
    status names a host that does not name it back. Both must be 0."""
    hosts = api(admin, "BareMetalHost").get(namespace=rack).to_dict()["items"]
    consumers: dict = {}
    for host in hosts:
        ref = (host.get("spec") or {}).get("consumerRef")
        if ref:
            consumers.setdefault((ref.get("namespace"), ref.get("name")), []).append(host["metadata"]["name"])
    by_name = {h["metadata"]["name"]: h for h in hosts}
    disagree = 0
    for item in api(admin, "HostClaim").get().to_dict()["items"]:
        recorded = (item.get("status") or {}).get("hardwareData") or {}
        if recorded.get("namespace") != rack:
            continue
        host = by_name.get(recorded.get("name"))
        ref = ((host or {}).get("spec") or {}).get("consumerRef") or {}
        if (ref.get("namespace"), ref.get("name")) != (item["metadata"]["namespace"], item["metadata"]["name"]):
            disagree += 1
    return {
        "hosts_bound": sum(len(v) for v in consumers.values()),
        "claims_on_two_hosts": sum(1 for v in consumers.values() if len(v) > 1),
        "claims_disagreeing_with_their_host": disagree,
    }


# -- hosts with emulated BMCs (the provisioner side) --------------------------------------------


class Site:
    """An infrastructure namespace with `size` hosts on the fleet, their BMCs behind one counting proxy."""

    def __init__(self, admin, fleet: dict, size: int, proxy: FaultProxy, labels: dict | None = None, first: int = 0):
        self.admin = admin
        self.namespace = f"bench-prov-{uuid.uuid4().hex[:6]}"
        self.names = [f"h{index:02d}" for index in range(size)]
        namespace(admin, self.namespace, {PROVISIONER_ANNOTATION: OURS})  # the provisioner drives opted-in hosts
        for binding in infra_namespace_bindings(self.namespace):  # the provisioner side reads BMC Secrets here
            api(admin, "RoleBinding", "rbac.authorization.k8s.io/v1").create(body=binding)
        password = Path(fleet["password_file"]).read_text().strip()
        self.systems = {}  # host name -> emulated system uuid
        for name, system in zip(self.names, fleet["systems"][first:], strict=False):
            self.systems[name] = system["uuid"]
            api(admin, "Secret", "v1").create(
                body={
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": f"{name}-bmc", "namespace": self.namespace},
                    "stringData": {"username": fleet["username"], "password": password},
                }
            )
            api(admin, "BareMetalHost").create(
                body={
                    "apiVersion": METAL3,
                    "kind": "BareMetalHost",
                    "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}},
                    "spec": {
                        "online": False,
                        "bootMACAddress": system["boot_mac"],
                        "automatedCleaningMode": "disabled",
                        "bmc": {"address": proxy.address_for(system["address"]), "credentialsName": f"{name}-bmc"},
                    },
                }
            )

    def patch_hosts(self, spec: dict) -> None:
        for name in self.names:
            api(self.admin, "BareMetalHost").patch(
                body={"spec": spec},
                name=name,
                namespace=self.namespace,
                content_type="application/merge-patch+json",
            )

    def states(self) -> dict:
        counts: dict = {}
        for host in api(self.admin, "BareMetalHost").get(namespace=self.namespace).items:
            state = ((host.status or {}).get("provisioning") or {}).get("state") or "-"
            counts[state] = counts.get(state, 0) + 1
        return counts

    def teardown(self) -> None:
        delete_namespaces(self.admin, [self.namespace], kinds=("BareMetalHost",))


class TimingProxy(FaultProxy):
    """The counting Redfish proxy, also noting per system when power-on was asked (POST ...Reset with On), when the
    emulator applies it, and when a read first showed it applied (a GET of the system answering PowerState On).

    sushy-tools' fake driver applies a power change at a random 1-11 s after it is asked (it stores the moment in
    its state database, `state_db`, and applies it on the first read after it): that moment is read from the
    database right after the request, so the BMC's own delay is known exactly, and the rest (seen - applied) is
    the provisioner's polling."""

    SYSTEM = re.compile(r"/redfish/v1/Systems/([^/]+)")

    def __init__(self, upstream: str, state_db: Path | None = None):
        super().__init__(upstream)
        self.state_db = state_db
        self.power_on_asked: dict[str, float] = {}
        self.power_on_applied: dict[str, float] = {}
        self.power_on_seen: dict[str, float] = {}

    def reset_timing(self) -> None:
        self.power_on_asked.clear()
        self.power_on_applied.clear()
        self.power_on_seen.clear()

    def _apply_time(self, system: str) -> float | None:
        """When the emulator will apply the system's pending power change, as time.monotonic(); None if unknown."""
        if self.state_db is None or not self.state_db.exists():
            return None
        import pickle  # the emulator's own state file (memoize.PersistentDict), local and ours
        import sqlite3

        try:
            with contextlib.closing(sqlite3.connect(f"file:{self.state_db}?mode=ro", uri=True, timeout=5)) as db:
                row = db.execute("select value from cache where key=?", (pickle.dumps(system),)).fetchone()
        except sqlite3.Error:
            return None
        pending = (pickle.loads(row[0]) if row else {}).get("pending_power") or {}
        if "apply_time" not in pending:
            return None
        return time.monotonic() + pending["apply_time"] - time.time()

    def _forward(self, method: str, target: str, headers: dict, body: bytes):
        asked = time.monotonic()
        status, response_headers, data = super()._forward(method, target, headers, body)
        match = self.SYSTEM.match(target.split("?")[0])
        if match and status < 300:
            system = match.group(1)
            if method == "POST" and target.rstrip("/").endswith("ComputerSystem.Reset") and b"On" in (body or b""):
                self.power_on_asked[system] = asked
                self.power_on_seen.pop(system, None)
                applied = self._apply_time(system)
                if applied is not None:
                    self.power_on_applied[system] = max(asked, applied)
            elif method == "GET" and target.rstrip("/").endswith(system) and system not in self.power_on_seen:
                with contextlib.suppress(ValueError):
                    if json.loads(data).get("PowerState") == "On" and system in self.power_on_asked:
                        self.power_on_seen[system] = time.monotonic()
        return status, response_headers, data

    def power_delays(self) -> dict[str, float]:
        """System -> the BMC's power-on delay: asked -> applied by the emulator (asked -> first seen On when the
        emulator's schedule could not be read)."""
        found = {}
        for system, asked in self.power_on_asked.items():
            if system in self.power_on_applied:
                found[system] = self.power_on_applied[system] - asked
            elif system in self.power_on_seen:
                found[system] = self.power_on_seen[system] - asked
        return found

    def poll_lags(self) -> dict[str, float]:
        """System -> applied by the emulator -> first read showing On (the provisioner's polling)."""
        return {s: self.power_on_seen[s] - t for s, t in self.power_on_applied.items() if s in self.power_on_seen}

    def requests_per_system(self) -> dict[str, int]:
        per: dict[str, int] = {}
        with self._lock:
            for line, count in self.counts.items():
                match = self.SYSTEM.search(line)
                key = match.group(1) if match else "(fleet-wide)"
                per[key] = per.get(key, 0) + count
        return per

    def requests_by_kind(self) -> dict[str, int]:
        """Requests by method and path with the system's uuid replaced by {system}."""
        kinds: dict[str, int] = {}
        with self._lock:
            for line, count in self.counts.items():
                kind = self.SYSTEM.sub("/redfish/v1/Systems/{system}", line)
                kinds[kind] = kinds.get(kind, 0) + count
        return kinds


# -- watching claims as a tenant would: one watch, never polling ----------------------------------


class ClaimWatch:
    """One watch on every HostClaim (as admin): when each claim was first seen with a condition True, and when
    it was deleted; time.monotonic() at the event's arrival. Re-lists after an expired watch."""

    def __init__(self, kubeconfig: str, conditions: tuple = ("Association", "Provisioned")):
        self._api = kube_client.CustomObjectsApi(api_client(kubeconfig, 2))
        self.conditions = conditions
        self.seen: dict[str, dict[tuple, float]] = {c: {} for c in conditions}
        self.deleted: dict[tuple, float] = {}
        self.present: set[tuple] = set()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claim-watch", daemon=True)
        self._synced = threading.Event()
        self._thread.start()
        if not self._synced.wait(30):
            raise RuntimeError("the claim watch did not start within 30 s")

    def _note(self, kind: str, item: dict, at: float) -> None:
        meta = item.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        with self._changed:
            if kind == "DELETED":
                self.present.discard(key)
                self.deleted.setdefault(key, at)
            else:
                self.present.add(key)
                self.deleted.pop(key, None)
                for condition in (item.get("status") or {}).get("conditions") or []:
                    if condition.get("type") in self.seen and condition.get("status") == "True":
                        self.seen[condition["type"]].setdefault(key, at)
            self._changed.notify_all()

    def _run(self) -> None:
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self._api.list_cluster_custom_object(GROUP, VERSION, "hostclaims")
                    now = time.monotonic()
                    with self._changed:
                        self.present.clear()
                    for item in listed["items"]:
                        self._note("ADDED", item, now)
                    version = listed["metadata"]["resourceVersion"]
                    self._synced.set()
                stream = kube_watch.Watch().stream(
                    self._api.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    "hostclaims",
                    resource_version=version,
                    timeout_seconds=20,
                    allow_watch_bookmarks=True,
                )
                for event in stream:
                    now = time.monotonic()
                    item = event["object"]
                    version = (item.get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._note(event["type"], item, now)
                    if self._stop.is_set():
                        return
            except ApiException as error:
                version = None if error.status == 410 else version
                self._stop.wait(0.5)
            except Exception:  # a dropped connection: watch again from the last version
                self._stop.wait(0.5)

    def wait(self, predicate, timeout: float) -> bool:
        """Wait until predicate(self) holds (checked on every event), at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 1.0))
        return True

    def at(self, condition: str, key: tuple) -> float | None:
        with self._changed:
            return self.seen[condition].get(key)

    def count(self, condition: str, keys) -> int:
        with self._changed:
            return sum(1 for key in keys if key in self.seen[condition])

    def close(self) -> None:
        self._stop.set()


# -- the controller as a process of its own ---------------------------------------------------


class Controller:
    """One side of the controller as its own identity and process; metrics on a port, JSON log in a file."""

    def __init__(
        self,
        env,
        side: str,
        infra_namespaces: list[str],
        work: Path,
        *extra: str,
        identity: str | None = None,
        ready_timeout: float = 120,
    ):
        self.side = side
        self.metrics_port, self.health_port = free_port(), free_port()
        work.mkdir(parents=True, exist_ok=True)
        self.private = work / "runner"
        self.log_path = work / "controller.log"
        self._log = self.log_path.open("w")
        self.argv = [
            sys.executable,
            "-m",
            "metalclaim.controller",
            "--kubeconfig",
            env.kubeconfig(identity or ("controller" if side == "claims" else "provisioner")),
            "--controllers",
            side,
            "--infra-namespaces",
            ",".join(infra_namespaces),
            "--private-data-dir",
            str(self.private),
            "--metrics-bind-address",
            f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address",
            f"127.0.0.1:{self.health_port}",
            *extra,
        ]
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
                "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
            },
        )
        self.pid = self.process.pid
        self.apiserver_port = int(urllib.parse.urlsplit(env.state["apiserver"]).port)
        deadline = time.monotonic() + ready_timeout
        while self._get(self.health_port, "/readyz")[0] != 200:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the {side} controller was not ready in {ready_timeout} s:\n{self.tail()}")
            time.sleep(0.1)

    def _get(self, port: int, path: str) -> tuple[int, str]:
        if self.process.poll() is not None:
            raise RuntimeError(f"the {self.side} controller exited ({self.process.returncode}):\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""
        except OSError:
            return 0, ""

    def samples(self) -> list[tuple[str, dict, float]]:
        """Every Prometheus sample: (name, labels, value)."""
        _status, text = self._get(self.metrics_port, "/metrics")
        found = []
        for line in text.splitlines():
            match = re.match(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line)
            if match:
                labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
                found.append((match.group(1), labels, float(match.group(3))))
        return found

    def metric(self, name: str, **labels) -> float:
        """Sum of a metric's samples whose labels include `labels`."""
        return sum(
            value
            for sample, found, value in self.samples()
            if sample == name and all(found.get(k) == v for k, v in labels.items())
        )

    def metrics_by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for sample, labels, value in self.samples():
            if sample == name:
                out[labels.get(label, "")] = out.get(labels.get(label, ""), 0.0) + value
        return out

    def runs(self, playbook: str | None = None) -> float:
        return self.metric("metalclaim_runs_total", **({"playbook": playbook} if playbook else {}))

    def settle(self, quiet: float = 1.0, timeout: float = 120) -> bool:
        """Wait until the queue is empty and no run ended for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        last, since = (self.runs(), self.metric("workqueue_adds_total")), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.2)
            runs = (self.runs(), self.metric("workqueue_adds_total"))
            if runs != last or self.metric("workqueue_depth") > 0:
                last, since = runs, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return True
        return False

    def run_events(self) -> list[dict]:
        """The "run" events of its JSON log: playbook, status, count (keys), seconds."""
        found = []
        self._log.flush()
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"event": "run"' in line:
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def rss_mib(self) -> tuple[float, float]:
        """(controller, its runner children) resident memory, MiB."""
        return rss_mib(self.pid), sum(rss_mib(pid) for pid in children(self.pid))

    def connections(self) -> int:
        return apiserver_connections(self.pid, self.apiserver_port)

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            self._log.flush()
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(45)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


# -- /proc ----------------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                found += [int(p) for p in (task / "children").read_text().split()]
            except OSError:  # a thread that ended meanwhile
                continue
    return found


def tree_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) under path."""
    total = count = 0
    for folder, _dirs, names in os.walk(path):  # os.walk skips what rotation removes while it walks
        for name in names:
            try:
                total, count = total + (Path(folder) / name).stat().st_size, count + 1
            except FileNotFoundError:
                continue
    return total, count


def apiserver_connections(pid: int, port: int) -> int:
    """Established TCP connections the process holds to `port` (its watches, and its pooled request connections):
    its socket inodes (/proc/<pid>/fd) matched against /proc/<pid>/net/tcp{,6}."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                    count += 1
    return count


# -- the floor F --------------------------------------------------------------------------------


def floor_times(work: Path, kubeconfig: str, runs: int = 10) -> list[float]:
    """Wall times of a one-task `debug` playbook through the controller's own Runner (a spawned ansible-runner
    child, the controller's settings and environment); the child's own start-up is not part of them."""
    from metalclaim.controller.runs import Runner

    work.mkdir(parents=True, exist_ok=True)
    playbook = work / "debug.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug:\n        msg: hi\n"
    )
    runner = Runner(work / "floor", {"ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "K8S_AUTH_KUBECONFIG": kubeconfig})
    try:
        runner.run(str(playbook), {})
        return [runner.run(str(playbook), {}).seconds for _run in range(runs)]
    finally:
        runner.close()
