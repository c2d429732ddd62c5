"""Event handlers: store events -> mapper -> work queue, as controller-runtime's handlers enqueue requests.

Each reflector's change (old, new) goes through the mapper (mapper.py: which keys it concerns, none for the
controller's own writes) into the queue, for the keys this controller serves (its sides, claim kinds, shard and
namespace selector). The stores and their indexes the mapper reads live here; so do the per-namespace Secret
watches, which follow the claims, and the periodic resync, which queues every key again.
"""

from __future__ import annotations

import threading
import time

from ansible_collections.metalclaim.hostclaim.plugins.module_utils.controller_contract import redact, token_key

from . import mapper
from .reflector import Store
from .scope import CLAIMS, PROVISIONER, TENANTS
from .workqueue import LIVE, RESYNC

KINDS = ("HostClaim", "BareMetalHost", "HostDeployPolicy", "Namespace", "Tenant", "HostClaimSet")
# Cluster API (--cluster-api): our MetalClaimMachines and MetalClaimClusters, and its Machines and Clusters.
CAPI_KINDS = ("MetalClaimMachine", "MetalClaimCluster", "Machine", "Cluster", "HostCatalog")


class EventHandlers:
    def __init__(self, settings, queue, metrics, stop: threading.Event, reflector, log):
        """reflector(api_version, kind, on_change, namespace, store=, stop=, **options): a new, unstarted one (the
        manager's); stop: the controller's flag."""
        self.settings = settings
        self.queue = queue
        self.metrics = metrics
        self.stop = stop
        self._new_reflector = reflector
        self._log = log
        self.stores = {kind: Store() for kind in (*KINDS, *CAPI_KINDS)}
        # The MetalClaimMachines of each (namespace, cluster name): those a Cluster's pause or provisioning wakes.
        self.stores["MetalClaimMachine"].add_index("cluster", mapper.metal_machine_cluster)
        self.stores["MetalClaimCluster"].add_index("namespace", lambda c: [c["metadata"]["namespace"]])
        claims = self.stores["HostClaim"]
        claims.add_index("namespace", lambda c: [c["metadata"]["namespace"]])
        # The tenants whose hooks want the claim events of a namespace.
        self.stores["Tenant"].add_index("claim-namespace", mapper.tenant_claim_namespaces)
        self.stores["BareMetalHost"].add_index("namespace", lambda h: [h["metadata"]["namespace"]])
        # The media tokens each host's provisioner operation holds: the host an image writer's callback is for. Hosts
        # record references to them, opened with the media directory's key (made here when this side starts first).
        self._media_key = token_key(settings.media_dir) if self.watches_callbacks(settings) else b""
        if self._media_key:
            self.stores["BareMetalHost"].add_index(
                "media-token", lambda host: mapper.operation_tokens(host, self._media_key)
            )
        # The claim key each host's consumerRef names: whether a claim gone still holds a host.
        self.stores["BareMetalHost"].add_index("consumer", lambda h: [k for k in [mapper.consumer_key(h)] if k])
        # The hosts waiting for a provisioning slot: a host that gives one up wakes them.
        self.stores["BareMetalHost"].add_index("slot-waiting", lambda h: [1] if mapper.waits_for_a_slot(h) else [])
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
        # Started as claims appear in a namespace, stopped when the last claim served there goes (mapper.
        # secret_watch_plan); not part of readiness (a namespace the controller may not read must not keep it
        # unready): the claims are reconciled anyway. Each has its own stop flag (set with the controller's too) and
        # its own Store: a (re)list replaces one namespace's Secrets only, and a stopped watch's go with it.
        self.secret_reflectors: dict = {}
        self._secret_lock = threading.Lock()
        self.metrics.secret_watches.set_function(lambda: len(self.secret_reflectors))
        self.metrics.secrets_cached.set_function(self._secrets_cached)
        self._started_at: dict[tuple, float] = {}  # claim key -> creation, until its Association turns True

    # -- keys ------------------------------------------------------------------------------------

    def _enqueue(self, kind: str, found: mapper.Keys, initial: bool) -> None:
        if found.dropped:
            self.metrics.self_caused.labels(kind).inc()
        for key in found.keys:
            if self.serves(key):
                self.queue.add(key, RESYNC if initial else LIVE)
        for key in found.wake:
            if self.serves(key):
                self.queue.wake(key, RESYNC if initial else LIVE)

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
        if kind in (mapper.CAPI_MACHINE, mapper.CAPI_CLUSTER) and not self.settings.cluster_api:
            return False
        if kind in (mapper.CLAIMSET, mapper.CATALOG, mapper.CAPI_MACHINE, mapper.CAPI_CLUSTER):
            # served beside baremetal claims (one claims side does that)
            if mapper.BAREMETAL_KIND not in self.settings.kinds:
                return False
        elif mapper.CLAIM_KIND_OF_KEY[kind] not in self.settings.kinds:
            return False
        if CLAIMS not in scope.sides or not scope.owns_namespace(namespace):
            return False
        # With a selector, the Namespace store holds only the selected namespaces.
        return not self.settings.namespace_selector or ("", namespace) in self.stores["Namespace"]

    def _enqueue_catalogs(self, found: mapper.Keys, initial: bool) -> None:
        """Catalog keys become ready --catalog-interval later (the earliest request wins): however many host events
        come meanwhile, each namespace's catalog is counted once then, at most once per interval."""
        if CLAIMS not in self.settings.scope.sides:
            return
        for key in found.keys:
            if self.serves(key):
                self.queue.add_after(key, self.settings.catalog_interval, RESYNC if initial else LIVE)

    def _namespace_labels(self) -> dict:
        return {ns["metadata"]["name"]: ns["metadata"].get("labels") for ns in self.stores["Namespace"].list()}

    # -- one handler per reflector ---------------------------------------------------------------

    def on_claim(self, old, new, initial=False) -> None:
        if TENANTS in self.settings.scope.sides:  # a claim event for the hooks of its namespace's tenant
            tenants = self.stores["Tenant"].by_index("claim-namespace", (new or old)["metadata"]["namespace"])
            self._enqueue("HostClaim", mapper.claim_changed_for_tenants(old, new, tenants), initial)
        self._enqueue("HostClaim", mapper.claim_changed_for_sets(old, new), initial)  # a member: its set counts again
        if self.settings.cluster_api:  # a machine's claim: the machine's status follows it
            self._enqueue("HostClaim", mapper.claim_changed_for_capi(old, new), initial)
        if not self.serves(mapper.claim_key(new or old)):  # another controller's kind (or shard): not a look
            return
        self._observe_association(old, new)
        self.sync_secret_watches((new or old)["metadata"]["namespace"])
        hosts = self.stores["BareMetalHost"]
        named = new is not None or bool(hosts.by_index("consumer", mapper.key_of(mapper.CLAIM, old)))
        self._enqueue("HostClaim", mapper.claim_changed(old, new, named_by_a_host=named), initial)

    def on_claimset(self, old, new, initial=False) -> None:
        self._enqueue("HostClaimSet", mapper.claimset_changed(old, new), initial)

    def on_metal_machine(self, old, new, initial=False) -> None:
        self._enqueue("MetalClaimMachine", mapper.metal_machine_changed(old, new), initial)

    def on_metal_cluster(self, old, new, initial=False) -> None:
        self._enqueue("MetalClaimCluster", mapper.metal_cluster_changed(old, new), initial)

    def on_capi_machine(self, old, new, initial=False) -> None:
        self._enqueue("Machine", mapper.capi_machine_changed(old, new), initial)

    def on_capi_cluster(self, old, new, initial=False) -> None:
        meta = (new or old)["metadata"]
        metal_machines = self.stores["MetalClaimMachine"].by_index("cluster", (meta["namespace"], meta["name"]))
        self._enqueue("Cluster", mapper.capi_cluster_changed(old, new, metal_machines), initial)

    def on_catalog_for_capi(self, old, new, initial=False) -> None:
        metal_clusters = self.stores["MetalClaimCluster"].by_index("namespace", (new or old)["metadata"]["namespace"])
        self._enqueue("HostCatalog", mapper.catalog_changed_for_capi(old, new, metal_clusters), initial)

    def on_tenant(self, old, new, initial=False) -> None:
        self._enqueue("Tenant", mapper.tenant_changed(old, new), initial)

    def on_host(self, old, new, initial=False) -> None:
        unbound = self.stores["HostClaim"].by_index("unbound", 1)
        slot_waiting = self.stores["BareMetalHost"].by_index("slot-waiting", 1)
        self._enqueue("BareMetalHost", mapper.host_changed(old, new, unbound, slot_waiting), initial)
        if mapper.host_fingerprint_for_catalogs(old) != mapper.host_fingerprint_for_catalogs(new):
            infra = (new or old)["metadata"].get("namespace", "")
            publishing = [p for p in self.stores["HostDeployPolicy"].list() if mapper.publishes(p, infra)]
            if publishing:  # else no catalog counts it: the namespaces are not looked at
                found = mapper.host_changed_for_catalogs(old, new, publishing, self._namespace_labels())
                self._enqueue_catalogs(found, initial)

    def on_policy(self, old, new, initial=False) -> None:
        self._enqueue("HostDeployPolicy", mapper.policy_changed(old, new, self.stores["HostClaim"].list()), initial)
        self._enqueue_catalogs(mapper.policy_changed_for_catalogs(old, new, self._namespace_labels()), initial)

    def on_namespace(self, old, new, initial=False) -> None:
        name = (new or old)["metadata"]["name"]
        claims = self.stores["HostClaim"].by_index("namespace", name)
        if self.settings.namespace_selector:  # which of its claims are served may have changed
            self.sync_secret_watches(name)
        self._enqueue("Namespace", mapper.namespace_changed(old, new, claims), initial)
        policies = self.stores["HostDeployPolicy"].list()
        self._enqueue_catalogs(mapper.namespace_changed_for_catalogs(old, new, policies), initial)

    def on_infra_namespace(self, old, new, initial=False) -> None:
        hosts = self.stores["BareMetalHost"].by_index("namespace", (new or old)["metadata"]["name"])
        self._enqueue("Namespace", mapper.infra_namespace_changed(old, new, hosts), initial)

    @staticmethod
    def watches_callbacks(settings) -> bool:
        """Whether this controller watches the image writers' callbacks (manager.py starts callbacks.CallbackWatch)."""
        return PROVISIONER in settings.scope.sides and bool(settings.media_dir)

    def on_callback(self, token: str) -> bool:
        """An image writer's callback (or a warm writer's acknowledgement) under `token` (callbacks.CallbackWatch): the
        host whose operation holds it is stepped now. Whether a host holds it."""
        hosts = self.stores["BareMetalHost"].by_index("media-token", token) if self._media_key else []
        found = mapper.callback_arrived(token, hosts, self._media_key)
        if found.keys:
            self._log("callback", token=redact(token), hosts=[f"{ns}/{name}" for _kind, ns, name in found.keys])
            self.metrics.callbacks.labels("woken").inc()
        self._enqueue("Callback", found, initial=False)
        return bool(found.keys)

    def on_secret(self, old, new, initial=False) -> None:
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

    def resync(self) -> None:
        """Every --resync-period until the stop: every key served again (drift, missed events), and the Secret
        watches planned again from the stores."""
        while not self.stop.wait(self.settings.resync_period):
            keys = [mapper.claim_key(claim) for claim in self.stores["HostClaim"].list()]
            keys += [mapper.key_of(mapper.HOST, host) for host in self.stores["BareMetalHost"].list()]
            keys += [mapper.key_of(mapper.CLAIMSET, claim_set) for claim_set in self.stores["HostClaimSet"].list()]
            keys += [mapper.key_of(mapper.CAPI_MACHINE, m) for m in self.stores["MetalClaimMachine"].list()]
            keys += [mapper.key_of(mapper.CAPI_CLUSTER, c) for c in self.stores["MetalClaimCluster"].list()]
            # All at once: a batch is cut after a quiet period of a few milliseconds, which this thread's scheduling
            # must not decide.
            self.queue.add_all([key for key in keys if self.serves(key)], RESYNC)
            # Catalogs are not watched (only the claim side writes them): the resync redoes any deleted by hand.
            policies = self.stores["HostDeployPolicy"].list()
            self._enqueue_catalogs(mapper.Keys(mapper.catalog_keys(policies, self._namespace_labels())), True)
            for tenant in self.stores["Tenant"].list():  # drift: an object of the tenant's edited by hand
                key = mapper.key_of(mapper.TENANT, tenant)
                if self.serves(key):
                    self.queue.add(key, RESYNC)
            self.sync_secret_watches()
            self.metrics.resyncs.inc()

    # -- the Secret watches ----------------------------------------------------------------------

    def sync_secret_watches(self, namespace: str | None = None) -> None:
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
                self._log("secret_watch_stopped", namespace=name)
            for name in sorted(start):
                # A core kind: no discovery request per namespace (one fewer call, and none to fail during an outage).
                reflector = self._new_reflector(
                    "v1",
                    "Secret",
                    self.on_secret,
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

    def stop_secret_watches(self) -> None:
        with self._secret_lock:
            for reflector in self.secret_reflectors.values():
                reflector.stop.set()
