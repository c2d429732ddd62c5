"""Provisioning slots (issue 24): the provisioner side as its own process with --provision-max-concurrent 1. A host
waiting for the slot (`delayed`) reads nothing from its BMC, and starts as soon as the host holding the slot gives it
up, not at its own requeue 10 s later.

The slot is given up at a moment the test chooses: the first host provisions a disk image, so it holds the slot until
its writer's callback, posted right after the waiting host's step (its next step of its own is 10 s away then).
"""

from __future__ import annotations

import time

import pytest

from metalclaim_dev.controllerproc import disk_image_provisioner, runs_of
from metalclaim_dev.netfixtures import post_json
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration
IMAGE = {"url": "http://127.0.0.1:9/img.qcow2", "format": "qcow2", "checksum": "0" * 64}


def test_a_host_giving_up_its_slot_starts_the_waiting_host_at_once(devenv, site, files, media_server, tmp_path):
    provisioner = disk_image_provisioner(
        devenv, site, files, media_server, tmp_path / "provisioner", ["h0", "h1"], "--provision-max-concurrent", "1"
    )
    waiting_key = f"host/{site.namespace}/h1"

    def operation(name):  # as the provisioner's pod sees it: the host's token references opened with the media key
        return site.operation(name, media_server["dir"])

    def delayed() -> bool:
        return (site.read("h1").get("status") or {}).get("operationalStatus") == "delayed"

    try:
        site.patch_hosts({"image": IMAGE, "online": True})  # h0 first: the slot goes in name order
        eventually(lambda: operation("h0").get("powered"), timeout=60, message=provisioner.output())
        eventually(delayed, timeout=30, message=provisioner.output())
        assert site.state("h1") == "available" and site.state("h0") == "provisioning"
        # Right after one of h1's own steps: its next is 10 s away, and only h0 giving up the slot can start it sooner.
        stepped = runs_of(provisioner, waiting_key)
        eventually(lambda: runs_of(provisioner, waiting_key) > stepped, timeout=15, message=provisioner.output())
        assert delayed()

        post_json(f"{media_server['url']}/callback/{operation('h0')['token']}", {"status": "success", "message": "ok"})
        freed = time.monotonic()
        eventually(lambda: site.state("h0") == "provisioned", timeout=15, message=provisioner.output())
        eventually(lambda: site.state("h1") == "provisioning", timeout=6, message=provisioner.output())
        started = time.monotonic() - freed
        assert operation("h1") == {} or operation("h1").get("kind") == "deploy"
        print(f"\nslot given up -> waiting host provisioning: {started:.1f} s (its next step was 10 s away)", end="")
    finally:
        provisioner.stop()
