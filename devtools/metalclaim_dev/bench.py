"""What the benches measure with: a rack or site sized for them, the controller as a process with its metrics and
log, a claim watcher, the floor F, /proc readings.

Imported by bench/run.py (make bench), bench/bind.py and bench/provision.py. Racks, sites and the controller's
process are the tests' own (metalclaim_dev.claimlayer, .site, .controllerproc), built here at a bench's sizes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import sys
import threading
import time
import urllib.parse
from pathlib import Path

from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes import watch as kube_watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from metalclaim_dev import REPO_ROOT as REPO

COLLECTIONS = REPO / ".collections"
# The collection's module_utils (metalclaim_dev.site reads BMC addresses with them), as pytest's pythonpath has it.
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.media import (  # noqa: E402
    token_key,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.media_protocol import (  # noqa: E402
    opened_operation,
)

from metalclaim_dev.claimlayer import Rack  # noqa: E402
from metalclaim_dev.controllerproc import ControllerProcess  # noqa: E402
from metalclaim_dev.netfixtures import FaultProxy, post_json  # noqa: E402
from metalclaim_dev.site import Site  # noqa: E402
from metalclaim_dev.support import create_namespace, delete_namespaces  # noqa: E402, F401 (bench/run.py's)

METAL3 = "metal3.io/v1alpha1"
TENANCY = "tenancy.metalclaim.io/v1alpha1"
TENANT_LABEL = "tenancy.metalclaim.io/tenant"
GROUP, VERSION = "metal3.io", "v1alpha1"


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


def rack_of(admin, hosts: int, tenants: int = 1, prefix: str = "bench", threads: int = 8) -> Rack:
    """A rack (metalclaim_dev.claimlayer) of `hosts` available hosts without BMCs (the claim side alone binds them)
    and `tenants` tenant namespaces of its own, admitted by its HostDeployPolicy `p`."""
    rack = Rack({"admin": admin}, tenants, prefix=f"{prefix}-")
    rack.policy({"names": rack.tenants}, name="p")
    rack.add_hosts(hosts, threads)
    return rack


def setup(admin, hosts: int, claims: int) -> tuple[str, str, str]:
    """(rack, tenant, kind): `hosts` available hosts labelled infra-kind=<kind>, a policy, `claims` claims
    named c0000... in the one tenant namespace (bench/bind.py's sizes)."""
    rack = rack_of(admin, hosts, 1)
    claim = api(admin, "HostClaim")
    for index in range(claims):
        claim.create(body=rack.claim_body(rack.tenants[0], f"c{index:04d}"))
    return rack.namespace, rack.tenants[0], rack.kind


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


def site_of(env, admin, size: int, proxy: FaultProxy, labels: dict | None = None, first: int = 0) -> Site:
    """A site (metalclaim_dev.site, no policy) of `size` hosts h00, h01... on the fleet's systems from `first` on,
    their BMCs behind the counting `proxy`, cleaning disabled; site.uuids: host name -> emulated system uuid."""
    site = Site(env, {"admin": admin}, None, prefix="bench-prov", policy=False)
    site.uuids = {}
    for index in range(first, min(first + size, len(site.systems))):
        name = f"h{index - first:02d}"
        address = proxy.address_for(site.systems[index]["address"])
        site.host(name, index, address=address, labels=labels, automatedCleaningMode="disabled")
        site.uuids[name] = site.systems[index]["uuid"]
    site.names = list(site.uuids)
    return site


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


def other_collections(checkout: Path) -> Path:
    """A collections path for another checkout: its metalclaim.hostclaim beside this checkout's kubernetes.core."""
    root = checkout / ".collections"
    links = {
        root / "ansible_collections" / "metalclaim" / "hostclaim": checkout,
        root / "ansible_collections" / "kubernetes": COLLECTIONS / "ansible_collections" / "kubernetes",
    }
    for link, target in links.items():
        if not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
    return root


class Controller(ControllerProcess):
    """One side of the controller as its own identity and process (metalclaim_dev.controllerproc), with what the
    benches read from it besides its metrics: runs, settling, its log's run events, memory, API connections."""

    stop_timeout = 45

    def __init__(
        self,
        env,
        side: str,
        infra_namespaces: list[str],
        work: Path,
        *extra: str,
        identity: str | None = None,
        ready_timeout: float = 120,
        install: Path | None = None,
    ):
        """install: another checkout of this repository (its controller package and its collection) to run
        instead of this one's, with this checkout's kubernetes.core."""
        self.side = side
        paths = {"ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS)}
        if install is not None:
            paths = {
                "ANSIBLE_COLLECTIONS_PATH": str(other_collections(install)),
                "PYTHONPATH": os.pathsep.join(
                    filter(None, (str(install / "controller"), os.environ.get("PYTHONPATH")))
                ),
            }
        super().__init__(
            env,
            work,
            "--controllers",
            side,
            "--infra-namespaces",
            ",".join(infra_namespaces),
            *extra,
            kubeconfig_identity=identity or ("controller" if side == "claims" else "provisioner"),
            env={**os.environ, **paths, "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false"},
            resync_period=None,  # the controller's own: the resync scenario measures it
            ready_timeout=ready_timeout,
        )
        self.apiserver_port = int(urllib.parse.urlsplit(env.state["apiserver"]).port)

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
        for line in self.output(full=True).splitlines():
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
        return "\n".join(self.output(full=True).splitlines()[-lines:])


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


# -- a stand-in for the image writer ------------------------------------------------------------


class FakeWriter(threading.Thread):
    """The image writer as the emulated BMCs cannot run it: each config drive published in the media directory
    (media/<token>/config-drive.iso, a deploy or cleaning job) is answered `seconds` later with a successful callback
    to the media server, as a writer booted from the deploy ISO would once it wrote its image. Each callback's time
    (time.monotonic()) is kept under the name of the host whose operation held the token (one LIST of hosts per
    callback): `called_back[host name]`."""

    def __init__(self, admin, namespace: str, media_dir: str, media_url: str, seconds: float):
        super().__init__(name="fake-writer", daemon=True)
        self.admin, self.namespace = admin, namespace
        self.media = Path(media_dir) / "media"
        self.url, self.seconds = media_url, seconds
        self.stop = threading.Event()
        self.called_back: dict[str, float] = {}
        self.failures: list[str] = []
        self._due: dict[str, float] = {}  # token -> when its callback goes

    def _host_of(self, token: str) -> str | None:
        for host in api(self.admin, "BareMetalHost").get(namespace=self.namespace).to_dict()["items"]:
            annotations = host["metadata"].get("annotations") or {}
            with contextlib.suppress(ValueError, TypeError):
                recorded = json.loads(annotations.get("provisioner.metalclaim.io/operation") or "{}")
                operation = opened_operation(recorded, token_key(str(self.media.parent)))[0]
                if token in (operation.get("token"), operation.get("warm")):
                    return host["metadata"]["name"]
        return None

    def run(self) -> None:
        while not self.stop.wait(0.05):
            now = time.monotonic()
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(self.media):
                    if entry.name not in self._due and (Path(entry.path) / "config-drive.iso").exists():
                        self._due[entry.name] = now + self.seconds
            for token, due in list(self._due.items()):
                if due is None or due > now:
                    continue
                self._due[token] = None  # answered once
                try:
                    post_json(f"{self.url}/callback/{token}", {"status": "success", "message": "bench: written"})
                except OSError as error:  # withdrawn meanwhile (the host moved on): nobody to tell
                    self.failures.append(str(error)[:200])
                    continue
                called = time.monotonic()
                name = self._host_of(token)
                if name is not None:
                    self.called_back[name] = called

    def close(self) -> None:
        self.stop.set()
        self.join(5)
