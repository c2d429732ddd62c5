"""The deploy system boots only its own medium (issue 22), played on QEMU (TCG) with the deploy ISO's own kernel and
initramfs: a previous tenant's fixed disk carrying a look-alike (an ISO9660 labelled as ours, holding
live/filesystem.squashfs) must never become the root filesystem, or it would receive the next tenant's config drive
(their data, image URL and callback token).

No libvirt: qemu-system-x86_64 boots the kernel and initramfs directly, the look-alike as a virtio disk (vda), no CD.
The initramfs looks for its medium for 30 s, then says none was found.

A removable look-alike (a CD, as a USB stick left plugged or another virtual medium would be) that copies our volume
ID is refused by the squashfs's SHA-256, baked into the initramfs at build time; the deploy ISO itself as the CD is
verified and booted, and the time that check takes under TCG is printed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from metalclaim_dev.devenv.images import build_deploy_iso

pytestmark = pytest.mark.minutes(3)

VOLUME_ID = "METALCLAIM_DEPLOY"  # files/metalclaim-build-deploy-iso's


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(argv)}: {result.stderr[-2000:]}"


def _boot(tmp_path: Path, kernel: Path, initrd: Path, *drives: str, until: tuple[str, ...], timeout: float) -> str:
    """Boot kernel+initrd on QEMU under TCG with `drives`; the serial console's text once a line of `until` shows."""
    serial = tmp_path / "serial.log"
    argv = ["qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-nodefaults", "-display", "none"]
    argv += ["-kernel", str(kernel), "-initrd", str(initrd), "-append", "console=ttyS0 loglevel=3"]
    argv += ["-serial", f"file:{serial}", *drives]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            text = serial.read_text(errors="replace") if serial.exists() else ""
            if any(line in text for line in until):
                return text
            assert process.poll() is None, f"QEMU ended: {process.stderr.read()[-2000:]}"
            time.sleep(0.5)
        raise AssertionError(f"none of {until} within {timeout}s; serial:\n{text[-3000:]}")
    finally:
        process.kill()
        process.wait(10)


def _deploy_tree(tmp_path: Path) -> tuple[Path, Path]:
    """(the deploy ISO, its live/ directory extracted: vmlinuz, initrd.img, filesystem.squashfs)."""
    for tool in ("qemu-system-x86_64", "xorriso"):
        if shutil.which(tool) is None:  # make e2e installs them (bindep.txt, vm): a missing one is a failure
            pytest.fail(f"{tool} is missing: make vm-setup installs it")
    iso = Path(build_deploy_iso()["iso"])
    tree = tmp_path / "deploy"
    _run("xorriso", "-osirrox", "on", "-indev", str(iso), "-extract", "/live", str(tree))
    return iso, tree


def test_a_look_alike_on_a_fixed_disk_is_never_booted(tmp_path):
    _iso, tree = _deploy_tree(tmp_path)
    # The look-alike: our volume ID, a live/filesystem.squashfs, on the disk a tenant controlled.
    fake_tree = tmp_path / "fake" / "live"
    fake_tree.mkdir(parents=True)
    (fake_tree / "filesystem.squashfs").write_bytes(b"not ours\n" * 1024)
    fake = tmp_path / "fake.iso"
    _run("xorriso", "-as", "mkisofs", "-V", VOLUME_ID, "-o", str(fake), str(tmp_path / "fake"))
    started = time.monotonic()
    serial = _boot(
        tmp_path,
        tree / "vmlinuz",
        tree / "initrd.img",
        "-drive",
        f"file={fake},format=raw,if=virtio,readonly=on",
        until=("no medium with live/filesystem.squashfs", "root filesystem from"),
        timeout=240,
    )
    print(f"\ninitramfs gave up on the fixed disk after {time.monotonic() - started:.1f} s", end="")
    assert "root filesystem from" not in serial, serial[-2000:]
    assert "no medium with live/filesystem.squashfs" in serial


def test_a_removable_look_alike_with_our_volume_id_is_refused_by_its_digest(tmp_path):
    """A CD (removable, as the BMC's own virtual CD is) labelled METALCLAIM_DEPLOY holding a squashfs that is not the
    one the initramfs was built with: refused, never the root filesystem."""
    _iso, tree = _deploy_tree(tmp_path)
    fake_root = tmp_path / "fake-root"
    (fake_root / "sbin").mkdir(parents=True)
    (fake_root / "sbin" / "metalclaim-deploy-init").write_text("#!/bin/sh\necho tenant A was here\n")
    fake_tree = tmp_path / "fake" / "live"
    fake_tree.mkdir(parents=True)
    _run("mksquashfs", str(fake_root), str(fake_tree / "filesystem.squashfs"), "-noappend", "-quiet")
    fake = tmp_path / "fake.iso"
    _run("xorriso", "-as", "mkisofs", "-V", VOLUME_ID, "-o", str(fake), str(tmp_path / "fake"))
    started = time.monotonic()
    serial = _boot(
        tmp_path,
        tree / "vmlinuz",
        tree / "initrd.img",
        "-drive",
        f"file={fake},format=raw,if=ide,media=cdrom,readonly=on",
        until=("no medium with live/filesystem.squashfs", "root filesystem from"),
        timeout=240,
    )
    print(f"\ninitramfs gave up on the removable look-alike after {time.monotonic() - started:.1f} s", end="")
    assert "root filesystem from" not in serial, serial[-2000:]
    assert "/dev/sr0: squashfs sha256" in serial and "is not this deploy ISO's: refused" in serial, serial[-2000:]
    assert serial.count("is not this deploy ISO's: refused") == 1  # read through once, not on every attempt


def test_the_deploy_iso_itself_is_verified_and_booted(tmp_path):
    """The same check on the real medium: the squashfs (about 120 MB) hashed under TCG, then mounted."""
    iso, tree = _deploy_tree(tmp_path)
    size = (tree / "filesystem.squashfs").stat().st_size
    serial = _boot(
        tmp_path,
        tree / "vmlinuz",
        tree / "initrd.img",
        "-drive",
        f"file={iso},format=raw,if=ide,media=cdrom,readonly=on",
        until=("no medium with live/filesystem.squashfs", "metalclaim-deploy: DHCP", "image writer"),
        timeout=420,
    )
    verified = re.search(r"/dev/sr0: squashfs sha256 verified in (\d+) s", serial)
    assert verified, serial[-2000:]
    print(f"\nsha256 of the {size / 1048576:.0f} MiB squashfs under TCG: {verified.group(1)} s", end="")
    assert "root filesystem from /dev/sr0" in serial
