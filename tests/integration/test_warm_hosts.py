"""Fast track (issue 27), played as the machine would see it: both controller sides as processes, the emulated BMC
read over time, the image writer played by the test from what it is given (the cleaning's config drive, then the job
handed to it over the media server).

A cleaned host in a namespace with a warm pool stays on in the deploy system, its writer polling for a job; it is
given back (and bound again) while on; a disk-image claim bound to it is written by that writer with no virtual media
inserted and no power cycle; a warm host found off falls back to booting the deploy ISO without losing the claim.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import WARM_ANNOTATION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import warm
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.machine import (
    CONFIG_DRIVE_FILE,
    OPERATION_ANNOTATION,
    WARM,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.media_protocol import NEXT_FILE

from metalclaim_dev.configdrive_reader import read_config_drive
from metalclaim_dev.netfixtures import post_json
from metalclaim_dev.sides import BmcTimeline, Sides
from metalclaim_dev.site import TENANT
from metalclaim_dev.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.minutes(4)]
IMAGE = {"url": "http://127.0.0.1:9/node.qcow2", "format": "qcow2", "checksum": "0" * 64, "checksumType": "sha256"}


def conditions(obj: dict) -> dict:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def post_status(url: str, body: dict) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def the_claim_side_gets_nothing_from_the_host(site, media_url: str) -> dict:
    """Issue 40's attack, as the claim side (the devenv's `controller` user), which may read every host: each value of
    the host's recorded operation tried as a media token. Tokens opened the cleaning's callback (a host given back
    unwiped) and a warm writer's next job (another tenant's config drive); the host now holds references only."""
    host = site.api("BareMetalHost", identity="controller").get(name="h0", namespace=site.namespace).to_dict()
    recorded = json.loads(host["metadata"]["annotations"][OPERATION_ANNOTATION])
    assert recorded.get("token"), recorded
    for value in (v for v in recorded.values() if isinstance(v, str)):
        for filename in (NEXT_FILE, CONFIG_DRIVE_FILE):
            assert http_status(f"{media_url}/media/{value}/{filename}") == 404, (filename, recorded)
        assert post_status(f"{media_url}/callback/{value}", {"status": "success", "message": "forged"}) == 404
    return recorded


def handed_job(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def boot_writer(bmc, both) -> dict:
    """The writer as the BMC boots it: the instructions on the config drive inserted while powered on."""
    eventually(
        lambda: bmc.media("config")["inserted"] and bmc.power_state() == "On",
        timeout=90,
        message=f"the writer booted\n{both()}",
    )
    drive = read_config_drive(urllib.request.urlopen(bmc.media("config")["image"], timeout=5).read())
    return json.loads(drive["metalclaim/deploy.json"])


def clean_until_warm(site, bmc, both) -> dict:
    """Play the cleaning's writer; returns its warm instructions once the host is available and warm."""
    cleaning = boot_writer(bmc, both)
    assert cleaning["mode"] == "clean" and set(cleaning["warm"]) == {"next", "ack"}, cleaning
    assert http_status(cleaning["warm"]["next"]) == 404  # no job yet
    media_url = cleaning["callback"]["url"].rsplit("/callback/", 1)[0]
    assert the_claim_side_gets_nothing_from_the_host(site, media_url)["kind"] == "clean"
    post_json(cleaning["callback"]["url"], {"status": "success", "message": "metadata wiped on /dev/sda"})

    def warm_and_free() -> bool:
        host = site.read("h0")
        annotations = host["metadata"].get("annotations") or {}
        return WARM_ANNOTATION in annotations and not host["spec"].get("consumerRef")

    eventually(warm_and_free, timeout=90, message=f"h0 warm and given back\n{both()}")
    assert the_claim_side_gets_nothing_from_the_host(site, media_url)["kind"] == WARM
    return cleaning["warm"]


def release(site, bmc, name: str, both) -> dict:
    """Delete the claim, play its host's cleaning: the warm instructions, once the claim is gone."""
    site.api("HostClaim", identity="tenant-a").delete(name=name, namespace=TENANT)
    waiting = clean_until_warm(site, bmc, both)
    eventually(lambda: site.read_claim(name) is None, timeout=60, message=f"{name} released\n{both()}")
    return waiting


def test_a_cleaned_host_stays_warm_and_its_writer_deploys_the_next_claim(devenv, site, files, media_server, tmp_path):
    options = [
        *("--deploy-iso-url", files.add("writer.iso", b"image writer live system\n" * 64)),
        *("--media-dir", media_server["dir"], "--media-url", media_server["url"]),
    ]
    site.api("Namespace", "v1").patch(
        body={"metadata": {"annotations": {warm.POOL_ANNOTATION: "1"}}},
        name=site.namespace,
        content_type="application/merge-patch+json",
    )
    site.host("h0", 0)
    sides = Sides(devenv, site, tmp_path, *options)
    both = sides.output
    bmc = site.bmc(0)
    try:
        eventually(lambda: site.state("h0") == "available", timeout=90, message=f"h0 available\n{both()}")
        site.claim("a", online=True)  # a first tenant's use: the host must be cleaned after it
        eventually(
            lambda: site.claim_powered_on("a") and bmc.power_state() == "On",
            timeout=60,
            message=f"a's host powered on\n{both()}",
        )
        waiting = release(site, bmc, "a", both)
        host = site.read("h0")
        assert host["status"]["poweredOn"] is True and host["status"]["provisioning"]["state"] == "available"
        assert conditions(host)["Cleaned"]["reason"] == "MetadataCleaned"
        assert bmc.power_state() == "On" and bmc.media("cd")["inserted"] and not bmc.media("config")["inserted"]

        # The next claim, a disk image: handed to the waiting writer, under a token of its own.
        with BmcTimeline(site.bmc(0)) as timeline:
            created = time.monotonic()
            site.claim("b", image=IMAGE, online=True)
            job = eventually(lambda: handed_job(waiting["next"]), timeout=60, message=f"a job handed\n{both()}")
            handed = time.monotonic()
            drive = read_config_drive(urllib.request.urlopen(job["config_drive"], timeout=5).read())
            deploy = json.loads(drive["metalclaim/deploy.json"])
            assert deploy["mode"] == "deploy" and deploy["image"]["url"] == IMAGE["url"]
            wait_token = waiting["next"].split("/")[-2]
            assert wait_token not in job["config_drive"] and deploy["callback"]["token"] != wait_token
            post_json(waiting["ack"], {"status": "success", "message": "job taken"})
            written = time.monotonic()
            post_json(deploy["callback"]["url"], {"status": "success", "message": "qcow2 image written"})

            def provisioned() -> bool:
                return conditions(site.read_claim("b") or {}).get("Provisioned", {}).get("status") == "True"

            eventually(provisioned, timeout=60, interval=0.2, message=f"b Provisioned\n{both()}")
            done = time.monotonic()
        samples = timeline.since(created)
        print(
            f"\nwarm: claim -> job handed {handed - created:.1f} s, claim -> Provisioned {done - created:.1f} s "
            f"({len(samples)} BMC reads)",
            end="",
        )
        # No virtual media went in, and the host stayed on until the image was written (then it restarts into its
        # disk): the deploy ISO did not boot again.
        assert not any(inserted for _, _, inserted in samples), samples
        assert all(power == "On" for at, power, _ in samples if at <= written), f"{samples}\n{both()}"

        host = site.read("h0")
        assert host["spec"]["consumerRef"]["name"] == "b"
        assert WARM_ANNOTATION not in (host["metadata"].get("annotations") or {})
        assert http_status(waiting["next"]) == 404  # the wait token is withdrawn with the job

        # A warm host found off (killed while it waited) falls back to the deploy ISO; the claim is not lost.
        waiting = release(site, bmc, "b", both)
        bmc.set_power("ForceOff")
        site.claim("c", image=IMAGE, online=True)
        cold = boot_writer(bmc, both)
        assert cold["mode"] == "deploy"
        assert http_status(waiting["next"]) == 404  # the dead writer's token means nothing any more
        post_json(cold["callback"]["url"], {"status": "success", "message": "qcow2 image written"})
        eventually(
            lambda: conditions(site.read_claim("c") or {}).get("Provisioned", {}).get("status") == "True",
            timeout=60,
            message=f"c Provisioned after the fallback\n{both()}",
        )
        reasons = {e["reason"] for e in site.events() if (e.get("involvedObject") or {}).get("name") == "h0"}
        assert reasons & {"WarmHostLost", "WarmFallback"}, reasons
    finally:
        bmc.close()
        sides.stop()
        with contextlib.suppress(Exception):
            site.cleanup()
