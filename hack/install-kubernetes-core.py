"""Install the kubernetes.core collection without a Galaxy server.

The `ansible` package on PyPI ships every community collection; we download its
wheel (pinned by version and sha256, cached outside the repository) with pip and
extract only `ansible_collections/kubernetes/core` into a project-local
collections path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ANSIBLE_VERSION = "12.3.0"
WHEEL = f"ansible-{ANSIBLE_VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414"
PREFIX = "ansible_collections/kubernetes/core/"


def cached_wheel(cache: Path) -> Path:
    wheel = cache / WHEEL
    if not wheel.exists():
        cache.mkdir(parents=True, exist_ok=True)
        print(f"downloading {WHEEL} from PyPI (about 55 MB, once)", file=sys.stderr)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                f"ansible=={ANSIBLE_VERSION}",
                "--dest",
                str(cache),
            ],
            check=True,
        )
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        wheel.unlink()
        sys.exit(f"{WHEEL}: sha256 {digest} does not match the pinned {WHEEL_SHA256}; removed it")
    return wheel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dest", type=Path, required=True, help="collections path (holds ansible_collections/)")
    default_cache = Path(os.environ.get("METALCLAIM_CACHE", Path.home() / ".cache" / "metalclaim")) / "wheels"
    parser.add_argument("--cache", type=Path, default=default_cache)
    args = parser.parse_args()
    target = args.dest / PREFIX
    manifest = target / "MANIFEST.json"
    if manifest.exists():
        version = json.loads(manifest.read_text())["collection_info"]["version"]
        print(f"kubernetes.core {version} already in {args.dest}")
        return 0
    wheel = cached_wheel(args.cache)
    args.dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory(dir=args.dest) as tmp:
        members = [name for name in archive.namelist() if name.startswith(PREFIX)]
        archive.extractall(tmp, members)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(os.path.join(tmp, PREFIX), target)
    version = json.loads(manifest.read_text())["collection_info"]["version"]
    print(f"kubernetes.core {version} installed in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
