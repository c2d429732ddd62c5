# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""bmh_redfish: advance a batch of BareMetalHosts one step each. The I/O edge of _provisioner/pure/machine.py.

Per host: read its BMC Secret (in the host's own namespace only, once per BMC connection),
ask the state machine what to observe, read that over Redfish, let the machine decide, carry
out its actions (BMC, then published media), then write the host's annotations/finalizer and
status. Nothing read from the BMC Secret leaves this module: results, statuses and Events
carry messages from _redfish, which are credential-free by construction.

What a run costs the API server: the first step lists BareMetalHosts and Namespaces once;
later steps of the `wait` loop re-read only the hosts that are due (see `Fleet`), and a kept
BMC connection keeps its credentials (see `Connections`). A settled host costs one read of
its BMC Secret per run and writes nothing.
"""

from __future__ import annotations

import base64
import collections
import copy
import dataclasses
import json
import re
import secrets
import threading
import time

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.events import record as record_event
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import StepFailure
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import bounded_map
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import now
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.firmware_policy import allowances
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    API_VERSION,
    DATA_ROLES,
    FIRMWARE_SETTINGS_KIND,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import media
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.configdrive import (
    PYCDLIB_IMPORT_ERROR,
    build_config_drive,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.redfish import (
    SUSHY_IMPORT_ERROR,
    RedfishClient,
    RedfishError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import (
    defaults,
    firmware,
    host_diff,
    machine,
    warm,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import media_protocol as protocol
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.bmc_address import (
    BmcAddressError,
    parse_bmc_address,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.instructions import (
    checksum_type,
    floppy_sized,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.outcomes import host_outcomes
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.settling import Settling

_MEDIA_TOKEN = re.compile(r"/media/([A-Za-z0-9_-]{43})/")
# The verbs Kube counts (Kube.calls); the module reports each, 0 included.
API_VERBS = ("list", "get", "create", "replace", "patch", "delete")
# A LIST of BareMetalHosts costs about one GET plus one per this many hosts (see Fleet).
LIST_HOSTS_PER_GET = 20

# bmh_redfish's arguments besides the connection's and the controller's: its module and its action plugin (the
# controller's runs in process and standby runs) validate them.
BMH_REDFISH_ARG_SPEC = dict(
    hosts=dict(
        type="list",
        elements="dict",
        options=dict(namespace=dict(type="str", required=True), name=dict(type="str", required=True)),
    ),
    namespaces=dict(type="list", elements="str"),
    deploy_iso_url=dict(type="str"),
    media_dir=dict(type="path"),
    media_url=dict(type="str"),
    max_concurrent=dict(type="int", default=20),
    power_off_timeout=dict(type="float", default=defaults.POWER_OFF_TIMEOUT),
    callback_timeout=dict(type="float", default=defaults.CALLBACK_TIMEOUT),
    callback_events=dict(type="bool", default=False),
    power_poll_interval=dict(type="float", default=defaults.POWER_POLL_INTERVAL),
    cleaning_erase=dict(type="str", choices=["metadata", "full"], default=defaults.CLEANING_ERASE),
    backoff_base=dict(type="float", default=defaults.BACKOFF_BASE),
    backoff_cap=dict(type="float", default=defaults.BACKOFF_CAP),
    redfish_timeout=dict(type="float", default=10),
    redfish_retries=dict(type="int", default=1),
    wait=dict(type="float", default=0),
    workers=dict(type="int", default=8),
)


@dataclasses.dataclass(frozen=True)
class Options:
    settings: machine.Settings
    media_dir: str = ""
    max_concurrent: int = 20  # hosts provisioning or deprovisioning at once (Metal3's default)
    redfish_timeout: float = 10.0
    redfish_retries: int = 1
    workers: int = 8  # hosts stepped at once: waits on different BMCs overlap


def provision_hosts(
    kube,
    wanted: list[dict] | None,
    namespaces: list[str] | None,
    options: Options,
    timestamp: str,
    check_mode: bool,
    connections: Connections | None = None,
    fleet: Fleet | None = None,
    diff: bool = False,
) -> dict:
    """Advance each selected host by one step.

    `fleet` carries what earlier steps of the run read and wrote: given one that has been
    read, only the `wanted` hosts are read again. With `diff`, the result's `writes` lists
    (kind, namespace, name, before, after) for every object written (or, in check mode, that
    would be), in the order written, for host_diff.RunDiff. Hosts are read and written in parallel
    (options.workers), but decided one by one in name order: that is where the provisioning
    slots (options.max_concurrent) are handed out.
    """
    run_fleet = fleet if fleet is not None else Fleet()
    keys = {(w["namespace"], w["name"]) for w in wanted or []}
    views = {key: HostKube(kube) for key in keys}  # each host's requests, counted
    run_fleet.read(kube, sorted(keys) if keys else None, views, options.workers)
    ours = run_fleet.ours()
    busy = sum(1 for h in ours if machine.state_of(h) in machine.BUSY_STATES)
    selected = [
        h
        for h in ours
        if (not keys or _key(h) in keys) and (not namespaces or h["metadata"]["namespace"] in namespaces)
    ]
    pool, pool_problems = _warm_pool(ours, selected, run_fleet)
    run_connections = connections or Connections(options)
    try:
        key = _token_key(options)
        works = [
            _Work(host, timestamp, views.get(_key(host)) or HostKube(kube), key) for host in sorted(selected, key=_key)
        ]
        for work in works:
            work.writes = [] if diff else None
        bounded_map(lambda work: _observe_host(work, options, run_connections), works, options.workers, "host")
        for work in works:
            if work.result.get("skipped"):
                continue
            namespace = work.host["metadata"]["namespace"]
            work.ctx.slot_free = busy < options.max_concurrent
            work.ctx.warm_offered, work.ctx.warm_room = pool.offered(namespace), pool.room(namespace)
            work.step = work.failure or machine.decide(work.opened, work.observed, work.ctx)
            busy += _busy(work.step.state) - _busy(work.result["previous"])
            pool.count(namespace, _warm_after(work.host, work.step))
        bounded_map(lambda work: _finish_host(work, options, check_mode, run_fleet), works, options.workers, "host")
    finally:
        if connections is None:
            run_connections.close()
    results = [work.result for work in works]
    for work in works:
        work.result["api_calls"] = work.kube.counts()
    swept = _sweep_media(ours, options, key) if options.media_dir and not check_mode else []
    requeues = [r["requeue_after"] for r in results if r.get("requeue_after") is not None]
    outcome = {
        "changed": any(r["changed"] for r in results),
        "hosts": results,
        "requeue_after": min(requeues) if requeues else None,
        "redfish_requests": sum(r["redfish_requests"] for r in results),
        "states": _count_states(results),
    }
    if swept:
        outcome["media_swept"] = len(swept)
    if pool_problems:
        outcome["warnings"] = pool_problems
    if diff:
        outcome["writes"] = [write for work in works for write in work.writes]
    return outcome


def _warm_pool(ours: list[dict], selected: list[dict], fleet: Fleet) -> tuple[warm.Pool, list[str]]:
    """Each namespace's warm pool (its Namespace's annotation over its hosts), with the warm hosts this run leaves
    alone already counted; and what is wrong with an annotation (such a namespace keeps no host warm)."""
    stepped = {_key(h) for h in selected}
    hosts, warm_elsewhere = collections.Counter(), collections.Counter()
    for host in ours:
        namespace = host["metadata"]["namespace"]
        hosts[namespace] += 1
        if _key(host) not in stepped and machine.operation(host).get("kind") == machine.WARM:
            warm_elsewhere[namespace] += 1
    sizes, problems = {}, []
    for namespace, count in sorted(hosts.items()):
        sizes[namespace], problem = warm.pool_size(
            fleet.namespace_annotations(namespace).get(warm.POOL_ANNOTATION), count
        )
        if problem:
            problems.append(f"namespace {namespace}: {problem}")
    return warm.Pool(sizes, warm_elsewhere), problems


def _warm_after(host: dict, step: machine.Step) -> bool:
    """Whether the host is (still) warm once the step is written: its operation then is, or stays, WARM."""
    if machine.OPERATION_ANNOTATION in step.annotations:
        written = step.annotations[machine.OPERATION_ANNOTATION]
        return bool(written) and json.loads(written).get("kind") == machine.WARM
    return machine.operation(host).get("kind") == machine.WARM


def _key(host: dict) -> tuple[str, str]:
    return host["metadata"]["namespace"], host["metadata"]["name"]


def _busy(state: str) -> int:
    return 1 if state in machine.BUSY_STATES else 0


def _count_states(results: list[dict]) -> dict:
    counts: dict = {}
    for result in results:
        counts[result["state"]] = counts.get(result["state"], 0) + 1
    return counts


class HostKube:
    """The run's Kube as one host's step uses it: the same client, its requests counted by verb and kind."""

    def __init__(self, kube):
        self._kube = kube
        self.calls: collections.Counter = collections.Counter()

    def counts(self) -> dict:
        """{"get Secret": 1, "patch BareMetalHost": 1, ...}: this host's requests so far."""
        return dict(sorted(self.calls.items()))

    def list(self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None):
        self.calls[f"list {kind}"] += 1
        return self._kube.list(api_version, kind, namespace=namespace, label_selector=label_selector)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None):
        self.calls[f"get {kind}"] += 1
        return self._kube.get(api_version, kind, name, namespace)

    def create(self, obj: dict) -> dict:
        self.calls[f"create {obj['kind']}"] += 1
        return self._kube.create(obj)

    def replace(self, obj: dict) -> dict:
        self.calls[f"replace {obj['kind']}"] += 1
        return self._kube.replace(obj)

    def patch_status(self, obj: dict, status: dict) -> dict:
        self.calls[f"patch {obj['kind']}"] += 1
        return self._kube.patch_status(obj, status)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        self.calls[f"delete {kind}"] += 1
        return self._kube.delete(api_version, kind, name, namespace)


class Fleet:
    """The BareMetalHosts of one module run and the labels of their Namespaces.

    The first step lists both kinds, one request each. A later step re-reads only the hosts
    it steps (those due): one GET each, in parallel, or a single LIST when that is cheaper.
    Measured on the devenv, a LIST costs about one GET plus one per LIST_HOSTS_PER_GET hosts
    (12 hosts: 1.5 GETs, 68: 4.8, 260: 11.6), so a LIST is taken when more hosts are due than that.
    Every host the API returns from our own writes replaces the copy held here, so a host
    that is not due costs no request, and the provisioning slots are still counted over the
    whole fleet. Namespace labels (who provisions a namespace's hosts) are read once per run.
    """

    def __init__(self):
        self._hosts: dict | None = None  # (namespace, name) -> host, None until the first read
        self._labels: dict = {}
        self._annotations: dict = {}
        self._lock = threading.Lock()

    def read(self, kube, due: list[tuple] | None, views: dict, workers: int) -> None:
        """Bring the hosts in `due` up to date (all hosts when None, and at the first read)."""
        if self._hosts is None:
            namespaces = kube.list("v1", "Namespace")
            self._labels = {ns["metadata"]["name"]: ns["metadata"].get("labels") or {} for ns in namespaces}
            self._annotations = {ns["metadata"]["name"]: ns["metadata"].get("annotations") or {} for ns in namespaces}
        if self._hosts is None or due is None or len(due) > 1 + len(self._hosts) / LIST_HOSTS_PER_GET:
            hosts = {_key(host): host for host in kube.list(API_VERSION, "BareMetalHost")}
            with self._lock:
                self._hosts = hosts
            return

        def reread(key: tuple) -> None:
            host = (views.get(key) or kube).get(API_VERSION, "BareMetalHost", key[1], key[0])
            self.follow(key, host)

        bounded_map(reread, due, workers, "host")

    def follow(self, key: tuple, host: dict | None) -> None:
        """Hold `host` (as read, or as a write returned it) for `key`; None: it is gone."""
        gone = host is None or (host["metadata"].get("deletionTimestamp") and not host["metadata"].get("finalizers"))
        with self._lock:
            if gone:
                self._hosts.pop(key, None)
            else:
                self._hosts[key] = host

    def namespace_annotations(self, namespace: str) -> dict:
        return self._annotations.get(namespace, {})

    def ours(self) -> list[dict]:
        """The hosts this provisioner drives (not those left to Metal3's BMO)."""
        with self._lock:
            hosts = list(self._hosts.values())
        return [h for h in hosts if machine.is_ours(h, self._labels.get(h["metadata"]["namespace"], {}))]


@dataclasses.dataclass
class _Link:
    """A kept BMC connection and the version of the Secret its credentials came from."""

    client: RedfishClient
    credentials_version: str


class Connections:
    """The BMC connections of a module run (or of a standby run's many steps), one per host and BMC (address, TLS
    check, Secret name).

    A host's later steps in the same run (the `wait` loop) reuse its connection: no second
    read of its BMC Secret, of the service root, and no second login. A connection that
    failed is dropped, so the next step reads the Secret again and connects afresh; a Secret
    rotated during a run is therefore read after a failure or at the next run. Kept across runs
    (a standby run serving many batches: begin_run() at each), a connection is reused only
    while its Secret is the version it was made from: each run reads the Secret once, as a cold run does, and
    saves the service root and the login.
    """

    def __init__(self, options: Options):
        self._options = options
        self._links: dict = {}
        self._checked: set = set()  # the links whose Secret this run has read again
        self._lock = threading.Lock()

    def begin_run(self) -> None:
        """A new run: each kept connection's Secret is read again before its first use."""
        with self._lock:
            self._checked = set()

    def open(self, kube, host: dict, ctx: machine.Context) -> _Bmc | None:
        """The host's BMC for this step; None (with the problem in ctx) when its Secret or address is unusable."""
        key = _link_key(host)
        with self._lock:
            link = self._links.get(key)
            checked = key in self._checked
        if link is None or not checked:
            credentials = _credentials(kube, host, ctx)
            if link is not None and (not credentials or ctx.credentials_version != link.credentials_version):
                self.drop(key, link.client)  # a rotated or deleted Secret never reuses the old login
                link = None
            if not credentials:
                return None
        if link is None:
            bmc = host["spec"]["bmc"]
            client = RedfishClient(
                parse_bmc_address(bmc["address"]),
                credentials["username"],
                credentials["password"],
                verify_tls=not bmc.get("disableCertificateVerification", False),
                timeout=self._options.redfish_timeout,
                retries=self._options.redfish_retries,
            )
            link = _Link(client, ctx.credentials_version)
            with self._lock:
                self._links[key] = link
        with self._lock:
            self._checked.add(key)
        ctx.credentials_version = link.credentials_version
        return _Bmc(self, key, link.client)

    def drop(self, key: tuple, client: RedfishClient) -> None:
        """Forget a connection that failed (only if it is still the one kept for key)."""
        with self._lock:
            link = self._links.get(key)
            if link is not None and link.client is client:
                del self._links[key]
                self._checked.discard(key)
        client.close()

    def close(self) -> None:
        with self._lock:
            links, self._links = list(self._links.values()), {}
        for link in links:
            link.client.close()


def _link_key(host: dict) -> tuple:
    bmc = (host.get("spec") or {}).get("bmc") or {}
    return (
        *_key(host),
        bmc.get("address"),
        bool(bmc.get("disableCertificateVerification")),
        bmc.get("credentialsName"),
    )


class _Bmc:
    """One host's Redfish client for one step: its run's connection, and the requests this step sent."""

    def __init__(self, connections: Connections, key: tuple, client: RedfishClient):
        self._connections = connections
        self._key = key
        self.client = client
        self._requests_before = client.requests

    @property
    def requests(self) -> int:
        """Requests sent for this step."""
        return self.client.requests - self._requests_before

    def failed(self) -> None:
        """The client hit an error: the next step reads the Secret again and connects afresh."""
        self._connections.drop(self._key, self.client)


@dataclasses.dataclass
class _Work:
    """One host's step in flight: what was read, what the machine decided, what came of it."""

    host: dict  # as read: its operation records token references (media_protocol.sealed_operation)
    timestamp: str
    kube: HostKube
    key: bytes  # the references' key (_token_key)
    opened: dict = dataclasses.field(default_factory=dict)  # the host as the machine sees it: with the tokens
    references: dict = dataclasses.field(default_factory=dict)  # {token: reference}, to record the step's operation
    result: dict = dataclasses.field(default_factory=dict)
    ctx: machine.Context | None = None
    bmc: _Bmc | None = None
    observed: dict = dataclasses.field(default_factory=dict)
    failure: machine.Step | None = None  # reading the BMC failed: this is the step
    step: machine.Step | None = None
    writes: list | None = None  # with --diff: (kind, namespace, name, before, after) per write

    def __post_init__(self):
        self.opened, self.references = _opened(self.host, self.key)
        namespace, name = _key(self.host)
        previous = machine.state_of(self.host)
        self.result = {
            "namespace": namespace,
            "name": name,
            "previous": previous,
            "state": previous,
            "changed": False,
            "redfish_requests": 0,
        }

    def mint(self) -> str:
        """A fresh token for the step, its reference kept to record it by."""
        reference = protocol.new_reference()
        token = protocol.token_for(self.key, reference)
        self.references[token] = reference
        return token

    def sealed(self, step: machine.Step) -> machine.Step:
        """The step with the operation it records holding references, never the tokens the machine worked with."""
        written = step.annotations.get(machine.OPERATION_ANNOTATION)
        if not written:
            return step
        sealed = protocol.sealed_operation(json.loads(written), self.references)
        annotations = {**step.annotations, machine.OPERATION_ANNOTATION: json.dumps(sealed, sort_keys=True)}
        return dataclasses.replace(step, annotations=annotations)


def _token_key(options: Options) -> bytes:
    """The key of the hosts' token references: the media directory's, made on first use. Without a media directory
    nothing is published or served: a key of this run's own does."""
    return media.token_key(options.media_dir) if options.media_dir else secrets.token_bytes(protocol.KEY_BYTES)


def _opened(host: dict, key: bytes) -> tuple[dict, dict]:
    """The host with its operation's references opened into tokens (the host itself when it records none), and
    {token: reference}."""
    op = machine.operation(host)
    opened_op, references = protocol.opened_operation(op, key)
    if opened_op == op:
        return host, references
    annotations = {
        **host["metadata"]["annotations"],
        machine.OPERATION_ANNOTATION: json.dumps(opened_op, sort_keys=True),
    }
    return {**host, "metadata": {**host["metadata"], "annotations": annotations}}, references


def _observe_host(work: _Work, options: Options, connections: Connections) -> None:
    """Read what the machine needs for this host: its BMC Secret (for a new connection), then Redfish."""
    host = work.opened
    work.ctx = machine.Context(
        now=work.timestamp, settings=options.settings, new_token=work.mint(), wait_token=work.mint()
    )
    wait = machine.waiting_for_backoff(host, work.ctx)
    if wait > 0 and not host["metadata"].get("deletionTimestamp"):
        work.result.update(skipped="backing off after an error", requeue_after=wait)
        return
    if not machine.needs_credentials(host):
        return  # paused, detached, unregistered or being removed: no BMC, no Secret
    work.bmc = connections.open(work.kube, host, work.ctx)
    try:
        work.observed = _observe(work.kube, host, work.bmc, work.ctx, options)
    except RedfishError as error:
        if work.bmc is not None:
            work.bmc.failed()
        work.failure = _redfish_failure(host, error, work.ctx)


def _finish_host(work: _Work, options: Options, check_mode: bool, fleet: Fleet) -> None:
    """Carry out the decided step on the BMC and media, then write the host."""
    if work.step is None:
        return
    result, host, step = work.result, work.host, work.step
    if not check_mode and work.failure is None:
        step = _carry_out(work.kube, work.opened, step, work.bmc, work.ctx, options)
    step = work.sealed(step)
    result["redfish_requests"] = work.bmc.requests if work.bmc is not None else 0
    if step.firmware_status and not check_mode:  # before the host: a claim run its write wakes finds it
        _write_firmware_status(work, step.firmware_status, result)
    try:
        result["changed"], written = _write(work.kube, host, step, work.timestamp, check_mode, work.writes)
    except ConflictError as error:
        result.update(conflict=str(error), requeue_after=1)
        return
    if written is not host:
        fleet.follow(_key(host), written)
    if step.event and step.finalizer != "remove" and not check_mode:
        try:
            record_event(work.kube, written, *step.event, work.timestamp, check_mode)
        except KubeError as error:  # an Event is a report, not the step: the host is written, the run goes on
            result["event_error"] = str(error)
    result["state"] = step.state
    result["actions"] = [_describe_action(a) for a in step.actions]
    if step.requeue_after is not None:
        result["requeue_after"] = step.requeue_after
    elif step.poll_after is not None:
        result["poll_after"] = step.poll_after
    if step.skipped:
        result["skipped"] = step.skipped
    if step.status.get("operationalStatus") == "error":
        result["error"] = step.status["errorMessage"]


def _write_firmware_status(work: _Work, status: dict, result: dict) -> None:
    """The BIOS attributes read back, into the HostFirmwareSettings' status (the claim layer reports them)."""
    hfs = (work.observed.get(firmware.FIRMWARE) or {}).get("hfs")
    if hfs is None:
        return
    try:
        work.kube.patch_status(hfs, status)
    except KubeError as error:  # a report: the next read writes it again
        result["firmware_error"] = str(error)


def _credentials(kube, host: dict, ctx: machine.Context) -> dict:
    """The BMC username/password, read only from the host's own namespace; problems go to ctx."""
    spec_bmc = (host.get("spec") or {}).get("bmc") or {}
    if not spec_bmc.get("address"):
        return {}
    try:
        parse_bmc_address(spec_bmc["address"])
    except BmcAddressError as error:
        ctx.address_problem = f"spec.bmc.address: {error}"
        return {}
    secret_name = spec_bmc.get("credentialsName")
    if not secret_name:
        ctx.credentials_problem = "spec.bmc.credentialsName is not set"
        return {}
    secret = kube.get("v1", "Secret", secret_name, host["metadata"]["namespace"])
    if secret is None:
        ctx.credentials_problem = f"BMC Secret {secret_name} not found in namespace {host['metadata']['namespace']}"
        return {}
    data = secret.get("data") or {}
    missing = [key for key in ("username", "password") if not data.get(key)]
    if missing:
        ctx.credentials_problem = f"BMC Secret {secret_name} has no {' or '.join(missing)}"
        return {}
    ctx.credentials_version = secret["metadata"]["resourceVersion"]
    return {key: base64.b64decode(data[key]).decode("utf-8", "replace").strip() for key in ("username", "password")}


def _observe(kube, host: dict, bmc: _Bmc | None, ctx: machine.Context, options: Options) -> dict:
    observed: dict = {}
    for need in machine.observations(host, ctx):
        if machine.deferred(host, need, observed):
            continue
        if need in (machine.PROBE, machine.POWER, machine.BOOT, machine.MEDIA, machine.INVENTORY) and bmc is None:
            raise _no_connection()
        if need == machine.PROBE:
            bmc.client.probe()
            observed[need] = True
        elif need == machine.POWER:
            observed[need] = bmc.client.power_state()
        elif need == machine.BOOT:
            observed[need] = bmc.client.boot_override()
        elif need == machine.MEDIA:
            observed[need] = {device: bmc.client.media(device) for device in machine.media_devices(host)}
        elif need == machine.INVENTORY:
            observed[need] = bmc.client.inventory()
        elif need == machine.CALLBACK:
            observed[need] = _callback(options, machine.operation(host).get("token", ""))
        elif need == machine.WARM_ACK:
            observed[need] = _callback(options, machine.operation(host).get("warm", ""))
        elif need == firmware.FIRMWARE:
            observed[need] = _firmware(kube, host, bmc)
    return observed


def _firmware(kube, host: dict, bmc: _Bmc | None) -> dict:
    """The host's HostFirmwareSettings and, only when something is asked for or to be put back, its BIOS."""
    namespace, name = _key(host)
    hfs = kube.get(API_VERSION, FIRMWARE_SETTINGS_KIND, name, namespace)
    found = {"hfs": hfs, "current": None, "pending": None}
    if firmware.wanted(hfs):
        found["allowed"], found["claimed"] = _consumer_firmware(kube, host)
    if not firmware.needs_bios(host, hfs, found.get("allowed"), found.get("claimed")):
        return found
    if bmc is None:
        raise _no_connection()
    try:
        found["current"], found["pending"] = bmc.client.bios()
    except RedfishError as error:
        if error.kind not in ("unsupported", "not-found"):
            raise
        found["unsupported"] = "the BMC exposes no BIOS settings"
    return found


def _consumer_firmware(kube, host: dict) -> tuple[dict, dict]:
    """({attribute: values} the HostDeployPolicies of the host's namespace allow for the namespace of the HostClaim
    holding it, {attribute: value} that claim asks for in spec.firmware.settings); both {} when no HostClaim holds
    it (or it, or its namespace, is gone: a claim of that name with another uid is not the consumer)."""
    ref = (host.get("spec") or {}).get("consumerRef") or {}
    if ref.get("kind") != "HostClaim" or not ref.get("namespace") or not ref.get("name"):
        return {}, {}
    claim = kube.get(API_VERSION, "HostClaim", ref["name"], ref["namespace"])
    if claim is None or (ref.get("uid") and claim["metadata"].get("uid") != ref["uid"]):
        return {}, {}
    claims_namespace = kube.get("v1", "Namespace", ref["namespace"])
    if claims_namespace is None:
        return {}, {}
    policies = kube.list(API_VERSION, "HostDeployPolicy", namespace=host["metadata"]["namespace"])
    labels = claims_namespace["metadata"].get("labels") or {}
    _authorized, decisions = evaluate_policies(policies, ref["namespace"], labels)
    allowed = allowances(policies, decisions).get(host["metadata"]["namespace"], {})
    claimed = ((claim.get("spec") or {}).get("firmware") or {}).get("settings") or {}
    return allowed, {str(name): firmware.as_text(value) for name, value in claimed.items()}


def _callback(options: Options, token: str) -> dict | None:
    if not options.media_dir or not token:
        return None
    try:
        return media.callback_result(options.media_dir, token)
    except ValueError:  # a token that is not ours (hand-edited annotation): nothing will ever arrive
        return None


def _redfish_failure(host: dict, error: RedfishError, ctx: machine.Context) -> machine.Step:
    error_type = None
    if error.kind == "credentials":
        error_type = machine.PROVISIONED_REGISTRATION_ERROR if machine.state_of(host) == machine.PROVISIONED else None
        error_type = error_type or machine.REGISTRATION_ERROR
    return machine.failed(host, without_tokens(str(error)), ctx, error_type=error_type)


def without_tokens(message: str) -> str:
    """BMCs echo the config-drive URL in their errors: keep its token (a callback credential) out of statuses."""
    return _MEDIA_TOKEN.sub(lambda found: f"/media/{protocol.redact(found.group(1))}/", message)


def _no_connection() -> RedfishError:
    # The machine asks for the BMC only when needs_credentials() said so; this is a safety net.
    return RedfishError("unreachable", "no BMC connection for this step")


def _carry_out(kube, host: dict, step: machine.Step, bmc: _Bmc | None, ctx: machine.Context, options: Options):
    """Run the step's actions in order; on a failure, undo this step's publishing and record the error."""
    published = []
    try:
        for action in step.actions:
            verb = action[0]
            if verb in ("power", "insert", "eject", "boot_once", "clear_boot", "bios") and bmc is None:
                raise _no_connection()
            if verb == "power":
                bmc.client.set_power(action[1])
            elif verb == "insert":
                bmc.client.insert_media(action[2], device=action[1])
            elif verb == "eject":
                bmc.client.eject_media(device=action[1])
            elif verb == "boot_once":
                bmc.client.set_boot_once(target=action[1], mode=action[2])
            elif verb == "clear_boot":
                bmc.client.clear_boot_override()
            elif verb == "bios":
                bmc.client.set_bios(action[1])
            elif verb == "publish":
                erase, wait = (*action[3:], None, None)[:2]
                _publish(kube, host, action[1], action[2], options, erase=erase, wait=wait)
                published.append(action[2])
            elif verb == "handoff":
                _hand_off(action[1], action[2], options)
            elif verb == "withdraw" and options.media_dir and action[1]:
                media.withdraw(options.media_dir, action[1])
    except (RedfishError, ValueError) as error:
        if isinstance(error, RedfishError) and bmc is not None:
            bmc.failed()
        for token in published:
            media.withdraw(options.media_dir, token)
        failure = (
            _redfish_failure(host, error, ctx)
            if isinstance(error, RedfishError)
            else machine.failed(host, without_tokens(str(error)), ctx, error_type=machine.PROVISIONING_ERROR)
        )
        failure.actions = step.actions
        return failure
    return step


# Unrecorded media older than the callback timeout plus this are withdrawn (a step publishes before it records).
SWEEP_GRACE = 300.0


def _sweep_media(hosts: list[dict], options: Options, key: bytes) -> list[str]:
    """Media whose operation no host records (its recording write failed, its provisioner died) stop being servable
    once older than any operation could be. A shard sharing the media directory records its own hosts' tokens: theirs
    are left alone that long too."""
    owned = {
        token for h in hosts for token in machine.tokens_of(protocol.opened_operation(machine.operation(h), key)[0])
    }
    return media.sweep(options.media_dir, owned, options.settings.callback_timeout + SWEEP_GRACE)


def _hand_off(wait_token: str, job_token: str, options: Options) -> None:
    """Tell the warm writer polling under `wait_token` where its job's config drive is (under the job's own token)."""
    job = {"config_drive": machine.config_drive_url(options.settings, job_token)}
    media.publish(options.media_dir, protocol.NEXT_FILE, json.dumps(job).encode(), token=wait_token)


def _publish(
    kube, host: dict, mode: str, token: str, options: Options, erase: str | None = None, wait: str | None = None
) -> None:
    """Build the host's config drive (tenant data + the writer's instructions) and make it downloadable."""
    if not options.media_dir or not options.settings.media_url:
        raise ValueError("disk images and cleaning need media_dir and media_url (the media server)")
    deploy = {
        "mode": mode,
        "callback": {"url": protocol.callback_url(options.settings.media_url, token), "token": token},
    }
    if mode == "clean" and erase:
        deploy["erase"] = erase
    if mode == "clean" and wait:
        deploy["warm"] = protocol.warm_instructions(options.settings.media_url, wait)
    data = {}
    if mode == "deploy":
        image = host["spec"]["image"]
        deploy["image"] = {
            "url": image["url"],
            "format": image.get("format") or "raw",
            "checksum": image["checksum"],
            "checksumType": image.get("checksumType") or checksum_type(image["checksum"]),
        }
        data = _tenant_data(kube, host)
    iso = build_config_drive(
        user_data=data.get("userData"),
        meta_data=data.get("metaData"),
        network_data=data.get("networkData"),
        deploy=deploy,
    )
    media.publish(options.media_dir, machine.CONFIG_DRIVE_FILE, floppy_sized(iso), token=token)


def _tenant_data(kube, host: dict) -> dict:
    """role -> bytes of the data Secrets the host's spec names: the claim layer's copies, in the host's namespace."""
    namespace = host["metadata"]["namespace"]
    data = {}
    for role in DATA_ROLES:
        ref = (host.get("spec") or {}).get(role) or {}
        if not ref.get("name"):
            continue
        if ref.get("namespace", namespace) != namespace:
            raise ValueError(f"spec.{role}: a Secret outside namespace {namespace} is never read")
        secret = kube.get("v1", "Secret", ref["name"], namespace)
        if secret is None:
            raise ValueError(f"spec.{role}: Secret {namespace}/{ref['name']} not found")
        values = secret.get("data") or {}
        value = values.get(role, values.get("value"))
        if value is None:
            raise ValueError(f"spec.{role}: Secret {namespace}/{ref['name']} has no {role} or value key")
        data[role] = base64.b64decode(value)
    return data


def _write(
    kube, host: dict, step: machine.Step, timestamp: str, check_mode: bool, writes: list | None = None
) -> tuple[bool, dict]:
    """Annotations and finalizer (guarded by resourceVersion), then status, then HardwareData; each only if changed.

    The step's Event is recorded by the caller, after this.

    Returns whether anything was (or would be) done, and the host as the API last returned it
    (`host` itself when nothing was written). Given `writes` (--diff), each write (or, in check
    mode, each write that would be made) is appended to it, built from the objects in hand.
    """
    changed = bool(step.actions)
    namespace, name = _key(host)
    before = host_diff.host_view(host) if writes is not None else None
    updated = copy.deepcopy(host)
    meta = updated["metadata"]
    annotations = dict(meta.get("annotations") or {})
    for name, value in step.annotations.items():
        if value is None:
            annotations.pop(name, None)
        else:
            annotations[name] = value
    meta["annotations"] = annotations
    finalizers = list(meta.get("finalizers") or [])
    if step.finalizer == "add" and machine.FINALIZER not in finalizers:
        finalizers.append(machine.FINALIZER)
    if step.finalizer == "remove" and machine.FINALIZER in finalizers:
        finalizers.remove(machine.FINALIZER)
    meta["finalizers"] = finalizers
    if (annotations, finalizers) != (
        host["metadata"].get("annotations") or {},
        host["metadata"].get("finalizers") or [],
    ):
        changed = True
        if not check_mode:
            host = kube.replace(updated)
        if writes is not None:
            writes.append((host_diff.HOST, namespace, name, before, host_diff.host_view(host, annotations, finalizers)))
    if step.finalizer == "remove":
        return changed, host  # the host is gone (or going): no status to write
    patch = _status_patch(host, step)
    if patch:
        changed = True
        if writes is not None:
            after = host_diff.patched(host_diff.host_view(host, annotations, finalizers), patch)
            writes.append((host_diff.HOST, namespace, name, before, after))
        if not check_mode:
            patch["lastUpdated"] = timestamp
            host = kube.patch_status(host, patch)
    if step.hardware is not None:
        written = _write_hardware_data(kube, host, step.hardware, check_mode)
        if written is not None and writes is not None:
            writes.append((host_diff.HARDWARE_DATA, namespace, name, *written))
    return changed, host


def _status_patch(host: dict, step: machine.Step) -> dict:
    current = host.get("status") or {}
    patch = {}
    for field, value in step.status.items():
        if field == "provisioning":
            continue
        if current.get(field) != value and not (value is None and field not in current):
            patch[field] = value
    provisioning = dict(step.status.get("provisioning") or {})
    current_provisioning = current.get("provisioning") or {}
    if step.state != (current_provisioning.get("state") or machine.NONE):
        provisioning["state"] = step.state  # a host never registered (paused, say) gets no empty state
    changes = {k: v for k, v in provisioning.items() if current_provisioning.get(k) != v}
    if step.state == machine.AVAILABLE and current_provisioning.get("image"):
        changes["image"] = None  # back in the pool: it runs no image
    if changes:
        patch["provisioning"] = changes
    return patch


def _write_hardware_data(kube, host: dict, hardware: dict, check_mode: bool = False) -> tuple[dict, dict] | None:
    """Create the host's HardwareData (inspection normally finds none), or update the one there.

    Returns what it wrote as (before, after) host_diff views, None when it wrote nothing. Check
    mode reads nothing and shows a HardwareData to be created.
    """
    namespace, name = _key(host)
    desired = {
        "apiVersion": API_VERSION,
        "kind": "HardwareData",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [
                {"apiVersion": API_VERSION, "kind": "BareMetalHost", "name": name, "uid": host["metadata"]["uid"]}
            ],
        },
        "spec": {"hardware": hardware},
    }
    created = ({}, host_diff.hardware_data_view(desired))
    if check_mode:
        return created
    try:
        kube.create(desired)
        return created
    except AlreadyExistsError:
        pass
    existing = kube.get(API_VERSION, "HardwareData", name, namespace)
    if existing is None:  # removed in between
        kube.create(desired)
        return created
    if existing.get("spec") != desired["spec"]:
        updated = copy.deepcopy(existing)
        updated["spec"] = desired["spec"]
        kube.replace(updated)
        return host_diff.hardware_data_view(existing), host_diff.hardware_data_view(desired)
    return None


def _describe_action(action: tuple) -> str:
    """An action as results may show it: never a media token or config-drive URL."""
    verb = action[0]
    if verb in ("power", "boot_once"):
        return " ".join(str(a) for a in action)
    if verb in ("insert", "eject"):
        return f"{verb} {action[1]}"
    if verb == "bios":
        return "bios " + ",".join(sorted(action[1]))
    return verb


def options_from(params: dict) -> Options:
    settings = machine.Settings(
        deploy_iso_url=params.get("deploy_iso_url"),
        media_url=params.get("media_url") or "",
        power_off_timeout=params["power_off_timeout"],
        callback_timeout=params["callback_timeout"],
        callback_events=params["callback_events"],
        power_poll_interval=params["power_poll_interval"],
        cleaning_erase=params.get("cleaning_erase") or "metadata",
        backoff_base=params["backoff_base"],
        backoff_cap=params["backoff_cap"],
    )
    return Options(
        settings=settings,
        media_dir=params.get("media_dir") or "",
        max_concurrent=params["max_concurrent"],
        redfish_timeout=params["redfish_timeout"],
        redfish_retries=params["redfish_retries"],
        workers=params["workers"],
    )


def libraries(params: dict) -> dict:
    """The Python packages a bmh_redfish run needs besides kubernetes."""
    # Disk images and cleaning build config drives: pycdlib only when a deploy ISO is configured.
    return {"sushy": SUSHY_IMPORT_ERROR, "pycdlib": PYCDLIB_IMPORT_ERROR if params.get("deploy_iso_url") else None}


def validate(params: dict) -> str | None:
    for name in ("max_concurrent", "workers"):
        if params[name] < 1:
            return f"{name} must be at least 1"
    return None


def provision(module, kube) -> dict:
    """The bmh_redfish module's step."""
    return provision_step(kube, module.params, module.check_mode, getattr(module, "_diff", False))


def provision_step(kube, params: dict, check_mode: bool, diff: bool, connections: Connections | None = None) -> dict:
    """One step per host, or, with `wait`, steps until the hosts settle: what the bmh_redfish module runs, and what its
    action plugin runs in the playbook's process (the controller's runs).

    While waiting, a host is stepped again only when its own requeue_after has passed, and
    only the hosts stepped are read again (Fleet): a settled host costs nothing more. The BMC connections are the
    run's own, or `connections` (kept open: the caller's to close) to reuse those of earlier runs.
    """
    options = options_from(params)
    deadline = time.monotonic() + max(0.0, params["wait"])
    settling = Settling()
    fleet = Fleet()
    run_diff = host_diff.RunDiff() if diff else None
    changed = False
    steps = requests = 0
    warnings: set = set()
    pending = params["hosts"]
    run_connections = connections or Connections(options)
    run_connections.begin_run()
    try:
        while True:
            result = provision_hosts(
                kube,
                pending,
                params["namespaces"],
                options,
                now(),
                check_mode,
                run_connections,
                fleet,
                diff=run_diff is not None,
            )
            for write in result.get("writes", ()):
                run_diff.record(*write)
            changed = changed or result["changed"]
            warnings.update(result.get("warnings", ()))
            requests += result["redfish_requests"]
            steps += 1
            settling.record(result["hosts"], pending, time.monotonic())
            next_at = settling.next_at()
            if check_mode or next_at is None or next_at > deadline:
                break
            time.sleep(max(0.0, next_at - time.monotonic()))
            pending = settling.due_now(max(next_at, time.monotonic()))
    except KubeError as error:
        raise StepFailure(str(error), api_calls=api_calls(kube)) from None
    finally:
        if connections is None:
            run_connections.close()
    hosts = settling.hosts()
    outcome = dict(
        changed=changed,
        hosts=hosts,
        outcomes=host_outcomes(hosts),
        states=_count_states(hosts),
        requeue_after=settling.requeue_after(time.monotonic()),
        redfish_requests=requests,
        api_calls=api_calls(kube),
        steps=steps,
    )
    if run_diff is not None:
        outcome["diff"] = run_diff.entries()
    if warnings:  # a warm pool annotation that means nothing: said, and that namespace keeps no host warm
        outcome["warnings"] = sorted(warnings)
    return outcome


def api_calls(kube) -> dict:
    """The run's requests to the API server by verb (Kube.calls), every verb present, 0 included."""
    counted = dict(kube.calls) if kube is not None else {}
    return {**{verb: 0 for verb in API_VERBS}, **counted}
