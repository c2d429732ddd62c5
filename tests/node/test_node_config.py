"""What the devenv's node is given (metalclaim_dev.devenv.node), without starting it."""

from __future__ import annotations

import hashlib
import json
import tarfile
import tomllib
from pathlib import Path

from metalclaim_dev.devenv import node


def test_containerd_uses_runc_and_never_lowers_oom_score_adj(tmp_path):
    config = tomllib.loads(node.containerd_config(tmp_path))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == node.PAUSE_IMAGE
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["BinaryName"].endswith("/runc") and runc["options"]["SystemdCgroup"] is False
    assert config["grpc"]["address"] == str(tmp_path / "containerd.sock")


def test_kubelet_accepts_cgroup_v1_with_cgroupfs(tmp_path):
    config = node.kubelet_config(tmp_path, tmp_path / "ca.crt", {"kubelet": 1, "kubelet_healthz": 2})
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["podLogsDir"].startswith(str(tmp_path))  # not /var/log/pods
    assert config["authentication"]["anonymous"]["enabled"] is False


def test_the_pause_image_is_a_valid_oci_layout(tmp_path):
    program = tmp_path / "pause"
    program.write_bytes(b"\x7fELF not really")
    node.oci_archive(program, tmp_path / "image.tar")
    with tarfile.open(tmp_path / "image.tar") as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == node.PAUSE_IMAGE
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == Path(name).name
    manifest = json.loads(files[f"blobs/sha256/{entry['digest'].split(':')[1]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
