"""`up --node`: a node beside the devenv's control plane, so the controller runs as pods from its image.

kubelet and kube-scheduler are built from Go modules as the control plane is (build-controlplane.sh --node, the
same cache); containerd and runc come from Debian (bindep.txt's `node` profile). Root only, one node per machine
(the kubelet's cgroups /kubepods and its /var/lib/kubelet are the machine's). What it took on this machine kind
(a hybrid cgroup v1 kernel, root without CAP_SYS_RESOURCE, no registry):

- runc, not crun (crun refuses these hybrid cgroups);
- containerd's CRI `restrict_oom_score_adj = true`: root cannot lower oom_score_adj here, and runc's init fails
  ("can't get final child's PID from pipe") when asked to; no hugetlb controller is mounted, so it stays off;
- kubelet `failCgroupV1: false` and the cgroupfs driver (no systemd);
- no pause image can be pulled: a tiny static pause program (Go) in an image built from scratch, imported;
- the controller-manager also runs the deployment, replicaset and node-lifecycle controllers;
- nodes get the `system:node` ClusterRole through their group (there is no Node authorizer);
- no kube-proxy and no pod network (the apiserver listens on loopback): pods use hostNetwork and explicit
  KUBERNETES_SERVICE_HOST/PORT. The CNI configuration is a placeholder so that the runtime reports its network
  ready; it is never used (hostNetwork sandboxes skip CNI).

`down` (before the control plane's) kills the pods' processes, stops the kubelet, the shims and containerd,
unmounts what they mounted, removes the kubelet's cgroups, /var/lib/kubelet and /var/log/pods.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from .controlplane import BUILD_SCRIPT, KCM_CONTROLLERS, restart_controller_manager, write_kubeconfig
from .env import Devenv, progress
from .pki import CertificateAuthority
from .processes import DevenvError, alive, free_port, spawn, stop_process_group, wait_until

NODE_NAME = "metalclaim-node"
NODE_CONTROLLERS = (
    *KCM_CONTROLLERS,
    "deployment-controller",
    "replicaset-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
)
PAUSE_IMAGE = "localhost/metalclaim-pause:1"
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI
# Where the kubelet writes whatever its --root-dir: removed by `down`.
KUBELET_DIRS = (Path("/var/lib/kubelet"), Path("/var/log/pods"), Path("/var/log/containers"))
# Where containerd's shims put their sockets whatever its state dir (empty once they are gone).
SHIM_SOCKET_DIRS = (Path("/run/containerd/s"), Path("/run/containerd"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"
NODE_BINARIES = ("containerd", "containerd-shim-runc-v2", "runc", "ctr")

PAUSE_SOURCE = """package main

import (
	"os"
	"os/signal"
	"syscall"
)

// The pod sandbox's process: it holds the pod's namespaces and waits to be stopped.
func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
"""


def cache_dir() -> Path:
    from .images import cache_dir as images_cache

    return images_cache()


def check_can_run() -> None:
    """Raise DevenvError saying what is missing for a node on this machine."""
    if os.geteuid() != 0:
        raise DevenvError("a node needs root (containerd, kubelet)")
    missing = [tool for tool in NODE_BINARIES if shutil.which(tool) is None]
    if missing:
        raise DevenvError(f"missing {', '.join(missing)}: `make system-packages PROFILES=node` (bindep.txt)")
    if not (CGROUP_ROOT / "memory").is_dir() and not (CGROUP_ROOT / "cgroup.controllers").exists():
        raise DevenvError(f"no cgroup hierarchy under {CGROUP_ROOT}")


def build_node_binaries() -> Path:
    result = subprocess.run(["bash", str(BUILD_SCRIPT), "--node"], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise DevenvError(f"building kubelet and kube-scheduler failed (exit {result.returncode}); see the log above")
    return Path(json.loads(result.stdout.strip().splitlines()[-1])["node_bin"])


def pause_image_archive() -> Path:
    """An OCI archive of PAUSE_IMAGE: a static Go program in an image from scratch; cached by its inputs."""
    go_version = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256((PAUSE_SOURCE + go_version + PAUSE_IMAGE).encode()).hexdigest()[:16]
    archive = cache_dir() / "images" / f"pause-{key}.tar"
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".pause-build.") as work:
        work = Path(work)
        (work / "go.mod").write_text("module metalclaim.local/pause\n\ngo 1.21\n")
        (work / "main.go").write_text(PAUSE_SOURCE)
        result = subprocess.run(
            ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", "pause", "."],
            cwd=work,
            env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise DevenvError(f"building the pause program failed: {result.stderr[-2000:]}")
        oci_archive(work / "pause", work / "image.tar")
        (work / "image.tar").rename(archive)
    return archive


def oci_archive(program: Path, destination: Path) -> None:
    """An OCI image layout (as a tar) holding one layer, `program` as /pause, named PAUSE_IMAGE."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    layer_bytes = io.BytesIO()
    with tarfile.open(fileobj=layer_bytes, mode="w") as layer:
        info = tarfile.TarInfo("pause")
        data = program.read_bytes()
        info.size, info.mode = len(data), 0o755
        layer.addfile(info, io.BytesIO(data))
    layer = blob(layer_bytes.getvalue())
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = blob(
        json.dumps(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Entrypoint": ["/pause"]},
                "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
            }
        ).encode()
    )
    manifest = blob(
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}],
            }
        ).encode()
    )
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **manifest,
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": PAUSE_IMAGE,
                    "org.opencontainers.image.ref.name": PAUSE_IMAGE.rsplit(":", 1)[1],
                },
            }
        ],
    }
    files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": json.dumps(index).encode()}
    files.update({f"blobs/sha256/{digest.split(':')[1]}": data for digest, data in blobs.items()})
    with tarfile.open(destination, "w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))


def containerd_config(root: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"

[grpc]
  address = "{root / "containerd.sock"}"

[ttrpc]
  address = "{root / "containerd.sock.ttrpc"}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # root lacks CAP_SYS_RESOURCE here: never ask runc for a lower oom_score_adj than containerd's own.
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{shutil.which("runc")}"
        Root = "{root / "runc"}"
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{root / "cni" / "bin"}"
    conf_dir = "{root / "cni" / "net.d"}"
"""


# Never used (pods run with hostNetwork): without a network configuration the runtime reports NetworkReady=false
# and the kubelet keeps the node NotReady.
CNI_PLACEHOLDER = {
    "cniVersion": "0.4.0",
    "name": "metalclaim-devenv-none",
    "plugins": [{"type": "bridge", "bridge": "mc-none0", "ipam": {"type": "host-local", "subnet": "10.244.0.0/24"}}],
}


def kubelet_config(directory: Path, ca: Path, ports: dict[str, int]) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This kernel mounts cgroup v1 hierarchies (hybrid): kubelet refuses v1 unless told not to.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{directory / 'containerd' / 'containerd.sock'}",
        "address": "127.0.0.1",
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["kubelet_healthz"],
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        "podLogsDir": str(directory / "kubelet" / "pod-logs"),
        # A shared disk: neither image garbage collection nor eviction for another process's files.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "registerNode": True,
        "maxPods": 30,
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "5s",
        "resolvConf": "/etc/resolv.conf",
    }


def node_objects() -> list[dict]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "metalclaim-devenv-nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
        }
    ]


def up(env: Devenv) -> dict:
    """Start the node (idempotent: a running one is kept); returns and records env.state["node"]."""
    if "node" in env.state and all(alive(env.state["pids"].get(n, 0)) for n in ("containerd", "kubelet")):
        return env.state["node"]
    check_can_run()
    for path in KUBELET_DIRS[:2]:
        if path.exists() and any(path.iterdir()):
            raise DevenvError(
                f"{path} is not empty: another kubelet ran (or runs) on this machine; `down` its devenv, or remove it"
            )
    started = time.monotonic()
    node_bin = build_node_binaries()
    pause = pause_image_archive()
    directory = env.directory
    logs = Path(env.state["logs"])
    root = directory / "containerd"
    for sub in ("root", "state", "runc", "cni/bin", "cni/net.d"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "cni" / "net.d" / "10-placeholder.conflist").write_text(json.dumps(CNI_PLACEHOLDER))
    (root / "config.toml").write_text(containerd_config(root))
    ports = {name: free_port() for name in ("kubelet", "kubelet_healthz", "scheduler")}
    env.state["node"] = {
        "name": NODE_NAME,
        "containerd": str(root / "containerd.sock"),
        "kubelet_dirs": [str(p) for p in KUBELET_DIRS],
    }
    env.save()
    progress("node: kube-controller-manager with the deployment, replicaset and node-lifecycle controllers")
    restart_controller_manager(env.state, NODE_CONTROLLERS)
    env.apply("admin", node_objects())
    env.save()

    ca = CertificateAuthority(directory / "pki")
    kube_dir = directory / "kubeconfig"
    scheduler_kubeconfig = kube_dir / "kube-scheduler.kubeconfig"
    write_kubeconfig(
        scheduler_kubeconfig,
        env.state["apiserver"],
        ca.cert_path,
        "system:kube-scheduler",
        ca.issue("kube-scheduler", "system:kube-scheduler"),
    )
    kubelet_kubeconfig = kube_dir / "kubelet.kubeconfig"
    user = f"system:node:{NODE_NAME}"
    write_kubeconfig(
        kubelet_kubeconfig, env.state["apiserver"], ca.cert_path, user, ca.issue("kubelet", user, ("system:nodes",))
    )

    progress("node: kube-scheduler")
    log_file = logs / "kube-scheduler.log"
    pid = spawn(
        [
            str(node_bin / "kube-scheduler"),
            f"--kubeconfig={scheduler_kubeconfig}",
            f"--authentication-kubeconfig={scheduler_kubeconfig}",
            f"--authorization-kubeconfig={scheduler_kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            "--leader-elect=false",
            "--v=1",
        ],
        log_file,
    )
    env.state["pids"]["kube-scheduler"] = pid
    env.save()

    progress(f"node: containerd ({root})")
    log_file = logs / "containerd.log"
    pid = spawn(["containerd", f"--config={root / 'config.toml'}", "--log-level=warn"], log_file)
    env.state["pids"]["containerd"] = pid
    env.save()
    wait_until(lambda: _ctr(env, "version", check=False).returncode == 0, "containerd", 60, pid, log_file)
    import_image(env, pause)

    progress(f"node: kubelet ({NODE_NAME})")
    config = directory / "kubelet" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(kubelet_config(directory, Path(env.state["ca"]), ports), indent=2))
    log_file = logs / "kubelet.log"
    pid = spawn(
        [
            str(node_bin / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={kubelet_kubeconfig}",
            f"--root-dir={directory / 'kubelet' / 'root'}",
            f"--cert-dir={directory / 'kubelet' / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            "--v=1",
        ],
        log_file,
    )
    env.state["pids"]["kubelet"] = pid
    env.save()
    wait_until(lambda: node_ready(env), f"node {NODE_NAME} Ready", 120, pid, log_file)
    env.state["node"]["startup_seconds"] = round(time.monotonic() - started, 1)
    env.save()
    progress(f"node: {NODE_NAME} Ready in {env.state['node']['startup_seconds']} s")
    return env.state["node"]


def node_ready(env: Devenv) -> bool:
    result = env.kubectl(
        "admin",
        "get",
        "node",
        NODE_NAME,
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}',
        check=False,
    )
    status, _, taints = result.stdout.partition(" ")
    return result.returncode == 0 and status == "True" and "not-ready" not in taints


def _ctr(env: Devenv, *args: str, check: bool = True, stdin=None) -> subprocess.CompletedProcess:
    argv = ["ctr", f"--address={env.state['node']['containerd']}", f"--namespace={NAMESPACE}", *args]
    result = subprocess.run(argv, stdin=stdin, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise DevenvError(f"ctr {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
    return result


def import_image(env: Devenv, archive: Path) -> None:
    """Import an image archive (OCI or docker) into the node's containerd."""
    with archive.open("rb") as handle:
        _ctr(env, "images", "import", "-", stdin=handle)


def load_podman_image(env: Devenv, ref: str, *tags: str) -> None:
    """Copy `ref` from podman's store into the node's containerd (as `ref` and each of `tags`)."""
    with tempfile.TemporaryDirectory(dir=env.directory) as work:
        archive = Path(work) / "image.tar"
        result = subprocess.run(
            ["podman", "save", "--format=docker-archive", "-o", str(archive), ref], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise DevenvError(f"podman save {ref} failed: {result.stderr.strip()}")
        import_image(env, archive)  # named by the archive's RepoTags: `ref`
    for tag in tags:
        _ctr(env, "images", "tag", "--force", ref, tag)


# -- down ---------------------------------------------------------------------------------------------------------


def down(env: Devenv) -> None:
    """Stop the node and remove every trace of it outside the devenv directory (the caller removes that)."""
    if "node" not in env.state:
        return
    directory = env.directory
    pids = env.state.get("pids", {})
    _kill_cgroup_tree()  # the pods' processes, so nothing restarts or holds a mount
    for name in ("kubelet", "kube-scheduler"):
        if name in pids:
            stop_process_group(pids.pop(name), timeout=10)
    _kill_shims(env.state["node"]["containerd"])
    _remove_shim_sockets(env.state["node"]["containerd"], directory / "containerd" / "state")
    if "containerd" in pids:
        stop_process_group(pids.pop("containerd"), timeout=10)
    _kill_cgroup_tree()
    _unmount_under([directory, *KUBELET_DIRS])
    _remove_cgroups()
    for path in KUBELET_DIRS:
        shutil.rmtree(path, ignore_errors=True)
    for path in SHIM_SOCKET_DIRS:  # the shims' sockets (outside containerd's state dir); left only if in use
        with contextlib.suppress(OSError):
            path.rmdir()
    del env.state["node"]
    env.save()


def _hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy that may hold the kubelet's cgroups."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()] if CGROUP_ROOT.is_dir() else []


def _kill_cgroup_tree() -> None:
    for _ in range(20):
        found = False
        for hierarchy in _hierarchies():
            top = hierarchy / KUBEPODS
            if not top.is_dir():
                continue
            # os.walk, not rglob: the kubelet removes pods' cgroups while we walk, and a directory gone
            # mid-walk is skipped (onerror) instead of ending the teardown with FileNotFoundError.
            for directory, _subdirectories, files in os.walk(top, onerror=lambda _error: None):
                if "cgroup.procs" not in files:
                    continue
                with contextlib.suppress(OSError):
                    for line in (Path(directory) / "cgroup.procs").read_text().split():
                        found = True
                        with contextlib.suppress(ProcessLookupError, ValueError):
                            os.kill(int(line), 9)
        if not found:
            return
        time.sleep(0.25)


def _kill_shims(address: str) -> None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address.encode() in argv:
                os.kill(int(entry.name), 9)


def _remove_shim_sockets(address: str, state: Path) -> None:
    """A killed shim leaves its socket: /run/containerd/s/<sha256 of address/namespace/id> (containerd 1.6)."""
    tasks = state / "io.containerd.runtime.v2.task" / NAMESPACE
    for task in tasks.iterdir() if tasks.is_dir() else ():
        name = hashlib.sha256(os.path.join(address, NAMESPACE, task.name).encode()).hexdigest()
        with contextlib.suppress(OSError):
            (SHIM_SOCKET_DIRS[0] / name).unlink()


def _unmount_under(paths: list[Path]) -> None:
    prefixes = [str(p.resolve()) for p in paths]
    mounts = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            point = line.split()[4].encode().decode("unicode_escape")
            if any(point == p or point.startswith(p + "/") for p in prefixes):
                mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


def _remove_cgroups() -> None:
    for hierarchy in _hierarchies():
        top = hierarchy / KUBEPODS
        if not top.is_dir():
            continue
        for path in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                path.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
