"""Boot media built on this machine from Debian packages, cached outside the repository.

The deploy ISO comes from the collection's own script (files/metalclaim-build-deploy-iso), the one the
infrastructure guide tells infra teams to run; the test images (a live ISO and a tenant disk image that
print a marker on the serial console) come from build-test-images.sh beside this file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

from . import REPO_ROOT
from .processes import DevenvError

DEPLOY_ISO_SCRIPT = REPO_ROOT / "files" / "metalclaim-build-deploy-iso"


def _run_builder(argv: list[str]) -> dict:
    """Run a build script (progress on stderr, passed through) and parse the JSON on its last stdout line."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise DevenvError(f"{Path(argv[1]).name} failed (exit {result.returncode}); see the log above")
    return json.loads(result.stdout.strip().splitlines()[-1])


def build_deploy_iso(force: bool = False) -> dict:
    """{"iso": path, "kernel": "<package> <version>", "cached": bool}

    One build at a time per cache: test files on parallel workers that need the ISO wait for the first build
    and then find it cached, rather than running debootstrap side by side on the same cores."""
    lock = cache_dir() / "images" / ".deploy-iso.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return _run_builder(["bash", str(DEPLOY_ISO_SCRIPT), *(["--force"] if force else [])])


def build_marker_iso(marker: str) -> Path:
    """A live ISO (GRUB only, BIOS and UEFI) that prints `marker` on the serial console and the screen, then waits.

    Built with grub-mkrescue from Debian's grub-pc-bin/grub-efi-amd64-bin in a second or two; cached by content."""
    grub_cfg = (
        "serial --unit=0 --speed=115200\n"
        "terminal_output serial console\n"
        "set timeout=0\n"
        f'echo "{marker}"\n'
        "sleep 86400\n"  # a live system keeps running: the VM stays on, as a booted OS would
    )
    key = hashlib.sha256(grub_cfg.encode() + _grub_version().encode()).hexdigest()[:16]
    iso = cache_dir() / "images" / f"marker-{key}.iso"
    if iso.exists():
        return iso
    iso.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=iso.parent, prefix=".marker-build.") as work:
        tree = Path(work) / "tree"
        (tree / "boot" / "grub").mkdir(parents=True)
        (tree / "boot" / "grub" / "grub.cfg").write_text(grub_cfg)
        built = Path(work) / "marker.iso"
        result = subprocess.run(["grub-mkrescue", "-o", str(built), str(tree)], capture_output=True, text=True)
        if result.returncode != 0:
            raise DevenvError(f"grub-mkrescue failed: {result.stderr[-2000:]}")
        built.rename(iso)
    return iso


DISK_IMAGE_BYTES = 40 * 1024**2  # virtual size: the ESP and its GPT; the qcow2 holds only what is written
ESP_START_SECTOR = 2048
ESP_SECTORS = 32 * 2048  # 32 MiB: FAT16, a size every UEFI firmware reads
ESP_TYPE = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"


def build_disk_image(marker: str) -> Path:
    """A tenant disk image (qcow2) whose UEFI boot prints `marker` on the serial console, then waits.

    GPT with one EFI system partition (FAT made with mtools) holding EFI/BOOT/BOOTX64.EFI, a GRUB core image
    (grub-mkimage, Debian's grub-efi-amd64-bin) with its config embedded: it reads nothing else, from the disk
    or the network. Built as a raw file (sfdisk works on files, mtools writes into an image: no loop devices),
    converted with qemu-img. Cached by content; a second or two to build."""
    grub_cfg = (
        "serial --unit=0 --speed=115200\n"
        "terminal_output serial console\n"
        f'echo "{marker}"\n'
        "sleep 86400\n"  # a booted OS keeps running: the VM stays on until it is powered off
    )
    key = hashlib.sha256(b"disk-1" + grub_cfg.encode() + _grub_version().encode()).hexdigest()[:16]
    image = cache_dir() / "images" / f"disk-{key}.qcow2"
    if image.exists():
        return image
    image.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=image.parent, prefix=".disk-build.") as work:
        work = Path(work)
        (work / "grub.cfg").write_text(grub_cfg)
        efi, esp, raw = work / "BOOTX64.EFI", work / "esp.img", work / "disk.raw"
        modules = ["serial", "terminal", "echo", "sleep", "efi_gop", "part_gpt", "fat"]
        _run(
            [
                "grub-mkimage",
                "-O",
                "x86_64-efi",
                "-o",
                str(efi),
                "-p",
                "/EFI/BOOT",
                "-c",
                str(work / "grub.cfg"),
                *modules,
            ]
        )
        with esp.open("wb") as handle:
            handle.truncate(ESP_SECTORS * 512)
        _run(["mformat", "-i", str(esp), "-T", str(ESP_SECTORS), "-h", "64", "-s", "32", "-H", "0", "-v", "ESP", "::"])
        _run(["mmd", "-i", str(esp), "::/EFI", "::/EFI/BOOT"])
        _run(["mcopy", "-i", str(esp), str(efi), "::/EFI/BOOT/BOOTX64.EFI"])
        with raw.open("wb") as handle:
            handle.truncate(DISK_IMAGE_BYTES)
        table = f"label: gpt\nstart={ESP_START_SECTOR}, size={ESP_SECTORS}, type={ESP_TYPE}, name=ESP\n"
        _run(["sfdisk", "--quiet", str(raw)], input=table)
        with raw.open("r+b") as handle:
            handle.seek(ESP_START_SECTOR * 512)
            handle.write(esp.read_bytes())
        built = work / "disk.qcow2"
        _run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(built)])
        built.rename(image)
    return image


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(argv: list[str], input: str | None = None) -> None:
    result = subprocess.run(argv, input=input, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DevenvError(f"{argv[0]} failed: {result.stderr[-2000:]}")


def _grub_version() -> str:
    return subprocess.run(["grub-mkrescue", "--version"], capture_output=True, text=True, check=False).stdout


def cache_dir() -> Path:
    """The build scripts' cache: $METALCLAIM_CACHE, else $XDG_CACHE_HOME/metalclaim, else ~/.cache/metalclaim."""
    if os.environ.get("METALCLAIM_CACHE"):
        return Path(os.environ["METALCLAIM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "metalclaim"
