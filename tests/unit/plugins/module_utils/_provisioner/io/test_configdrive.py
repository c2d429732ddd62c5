"""The per-host config drive: NoCloud cidata files and the image writer's instructions, read back."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import json
import shutil
import subprocess

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import configdrive
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import instructions

from metalclaim_dev.configdrive_reader import read_config_drive, volume_id
from metalclaim_dev.support import REPO_ROOT

TOKEN = "A" * 43
DEPLOY = {
    "mode": "deploy",
    "image": {
        "url": "http://127.0.0.1:8080/images/focal.qcow2",
        "format": "qcow2",
        "checksum": "ab" * 32,
        "checksumType": "sha256",
    },
    "callback": {"url": f"http://127.0.0.1:9000/callback/{TOKEN}", "token": TOKEN},
}


def test_nocloud_files_and_instructions_are_read_back():
    user_data = b"#cloud-config\nusers: [{name: tenant}]\n"
    network_data = b"version: 2\nethernets: {eth0: {dhcp4: true}}\n"
    iso = configdrive.build_config_drive(
        user_data=user_data, meta_data=b"instance-id: bm-01\n", network_data=network_data, deploy=DEPLOY
    )
    files = read_config_drive(iso)
    assert set(files) == {"user-data", "meta-data", "network-config", "metalclaim/deploy.json"}
    assert files["user-data"] == user_data
    assert files["meta-data"] == b"instance-id: bm-01\n"
    assert files["network-config"] == network_data
    assert json.loads(files["metalclaim/deploy.json"]) == DEPLOY
    assert volume_id(iso) == "cidata"


def test_meta_data_and_user_data_always_exist_and_network_config_only_when_given():
    iso = configdrive.build_config_drive(user_data=None, meta_data=None, network_data=None, deploy=DEPLOY)
    files = read_config_drive(iso)
    assert set(files) == {"user-data", "meta-data", "metalclaim/deploy.json"}
    assert files["user-data"] == b""
    assert files["meta-data"].startswith(b"instance-id: iid-metalclaim-")
    # Another deployment (another callback token) is another instance for cloud-init.
    other = dict(DEPLOY, callback={"url": DEPLOY["callback"]["url"], "token": "B" * 43})
    assert instructions.default_meta_data(other) != instructions.default_meta_data(DEPLOY)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"mode": "install"}, "deploy.mode"),
        ({"callback": {"url": "ftp://x/callback", "token": TOKEN}}, "deploy.callback.url"),
        ({"callback": {"url": "http://x/callback"}}, "deploy.callback.token"),
        ({"image": None}, "deploy.image must be a mapping"),
        ({"image": dict(DEPLOY["image"], format="vmdk")}, "deploy.image.format"),
        ({"image": dict(DEPLOY["image"], checksumType="sha1")}, "deploy.image.checksumType"),
        ({"image": dict(DEPLOY["image"], checksum="not-hex")}, "deploy.image.checksum"),
        ({"image": dict(DEPLOY["image"], url="file:///etc/shadow")}, "deploy.image.url"),
    ],
)
def test_invalid_instructions_are_refused(change, complaint):
    with pytest.raises(ValueError, match=complaint.replace(".", r"\.")):
        configdrive.build_config_drive(user_data=None, meta_data=None, network_data=None, deploy={**DEPLOY, **change})


@pytest.mark.skipif(shutil.which("blkid") is None, reason="blkid (util-linux) is not installed")
def test_blkid_sees_the_label_cloud_init_looks_for(tmp_path):
    path = tmp_path / "config-drive.iso"
    path.write_bytes(configdrive.build_config_drive(user_data=None, meta_data=None, network_data=None, deploy=DEPLOY))
    probe = subprocess.run(["blkid", "-p", "-o", "export", str(path)], capture_output=True, text=True, check=True)
    assert "LABEL=cidata" in probe.stdout.splitlines()
    assert "TYPE=iso9660" in probe.stdout.splitlines()


def _image_writer():
    """The image writer script as a module (it has no .py suffix: it is installed as a command)."""
    path = REPO_ROOT / "files" / "metalclaim-image-writer"
    loader = importlib.machinery.SourceFileLoader("metalclaim_image_writer", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_writers_stdlib_reader_sees_what_pycdlib_wrote():
    writer = _image_writer()
    iso = configdrive.build_config_drive(
        user_data=b"#cloud-config\n", meta_data=None, network_data=b"version: 2\n", deploy=DEPLOY
    )
    handle = io.BytesIO(iso)
    assert writer.read_iso(handle) == read_config_drive(iso)
    assert writer.iso_volume(handle) == iso
    with pytest.raises(writer.WriterError, match="not an ISO9660 image"):
        writer.read_iso(io.BytesIO(bytes(64 * 2048)))


SHA = "ab" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{SHA}\n", SHA),
        (f"{SHA}  other-name.qcow2\n", SHA),  # a single digest applies whatever name it gives
        (f"{'cd' * 32}  other.qcow2\n{SHA} *node.qcow2\n", SHA),
        (f"# comment\n\n{'cd' * 32}  other.qcow2\n{SHA}  images/node.qcow2\n", SHA),
        (f"SHA256 (other.qcow2) = {'cd' * 32}\nSHA256 (node.qcow2) = {SHA}\n", SHA),
    ],
)
def test_checksum_files(text, expected):
    assert _image_writer().parse_checksum_file(text, "node.qcow2") == expected


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (f"{'cd' * 32}  a.qcow2\n{SHA}  b.qcow2\n", "0 entries"),
        (f"{'cd' * 32}  node.qcow2\n{SHA}  node.qcow2\n", "2 entries"),
        ("<html>not found</html>\n", "not a checksum"),
    ],
)
def test_unusable_checksum_files(text, complaint):
    writer = _image_writer()
    with pytest.raises(writer.WriterError, match=complaint):
        writer.parse_checksum_file(text, "node.qcow2")


def test_a_config_drive_is_padded_to_a_floppy_size_and_reads_the_same():
    iso = configdrive.build_config_drive(user_data=b"#cloud-config\n", meta_data=None, network_data=None, deploy=DEPLOY)
    padded = instructions.floppy_sized(iso)
    assert len(padded) == 1474560 and padded[: len(iso)] == iso and not any(padded[len(iso) :])
    assert instructions.floppy_sized(bytes(1474561)) == bytes(2949120)
    too_big = bytes(2949121)
    assert instructions.floppy_sized(too_big) is too_big  # a USB stick takes any size
