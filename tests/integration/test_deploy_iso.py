"""The deploy ISO script (files/metalclaim-build-deploy-iso): what the ISO it builds holds, read back with
xorriso, unsquashfs, zstd and cpio. Booting it on a VM is tests/e2e/test_vms.py's part.

The first run builds the ISO (debootstrap and a kernel download: 2-3 minutes); later runs reuse the cache.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from metalclaim_dev.devenv.images import build_deploy_iso
from metalclaim_dev.support import REPO_ROOT

WRITER = REPO_ROOT / "files" / "metalclaim-image-writer"
TOOLS = ("xorriso", "unsquashfs", "zstd", "cpio", "debootstrap", "grub-mkrescue")


def _run(*argv: str, **options) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, check=False, **options)
    assert result.returncode == 0, f"{' '.join(argv)} failed: {result.stderr.decode(errors='replace')[-2000:]}"
    return result


@pytest.fixture(scope="module")
def deploy_iso() -> dict:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:  # a machine that cannot build is a failure to see, never a skip
        pytest.fail(f"missing {missing}: .ci/run installs them (apt-get)")
    return build_deploy_iso()


@pytest.fixture(scope="module")
def iso_tree(deploy_iso, tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("deploy-iso")
    _run("xorriso", "-osirrox", "on", "-indev", deploy_iso["iso"], "-extract", "/", str(tree))
    return tree


@pytest.fixture(scope="module")
def root_listing(iso_tree) -> set[str]:
    listing = _run("unsquashfs", "-lc", "-d", "", str(iso_tree / "live" / "filesystem.squashfs")).stdout.decode()
    return {line.strip().lstrip("/") for line in listing.splitlines() if line.strip()}


def test_the_iso_boots_in_bios_and_uefi_mode(deploy_iso):
    report = _run("xorriso", "-indev", deploy_iso["iso"], "-report_el_torito", "plain").stdout.decode()
    platforms = set(re.findall(r"El Torito boot img :\s+\d+\s+(\w+)\s+y", report))
    assert platforms == {"BIOS", "UEFI"}, report


def test_grub_boots_the_kernel_and_initramfs_with_a_serial_console(iso_tree):
    grub = (iso_tree / "boot" / "grub" / "grub.cfg").read_text()
    assert "linux /live/vmlinuz" in grub and "initrd /live/initrd.img" in grub
    # The last console= is /dev/console: the writer's progress lands on the serial port.
    consoles = re.findall(r"console=(\S+)", grub)
    assert consoles[-1].startswith("ttyS0"), consoles
    assert "set timeout=0" in grub
    assert (iso_tree / "live" / "vmlinuz").read_bytes()[0x202:0x206] == b"HdrS"  # a bzImage


def test_the_root_filesystem_has_the_writer_and_its_tools(iso_tree, root_listing):
    for path in (
        "usr/bin/python3",
        "usr/bin/qemu-img",
        "usr/sbin/sfdisk",
        "usr/sbin/wipefs",
        "usr/sbin/blkid",
        "usr/sbin/blkdiscard",  # the writer's full erase (blkdiscard --zeroout)
        "usr/sbin/modprobe",
        "usr/bin/busybox",
        "usr/local/sbin/metalclaim-image-writer",
        "usr/sbin/metalclaim-deploy-init",
    ):
        assert path in root_listing, path
    assert any(p.endswith("/virtio_net.ko") for p in root_listing)
    assert not any("/kernel/drivers/gpu/" in p for p in root_listing)  # left out: the ISO stays small
    squashfs = str(iso_tree / "live" / "filesystem.squashfs")
    writer = _run("unsquashfs", "-cat", squashfs, "usr/local/sbin/metalclaim-image-writer")
    assert writer.stdout == WRITER.read_bytes()  # the writer of this checkout, not another version
    init = _run("unsquashfs", "-cat", squashfs, "usr/sbin/metalclaim-deploy-init")
    assert b"metalclaim-image-writer --work-dir" in init.stdout and b"udhcpc" in init.stdout
    # PID 1 and the DHCP hook run under the deploy system's /bin/sh (dash): a syntax error would only show at boot.
    hook = _run("unsquashfs", "-cat", squashfs, "etc/metalclaim-udhcpc")
    for script in (init.stdout, hook.stdout):
        _run("dash", "-n", input=script)


def test_the_initramfs_reaches_the_cd_and_mounts_the_root_filesystem(iso_tree):
    archive = _run("zstd", "-dc", str(iso_tree / "live" / "initrd.img")).stdout
    names = set(_run("cpio", "-t", "--quiet", input=archive).stdout.decode().split())
    assert {"init", "bin/busybox", "bin/switch_root"} <= names
    modules = {Path(name).name for name in names if name.endswith(".ko")}
    assert {"isofs.ko", "squashfs.ko", "overlay.ko", "sr_mod.ko", "virtio_pci.ko", "ata_piix.ko"} <= modules
    assert any(name.endswith("/modules.dep") for name in names)
    init = _run("cpio", "-i", "--quiet", "--to-stdout", "init", input=archive).stdout.decode()
    assert "live/filesystem.squashfs" in init and "switch_root /root /sbin/metalclaim-deploy-init" in init


def test_the_initramfs_mounts_only_the_squashfs_whose_digest_it_was_built_with(iso_tree):
    """Issue 22: a removable look-alike that copies our volume ID must still be refused, so the squashfs's SHA-256
    is baked into the initramfs (built after the squashfs) and checked before anything on the medium is mounted."""
    digest = hashlib.sha256((iso_tree / "live" / "filesystem.squashfs").read_bytes()).hexdigest()
    archive = _run("zstd", "-dc", str(iso_tree / "live" / "initrd.img")).stdout
    names = set(_run("cpio", "-t", "--quiet", input=archive).stdout.decode().split())
    assert "bin/sha256sum" in names
    init = _run("cpio", "-i", "--quiet", "--to-stdout", "init", input=archive).stdout.decode()
    assert f"SQUASHFS_SHA256={digest}\n" in init, "the initramfs does not carry this ISO's squashfs digest"
    check = init.index("sha256sum /mnt/cd/live/filesystem.squashfs")
    assert check < init.index('[ "$digest" = "$SQUASHFS_SHA256" ]') < init.index("found=$device")
    assert check < init.index("mount -t squashfs")  # hashed before it is ever mounted


def test_a_second_build_reuses_the_cached_iso(deploy_iso):
    again = build_deploy_iso()
    assert again["cached"] is True and again["iso"] == deploy_iso["iso"]
    assert not Path(again["iso"]).resolve().is_relative_to(REPO_ROOT)  # cached outside the checkout
