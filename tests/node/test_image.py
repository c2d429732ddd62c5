"""The image as the Deployments in config/manager run it: read-only root, user 65532, its writable places
(the `work` and `tmp` emptyDirs) as tmpfs, nothing but the image's own environment (HOME, Ansible's temp
directories, ansible-runner's private data dir, the collections path)."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

from metalclaim_dev.controllerproc import associated
from metalclaim_dev.devenv.processes import free_port
from metalclaim_dev.support import eventually

# config/manager/deployment.yaml's pod, as podman flags. nofile/nproc: podman's defaults are more than root
# may set here (no CAP_SYS_RESOURCE), see hack/build-image.sh.
AS_DEPLOYED = [
    "--network=host",
    "--read-only",
    "--read-only-tmpfs=false",
    "--user=65532:65532",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--tmpfs=/var/run/metalclaim:rw,size=1g,mode=0777,notmpcopyup",  # emptyDirs: empty, 0777
    "--tmpfs=/tmp:rw,size=256m,mode=0777,notmpcopyup",
    "--ulimit=nofile=20000:20000",
    "--ulimit=nproc=32768:32768",
]


def inline_kubeconfig(path: str, destination: Path) -> Path:
    """The devenv's kubeconfig with its files inline, readable by user 65532 in the container."""
    config = json.loads(Path(path).read_text())
    cluster = config["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = base64.b64encode(Path(cluster.pop("certificate-authority")).read_bytes())
    user = config["users"][0]["user"]
    for key in ("client-certificate", "client-key"):
        user[f"{key}-data"] = base64.b64encode(Path(user.pop(key)).read_bytes())
    cluster["certificate-authority-data"] = cluster["certificate-authority-data"].decode()
    for key in ("client-certificate-data", "client-key-data"):
        user[key] = user[key].decode()
    destination.write_text(json.dumps(config))
    destination.chmod(0o644)
    return destination


def test_help_runs_on_a_read_only_root(image):
    result = subprocess.run(["podman", "run", "--rm", *AS_DEPLOYED, image, "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "usage: metalclaim-controller" in result.stdout


def test_the_claim_side_binds_a_claim_on_a_read_only_root(image, devenv, rack, tmp_path):
    kubeconfig = inline_kubeconfig(devenv.kubeconfig("controller"), tmp_path / "kubeconfig")
    probes, metrics = free_port(), free_port()
    name = f"metalclaim-image-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    subprocess.run(
        [
            "podman",
            "run",
            "--detach",
            f"--name={name}",
            *AS_DEPLOYED,
            f"--volume={kubeconfig}:/etc/metalclaim/kubeconfig:ro",
            image,
            "--controllers=claims",
            "--kubeconfig=/etc/metalclaim/kubeconfig",
            f"--infra-namespaces={rack.namespace}",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{probes}",
        ],
        check=True,
        capture_output=True,
    )
    try:

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probes}/readyz", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return False

        eventually(ready, timeout=60, message=f"/readyz\n{logs(name)}")
        print(f"\ncontainer start -> /readyz in {time.monotonic() - started:.1f} s")
        rack.policy()
        rack.host("h1")
        rack.claim("c1")
        # A playbook run (ansible-runner, Ansible's temp files) on the read-only root.
        eventually(lambda: associated(rack, "c1"), timeout=60, message=f"c1 associated\n{logs(name)}")
        written = subprocess.run(
            ["podman", "exec", name, "sh", "-c", "ls -A /var/run/metalclaim; id -u; echo $HOME"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert {"runner", "tmp"} <= set(written), written
        assert written[-2:] == ["65532", "/var/run/metalclaim"]
    finally:
        subprocess.run(["podman", "rm", "--force", "--time=5", name], capture_output=True, check=False)


def logs(name: str) -> str:
    return subprocess.run(["podman", "logs", "--tail=40", name], capture_output=True, text=True).stdout[-6000:]
