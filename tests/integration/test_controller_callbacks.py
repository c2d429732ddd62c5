"""The image writer's callback as an event (issue 24): the provisioner side as its own process, with the media server,
steps the host whose writer called back at once, and no other; a callback no host's operation holds wakes nothing.

With --media-dir the provision role is told callbacks are events, so a host whose writer is at work asks for its next
step only a minute later: every run counted here within that minute is one a callback caused.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from metalclaim_dev.controllerproc import disk_image_provisioner, runs_of
from metalclaim_dev.netfixtures import post_json
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration
IMAGE = {"url": "http://127.0.0.1:9/img.qcow2", "format": "qcow2", "checksum": "0" * 64}


def test_a_writers_callback_steps_exactly_its_host_at_once(devenv, site, files, media_server, tmp_path):
    provisioner = disk_image_provisioner(devenv, site, files, media_server, tmp_path / "provisioner", ["h0", "h1"])
    key = f"host/{site.namespace}/h0"

    def operation(name):  # as the provisioner's pod sees it: the host's token references opened with the media key
        return site.operation(name, media_server["dir"])

    try:
        site.patch_hosts({"image": IMAGE, "online": True})
        for name in ("h0", "h1"):  # each writer booted: media in, powered, waiting for its callback
            eventually(
                lambda name=name: operation(name).get("powered"), timeout=60, message=f"{name}\n{provisioner.output()}"
            )

        # A callback under a token no host holds (as a withdrawn one's would be): seen and counted, nobody woken.
        unknown = os.path.join(media_server["dir"], "callbacks", "u" * 43 + ".json")
        with open(unknown, "w") as handle:
            handle.write('{"status": "success", "message": "", "received_at": 0}')
        eventually(lambda: provisioner.metric("metalclaim_callbacks_total", result="unknown") == 1, timeout=10)
        assert provisioner.metric("metalclaim_callbacks_total", result="woken") == 0

        token = operation("h0")["token"]
        called = time.monotonic()
        post_json(f"{media_server['url']}/callback/{token}", {"status": "success", "message": "ok"})
        # Its next look was a minute away: only the callback can step it this soon.
        eventually(lambda: site.state("h0") == "provisioned", timeout=15, message=provisioner.output())
        woken = time.monotonic() - called
        assert provisioner.metric("metalclaim_callbacks_total", result="woken") == 1
        assert runs_of(provisioner, key) >= 1
        # Exactly h0's key was queued by a callback; h1's writer is still at work, its host untouched.
        lines = provisioner.output(full=True).splitlines()
        wakes = [json.loads(line) for line in lines if '"event": "callback"' in line]
        assert [wake["hosts"] for wake in wakes] == [[f"{site.namespace}/h0"]], wakes
        assert site.state("h1") == "provisioning" and operation("h1").get("powered")
        # The token is a credential: the controller's log shows its first 6 characters only.
        log = provisioner.output(full=True)
        assert wakes[0]["token"] == token[:6] + "..."
        assert all(secret not in log for secret in (token, operation("h1")["token"], "u" * 43))
        print(f"\nwriter's callback -> host provisioned: {woken:.1f} s (its next look was 60 s away)", end="")
    finally:
        provisioner.stop()
