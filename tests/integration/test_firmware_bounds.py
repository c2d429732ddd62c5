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
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.site import TENANT, settle

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


ALLOWED = {"ProcVirtualization": "Enabled"}  # a setting a policy allows, that the tenant's claim never asks for


def write_settings(site, settings: dict) -> None:
    """As the claim side (its token may write HostFirmwareSettings): the host's spec.settings."""
    api = site.api("HostFirmwareSettings", identity="controller")
    body = {"spec": {"settings": settings}}
    try:
        api.patch(body=body, name="h0", namespace=site.namespace, content_type="application/merge-patch+json")
    except ApiException as error:
        if error.status != 404:
            raise
        api.create(
            body={
                "apiVersion": API_VERSION,
                "kind": "HostFirmwareSettings",
                "metadata": {"name": "h0", "namespace": site.namespace},
                **body,
            }
        )


def test_an_allowed_setting_nobody_asked_for_is_never_applied_to_a_claim(site, files):
    """Issue 40: a setting a policy allows, left in a host's HostFirmwareSettings (by the claim side's token, or by
    an earlier consumer), was applied to the next claim though it asked for nothing. Now the claim side empties it
    before the host gets the claim's image, and the provisioner applies only what the consumer HostClaim asks."""
    site.api("HostDeployPolicy").create(
        body={
            "apiVersion": API_VERSION,
            "kind": "HostDeployPolicy",
            "metadata": {"name": "firmware", "namespace": site.namespace},
            "spec": {
                "hostclaimNamespaces": {},
                "firmware": {"allowedSettings": [{"name": "ProcVirtualization", "values": ["Enabled"]}]},
            },
        }
    )
    iso_url = files.add("live.iso", b"live iso for a test\n" * 64)
    site.host("h0", 0)
    settle(site, "h0", "available")
    write_settings(site, ALLOWED)  # left before the claim
    site.claim("plain", image={"url": iso_url, "format": "live-iso"}, online=True)  # asks for no setting
    claim_steps = [
        {f"metalclaim.hostclaim.{module}": {"claims": [{"namespace": TENANT, "name": "plain"}]}}
        for module in ("hostclaim_bind", "hostclaim_secrets", "hostclaim_sync")
    ]
    site.run(claim_steps)
    hfs = site.api("HostFirmwareSettings").get(name="h0", namespace=site.namespace).to_dict()
    assert (hfs["spec"] or {}).get("settings") in ({}, None), hfs["spec"]  # emptied before the image went on
    assert site.read("h0")["spec"]["image"]["url"] == iso_url

    write_settings(site, ALLOWED)  # written again, after the claim side's sync: only the provisioner stands now
    for _round in range(4):
        site.provision(wait=2)
        if (site.read("h0").get("status") or {}).get("errorType"):
            break
    status = site.read("h0")["status"]
    assert status.get("errorType") == "provisioning error", status
    assert "ProcVirtualization" in status["errorMessage"]
    assert "the HostClaim holding the host does not ask for it" in status["errorMessage"], status["errorMessage"]
    bmc = site.bmc(0)
    try:
        assert bmc.power_state() == "Off" and not bmc.media("cd")["inserted"]  # nothing booted
    finally:
        bmc.close()
