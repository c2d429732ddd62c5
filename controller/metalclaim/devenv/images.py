"""Boot media built on this machine from Debian packages, cached outside the repository.

The deploy ISO comes from the collection's own script (files/metalclaim-build-deploy-iso), the one the
infrastructure guide tells infra teams to run; the test images (a live ISO and a tenant disk image that
print a marker on the serial console) come from build-test-images.sh beside this file.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from . import REPO_ROOT
from .processes import DevenvError

DEPLOY_ISO_SCRIPT = REPO_ROOT / "files" / "metalclaim-build-deploy-iso"
TEST_IMAGES_SCRIPT = Path(__file__).with_name("build-test-images.sh")


def _run_builder(argv: list[str]) -> dict:
    """Run a build script (progress on stderr, passed through) and parse the JSON on its last stdout line."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise DevenvError(f"{Path(argv[1]).name} failed (exit {result.returncode}); see the log above")
    return json.loads(result.stdout.strip().splitlines()[-1])


def build_deploy_iso(force: bool = False) -> dict:
    """{"iso": path, "kernel": "<package> <version>", "cached": bool}"""
    return _run_builder(["bash", str(DEPLOY_ISO_SCRIPT), *(["--force"] if force else [])])
