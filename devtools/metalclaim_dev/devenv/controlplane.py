"""etcd + kube-apiserver + kube-controller-manager on loopback, for tests and demos."""

from __future__ import annotations

import json
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .pki import CertificateAuthority, KeyPair, service_account_keys
from .processes import DevenvError, free_port, http_ok, spawn, stop_process_group, wait_until

BUILD_SCRIPT = Path(__file__).with_name("build-controlplane.sh")

# Who is who in the devenv: user name, groups. Tenants and infra get their rights
# from RoleBindings; the controller's two sides (claims, provisioner) from the deploy
# manifests' ClusterRoles and the per-namespace RoleBindings of env.tenancy_objects.
IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("admin", ("system:masters",)),
    "infra": ("infra", ("metalclaim:infra",)),
    "tenant-a": ("tenant-a", ("metalclaim:tenants",)),
    "tenant-b": ("tenant-b", ("metalclaim:tenants",)),
    "controller": ("metalclaim-controller", ("metalclaim:controllers",)),
    "provisioner": ("metalclaim-provisioner", ("metalclaim:controllers",)),
    # Cluster API's core manager (capi.py): only its own ClusterRole, bound by capi.rbac, gives it rights.
    "capi": ("capi-manager", ("metalclaim:capi",)),
}

KCM_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "clusterrole-aggregation-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "resourcequota-controller",
    "root-ca-certificate-publisher-controller",
)


@dataclass(frozen=True)
class Binaries:
    kubernetes_version: str
    etcd_version: str
    kube_bin: Path
    etcd: Path

    @property
    def kube_apiserver(self) -> Path:
        return self.kube_bin / "kube-apiserver"

    @property
    def kube_controller_manager(self) -> Path:
        return self.kube_bin / "kube-controller-manager"

    @property
    def kubectl(self) -> Path:
        return self.kube_bin / "kubectl"


def build_binaries() -> Binaries:
    """Build (or reuse from the cache) the control-plane binaries; progress goes to stderr."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise DevenvError(f"building the control plane failed (exit {result.returncode}); see the log above")
    info = json.loads(result.stdout.strip().splitlines()[-1])
    return Binaries(info["kubernetes"], info["etcd"], Path(info["kube_bin"]), Path(info["etcd_bin"]))


def write_kubeconfig(path: Path, server: str, ca: Path, user: str, pair: KeyPair) -> None:
    # JSON is valid YAML; kubectl, the Python client and kubernetes.core all read it.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "metalclaim-devenv", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)}}],
        "contexts": [{"name": user, "context": {"cluster": "metalclaim-devenv", "user": user}}],
        "current-context": user,
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


@dataclass
class ControlPlane:
    """Starts the three processes; returns what the state file records."""

    binaries: Binaries
    directory: Path

    def start(self) -> dict:
        pki_dir = self.directory / "pki"
        logs = self.directory / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(pki_dir)
        serving = ca.issue(
            "apiserver",
            "kube-apiserver",
            server_names=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        )
        sa = service_account_keys(pki_dir)
        ports = {name: free_port() for name in ("etcd_client", "etcd_peer", "apiserver", "kcm")}
        server = f"https://127.0.0.1:{ports['apiserver']}"
        pids: dict[str, int] = {}
        try:
            pids["etcd"] = self._start_etcd(ports, logs / "etcd.log")
            pids["kube-apiserver"] = self._start_apiserver(ports, ca, serving, sa, logs / "kube-apiserver.log")
            kubeconfigs = self._write_kubeconfigs(ca, server)
            pids["kube-controller-manager"] = self._start_controller_manager(
                ports, ca, sa, logs / "kube-controller-manager.log"
            )
        except BaseException:
            for pid in reversed(list(pids.values())):
                stop_process_group(pid)
            raise
        return {
            "apiserver": server,
            "etcd": f"http://127.0.0.1:{ports['etcd_client']}",
            "ca": str(ca.cert_path),
            "kubeconfigs": kubeconfigs,
            "pids": pids,
            "logs": str(logs),
        }

    def _start_etcd(self, ports: dict[str, int], log_file: Path) -> int:
        client = f"http://127.0.0.1:{ports['etcd_client']}"
        peer = f"http://127.0.0.1:{ports['etcd_peer']}"
        pid = spawn(
            [
                str(self.binaries.etcd),
                "--name=devenv",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=devenv={peer}",
                # A disposable test store: durability is not worth the fsync latency.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            log_file,
        )
        wait_until(lambda: http_ok(f"{client}/health"), "etcd", 30, pid, log_file)
        return pid

    def _start_apiserver(self, ports, ca: CertificateAuthority, serving: KeyPair, sa: KeyPair, log_file: Path) -> int:
        pid = spawn(
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{ports['etcd_client']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports['apiserver']}",
                f"--cert-dir={self.directory / 'pki'}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.cert_path}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,ResourceQuota,LimitRanger",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                # The kubernetes Service's endpoints may not point at loopback; nothing here needs them.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=false",
                "--v=1",
            ],
            log_file,
        )
        admin = ca.issue("admin", *IDENTITIES["admin"])
        _wait_apiserver_ready(f"https://127.0.0.1:{ports['apiserver']}", ca.cert_path, admin, pid, log_file)
        return pid

    def _write_kubeconfigs(self, ca: CertificateAuthority, server: str) -> dict[str, str]:
        kube_dir = self.directory / "kubeconfig"
        kube_dir.mkdir(exist_ok=True)
        paths: dict[str, str] = {}
        for identity, (user, groups) in IDENTITIES.items():
            pair = ca.issue(identity, user, groups)
            path = kube_dir / f"{identity}.kubeconfig"
            write_kubeconfig(path, server, ca.cert_path, user, pair)
            paths[identity] = str(path)
        kcm = ca.issue("kube-controller-manager", "system:kube-controller-manager")
        write_kubeconfig(
            kube_dir / "kube-controller-manager.kubeconfig", server, ca.cert_path, "system:kube-controller-manager", kcm
        )
        return paths

    def _start_controller_manager(self, ports, ca: CertificateAuthority, sa: KeyPair, log_file: Path) -> int:
        kubeconfig = self.directory / "kubeconfig" / "kube-controller-manager.kubeconfig"
        pid = spawn(
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kcm']}",
                f"--cert-dir={self.directory / 'pki' / 'kcm'}",
                f"--controllers={','.join(KCM_CONTROLLERS)}",
                # Each controller acts as its own service account, as in a real cluster.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={ca.cert_path}",
                "--leader-elect=false",
                # Sync quotas and collect garbage quickly: tests wait on them.
                "--resource-quota-sync-period=10s",
                "--v=1",
            ],
            log_file,
        )
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # self-signed serving cert; only /healthz is read
        wait_until(
            lambda: http_ok(f"https://127.0.0.1:{ports['kcm']}/healthz", context),
            "kube-controller-manager",
            60,
            pid,
            log_file,
        )
        return pid


def _wait_apiserver_ready(server: str, ca: Path, admin: KeyPair, pid: int, log_file: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(admin.cert), str(admin.key))
    wait_until(lambda: http_ok(f"{server}/readyz", context), "kube-apiserver", 120, pid, log_file)


def stop_apiserver(state: dict, grace: float = 5.0) -> list[str]:
    """Stop a running devenv's kube-apiserver (etcd and the rest keep running, as in a control-plane upgrade).

    SIGTERM, then SIGKILL after `grace` seconds: it closes its watches and stops listening within
    milliseconds of SIGTERM, then lingers ~15 s in internal teardown that no client can tell apart.
    Returns the command line it ran with, read from /proc, for start_apiserver: the same flags, ports,
    certificates and etcd, so every kubeconfig and client stays valid across the restart.
    """
    pid = state["pids"]["kube-apiserver"]
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError as error:
        raise DevenvError(f"kube-apiserver (pid {pid}) is not running: {error}") from error
    stop_process_group(pid, timeout=grace)
    return [arg.decode() for arg in argv]


def start_apiserver(state: dict, argv: list[str]) -> int:
    """Start kube-apiserver with `argv` (from stop_apiserver), wait for its /readyz as admin, record its pid
    in state["pids"]; the caller saves the state (Devenv.save) so `down` and later users see the new pid."""
    log_file = Path(state["logs"]) / "kube-apiserver.log"
    pid = spawn(argv, log_file)
    admin = json.loads(Path(state["kubeconfigs"]["admin"]).read_text())["users"][0]["user"]
    pair = KeyPair(Path(admin["client-certificate"]), Path(admin["client-key"]))
    try:
        _wait_apiserver_ready(state["apiserver"], Path(state["ca"]), pair, pid, log_file)
    finally:
        state["pids"]["kube-apiserver"] = pid  # recorded even if not ready, so `down` stops it
    return pid


def restart_controller_manager(state: dict, controllers: tuple[str, ...]) -> int:
    """Restart the devenv's kube-controller-manager running `controllers` (its other flags kept); returns the new pid.

    The devenv's node (metalclaim_dev.devenv.node) needs the controllers that run pods: deployments, replica sets,
    node lifecycle (the not-ready taint lifted, pods of a lost node evicted)."""
    pid = state["pids"]["kube-controller-manager"]
    try:
        argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")]
    except OSError as error:
        raise DevenvError(f"kube-controller-manager (pid {pid}) is not running: {error}") from error
    argv = [a for a in argv if not a.startswith("--controllers=")] + [f"--controllers={','.join(controllers)}"]
    port = next(a.split("=", 1)[1] for a in argv if a.startswith("--secure-port="))
    stop_process_group(pid)
    log_file = Path(state["logs"]) / "kube-controller-manager.log"
    pid = spawn(argv, log_file)
    state["pids"]["kube-controller-manager"] = pid
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # self-signed serving cert; only /healthz is read
    wait_until(
        lambda: http_ok(f"https://127.0.0.1:{port}/healthz", context), "kube-controller-manager", 60, pid, log_file
    )
    return pid
