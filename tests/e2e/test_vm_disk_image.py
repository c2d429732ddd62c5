"""A tenant disk image through the deploy ISO on a real VM (metalclaim_dev.devenv.vms): deploy, clean, faults.

One VM for the module, its own control plane (the file runs alone or beside others). The claim layer's
steps and bmh_redfish run as the controller would run them (Site.reconcile_and_provision); the deploy ISO
is the collection's own (files/metalclaim-build-deploy-iso, cached), the tenant image is built here
(images.build_disk_image: GPT, FAT ESP made with mtools, a GRUB EFI binary printing a marker).
The tests run in order on that VM: a writer that never calls back, a wrong checksum then the tenant's fix
(provisioned, booted from its disk, the disk read back), deprovisioning with metadata cleaning and a second
tenant's provisioning. If the VM environment cannot start, every test fails with the reason: never a skip.
Each phase's duration is printed on stderr and written to <devenv>/vm-phases.json.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from metalclaim_dev.site import TENANT, Site, settle
from metalclaim_dev.support import eventually
from metalclaim_dev.vmenv import (
    CALLBACK_TIMEOUT,
    CLEANED_MILESTONE,
    DEPLOY_MILESTONES,
    DISK_MARKER,
    MIB,
    SerialWatch,
    check_disk_holds_the_image_and_config_drive,
    partition_table,
    power_on_watch,
    publish_images,
    read_at,
    record_boot,
    signatures,
    vm_environment,
    vm_site,
)

pytestmark = pytest.mark.minutes(7)

HOST = "vm-0"


@pytest.fixture(scope="module")
def vm_env(tmp_path_factory, pytestconfig):
    yield from vm_environment(tmp_path_factory, pytestconfig, "vm-disk")


# sushy-tools' libvirt driver copies an inserted ISO into its pool within the InsertMedia request (the deploy ISO is
# 144 MiB), and a reset waits on QEMU: 3 s (tests/site.FAST) timed out on a loaded 2-core machine.
VM_REDFISH_TIMEOUT = 30


@pytest.fixture(scope="module")
def media(vm_env) -> dict:
    """The deploy ISO and the tenant image on the devenv's image server; bmh_redfish's media options."""
    images = publish_images(vm_env)
    return {
        **images,
        "options": {
            "deploy_iso_url": images["deploy_iso_url"],
            "media_dir": vm_env.state["vms"]["media_dir"],
            "media_url": vm_env.state["vms"]["media_url"],
            "callback_timeout": CALLBACK_TIMEOUT,
            "redfish_timeout": VM_REDFISH_TIMEOUT,
        },
    }


@pytest.fixture(scope="module")
def site(vm_env, tmp_path_factory):
    yield from vm_site(vm_env, tmp_path_factory, "vm-disk-site")


def vm(vm_env) -> dict:
    return vm_env.state["vms"]["systems"][0]


def serial_log(vm_env) -> Path:
    return Path(vm(vm_env)["serial_log"])


def disk(vm_env) -> Path:
    return Path(vm(vm_env)["disk"])


def user_data_secret(site: Site, name: str, user_data: str) -> None:
    site.api("Secret", "v1", identity="tenant-a").create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": TENANT},
            "stringData": {"userData": user_data},
        }
    )


def drive(site: Site, options: dict, done, what: str, rounds: int = 20, wait: float = 45) -> None:
    """Rounds of the claim layer and the provisioner (as the controller runs them) until done().

    bmh_redfish steps a host again within a round while its requeue comes before `wait` is over, and returns
    as soon as nothing is due: a long wait saves Ansible runs, not time."""
    for _round in range(rounds):
        site.reconcile_and_provision(wait=wait, **options)
        if done():
            return
    host = site.read(HOST)
    raise AssertionError(f"{what}: not reached; host status {host.get('status')}")


def host_error(site: Site) -> tuple[str, str]:
    status = site.read(HOST).get("status") or {}
    return status.get("errorType") or "", status.get("errorMessage") or ""


def claim_condition(site: Site, claim: str, kind: str) -> dict:
    conditions = ((site.read_claim(claim) or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def powered_off(site: Site) -> bool:
    bmc = site.bmc(0)
    try:
        return bmc.power_state() == "Off"
    finally:
        bmc.close()


def test_the_vm_is_registered_and_available(vm_env, site, media):
    started = time.monotonic()
    site.host(HOST, 0, automatedCleaningMode="metadata")
    settle(site, HOST, "available", **media["options"])
    vm_env.state["phases"].record("register + inspect", started)
    assert partition_table(disk(vm_env)) is None and signatures(disk(vm_env)) == ""


def test_a_writer_that_never_calls_back_times_out_and_the_host_is_powered_off(vm_env, site, media):
    """Infra side (the host's own spec, no claim): the callback timeout far shorter than the deploy takes."""
    hosts = site.api("BareMetalHost")
    patch = {"spec": {"automatedCleaningMode": "disabled", "online": True, "image": media["image"]}}
    hosts.patch(body=patch, name=HOST, namespace=site.namespace, content_type="application/merge-patch+json")
    options = {**media["options"], "callback_timeout": 6, "backoff_base": 600, "backoff_cap": 600}
    started = time.monotonic()
    for _round in range(10):
        site.provision(wait=5, **options)
        if host_error(site)[0]:
            break
    error_type, message = host_error(site)
    assert error_type == "provisioning error", site.read(HOST).get("status")
    assert message == "no callback from the image writer within 6s"
    assert eventually(lambda: powered_off(site), timeout=30, message="the VM powered off")
    assert site.read(HOST)["status"]["poweredOn"] is False
    vm_env.state["phases"].record("fault: no callback -> provisioning error, powered off", started)
    # The infra team takes the image away: back to available (cleaning disabled: no deploy system boots).
    patch = {"spec": {"image": None, "online": False}}
    hosts.patch(body=patch, name=HOST, namespace=site.namespace, content_type="application/merge-patch+json")
    settle(site, HOST, "available", **media["options"])
    patch = {"spec": {"automatedCleaningMode": "metadata"}}
    hosts.patch(body=patch, name=HOST, namespace=site.namespace, content_type="application/merge-patch+json")
    assert partition_table(disk(vm_env)) is None and signatures(disk(vm_env)) == ""
    vm_env.state["phases"].record("fault: no callback, back to available", started)


def test_a_wrong_checksum_fails_cleanly_then_the_fixed_claim_boots_its_disk_image(vm_env, site, media):
    # The retry after the error waits 15 s: longer than a round's wait (10 s), so the round that records the error
    # returns at once and the tenant's fix is on the host before the retry.
    options = {**media["options"], "backoff_base": 15, "backoff_cap": 30}
    user_data = "#cloud-config\nhostname: tenant-disk\nruncmd: [echo metalclaim]\n"
    user_data_secret(site, "disk-userdata", user_data)
    wrong = {**media["image"], "checksum": "0" * 64}
    started = time.monotonic()
    site.claim("disk", image=wrong, online=True, userData={"name": "disk-userdata"})
    drive(site, options, lambda: host_error(site)[0] != "", "the wrong checksum's error", wait=10)
    error_type, message = host_error(site)
    assert error_type == "provisioning error"
    assert message == (
        f"the image writer failed: sha256 checksum mismatch: the image has {media['image']['checksum']}, "
        f"expected {'0' * 64}"
    )
    provisioned = claim_condition(site, "disk", "Provisioned")
    assert provisioned["status"] == "False" and provisioned["reason"] == "provisioningError", provisioned
    assert "sha256 checksum mismatch" in provisioned["message"]
    assert partition_table(disk(vm_env)) is None and signatures(disk(vm_env)) == ""  # nothing written
    assert read_at(disk(vm_env), 0, MIB) == bytes(MIB)
    vm_env.state["phases"].record("fault: wrong checksum -> provisioning error (claim and host)", started)

    # The tenant fixes the checksum: the retry (after the backoff) deploys; the VM boots from its disk.
    site.patch_claim("disk", {"spec": {"image": media["image"]}})
    serial = SerialWatch(serial_log(vm_env), (*DEPLOY_MILESTONES, ("marker", DISK_MARKER)))
    power_on = power_on_watch(vm_env, vm(vm_env))
    started = time.monotonic()
    drive(site, options, lambda: site.state(HOST) == "provisioned", "provisioned")
    provisioned_at = time.monotonic()
    eventually(lambda: DISK_MARKER in serial.text(), timeout=120, interval=1, message="the disk image's marker")
    seen = serial.stop()
    phases = vm_env.state["phases"]
    for name, _needle in DEPLOY_MILESTONES:
        phases.record(f"deploy: {name}", started, seen.get(name))
    phases.record("deploy: host provisioned", started, provisioned_at)
    phases.record("deploy: marker from the disk", started, seen.get("marker"))
    phases.record("deploy: reboot (provisioned -> marker)", provisioned_at, seen.get("marker"))
    record_boot(phases, "deploy", power_on, seen)
    condition = claim_condition(site, "disk", "Provisioned")
    assert condition["status"] == "True", condition
    assert not host_error(site)[0]

    # Powered off (the tenant's online: false), the disk file is read back.
    site.patch_claim("disk", {"spec": {"online": False}})
    # A short wait: a provisioned host's periodic power check would hold a long round to its end. A short soft
    # power-off timeout: the image's GRUB ignores ACPI, so the provisioner forces the power off after it.
    off = lambda: powered_off(site) and not site.read(HOST)["status"]["poweredOn"]  # noqa: E731
    drive(site, {**options, "power_off_timeout": 3}, off, "powered off", wait=5)
    check_disk_holds_the_image_and_config_drive(disk(vm_env), media["raw"], user_data)
    vm_env.state["phases"].record("deploy: powered off, disk file read back", started)


def test_deprovisioning_cleans_the_disk_and_a_second_tenant_provisions(vm_env, site, media):
    options = media["options"]
    # Tenant A also wrote to the second disk: a partition table and a marker (as its OS would).
    data_disk = Path(vm(vm_env)["data_disk"])
    subprocess.run(["sfdisk", "--quiet", str(data_disk)], input=b"label: gpt\nstart=2048, type=L\n", check=True)
    with data_disk.open("r+b") as handle:
        handle.seek(2048 * 512)
        handle.write(DISK_MARKER.encode())
    assert partition_table(data_disk) is not None
    serial = SerialWatch(serial_log(vm_env), (*DEPLOY_MILESTONES[:-2], CLEANED_MILESTONE))
    power_on = power_on_watch(vm_env, vm(vm_env))
    started = time.monotonic()
    site.api("HostClaim", identity="tenant-a").delete(name="disk", namespace=TENANT)
    drive(
        site,
        options,
        lambda: site.state(HOST) == "available" and site.read_claim("disk") is None,
        "deprovisioned and released",
    )
    seen = serial.stop()
    vm_env.state["phases"].record("deprovision: disk cleaned (writer)", started, seen.get("cleaned"))
    record_boot(vm_env.state["phases"], "cleaning", power_on, seen)
    vm_env.state["phases"].record("deprovision with metadata cleaning -> available", started)
    host = site.read(HOST)
    cleaned = next(c for c in host["status"]["conditions"] if c["type"] == "Cleaned")
    assert cleaned["status"] == "True" and cleaned["reason"] == "MetadataCleaned", cleaned
    assert host["status"]["poweredOn"] is False and not host_error(site)[0]
    assert signatures(disk(vm_env)) == "", signatures(disk(vm_env))
    assert partition_table(disk(vm_env)) is None
    # Every disk: tenant A's table and marker on the second one are gone for the next tenant.
    assert signatures(data_disk) == "" and partition_table(data_disk) is None
    assert DISK_MARKER.encode() not in read_at(data_disk, 0, 4 * 1024**2)
    assert "/dev/vdb" in cleaned["message"], cleaned  # reported per disk

    user_data = "#cloud-config\nhostname: second-tenant\n"
    user_data_secret(site, "second-userdata", user_data)
    serial = SerialWatch(serial_log(vm_env), (*DEPLOY_MILESTONES, ("marker", DISK_MARKER)))
    started = time.monotonic()
    site.claim("second", image=media["image"], online=True, userData={"name": "second-userdata"})
    drive(site, options, lambda: site.state(HOST) == "provisioned", "second provisioning")
    eventually(lambda: DISK_MARKER in serial.text(), timeout=120, interval=1, message="the marker, second time")
    seen = serial.stop()
    vm_env.state["phases"].record("second provisioning: marker from the disk", started, seen.get("marker"))
    # Read while the VM runs: the image's GRUB only prints and waits, nothing writes to the disk.
    check_disk_holds_the_image_and_config_drive(disk(vm_env), media["raw"], user_data)
