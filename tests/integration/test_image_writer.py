"""The image writer script (files/metalclaim-image-writer) against file-backed disks, real qemu-img,
a loopback image server and the real media server process receiving its callback."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import configdrive, media
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import instructions
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import media_protocol as protocol

from metalclaim_dev.configdrive_reader import read_config_drive
from metalclaim_dev.support import REPO_ROOT

WRITER = REPO_ROOT / "files" / "metalclaim-image-writer"
MIB = 1024 * 1024
DISK_SIZE = 64 * MIB
SECTOR = 512
USER_DATA = b"#cloud-config\nhostname: tenant-node\n"
NETWORK_DATA = b"version: 2\nethernets:\n  eth0:\n    dhcp4: true\n"
TOOLS = {"qemu-img": "qemu-utils", "sfdisk": "fdisk", "wipefs": "util-linux", "blkid": "util-linux"}


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:  # a missing tool is a broken test machine, never a silent skip
        pytest.fail(f"{tool} is not installed: apt-get install -y {TOOLS.get(tool, tool)}")
    return path


@pytest.fixture(scope="module", autouse=True)
def tools():
    for tool in TOOLS:
        require(tool)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def image_server(tmp_path_factory):
    """A loopback HTTP server for images and checksum files: (directory, base URL)."""
    directory = tmp_path_factory.mktemp("images")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield directory, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def media_server(tmp_path_factory):
    """The real media server process: (media directory, base URL)."""
    directory = tmp_path_factory.mktemp("media")
    process = subprocess.Popen(
        [sys.executable, "-m", "metalclaim.mediaserver", "--dir", str(directory), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    url = process.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), "the media server did not start"
    yield str(directory), url
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=10)


def random_bytes(size: int, seed: int) -> bytearray:
    data = bytearray(random.Random(seed).randbytes(size))
    data[size // 4 : size // 2] = bytes(size // 4)  # a zero stretch, which qcow2 stores sparsely
    return data


def partitioned(path: Path, size: int, seed: int, script: str) -> bytes:
    """A raw disk image with a known pattern and a partition table made by sfdisk; returns its bytes."""
    path.write_bytes(random_bytes(size, seed))
    subprocess.run(["sfdisk", "--quiet", str(path)], input=script.encode(), check=True, capture_output=True)
    return path.read_bytes()


def sparse_disk(path: Path) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(DISK_SIZE)
    return path


def sfdisk_json(disk: Path) -> dict:
    result = subprocess.run(["sfdisk", "--json", str(disk)], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)["partitiontable"]


def config_drive(
    tmp_path: Path,
    media_server,
    mode: str,
    image: dict | None = None,
    erase: str | None = None,
    warm: dict | None = None,
    name: str = "config-drive.iso",
):
    """Build and publish a host's config drive, then fetch it back from the media server as a BMC would.

    Returns (token, path of the downloaded ISO)."""
    media_dir, media_url = media_server
    token = protocol.new_token()
    deploy = {"mode": mode, "callback": {"url": protocol.callback_url(media_url, token), "token": token}}
    if image:
        deploy["image"] = image
    if erase:
        deploy["erase"] = erase
    if warm:
        deploy["warm"] = warm
    iso = configdrive.build_config_drive(user_data=USER_DATA, meta_data=None, network_data=NETWORK_DATA, deploy=deploy)
    media.publish(media_dir, "config-drive.iso", iso, token=token)
    with urllib.request.urlopen(protocol.media_url(media_url, token, "config-drive.iso"), timeout=10) as response:
        served = response.read()
    files = read_config_drive(served)
    assert files["user-data"] == USER_DATA and files["network-config"] == NETWORK_DATA
    assert json.loads(files["metalclaim/deploy.json"]) == deploy
    path = tmp_path / name
    path.write_bytes(served)
    return token, path


def run_writer(config_drive_path: Path, disk: Path, work_dir: Path) -> subprocess.CompletedProcess:
    # Run through its shebang, as the live system does: whatever python3 is first on PATH, stdlib only.
    return subprocess.run(
        [str(WRITER), "--config-drive", str(config_drive_path), "--disk", str(disk), "--work-dir", str(work_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def config_drive_on_disk(disk: Path, partition: dict) -> dict:
    start = partition["start"] * SECTOR
    data = disk.read_bytes()[start : start + partition["size"] * SECTOR]
    probe = subprocess.run(
        ["blkid", "-p", "-o", "export", "-O", str(start), str(disk)], capture_output=True, text=True, check=True
    )
    assert "LABEL=cidata" in probe.stdout.splitlines(), probe.stdout  # what cloud-init's NoCloud looks for
    return read_config_drive(data)


def _qcow2_image(tmp_path: Path, image_server, name: str, seed: int) -> tuple[dict, bytes]:
    """A partitioned raw image (its bytes returned) served as qcow2 under `name`, with its image spec."""
    images, images_url = image_server
    source = partitioned(tmp_path / "source.raw", 8 * MIB, seed=seed, script="start=2048, size=12288, type=L\n")
    subprocess.run(
        ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(tmp_path / "source.raw"), str(images / name)],
        check=True,
    )
    image = {
        "url": f"{images_url}/{name}",
        "format": "qcow2",
        "checksum": hashlib.sha256((images / name).read_bytes()).hexdigest(),
        "checksumType": "sha256",
    }
    return image, source


def test_qcow2_image_and_config_drive_are_written_and_reported(tmp_path, image_server, media_server):
    image, source = _qcow2_image(tmp_path, image_server, "node.qcow2", seed=1)
    token, iso_path = config_drive(tmp_path, media_server, "deploy", image)
    disk = sparse_disk(tmp_path / "disk.img")

    result = run_writer(iso_path, disk, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "write: 100%" in result.stdout and "checksum: sha256 verified" in result.stdout
    assert token not in result.stdout + result.stderr

    written = disk.read_bytes()
    assert len(written) == DISK_SIZE
    # Everything but the MBR's partition entries is the image, byte for byte.
    assert written[:446] == source[:446]
    assert written[446:462] == source[446:462]  # the image's own partition entry is kept
    assert written[SECTOR : len(source)] == source[SECTOR:]
    table = sfdisk_json(disk)
    assert table["label"] == "dos"
    original, drive = table["partitions"]
    assert (original["start"], original["size"]) == (2048, 12288)
    assert drive["start"] * SECTOR >= len(source) and (drive["start"] + drive["size"]) * SECTOR <= DISK_SIZE
    assert drive["start"] % 2048 == 0 and drive["type"] == "83"
    assert config_drive_on_disk(disk, drive) == read_config_drive(iso_path.read_bytes())

    result_report = media.callback_result(media_server[0], token)
    assert result_report["status"] == "success", result_report
    assert "qcow2 image written" in result_report["message"]


def test_a_warm_writer_cleans_waits_and_runs_the_job_handed_to_it(tmp_path, image_server, media_server):
    """Fast track: after the cleaning's callback the writer polls for a job under the wait token (404: none yet),
    takes the one the provisioner hands it (acknowledged on the wait token), and deploys it under the job's token."""
    media_dir, media_url = media_server
    disk = sparse_disk(tmp_path / "disk.img")
    wait_token = protocol.new_token()
    clean_token, clean_iso = config_drive(
        tmp_path, media_server, "clean", warm=protocol.warm_instructions(media_url, wait_token)
    )
    writer = subprocess.Popen(
        [str(WRITER), "--config-drive", str(clean_iso), "--disk", str(disk), "--work-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        for line in writer.stdout:  # the cleaning first, then the wait
            lines.append(line)
            if "waiting for a job" in line:
                break
        assert media.callback_result(media_dir, clean_token)["status"] == "success", "".join(lines)
        assert media.callback_result(media_dir, wait_token) is None  # nothing taken before a job is handed

        image, source = _qcow2_image(tmp_path, image_server, "warm.qcow2", seed=7)
        job_token, _ = config_drive(tmp_path, media_server, "deploy", image, name="job.iso")
        # What the provisioner's handoff writes (io/provisioner.py _hand_off), under the wait token.
        job = {"config_drive": protocol.media_url(media_url, job_token, "config-drive.iso")}
        media.publish(media_dir, protocol.NEXT_FILE, json.dumps(job).encode(), token=wait_token)

        output, _ = writer.communicate(timeout=120)
    finally:
        writer.kill()
    assert writer.returncode == 0, "".join(lines) + output
    assert media.callback_result(media_dir, wait_token)["message"] == "job taken"
    report = media.callback_result(media_dir, job_token)
    assert report["status"] == "success" and "qcow2 image written" in report["message"], report
    written = disk.read_bytes()
    assert written[SECTOR : len(source)] == source[SECTOR:]
    for token in (clean_token, wait_token, job_token):
        assert token not in "".join(lines) + output  # tokens never reach the console


def test_a_warm_writer_never_takes_a_job_it_cannot_read(tmp_path, media_server):
    """A handed job whose config drive is not there is not acknowledged: the provisioner's pickup deadline passes
    and it falls back to booting the deploy ISO, instead of waiting for a callback that cannot come."""
    media_dir, media_url = media_server
    disk = sparse_disk(tmp_path / "disk.img")
    wait_token = protocol.new_token()
    _, clean_iso = config_drive(tmp_path, media_server, "clean", warm=protocol.warm_instructions(media_url, wait_token))
    missing = {"config_drive": protocol.media_url(media_url, protocol.new_token(), "config-drive.iso")}
    media.publish(media_dir, protocol.NEXT_FILE, json.dumps(missing).encode(), token=wait_token)
    result = run_writer(clean_iso, disk, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot read the job" in result.stdout and "HTTP 404" in result.stdout
    assert media.callback_result(media_dir, wait_token) is None


def test_a_floppy_sized_config_drive_puts_only_the_iso_on_the_disk(tmp_path, image_server, media_server):
    """The provisioner pads the ISO to a floppy's size (BMCs with a floppy drive only): the padding stays off disk."""
    images, images_url = image_server
    partitioned(images / "node.raw", 8 * MIB, seed=3, script="start=2048, size=12288, type=L\n")
    checksum = hashlib.sha256((images / "node.raw").read_bytes()).hexdigest()
    image = {"url": f"{images_url}/node.raw", "format": "raw", "checksum": checksum, "checksumType": "sha256"}
    token, iso_path = config_drive(tmp_path, media_server, "deploy", image)
    iso = iso_path.read_bytes()
    floppy = tmp_path / "floppy.img"
    floppy.write_bytes(instructions.floppy_sized(iso))
    assert floppy.stat().st_size == 1474560 > MIB > len(iso)
    disk = sparse_disk(tmp_path / "disk.img")

    result = run_writer(floppy, disk, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    _original, drive = sfdisk_json(disk)["partitions"]
    assert drive["size"] * SECTOR == MIB  # the ISO rounded to a MiB, not the 1.44 MB floppy
    start = drive["start"] * SECTOR
    assert disk.read_bytes()[start : start + MIB] == iso + bytes(MIB - len(iso))
    assert media.callback_result(media_server[0], token)["status"] == "success"


def test_raw_gpt_image_with_a_checksum_file(tmp_path, image_server, media_server):
    images, images_url = image_server
    source = partitioned(images / "node-gpt.raw", 6 * MIB, seed=2, script="label: gpt\nstart=2048, size=8192, type=L\n")
    sums = f"{'0' * 128}  other.raw\n{hashlib.sha512(source).hexdigest()}  node-gpt.raw\n"
    (images / "SHA512SUMS").write_text(sums)
    image = {
        "url": f"{images_url}/node-gpt.raw",
        "format": "raw",
        "checksum": f"{images_url}/SHA512SUMS",
        "checksumType": "sha512",
    }
    token, iso_path = config_drive(tmp_path, media_server, "deploy", image)
    disk = sparse_disk(tmp_path / "disk.img")

    result = run_writer(iso_path, disk, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

    written = disk.read_bytes()
    assert written[34 * SECTOR : 10240 * SECTOR] == source[34 * SECTOR : 10240 * SECTOR]
    table = sfdisk_json(disk)
    assert table["label"] == "gpt"
    assert table["lastlba"] == DISK_SIZE // SECTOR - 34  # the backup table moved to the end of the disk
    original, drive = table["partitions"]
    assert (original["start"], original["size"]) == (2048, 8192)
    assert drive["start"] * SECTOR >= len(source)
    subprocess.run(["sfdisk", "--verify", str(disk)], check=True, capture_output=True)
    assert config_drive_on_disk(disk, drive)["meta-data"].startswith(b"instance-id: ")
    assert media.callback_result(media_server[0], token)["status"] == "success"


def test_a_checksum_mismatch_is_refused_before_the_disk_is_touched(tmp_path, image_server, media_server):
    images, images_url = image_server
    (images / "tampered.qcow2").write_bytes(b"not the image the checksum was computed for")
    image = {
        "url": f"{images_url}/tampered.qcow2",
        "format": "qcow2",
        "checksum": hashlib.sha256(b"the real image").hexdigest(),
        "checksumType": "sha256",
    }
    token, iso_path = config_drive(tmp_path, media_server, "deploy", image)
    disk = sparse_disk(tmp_path / "disk.img")

    result = run_writer(iso_path, disk, tmp_path)
    assert result.returncode == 1
    assert "sha256 checksum mismatch" in result.stdout
    assert disk.read_bytes() == bytes(DISK_SIZE)
    report = media.callback_result(media_server[0], token)
    assert report["status"] == "failure"
    assert report["message"].startswith("sha256 checksum mismatch: the image has ")


def test_a_missing_image_is_reported(tmp_path, image_server, media_server):
    image = {"url": f"{image_server[1]}/gone.qcow2", "format": "qcow2", "checksum": "ab" * 32, "checksumType": "sha256"}
    token, iso_path = config_drive(tmp_path, media_server, "deploy", image)
    disk = sparse_disk(tmp_path / "disk.img")
    result = run_writer(iso_path, disk, tmp_path)
    assert result.returncode == 1
    assert disk.read_bytes() == bytes(DISK_SIZE)
    report = media.callback_result(media_server[0], token)
    assert report["status"] == "failure" and report["message"].endswith("gone.qcow2 failed: HTTP 404")


def test_an_image_without_partition_table_is_reported(tmp_path, image_server, media_server):
    images, images_url = image_server
    (images / "bare.raw").write_bytes(bytes(2 * MIB))
    image = {
        "url": f"{images_url}/bare.raw",
        "format": "raw",
        "checksum": hashlib.md5(bytes(2 * MIB)).hexdigest(),
        "checksumType": "md5",
    }
    token, iso_path = config_drive(tmp_path, media_server, "deploy", image)
    result = run_writer(iso_path, sparse_disk(tmp_path / "disk.img"), tmp_path)
    assert result.returncode == 1
    report = media.callback_result(media_server[0], token)
    assert report["status"] == "failure" and "no partition table" in report["message"]


def test_clean_mode_leaves_no_partition_table_or_signature(tmp_path, media_server):
    disk = sparse_disk(tmp_path / "disk.img")
    subprocess.run(["sfdisk", "--quiet", str(disk)], input=b"label: gpt\nstart=2048, size=65536, type=L\n", check=True)
    # A real filesystem inside the partition: its superblock must go too.
    subprocess.run(
        [require("mkfs.ext4"), "-q", "-F", "-E", f"offset={2048 * SECTOR}", str(disk), "32M"],
        check=True,
        capture_output=True,
    )
    assert (
        b"ext4"
        in subprocess.run(["blkid", "-p", "-O", str(2048 * SECTOR), str(disk)], capture_output=True, check=False).stdout
    )
    token, iso_path = config_drive(tmp_path, media_server, "clean")

    result = run_writer(iso_path, disk, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

    assert subprocess.run(["sfdisk", "--json", str(disk)], capture_output=True, check=False).returncode != 0
    assert (
        subprocess.run(["wipefs", "--no-act", "--noheadings", str(disk)], capture_output=True, check=False).stdout
        == b""
    )
    probe = subprocess.run(["blkid", "-p", "-O", str(2048 * SECTOR), str(disk)], capture_output=True, check=False)
    assert b"ext4" not in probe.stdout
    written = disk.read_bytes()
    assert written[:MIB] == bytes(MIB) and written[-MIB:] == bytes(MIB)
    assert disk.stat().st_size == DISK_SIZE
    assert media.callback_result(media_server[0], token)["status"] == "success"


def test_clean_mode_wipes_every_disk_and_reports_each(tmp_path, media_server):
    # A tenant may have written to any disk: the second one's table and signature must go too.
    disks = [sparse_disk(tmp_path / "a.img"), sparse_disk(tmp_path / "b.img")]
    for disk in disks:
        subprocess.run(["sfdisk", "--quiet", str(disk)], input=b"label: gpt\nstart=2048, type=L\n", check=True)
    token, iso_path = config_drive(tmp_path, media_server, "clean")
    argv = [str(WRITER), "--config-drive", str(iso_path), "--work-dir", str(tmp_path)]
    result = subprocess.run(
        [*argv, *(f"--disk={disk}" for disk in disks)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for disk in disks:
        assert subprocess.run(["sfdisk", "--json", str(disk)], capture_output=True, check=False).returncode != 0
    report = media.callback_result(media_server[0], token)
    assert report["status"] == "success"
    assert all(f"metadata cleaned on {disk}" in report["message"] for disk in disks), report


MARKER = b"tenant A's secret, in the middle of the second disk"


def _two_disks_with_a_marker(tmp_path: Path) -> tuple[list[Path], int]:
    """Two disks with a partition table and a filesystem-free marker in the middle of the second's partition."""
    disks = [sparse_disk(tmp_path / "a.img"), sparse_disk(tmp_path / "b.img")]
    for disk in disks:
        subprocess.run(["sfdisk", "--quiet", str(disk)], input=b"label: gpt\nstart=2048, type=L\n", check=True)
    middle = DISK_SIZE // 2 + 12345  # far from any region metadata cleaning zeroes
    with open(disks[1], "r+b") as handle:
        handle.seek(middle)
        handle.write(MARKER)
    return disks, middle


def _clean(
    tmp_path: Path, media_server, disks: list[Path], erase: str | None
) -> tuple[subprocess.CompletedProcess, dict]:
    token, iso_path = config_drive(tmp_path, media_server, "clean", erase=erase)
    argv = [str(WRITER), "--config-drive", str(iso_path), "--work-dir", str(tmp_path)]
    result = subprocess.run(
        [*argv, *(f"--disk={disk}" for disk in disks)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result, media.callback_result(media_server[0], token)


def test_full_erase_zeroes_every_byte_of_every_disk_where_metadata_cleaning_leaves_data(tmp_path, media_server):
    """Issue 22: the infra team's full-erase mode (Ironic's erase_devices): tenant A's marker in the middle of the
    second disk is gone for tenant B, every byte of both disks is zero, and each disk is reported. Metadata mode (the
    default) is what the infra guide says it is: tables and signatures gone, the marker still on the raw disk."""
    disks, middle = _two_disks_with_a_marker(tmp_path)
    _result, report = _clean(tmp_path, media_server, disks, None)
    assert disks[1].read_bytes()[middle : middle + len(MARKER)] == MARKER
    assert all(f"metadata cleaned on {disk}" in report["message"] for disk in disks), report

    with open(disks[0], "r+b") as handle:
        handle.seek(20 * MIB)
        handle.write(random.Random(7).randbytes(3 * MIB))
    result, report = _clean(tmp_path, media_server, disks, "full")
    for disk in disks:
        data = disk.read_bytes()
        assert len(data) == DISK_SIZE and data.count(0) == DISK_SIZE, f"{disk} has non-zero bytes left"
    assert report["status"] == "success"
    assert all(f"every byte zeroed on {disk}" in report["message"] for disk in disks), report
    assert "% zeroed" in result.stdout  # progress on the console while a big disk is erased


@pytest.mark.skipif(os.geteuid() != 0, reason="a loop device takes root")
def test_full_erase_of_a_block_device_uses_the_kernels_zeroout(tmp_path, media_server):
    """A block device (a loop device over a file with random data): blkdiscard --zeroout, every byte zero after it."""
    backing = tmp_path / "loop.img"
    backing.write_bytes(random.Random(11).randbytes(DISK_SIZE))
    device = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        result, report = _clean(tmp_path, media_server, [Path(device)], "full")
        with open(device, "rb") as handle:
            assert handle.read().count(0) == DISK_SIZE
    finally:
        subprocess.run(["losetup", "--detach", device], check=False)
    assert backing.read_bytes().count(0) == DISK_SIZE
    assert f"every byte zeroed on {device} (64 MiB, blkdiscard --zeroout" in report["message"], report
    assert f"{device}: 100% zeroed" in result.stdout


def test_an_unknown_erase_mode_is_refused_by_the_config_drive():
    deploy = {"mode": "clean", "erase": "shred", "callback": {"url": "http://127.0.0.1:1/cb", "token": "t"}}
    with pytest.raises(ValueError, match=r"deploy\.erase must be one of metadata, full"):
        instructions.validate_deploy(deploy)
