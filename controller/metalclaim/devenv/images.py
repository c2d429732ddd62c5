"""Boot media built on this machine from Debian packages, cached outside the repository.

The deploy ISO comes from the collection's own script (files/metalclaim-build-deploy-iso), the one the
infrastructure guide tells infra teams to run; the test images (a live ISO and a tenant disk image that
print a marker on the serial console) come from build-test-images.sh beside this file.
"""

from __future__ import annotations

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
    """{"iso": path, "kernel": "<package> <version>", "cached": bool}"""
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


def _grub_version() -> str:
    return subprocess.run(["grub-mkrescue", "--version"], capture_output=True, text=True, check=False).stdout


def cache_dir() -> Path:
    """The build scripts' cache: $METALCLAIM_CACHE, else $XDG_CACHE_HOME/metalclaim, else ~/.cache/metalclaim."""
    if os.environ.get("METALCLAIM_CACHE"):
        return Path(os.environ["METALCLAIM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "metalclaim"
