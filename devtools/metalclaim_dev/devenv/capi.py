"""Cluster API's real core manager (sigs.k8s.io/cluster-api/core) beside a running devenv, on loopback.

`start` does by hand what upstream's core/config/default kustomization does in a cluster: the CRDs, with conversion
by webhook; the Mutating/ValidatingWebhookConfigurations, pointed at the manager by URL (no Service or
cert-manager here: a serving certificate from the devenv's CA, its caBundle injected); the manager's ClusterRole
(`capi-manager-role`, labelled aggregate-to-manager) aggregated into `capi-aggregated-manager-role`, which is what
the manager's identity is bound to. Binaries and manifests come from build-controlplane.sh --capi.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import fcntl
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from .controlplane import BUILD_SCRIPT, IDENTITIES, write_kubeconfig
from .env import Devenv, progress
from .pki import CertificateAuthority
from .processes import DevenvError, alive, free_port, http_ok, log_tail, spawn, stop_process_group, wait_until

IDENTITY = "capi"
USER = IDENTITIES[IDENTITY][0]
PREFIX = "capi-"  # upstream's namePrefix (core/config/default/kustomization.yaml)
PROVIDER_LABEL = {"cluster.x-k8s.io/provider": "cluster-api"}
AGGREGATE_LABEL = "cluster.x-k8s.io/aggregate-to-manager"
MANAGER_ROLE = PREFIX + "manager-role"
AGGREGATED_ROLE = PREFIX + "aggregated-manager-role"
ROLE_BINDING = PREFIX + "manager-rolebinding"
PROCESS = "cluster-api"
# The gates upstream's manager Deployment sets (core/config/manager/manager.yaml, its defaults).
FEATURE_GATES = (
    "MachinePool=true,ClusterTopology=false,RuntimeSDK=false,MachineSetPreflightChecks=true,"
    "MachineWaitForVolumeDetachConsiderVolumeAttachments=true,PriorityQueue=true,ReconcilerRateLimiting=true,"
    "InPlaceUpdates=false,MachineTaintPropagation=false"
)


@dataclass(frozen=True)
class Build:
    version: str
    manager: Path
    config: Path  # crd/, webhook/manifests.yaml, rbac/ copied from the module


def build() -> Build:
    """Build (or reuse from the cache) the core manager; progress goes to stderr."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT), "--capi"], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise DevenvError(f"building Cluster API failed (exit {result.returncode}); see the log above")
    info = json.loads(result.stdout.strip().splitlines()[-1])
    return Build(info["cluster_api"], Path(info["capi_manager"]), Path(info["capi_dir"]) / "config")


def _load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _labelled(obj: dict, extra: dict[str, str] | None = None) -> dict:
    obj.setdefault("metadata", {}).setdefault("labels", {}).update({**PROVIDER_LABEL, **(extra or {})})
    return obj


def crds(config: Path, url: str, ca_bundle: str) -> list[dict]:
    """The CRD bases, each converting by webhook at `url`/convert, as upstream's crd/patches/webhook_in_*.yaml do
    (every one of them serves several versions: v1beta1 and v1beta2, some v1alpha1)."""
    objects = []
    for path in sorted((config / "crd").glob("*.yaml")):
        for crd in _load_all(path):
            if len(crd["spec"]["versions"]) > 1:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1"],
                        "clientConfig": {"url": f"{url}/convert", "caBundle": ca_bundle},
                    },
                }
            objects.append(_labelled(crd))
    return objects


def webhook_configurations(config: Path, url: str, ca_bundle: str) -> list[dict]:
    """The module's webhook configurations, named as upstream's kustomize names them, each webhook's Service
    clientConfig replaced by a URL of the same path on the manager's loopback port."""
    objects = []
    for doc in _load_all(config / "webhook" / "manifests.yaml"):
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
        objects.append(_labelled(doc))
    return objects


def rbac(config: Path) -> list[dict]:
    """The manager's rights as core/config/default lays them out: role.yaml's ClusterRole, prefixed and labelled to
    aggregate into aggregated_role.yaml's (manager_role_aggregation_patch.yaml), which the binding names."""
    role = next(d for d in _load_all(config / "rbac" / "role.yaml") if d["kind"] == "ClusterRole")
    role["metadata"]["name"] = MANAGER_ROLE
    aggregated = next(d for d in _load_all(config / "rbac" / "aggregated_role.yaml") if d["kind"] == "ClusterRole")
    aggregated["metadata"]["name"] = AGGREGATED_ROLE
    return [
        _labelled(role, {AGGREGATE_LABEL: "true"}),
        _labelled(aggregated),
        _labelled(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": ROLE_BINDING},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGGREGATED_ROLE},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
            }
        ),
    ]


@dataclass(frozen=True)
class ClusterAPI:
    """A running core manager, as recorded in the devenv state (state["cluster_api"])."""

    version: str
    pid: int
    log: Path
    webhook_url: str
    health_url: str
    metrics_url: str
    kubeconfig: Path

    @classmethod
    def from_state(cls, record: dict) -> ClusterAPI:
        return cls(
            record["version"],
            record["pid"],
            Path(record["log"]),
            record["webhook_url"],
            record["health_url"],
            record["metrics_url"],
            Path(record["kubeconfig"]),
        )

    def alive(self) -> bool:
        return alive(self.pid)

    def ready(self) -> bool:
        return self.alive() and http_ok(f"{self.health_url}/healthz") and http_ok(f"{self.health_url}/readyz")

    def wait_ready(self, timeout: float = 120) -> None:
        wait_until(self.ready, "cluster-api manager", timeout, self.pid, self.log)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)


def _kubeconfig(env: Devenv) -> Path:
    """The manager's own identity's kubeconfig: a devenv started before IDENTITIES had it gets one issued now."""
    if IDENTITY in env.state["kubeconfigs"]:
        return Path(env.kubeconfig(IDENTITY))
    ca = CertificateAuthority(Path(env.state["ca"]).parent)
    pair = ca.issue(IDENTITY, *IDENTITIES[IDENTITY])
    path = env.directory / "kubeconfig" / f"{IDENTITY}.kubeconfig"
    write_kubeconfig(path, env.state["apiserver"], ca.cert_path, USER, pair)
    env.state["kubeconfigs"][IDENTITY] = str(path)
    return path


@contextlib.contextmanager
def _locked(env: Devenv):
    # Workers sharing one devenv (METALCLAIM_DEVENV) start the manager once: the first under the lock starts it,
    # the rest find it in the state file it saved.
    with open(env.directory / "cluster-api.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            fresh = Devenv.load(env.directory)
            if fresh is not None:
                env.state.update(fresh.state)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def start(env: Devenv, feature_gates: str = FEATURE_GATES, timeout: float = 180) -> ClusterAPI:
    """Start the core manager against `env` (idempotent: a running one is returned); stopped by `env.down()`."""
    with _locked(env):
        record = env.state.get("cluster_api")
        if record is not None:
            running = ClusterAPI.from_state(record)
            if running.alive():
                running.wait_ready(timeout)
                return running
            progress(f"cluster-api manager (pid {running.pid}) is gone: starting it again")
        return _start(env, feature_gates, timeout)


def _start(env: Devenv, feature_gates: str, timeout: float) -> ClusterAPI:
    started = time.monotonic()
    binaries = build()
    directory = env.directory / "cluster-api"
    directory.mkdir(exist_ok=True)
    ca = CertificateAuthority(Path(env.state["ca"]).parent)
    serving = ca.issue("cluster-api-webhook", "cluster-api-webhook", server_names=("127.0.0.1",))
    ca_bundle = base64.b64encode(ca.cert_path.read_bytes()).decode()
    ports = {name: free_port() for name in ("webhook", "health", "diagnostics")}
    webhook_url = f"https://127.0.0.1:{ports['webhook']}"
    kubeconfig = _kubeconfig(env)

    progress(f"installing Cluster API {binaries.version} CRDs, webhook configurations and RBAC")
    # Server-side, forced: a restart moves the webhook port, and the CRD migrator owns fields of the CRDs it patched.
    env.kubectl(
        "admin",
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=metalclaim-devenv",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": crds(binaries.config, webhook_url, ca_bundle)
                + rbac(binaries.config)
                + webhook_configurations(binaries.config, webhook_url, ca_bundle),
            }
        ),
    )
    env.kubectl(
        "admin",
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        "-l",
        ",".join(f"{k}={v}" for k, v in PROVIDER_LABEL.items()),
    )

    log_file = Path(env.state["logs"]) / "cluster-api-manager.log"
    progress(f"starting the cluster-api manager {binaries.version} as {USER}; log {log_file}")
    pid = spawn(
        [
            str(binaries.manager),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            # The webhook server has no address flag: it listens on every interface (controller-runtime's default).
            f"--webhook-port={ports['webhook']}",
            f"--webhook-cert-dir={serving.cert.parent}",
            f"--webhook-cert-name={serving.cert.name}",
            f"--webhook-key-name={serving.key.name}",
            f"--health-addr=127.0.0.1:{ports['health']}",
            f"--diagnostics-address=127.0.0.1:{ports['diagnostics']}",
            "--insecure-diagnostics=true",
            f"--feature-gates={feature_gates}",
            "--v=2",
        ],
        log_file,
        cwd=directory,
    )
    manager = ClusterAPI(
        binaries.version,
        pid,
        log_file,
        webhook_url,
        f"http://127.0.0.1:{ports['health']}",
        f"http://127.0.0.1:{ports['diagnostics']}/metrics",
        kubeconfig,
    )
    # Recorded before it is ready, so that `down` stops it whatever happens next.
    env.state["pids"][PROCESS] = pid
    env.state["cluster_api"] = {
        "version": manager.version,
        "pid": pid,
        "log": str(log_file),
        "webhook_url": webhook_url,
        "health_url": manager.health_url,
        "metrics_url": manager.metrics_url,
        "kubeconfig": str(kubeconfig),
    }
    env.save()
    try:
        manager.wait_ready(timeout)
    except BaseException:
        stop_process_group(pid)
        raise
    env.state["cluster_api"]["startup_seconds"] = round(time.monotonic() - started, 1)
    env.save()
    progress(f"cluster-api manager ready in {env.state['cluster_api']['startup_seconds']}s")
    return manager


def stop(env: Devenv) -> None:
    """Stop the manager (its CRDs and webhook configurations stay: a later `start` points them at the new one)."""
    with _locked(env):
        pid = env.state["pids"].pop(PROCESS, None)
        env.state.pop("cluster_api", None)
        if pid is not None:
            stop_process_group(pid)
        env.save()
