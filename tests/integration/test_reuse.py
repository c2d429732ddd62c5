"""A host between two tenants (issue 22), played as the machine would see it: both controller sides as processes,
the emulated BMC read over time, the image writer played by the test from the config drive the BMC was given.

Tenant A powers its host on with no image (it may network-boot anything, and write to the disk). Tenant B waits for
exactly that host. When A deletes its claim, B may get the host only after a read says it is off and after it was
cleaned; and no cleaning medium (the config drive with the callback token) may go in while A's OS still runs.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.configdrive_reader import read_config_drive
from metalclaim_dev.netfixtures import post_json
from metalclaim_dev.sides import BmcTimeline, Sides
from metalclaim_dev.site import TENANT
from metalclaim_dev.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.minutes(2)]
TENANT_B, TENANT_B_NAMESPACE = "tenant-b", "tenant-b"


def conditions(obj: dict) -> dict:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_a_host_reaches_the_next_tenant_only_powered_off_and_cleaned(devenv, site, files, media_server, tmp_path):
    options = [
        *("--deploy-iso-url", files.add("writer.iso", b"image writer live system\n" * 64)),
        *("--media-dir", media_server["dir"], "--media-url", media_server["url"]),
    ]
    site.host("h0", 0)
    sides = Sides(devenv, site, tmp_path, *options)
    both = sides.output
    bmc = site.bmc(0)
    try:
        eventually(lambda: site.state("h0") == "available", timeout=90, message=f"h0 available\n{both()}")
        site.claim("a", online=True)  # tenant A: no image, powered on
        eventually(
            lambda: site.claim_powered_on("a") and bmc.power_state() == "On",
            timeout=60,
            message=f"A's host powered on\n{both()}",
        )
        selector = {"matchLabels": {"infra-kind": site.kind}}
        claims_b = site.api("HostClaim", identity=TENANT_B)
        claims_b.create(
            body={
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "HostClaim",
                "metadata": {"name": "b", "namespace": TENANT_B_NAMESPACE},
                "spec": {"hostSelector": selector, "online": False},
            }
        )

        def read_b() -> dict:
            return claims_b.get(name="b", namespace=TENANT_B_NAMESPACE).to_dict()

        eventually(lambda: "Association" in conditions(read_b()), timeout=30, message=f"B looked at\n{both()}")
        assert conditions(read_b())["Association"]["status"] == "False"  # the one matching host is A's

        with BmcTimeline(site.bmc(0)) as timeline:  # a client of its own: it reads from another thread
            deleted = time.monotonic()
            site.api("HostClaim", identity="tenant-a").delete(name="a", namespace=TENANT)

            # The image writer, as the cleaning boot would run it: it reads the config drive the BMC was given.
            def writer_booted() -> bool:
                media = bmc.media("config")
                return bool(media["inserted"]) and bmc.power_state() == "On"

            eventually(writer_booted, timeout=90, message=f"the cleaning writer booted\n{both()}")
            drive = read_config_drive(urllib.request.urlopen(bmc.media("config")["image"], timeout=5).read())
            deploy = json.loads(drive["metalclaim/deploy.json"])
            assert deploy["mode"] == "clean"
            post_json(deploy["callback"]["url"], {"status": "success", "message": "metadata wiped on /dev/sda"})

            def b_associated() -> bool:
                return conditions(read_b()).get("Association", {}).get("status") == "True"

            eventually(b_associated, timeout=90, interval=0.2, message=f"B Associated\n{both()}")
            associated = time.monotonic()
            host_when_b_bound = site.read("h0")
        samples = timeline.since(deleted)
        print(f"\nA deleted -> B Associated: {associated - deleted:.1f} s ({len(samples)} BMC reads)", end="")

        # A confirmed power-off of A's OS before any cleaning medium went in.
        first_insert = next(i for i, (_, _, inserted) in enumerate(samples) if inserted)
        assert any(power == "Off" for _, power, _ in samples[:first_insert]), samples[: first_insert + 1]
        assert all(power != "On" or not inserted for _, power, inserted in samples[:first_insert])
        # Cleaned, then off again, before B was bound.
        cleaned = conditions(host_when_b_bound)["Cleaned"]
        assert (cleaned["status"], cleaned["reason"]) == ("True", "MetadataCleaned"), cleaned
        assert host_when_b_bound["status"]["poweredOn"] is False
        before_b = [s for s in samples if s[0] <= associated]
        last_insert = max(i for i, (_, _, inserted) in enumerate(before_b) if inserted)
        assert any(power == "Off" and not inserted for _, power, inserted in before_b[last_insert + 1 :]), before_b[-5:]
        assert host_when_b_bound["spec"]["consumerRef"]["namespace"] == TENANT_B_NAMESPACE
    finally:
        bmc.close()
        sides.stop()
        with contextlib.suppress(ApiException):  # never created, or gone
            site.api("HostClaim").patch(
                body={"metadata": {"finalizers": None}},
                name="b",
                namespace=TENANT_B_NAMESPACE,
                content_type="application/merge-patch+json",
            )
            site.api("HostClaim").delete(name="b", namespace=TENANT_B_NAMESPACE)


def test_a_power_change_behind_our_back_shows_on_the_claim_within_the_poll_interval(devenv, site, tmp_path):
    site.host("h0", 0)
    poll = 3
    sides = Sides(devenv, site, tmp_path, "--provision-power-poll-interval", str(poll))
    both = sides.output
    bmc = site.bmc(0)
    try:
        eventually(lambda: site.state("h0") == "available", timeout=90, message=f"h0 available\n{both()}")
        site.claim("c", online=False)
        eventually(lambda: conditions(site.read_claim("c")).get("Association", {}).get("status") == "True", timeout=30)
        eventually(lambda: (site.read_claim("c").get("status") or {}).get("poweredOn") is False, timeout=30)
        time.sleep(poll + 1)  # settled: nothing is due but the poll
        bmc.set_power("On")  # behind our back, at the BMC
        changed = time.monotonic()
        eventually(
            lambda: (site.read_claim("c").get("status") or {}).get("poweredOn") is True,
            timeout=poll + 20,
            interval=0.2,
            message=f"the claim shows the power-on\n{both()}",
        )
        print(f"\npowered on at the BMC -> the claim says so in {time.monotonic() - changed:.1f} s", end="")
        # And the provisioner puts it back as the spec says (online: false).
        eventually(lambda: bmc.power_state() == "Off", timeout=60, message=f"powered off again\n{both()}")
    finally:
        bmc.close()
        sides.stop()
