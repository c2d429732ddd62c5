"""Prometheus metrics: client-go / controller-runtime names where they fit, metalclaim_* for ours."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

NAME = "metalclaim"  # the `name` / `controller` label value, as controller-runtime labels its controllers
_RUN_BUCKETS = (0.5, 1, 1.5, 2, 3, 5, 8, 13, 21, 34, 60, 120, 300)
_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.depth = Gauge("workqueue_depth", "Current depth of the work queue.", ["name"], registry=r).labels(NAME)
        self.adds = Counter("workqueue_adds_total", "Adds handled by the work queue.", ["name"], registry=r).labels(
            NAME
        )
        self.queue_seconds = Histogram(
            "workqueue_queue_duration_seconds",
            "How long a key stays in the work queue before a batch takes it.",
            ["name"],
            registry=r,
        ).labels(NAME)
        self.reconciles = Counter(
            "controller_runtime_reconcile_total",
            "Reconciliations per key by outcome (done, retry, requeue, wait).",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_seconds = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of the run that reconciled a batch.",
            ["controller"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(
            "leader_election_master_status", "1 while this instance holds the Lease.", ["name"], registry=r
        ).labels(NAME)
        self.runs = Counter(
            "metalclaim_runs_total", "Playbook runs by playbook and status.", ["playbook", "status"], registry=r
        )
        self.run_seconds = Histogram(
            "metalclaim_run_duration_seconds", "Playbook run wall time.", ["playbook"], buckets=_RUN_BUCKETS, registry=r
        )
        self.batch_size = Histogram(
            "metalclaim_batch_size", "Keys per run.", ["playbook"], buckets=_BATCH_BUCKETS, registry=r
        )
        self.association = Histogram(
            "metalclaim_claim_association_seconds",
            "From a claim's creation (as this controller saw it) to Association=True.",
            buckets=(0.25, 0.5, 1, 1.5, 2, 3, 5, 8, 13, 21, 34, 60),
            registry=r,
        )
        self.watch_restarts = Counter(
            "metalclaim_watch_restarts_total", "Watches restarted, by kind and reason.", ["kind", "reason"], registry=r
        )
        self.self_caused = Counter(
            "metalclaim_events_dropped_total",
            "Events that changed nothing the controller reads (its own writes, status-only updates), by kind.",
            ["kind"],
            registry=r,
        )
        self.callbacks = Counter(
            "metalclaim_callbacks_total",
            "Image writers' callbacks seen in the media directory: woken (a host's operation holds the token: its key "
            "queued) or unknown (none did when first seen).",
            ["result"],
            registry=r,
        )
        self.resyncs = Counter("metalclaim_resyncs_total", "Periodic resyncs.", registry=r)
        self.standby_batches = Counter(
            "metalclaim_standby_batches_total",
            "Claim batches by path: handed to a standby run, or run cold (no standby ready).",
            ["path"],
            registry=r,
        )
        self.secret_watches = Gauge(
            "metalclaim_secret_watches",
            "Namespaces whose Secrets' metadata is watched: those holding a claim this controller serves.",
            registry=r,
        )
        self.secrets_cached = Gauge(
            "metalclaim_secrets_cached", "Secrets (their metadata) held by the Secret watches, together.", registry=r
        )
        self.standby_ready = Gauge(
            "metalclaim_standby_ready", "Standby runs started and waiting for a batch.", registry=r
        )
        self.metrics_reviews = Counter(
            "metalclaim_metrics_reviews_total",
            "TokenReviews and SubjectAccessReviews made for the requests to /metrics (the answers kept aside).",
            ["review"],
            registry=r,
        )

    def added(self, _key) -> None:
        self.adds.inc()

    def waited(self, _key, seconds: float) -> None:
        self.queue_seconds.observe(seconds)

    def reviewed(self, review: str) -> None:
        self.metrics_reviews.labels(review).inc()
