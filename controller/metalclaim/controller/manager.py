"""The controller: reflectors -> mapper -> work queue -> batches -> one playbook run per batch -> outcomes.

Threads: one reflector per kind, the dispatcher (the only thread that talks to the runner
process), the resync timer, the Lease elector and the HTTP server for probes and metrics.
One stop flag ends them all. Runs reconcile from current state: a batch is a list of keys,
and the playbooks read everything they need from the API server themselves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import threading
import time
from pathlib import Path

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION

from . import collection, mapper, metrics, outcomes
from .groups import GROUPS, IN_PROCESS_VAR
from .leader import LeaderElector
from .reflector import Reflector, Store
from .runs import Runner, private_directory
from .scope import CLAIMS, PROVISIONER, TENANTS
from .settings import Settings
from .standby import Standby
from .workqueue import LIVE, RESYNC, WorkQueue

__all__ = ["Controller", "Settings", "remote_slot_wanted"]

TENANCY_API_VERSION = "tenancy.metalclaim.io/v1alpha1"
LOG = logging.getLogger("metalclaim.controller")


def log(event: str, **fields) -> None:
    """One JSON line per event: never Secret data, BMC addresses or credentials."""
    LOG.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))


class Controller:
    def __init__(self, settings: Settings, api_client, registry=None):
        self.settings = settings
        self.api_client = api_client
        self.stop = threading.Event()
        self.metrics = metrics.Metrics(registry)
        self.queue = WorkQueue(on_add=self.metrics.added, on_get=self.metrics.waited)
        self.stores = {
            kind: Store() for kind in ("HostClaim", "BareMetalHost", "HostDeployPolicy", "Namespace", "Tenant")
        }
        claims = self.stores["HostClaim"]
        claims.add_index("namespace", lambda c: [c["metadata"]["namespace"]])
        # The tenants whose hooks want the claim events of a namespace.
        self.stores["Tenant"].add_index("claim-namespace", mapper.tenant_claim_namespaces)
        self.stores["BareMetalHost"].add_index("namespace", lambda h: [h["metadata"]["namespace"]])
        # The provisioner side's view of namespaces (their opt-in label), apart from the claim side's, which
        # a namespace selector may narrow to tenant namespaces.
        self.infra_namespaces = Store()
        claims.add_index("secret", mapper.secret_refs)
        # Claims a freed host may serve: baremetal ones only (a remote claim's hosts are in another cluster).
        claims.add_index(
            "unbound",
            lambda c: (
                [1]
                if mapper.is_baremetal(c) and not mapper.is_bound(c) and not c["metadata"].get("deletionTimestamp")
                else []
            ),
        )
        self.reflectors: list[Reflector] = []
        # Started as claims appear in a namespace, stopped when the last claim served there goes (mapper.
        # secret_watch_plan); not part of readiness (a namespace the controller may not read must not keep it
        # unready): the claims are reconciled anyway. Each has its own stop flag (set with the controller's too) and
        # its own Store: a (re)list replaces one namespace's Secrets only, and a stopped watch's go with it.
        self.secret_reflectors: dict[str, Reflector] = {}
        self._secret_lock = threading.Lock()
        self.metrics.secret_watches.set_function(lambda: len(self.secret_reflectors))
        self.metrics.secrets_cached.set_function(self._secrets_cached)
        self.leader: LeaderElector | None = None
        self._leader_thread: threading.Thread | None = None
        self.runners: list[Runner] = []
        self.standbys: list[Standby] = []  # one per slot with --standby (the slot's two runners)
        # A runner slot of their own for remote claims, beside --runner-slots, when other work shares the process:
        # a hardware cluster that answers slowly (or never, until the claim's deadline) never delays that work.
        self._remote_slot: int | None = None
        self._remote_runner: Runner | None = None
        self._standby_dir: Path | None = None
        self._cancel_run = threading.Event()
        self._release_lease = threading.Event()  # set once no run is in flight: only then may another leader start
        self._dispatchers: list[threading.Thread] = []
        self._started_at: dict[tuple, float] = {}  # claim key -> creation, until its Association turns True

    # -- events -> keys -------------------------------------------------------------------------

    def _enqueue(self, kind: str, found: mapper.Keys, initial: bool) -> None:
        if found.dropped:
            self.metrics.self_caused.labels(kind).inc()
        for key in found.keys:
            if self.serves(key):
                self.queue.add(key, RESYNC if initial else LIVE)

    def serves(self, key: tuple | None) -> bool:
        """Whether this controller's side, claim kinds, shard and namespace selector cover a key."""
        if key is None:  # a claim of a kind no playbook of ours serves
            return False
        scope = self.settings.scope
        kind, namespace, name = key
        if kind == mapper.TENANT:  # cluster-scoped: sharded by name
            return TENANTS in scope.sides and scope.owns_namespace(name)
        if kind == mapper.HOST:
            return PROVISIONER in scope.sides and scope.owns_namespace(namespace)
        if mapper.CLAIM_KIND_OF_KEY[kind] not in self.settings.kinds:
            return False
        if CLAIMS not in scope.sides or not scope.owns_namespace(namespace):
            return False
        # With a selector, the Namespace store holds only the selected namespaces.
        return not self.settings.namespace_selector or ("", namespace) in self.stores["Namespace"]

    def _on_claim(self, old, new, initial=False) -> None:
        if TENANTS in self.settings.scope.sides:  # a claim event for the hooks of its namespace's tenant
            tenants = self.stores["Tenant"].by_index("claim-namespace", (new or old)["metadata"]["namespace"])
            self._enqueue("HostClaim", mapper.claim_changed_for_tenants(old, new, tenants), initial)
        if not self.serves(mapper.claim_key(new or old)):  # another controller's kind (or shard): not a look
            return
        self._observe_association(old, new)
        self._sync_secret_watches((new or old)["metadata"]["namespace"])
        self._enqueue("HostClaim", mapper.claim_changed(old, new), initial)

    def _on_tenant(self, old, new, initial=False) -> None:
        self._enqueue("Tenant", mapper.tenant_changed(old, new), initial)

    def _on_host(self, old, new, initial=False) -> None:
        unbound = self.stores["HostClaim"].by_index("unbound", 1)
        self._enqueue("BareMetalHost", mapper.host_changed(old, new, unbound), initial)

    def _on_policy(self, old, new, initial=False) -> None:
        self._enqueue("HostDeployPolicy", mapper.policy_changed(old, new, self.stores["HostClaim"].list()), initial)

    def _on_namespace(self, old, new, initial=False) -> None:
        name = (new or old)["metadata"]["name"]
        claims = self.stores["HostClaim"].by_index("namespace", name)
        if self.settings.namespace_selector:  # which of its claims are served may have changed
            self._sync_secret_watches(name)
        self._enqueue("Namespace", mapper.namespace_changed(old, new, claims), initial)

    def _on_infra_namespace(self, old, new, initial=False) -> None:
        hosts = self.stores["BareMetalHost"].by_index("namespace", (new or old)["metadata"]["name"])
        self._enqueue("Namespace", mapper.infra_namespace_changed(old, new, hosts), initial)

    def _on_secret(self, old, new, initial=False) -> None:
        meta = (new or old)["metadata"]
        claims = self.stores["HostClaim"].by_index("secret", (meta["namespace"], meta["name"]))
        self._enqueue("Secret", mapper.secret_changed(old, new, claims), initial)

    def _observe_association(self, old, new) -> None:
        """create -> Association=True, as a tenant watching the claim sees it (a histogram)."""
        if new is None:
            self._started_at.pop(mapper.claim_key(old), None)  # deleted before it was associated
            return
        key = mapper.claim_key(new)
        conditions = {c.get("type"): c for c in (new.get("status") or {}).get("conditions") or []}
        associated = (conditions.get("Association") or {}).get("status") == "True"
        if old is None and not associated:
            self._started_at[key] = time.time()
        elif associated and key in self._started_at:
            self.metrics.association.observe(time.time() - self._started_at.pop(key))

    # -- runs ------------------------------------------------------------------------------------

    def _extravars(self, group: str, keys: list) -> tuple[str, dict]:
        """The playbook a batch of `group` runs and its variables (groups.GROUPS: the one table of them)."""
        entry = GROUPS[group]
        return entry.playbook_path(), entry.extravars(keys, self.settings)

    def _run_batch(self, keys: list, slot: int) -> None:
        group = keys[0][0]
        playbook, extravars = self._extravars(group, keys)
        name = GROUPS[group].playbook
        self.metrics.batch_size.labels(name).observe(len(keys))
        report = self._run(slot, group, playbook, extravars)
        self.metrics.runs.labels(name, report.status).inc()
        self.metrics.run_seconds.labels(name).observe(report.seconds)
        log(
            "run",
            playbook=name,
            status=report.status,
            count=len(keys),
            keys=_shown(keys),
            seconds=round(report.seconds, 3),
            slot=slot,
        )
        if report.status != "successful":
            for failure in report.failures:
                log("run_failed", playbook=name, task=failure["task"], message=failure["msg"], keys=_shown(keys))
            found = outcomes.failed_run(keys, report.status)
        else:
            found = outcomes.read(group, keys, GROUPS[group].result_of(report.results))
        for key, outcome in found.items():
            self.metrics.reconciles.labels(name, outcome.result).inc()
            if outcome.result == outcomes.RETRY:
                delay = self.queue.add_rate_limited(key)
                log("retry", key="/".join(key), reason=outcome.reason, after=round(delay, 3))
            elif outcome.result == outcomes.REQUEUE:
                self.queue.forget(key)
                self.queue.add_after(key, outcome.delay)
            else:
                self.queue.forget(key)
        self.metrics.reconcile_seconds.labels(name).observe(report.seconds)

    def _run(self, slot: int, group: str, playbook: str, extravars: dict):
        """The batch's run: handed to the slot's standby run when there is one, else a cold run."""
        if slot == self._remote_slot:
            return self._remote_runner.run(playbook, extravars, self._cancel_run)
        if not self.standbys:
            return self.runners[slot].run(playbook, extravars, self._cancel_run)
        standby = self.standbys[slot]
        if group == mapper.CLAIM:
            runner = standby.hand_over(extravars[GROUPS[mapper.CLAIM].objects_var], self.stop)
            if runner is not None:
                self.metrics.standby_batches.labels("standby").inc()
                return runner.wait(self._cancel_run)
            self.metrics.standby_batches.labels("cold").inc()
        return standby.free_runner().run(playbook, extravars, self._cancel_run)

    def _dispatch(self, slot: int) -> None:
        """One runner slot: take a batch (the queue never hands a key to two slots), run it, settle its keys."""
        while not self.stop.is_set():
            if self.leader is not None and not self.leader.is_leader:
                self.stop.wait(0.1)
                continue
            keys = self.queue.get_batch(
                group=lambda key: key[0],
                max_size=self.settings.batch_max_size,
                quiet=self.settings.batch_quiet,
                max_wait=self.settings.batch_max_wait,
                timeout=0.5,
                accept=self._accepts(slot),
            )
            if keys is None:
                return
            if not keys:
                if slot < len(self.standbys):
                    self.standbys[slot].maintain()
                continue
            try:
                self._run_batch(keys, slot)
            except Exception as error:  # never lose the keys: back off and carry on
                log("dispatch_error", error=f"{type(error).__name__}: {error}")
                for key in keys:
                    self.queue.add_rate_limited(key)
            finally:
                self.queue.done(keys)
                self.metrics.depth.set(len(self.queue))

    def _accepts(self, slot: int):
        """The keys a slot takes: with a remote slot, remote claims there and only there."""
        if self._remote_slot is None:
            return None
        if slot == self._remote_slot:
            return lambda key: key[0] == mapper.REMOTE
        return lambda key: key[0] != mapper.REMOTE

    def _resync(self) -> None:
        while not self.stop.wait(self.settings.resync_period):
            for claim in self.stores["HostClaim"].list():
                key = mapper.claim_key(claim)
                if self.serves(key):
                    self.queue.add(key, RESYNC)
            for host in self.stores["BareMetalHost"].list():
                key = mapper.key_of(mapper.HOST, host)
                if self.serves(key):
                    self.queue.add(key, RESYNC)
            for tenant in self.stores["Tenant"].list():  # drift: an object of the tenant's edited by hand
                key = mapper.key_of(mapper.TENANT, tenant)
                if self.serves(key):
                    self.queue.add(key, RESYNC)
            self._sync_secret_watches()
            self.metrics.resyncs.inc()

    # -- life cycle -----------------------------------------------------------------------------

    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    def alive(self) -> bool:
        threads = [*self.reflectors, *list(self.secret_reflectors.values()), *self._dispatchers]
        return (bool(self._dispatchers) and all(t.is_alive() for t in threads)) or self.stop.is_set()

    def _reflector(
        self,
        api_version: str,
        kind: str,
        on_change,
        namespace=None,
        store: Store | None = None,
        stop: threading.Event | None = None,
        **options,
    ) -> Reflector:
        """A reflector feeding the kind's store (or the one given), ending with the controller (or with the flag
        given); the caller keeps it (self.reflectors: part of readiness)."""
        return Reflector(
            self.api_client,
            api_version=api_version,
            kind=kind,
            namespace=namespace,
            store=self.stores[kind] if store is None else store,
            on_change=on_change,
            stop=self.stop if stop is None else stop,
            on_restart=lambda reason, kind=kind: self.metrics.watch_restarts.labels(kind, reason).inc(),
            log=log,
            name=f"reflector-{kind}" + (f"-{namespace}" if namespace else ""),
            **options,
        )

    def _sync_secret_watches(self, namespace: str | None = None) -> None:
        """Watch the Secrets of exactly the namespaces holding a claim this controller serves: start the watch of a
        namespace whose first such claim appears, stop it (its Secrets go with its Store) when the last one goes.
        One namespace (after its claim's or its own event), or every one (at resync).

        Tenant Secrets are read per namespace (the claim side has no cluster-wide Secret rights). Called from the
        claim and namespace reflectors' threads and the resync: the plan is made and applied under the lock, from
        the stores as they are then, and each store change calls this again after it, so the last call sees the
        last state."""
        if not self.settings.watch_secrets:
            return
        claims = self.stores["HostClaim"]
        with self._secret_lock:
            if self.stop.is_set():
                return
            if namespace is None:
                start, stop = mapper.secret_watch_plan(self.secret_reflectors, claims.list(), self.serves)
            else:
                watched = {namespace} & set(self.secret_reflectors)
                start, stop = mapper.secret_watch_plan(watched, claims.by_index("namespace", namespace), self.serves)
            for name in sorted(stop):
                reflector = self.secret_reflectors.pop(name)
                reflector.stop.set()  # its thread ends promptly; its Store (this namespace's Secrets) goes with it
                log("secret_watch_stopped", namespace=name)
            for name in sorted(start):
                # A core kind: no discovery request per namespace (one fewer call, and none to fail during an outage).
                reflector = self._reflector(
                    "v1",
                    "Secret",
                    self._on_secret,
                    name,
                    store=Store(),
                    stop=threading.Event(),
                    metadata_only=True,
                    plural="secrets",
                    namespaced=True,
                )
                self.secret_reflectors[name] = reflector
                reflector.start()  # under the lock: alive() never sees a watch not yet started

    def _secrets_cached(self) -> int:
        with self._secret_lock:
            return sum(len(reflector.store) for reflector in self.secret_reflectors.values())

    def _stop_secret_watches(self) -> None:
        with self._secret_lock:
            for reflector in self.secret_reflectors.values():
                reflector.stop.set()

    def start(self) -> None:
        settings, sides = self.settings, self.settings.scope.sides
        infra = settings.infra_namespaces or (None,)
        self.reflectors = []
        # Hosts and policies concern baremetal claims only: a claims side serving remote claims alone needs no
        # right on them.
        baremetal = CLAIMS in sides and mapper.BAREMETAL_KIND in settings.kinds
        if baremetal or PROVISIONER in sides:
            self.reflectors += [self._reflector(API_VERSION, "BareMetalHost", self._on_host, ns) for ns in infra]
        if TENANTS in sides:
            self.reflectors.append(self._reflector(TENANCY_API_VERSION, "Tenant", self._on_tenant))
            if CLAIMS not in sides:  # claim events for tenant hooks (the claims side's reflector serves both)
                self.reflectors.append(self._reflector(API_VERSION, "HostClaim", self._on_claim))
        if PROVISIONER in sides:
            self.reflectors.append(
                self._reflector("v1", "Namespace", self._on_infra_namespace, store=self.infra_namespaces)
            )
        if CLAIMS in sides:
            self.reflectors += [
                self._reflector(API_VERSION, "HostClaim", self._on_claim),
                *(
                    self._reflector(API_VERSION, "HostDeployPolicy", self._on_policy, ns)
                    for ns in (infra if baremetal else ())
                ),
                self._reflector(
                    "v1", "Namespace", self._on_namespace, label_selector=settings.namespace_selector or None
                ),
            ]
        envvars = {"ANSIBLE_COLLECTIONS_PATH": collection.collections_path()}
        if settings.kubeconfig:
            envvars["K8S_AUTH_KUBECONFIG"] = settings.kubeconfig
        # One private data dir per runner, each rotating its artifacts: disk stays within
        # runners x keep_artifacts runs, however many runs happen. All inside one directory of our own.
        private_directory(settings.private_data_dir)
        standby = settings.standby and CLAIMS in sides
        per_slot = 2 if standby else 1
        self.runners = [
            Runner(
                _runner_dir(settings.private_data_dir, slot, settings.runner_slots, runner, per_slot),
                envvars,
                keep_artifacts=settings.keep_artifacts,
            )
            for slot in range(settings.runner_slots)
            for runner in range(per_slot)
        ]
        if remote_slot_wanted(settings):
            self._remote_slot = settings.runner_slots
            self._remote_runner = Runner(
                settings.private_data_dir / "remote", envvars, keep_artifacts=settings.keep_artifacts
            )
            self.runners.append(self._remote_runner)  # closed with the others
        if standby:
            # A short path (sockets: 107 bytes at most), a directory only this user can enter (mkdtemp: 0700).
            self._standby_dir = Path(tempfile.mkdtemp(prefix="metalclaim-standby-"))
            self.standbys = [
                Standby(
                    self.runners[2 * slot : 2 * slot + 2],
                    self._standby_dir / f"slot-{slot}.sock",
                    GROUPS[mapper.CLAIM].playbook_path(),
                    extravars={IN_PROCESS_VAR: True},  # its claims come through the socket at the hand-over
                    max_age=settings.standby_max_age,
                    fingerprint=collection.fingerprint,
                    log=lambda event, slot=slot, **fields: log(event, slot=slot, **fields),
                    on_ready=self.metrics.standby_ready.inc,
                )
                for slot in range(settings.runner_slots)
            ]
            for slot_standby in self.standbys:
                slot_standby.launch()
        for reflector in self.reflectors:
            reflector.start()
        if settings.leader_elect:
            self.leader = LeaderElector(
                self.api_client,
                namespace=settings.leader_election_namespace,
                name=settings.lease_name,
                identity=settings.identity,
                lease_duration=settings.leader_elect_lease_duration,
                renew_deadline=settings.leader_elect_renew_deadline,
                retry_period=settings.leader_elect_retry_period,
                on_started_leading=lambda: self.metrics.leader.set(1),
                on_stopped_leading=self._lost_leadership,
                log=log,
            )
            self._leader_thread = threading.Thread(
                target=self.leader.run, args=(self._release_lease,), name="leader", daemon=True
            )
            self._leader_thread.start()
        else:
            self.metrics.leader.set(1)
        slots = settings.runner_slots + (self._remote_slot is not None)
        self._dispatchers = [
            threading.Thread(target=self._dispatch, args=(slot,), name=f"dispatcher-{slot}", daemon=True)
            for slot in range(slots)
        ]
        for dispatcher in self._dispatchers:
            dispatcher.start()
        threading.Thread(target=self._resync, name="resync", daemon=True).start()
        log(
            "started",
            controllers=list(sides),
            kinds=list(settings.kinds),
            remote_allowed_namespaces=list(settings.remote_allowed_namespaces),
            shard=f"{settings.scope.shard[0]}/{settings.scope.shard[1]}",
            namespace_selector=settings.namespace_selector,
            infra_namespaces=list(settings.infra_namespaces),
            leader_elect=settings.leader_elect,
            runner_slots=settings.runner_slots,
            remote_slot=self._remote_slot is not None,
            standby=bool(self.standbys),
        )

    def _lost_leadership(self) -> None:
        self.metrics.leader.set(0)
        if not self.stop.is_set():
            log("leadership_lost")
            self.shutdown()

    def shutdown(self) -> None:
        """Stop: the run in progress finishes or is cancelled within the grace period; then the Lease is released."""
        self.stop.set()
        self._stop_secret_watches()
        self.queue.shutdown()
        dispatchers = [d for d in self._dispatchers if d is not threading.current_thread()]
        deadline = time.monotonic() + self.settings.grace_period / 2
        for dispatcher in dispatchers:  # the runs in flight may finish within half the grace period
            dispatcher.join(max(0.0, deadline - time.monotonic()))
        if any(d.is_alive() for d in dispatchers):
            self._cancel_run.set()
            deadline = time.monotonic() + self.settings.grace_period / 2
            for dispatcher in dispatchers:
                dispatcher.join(max(0.0, deadline - time.monotonic()))
        for slot_standby in self.standbys:
            slot_standby.close()
        for runner in self.runners:
            runner.close()
        if self._standby_dir is not None:
            with contextlib.suppress(OSError):
                self._standby_dir.rmdir()
        self._release_lease.set()
        if self.leader is not None and self._leader_thread is not threading.current_thread():
            self._leader_thread.join(5)
        log("stopped")


def remote_slot_wanted(settings: Settings) -> bool:
    """Whether remote claims get a runner slot of their own: when they are served beside other work (baremetal
    claims, hosts, Tenants), which then never waits behind a remote run (issue 22)."""
    sides = settings.scope.sides
    if CLAIMS not in sides or mapper.REMOTE_KIND not in settings.kinds:
        return False
    return mapper.BAREMETAL_KIND in settings.kinds or PROVISIONER in sides or TENANTS in sides


def _runner_dir(private: Path, slot: int, slots: int, runner: int, per_slot: int) -> Path:
    """private (one slot), private/slot-N (several); with standby runs, a slot's second runner in .../standby-b."""
    slot_dir = private if slots == 1 else private / f"slot-{slot}"
    return slot_dir if runner == 0 else slot_dir / "standby-b"


def _shown(keys: list, limit: int = 20) -> list[str]:
    return ["/".join(key) for key in keys[:limit]] + ([f"... {len(keys) - limit} more"] if len(keys) > limit else [])
