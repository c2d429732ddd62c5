"""The manager: one controller's life cycle, as controller-runtime's manager runs its controllers.

It owns what the two halves share (the settings, the stores' reflectors, the work queue, the metrics, one stop
flag) and their threads: one reflector per kind, feeding the event handlers (handlers.py: store events -> mapper
-> queue); the dispatcher threads, one per runner slot (dispatch.py: batches -> runs -> outcomes -> queue); the
resync timer; the Lease elector; and the health the HTTP server reports. One stop flag ends them all. Runs
reconcile from current state: a batch is a list of keys, and the playbooks read everything they need from the API
server themselves.
"""

from __future__ import annotations

import json
import logging
import threading

from ansible_collections.metalclaim.hostclaim.plugins.module_utils.controller_contract import (
    API_VERSION,
    CAPI_API_VERSION,
    CAPI_CLUSTER_KIND,
    CAPI_MACHINE_KIND,
    CAPI_PROVIDER_API_VERSION,
    media_problem,
)

from . import mapper, metrics
from .callbacks import CallbackWatch
from .dispatch import Dispatcher
from .handlers import EventHandlers
from .leader import LeaderElector
from .reflector import Reflector, Store
from .scope import CLAIMS, PROVISIONER, TENANTS
from .settings import Settings
from .workqueue import WorkQueue

__all__ = ["Controller", "Settings", "log"]

TENANCY_API_VERSION = "tenancy.metalclaim.io/v1alpha1"
LOG = logging.getLogger("metalclaim.controller")


def log(event: str, **fields) -> None:
    """One JSON line per event: never Secret data, BMC addresses or credentials."""
    LOG.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))


def media_warning(settings: Settings) -> dict | None:
    """What a provisioner side's start warns of: deploy media no BMC can fetch (the hosts' deploys and cleanings fail
    at once, saying so: reach.py), as the fields of its log line; None when there is nothing to say."""
    if PROVISIONER not in settings.scope.sides:
        return None
    problem = media_problem(settings.media_url, settings.deploy_iso_url)
    return {"level": "WARNING", "problem": problem} if problem else None


class Controller:
    def __init__(self, settings: Settings, api_client, registry=None):
        self.settings = settings
        self.api_client = api_client
        self.stop = threading.Event()
        self.metrics = metrics.Metrics(registry)
        self.queue = WorkQueue(on_add=self.metrics.added, on_get=self.metrics.waited)
        self.handlers = EventHandlers(settings, self.queue, self.metrics, self.stop, self._reflector, log)
        self.stores = self.handlers.stores
        self.dispatcher = Dispatcher(settings, self.queue, self.metrics, self.stop, self._leading, log)
        self.reflectors: list[Reflector] = []
        self.callback_watch: CallbackWatch | None = None  # the provisioner side's, with a media directory
        self.leader: LeaderElector | None = None
        self._leader_thread: threading.Thread | None = None
        self._release_lease = threading.Event()  # set once no run is in flight: only then may another leader start

    def synced(self) -> bool:
        # Not before start(): no watch yet is not every watch synced (the readiness probe asks from the first moment).
        return bool(self.reflectors) and all(r.synced.is_set() for r in self.reflectors)

    def alive(self) -> bool:
        threads = [*self.reflectors, *list(self.handlers.secret_reflectors.values()), *self.dispatcher.threads]
        threads += [self.callback_watch] if self.callback_watch is not None else []
        return (bool(self.dispatcher.threads) and all(t.is_alive() for t in threads)) or self.stop.is_set()

    def _leading(self) -> bool:
        return self.leader is None or self.leader.is_leader

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

    def _watches(self) -> list[Reflector]:
        """One reflector per kind (and infrastructure namespace) the sides served need, each with its handler."""
        settings, sides, on = self.settings, self.settings.scope.sides, self.handlers
        infra = settings.infra_namespaces or (None,)
        reflectors = []
        # Hosts and policies concern baremetal claims only: a claims side serving remote claims alone needs no
        # right on them.
        baremetal = CLAIMS in sides and mapper.BAREMETAL_KIND in settings.kinds
        if baremetal or PROVISIONER in sides:
            reflectors += [self._reflector(API_VERSION, "BareMetalHost", on.on_host, ns) for ns in infra]
        if TENANTS in sides:
            reflectors.append(self._reflector(TENANCY_API_VERSION, "Tenant", on.on_tenant))
            if CLAIMS not in sides:  # claim events for tenant hooks (the claims side's reflector serves both)
                reflectors.append(self._reflector(API_VERSION, "HostClaim", on.on_claim))
        if PROVISIONER in sides:
            reflectors.append(
                self._reflector("v1", "Namespace", on.on_infra_namespace, store=self.handlers.infra_namespaces)
            )
        if CLAIMS in sides:
            reflectors += [
                self._reflector(API_VERSION, "HostClaim", on.on_claim),
                *([self._reflector(API_VERSION, "HostClaimSet", on.on_claimset)] if baremetal else []),
                *(
                    self._reflector(API_VERSION, "HostDeployPolicy", on.on_policy, ns)
                    for ns in (infra if baremetal else ())
                ),
                self._reflector("v1", "Namespace", on.on_namespace, label_selector=settings.namespace_selector or None),
            ]
            if baremetal and settings.cluster_api:
                reflectors += [
                    self._reflector(CAPI_PROVIDER_API_VERSION, CAPI_MACHINE_KIND, on.on_metal_machine),
                    self._reflector(CAPI_PROVIDER_API_VERSION, CAPI_CLUSTER_KIND, on.on_metal_cluster),
                    self._reflector(CAPI_API_VERSION, "Machine", on.on_capi_machine),
                    self._reflector(CAPI_API_VERSION, "Cluster", on.on_capi_cluster),
                    # The failure domains a MetalClaimCluster shows are its namespace's catalog's (our own writes).
                    self._reflector(API_VERSION, "HostCatalog", on.on_catalog_for_capi),
                ]
        return reflectors

    def start(self) -> None:
        settings = self.settings
        self.reflectors = self._watches()
        self.dispatcher.start()
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
        self.dispatcher.start_threads()
        threading.Thread(target=self.handlers.resync, name="resync", daemon=True).start()
        if self.handlers.watches_callbacks(settings):
            # The image writers' callbacks wake their hosts (the provision role is told so: groups.py).
            self.callback_watch = CallbackWatch(
                settings.media_dir,
                self.handlers.on_callback,
                self.stop,
                log,
                on_unknown=self.metrics.callbacks.labels("unknown").inc,
            )
            self.callback_watch.start()
        log(
            "started",
            controllers=list(settings.scope.sides),
            kinds=list(settings.kinds),
            remote_allowed_namespaces=list(settings.remote_allowed_namespaces),
            shard=f"{settings.scope.shard[0]}/{settings.scope.shard[1]}",
            namespace_selector=settings.namespace_selector,
            infra_namespaces=list(settings.infra_namespaces),
            leader_elect=settings.leader_elect,
            runner_slots=settings.runner_slots,
            remote_slot=self.dispatcher.remote_slot is not None,
            standby=bool(self.dispatcher.standbys),
        )
        warning = media_warning(settings)
        if warning is not None:
            log("media_unreachable", **warning)

    def _lost_leadership(self) -> None:
        self.metrics.leader.set(0)
        if not self.stop.is_set():
            log("leadership_lost")
            self.shutdown()

    def shutdown(self) -> None:
        """Stop: the run in progress finishes or is cancelled within the grace period; then the Lease is released."""
        self.stop.set()
        self.handlers.stop_secret_watches()
        self.queue.shutdown()
        self.dispatcher.close()
        self._release_lease.set()
        if self.leader is not None and self._leader_thread is not threading.current_thread():
            self._leader_thread.join(5)
        log("stopped")
