"""BIOS settings no policy allows are never applied (issue 40), as the claim side would write them, on the real API
server and the emulated fleet, the provisioner as its own identity.

The attack confirmed live: with the claim side's token, `HttpBootUri` and `SecureBoot` written into a free host's
HostFirmwareSettings (no HostDeployPolicy allows either), then the host's image and online: the provisioner went to
set both at provisioning (this emulator has no BIOS, so it stopped there, with "the BMC exposes no BIOS settings"; a
real BMC would have applied them). Now the provisioner applies only what an admitting policy of the host's namespace
allows for the namespace of the HostClaim holding the host: here none holds it, so nothing is allowed, and the step
is a provisioning error naming the setting before any BIOS is read or the host is powered.
"""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION

from metalclaim_dev.site import settle

pytestmark = pytest.mark.integration
WRITTEN = {"HttpBootUri": "http://10.9.9.9/evil.efi", "SecureBoot": "Disabled"}


def test_settings_the_claim_side_wrote_that_no_policy_allows_are_refused(site, files):
    iso_url = files.add("live.iso", b"live iso for a test\n" * 64)
    site.host("h0", 0)
    settle(site, "h0", "available")
    claim_side = "controller"  # the claim side's user: it may write HostFirmwareSettings and a host's image
    site.api("HostFirmwareSettings", identity=claim_side).create(
        body={
            "apiVersion": API_VERSION,
            "kind": "HostFirmwareSettings",
            "metadata": {"name": "h0", "namespace": site.namespace},
            "spec": {"settings": WRITTEN},
        }
    )
    site.api("BareMetalHost", identity=claim_side).patch(
        body={"spec": {"image": {"url": iso_url, "format": "live-iso"}, "online": True}},
        name="h0",
        namespace=site.namespace,
        content_type="application/merge-patch+json",
    )
    for _round in range(4):
        site.provision(wait=2)
        if (site.read("h0").get("status") or {}).get("errorType"):
            break
    status = site.read("h0")["status"]
    assert status["errorType"] == "provisioning error", status
    assert "no HostDeployPolicy of this namespace allows it" in status["errorMessage"], status["errorMessage"]
    assert "HttpBootUri" in status["errorMessage"]
    bmc = site.bmc(0)
    try:
        assert bmc.power_state() == "Off" and not bmc.media("cd")["inserted"]  # nothing booted
    finally:
        bmc.close()
    hfs = site.api("HostFirmwareSettings").get(name="h0", namespace=site.namespace).to_dict()
    valid = {c["type"]: c for c in hfs["status"]["conditions"]}["Valid"]
    assert (valid["status"], valid["reason"]) == ("False", "ConfigurationError")
