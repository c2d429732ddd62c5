"""End to end on real VMs with the controller running: the tenant's HostClaim deploys a disk image and is released.

The controller runs as two processes, each as its own identity (as `make demo` and config/manager run it): the claim
side (`--controllers claims`, the `controller` identity) and the Redfish provisioner (`--controllers provisioner`, the
`provisioner` identity, with the deploy ISO and the devenv's media server). The test itself only acts as the infra
team (BMC Secrets, BareMetalHosts with metadata cleaning, the guide's HostDeployPolicy, in `infrahost`) and as the
tenant (`tenant-a`: a userData Secret and a HostClaim in `cluster-ns`, then its deletion); nobody runs a playbook.

METALCLAIM_E2E_VMS=N (default 1) runs the same flow on N VMs at once: N claims, each bound to its own VM.
Each phase's duration is printed on stderr (per VM when N > 1) and written to <devenv>/vm-phases.json; each test's
Redfish requests per VM to <devenv>/vm-redfish.json.
If the VM environment cannot start, every test fails with the reason: never a skip.
"""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import pytest

from metalclaim_dev.devenv.env import INFRA_NAMESPACE
from metalclaim_dev.devenv.vms import GUEST_GATEWAY
from metalclaim_dev.e2e import (
    METAL3,
    TENANT,
    TENANT_NAMESPACE,
    Controller,
    api_as,
    claim_condition,
    claim_error,
    claim_host,
    condition_once,
    host_name,
    host_state,
    host_status,
    infra_objects,
    read,
    vm_of,
)
from metalclaim_dev.support import eventually
from metalclaim_dev.vmenv import (
    CLEANED_MILESTONE,
    DEPLOY_MILESTONES,
    DISK_MARKER,
    RedfishRequests,
    SerialWatch,
    check_disk_holds_the_image_and_config_drive,
    partition_table,
    publish_images,
    signatures,
    start_media_server,
    stop_media_server,
    vm_environment,
)

pytestmark = pytest.mark.minutes(13)

VMS = int(os.environ.get("METALCLAIM_E2E_VMS", "1"))
# Seconds for N VMs under TCG on 2 shared cores: the deploys run side by side and share the CPU.
DEPLOY_TIMEOUT = 300 + 150 * VMS
# The fault test's callback timeout: the deploy ISO boots and writes within ~40 s here, the writer gives up
# calling back after ~60 s of attempts; the default (1800 s) would make the test wait half an hour.
FAULT_CALLBACK_TIMEOUT = 120
# A booking's start ahead of its creation, and its lease: the deploy (about a minute for one VM here) fits in it.
BOOKING_LEAD = 20
BOOKED_LEASE = 180
# Seconds from a booking's start (a lease's end) to the run acting on it, in server time: one run of the claim side
# (no standby run here; 3-5 s measured on a VM host under TCG). The claim layer's own latency is test_lease.py's.
NEXT_RUN = 15


@pytest.fixture(scope="module")
def env(tmp_path_factory, pytestconfig):
    yield from vm_environment(tmp_path_factory, pytestconfig, "e2e", count=VMS)


@pytest.fixture(scope="module")
def images(env) -> dict:
    return publish_images(env)


@pytest.fixture(scope="module")
def api(env):
    """api(kind, identity, api_version) -> the dynamic client's resource, as that identity."""
    return api_as(env, "infra", TENANT)


@pytest.fixture(autouse=True)
def redfish_cost(env, request):
    """Each test is a phase: its Redfish requests per VM are printed and kept in <devenv>/vm-redfish.json."""
    counter = RedfishRequests(env)
    yield
    env.state["phases"].requests(request.node.name.removeprefix("test_").replace("_", " "), counter.take())


@pytest.fixture(scope="module")
def controller(env, images, tmp_path_factory):
    started = time.monotonic()
    sides = Controller(env, images, tmp_path_factory.mktemp("e2e-controller"))
    try:
        env.state["phases"].record("controller started (claims, provisioner)", started)
        yield sides
    finally:
        sides.stop()


def claim_name(index: int) -> str:
    return f"e2e-{index}"


def user_data(index: int) -> str:
    return f"#cloud-config\nhostname: e2e-{index}\nruncmd: [echo metalclaim-e2e-{index}]\n"


def label(host: str, phase: str) -> str:
    return phase if VMS == 1 else f"{host}: {phase}"


def test_infra_registers_the_vms_and_they_are_inspected(env, api, controller):
    """As infra: BMC Secrets and BareMetalHosts (metadata cleaning), the guide's policy; the provisioner side
    registers and inspects every VM until available, its HardwareData as libvirt reports the VM."""
    objects = infra_objects(env)
    started = time.monotonic()
    env.apply("infra", objects)
    hosts = [host_name(index) for index in range(VMS)]
    eventually(
        lambda: all(host_state(api, host) == "available" for host in hosts),
        timeout=120 + 30 * VMS,
        interval=1,
        message=f"every host available\n{controller.output()}",
    )
    env.state["phases"].record(f"register + inspect ({VMS} host{'s' if VMS > 1 else ''})", started)
    for host in hosts:
        hardware = read(api, "HardwareData", "infra", host, INFRA_NAMESPACE)["spec"]["hardware"]
        assert hardware["nics"][0]["mac"] == vm_of(env, host)["boot_mac"], hardware
        assert hardware["cpu"]["count"] == 1 and hardware["ramMebibytes"] > 0, hardware
        assert partition_table(Path(vm_of(env, host)["disk"])) is None


def test_a_tenant_claim_deploys_the_disk_image_and_the_vm_boots_it(env, api, controller, images):
    """As the tenant: a userData Secret and a claim with the disk image, its checksum and online: true, per VM.
    The controller binds, copies and deploys (deploy ISO, image writer, callback); each VM then boots its disk."""
    watches = {
        system["name"]: SerialWatch(Path(system["serial_log"]), (*DEPLOY_MILESTONES, ("marker", DISK_MARKER)))
        for system in env.state["vms"]["systems"]
    }
    started = time.monotonic()
    for index in range(VMS):
        api("Secret", TENANT, "v1").create(
            body={
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{claim_name(index)}-userdata", "namespace": TENANT_NAMESPACE},
                "stringData": {"userData": user_data(index)},
            }
        )
        api("HostClaim", TENANT).create(
            body={
                "apiVersion": METAL3,
                "kind": "HostClaim",
                "metadata": {"name": claim_name(index), "namespace": TENANT_NAMESPACE},
                "spec": {
                    "online": True,
                    "image": images["image"],
                    "userData": {"name": f"{claim_name(index)}-userdata"},
                },
            }
        )
    claims = [claim_name(index) for index in range(VMS)]
    eventually(
        lambda: all(claim_condition(api, claim, "Association").get("status") == "True" for claim in claims),
        timeout=60,
        message=f"every claim associated\n{controller.output()}",
    )
    env.state["phases"].record("claims -> Association=True", started)
    provisioned_at: dict[str, float] = {}

    def all_provisioned() -> bool:
        for claim in claims:
            if claim not in provisioned_at and claim_condition(api, claim, "Provisioned").get("status") == "True":
                provisioned_at[claim] = time.monotonic()
        return len(provisioned_at) == len(claims)

    eventually(
        all_provisioned,
        timeout=DEPLOY_TIMEOUT,
        interval=1,
        message=f"every claim Provisioned\n{[claim_condition(api, c, 'Provisioned') for c in claims]}\n"
        f"{controller.output()}",
    )
    env.state["phases"].record(f"claims -> Provisioned=True ({VMS} at once)", started)
    bound = {claim: claim_host(api, claim) for claim in claims}
    assert sorted(bound.values()) == sorted(host_name(index) for index in range(VMS)), bound  # one VM per claim
    for claim, host in bound.items():
        watch = watches[vm_of(env, host)["name"]]
        eventually(
            lambda watch=watch: DISK_MARKER in watch.text(),
            timeout=180,
            interval=1,
            message=f"the disk image's marker on {host}'s serial console",
        )
        seen = watch.stop()
        phases = env.state["phases"]
        for name, _needle in DEPLOY_MILESTONES:
            phases.record(label(host, f"deploy: {name}"), started, seen.get(name))
        phases.record(label(host, "deploy: claim Provisioned"), started, provisioned_at[claim])
        phases.record(label(host, "deploy: marker from the disk"), started, seen.get("marker"))
        status = host_status(api, host)
        assert status["provisioning"]["state"] == "provisioned" and status["poweredOn"] is True, status
        assert not status.get("errorType"), status
        assert status["provisioning"]["image"]["url"] == images["image"]["url"]
        claim_object = read(api, "HostClaim", TENANT, claim, TENANT_NAMESPACE)
        assert claim_object["status"].get("poweredOn") is True, claim_object["status"]
        # Read while the VM runs: the image's GRUB only prints and waits, nothing writes to the disk.
        check_disk_holds_the_image_and_config_drive(
            Path(vm_of(env, host)["disk"]), images["raw"], user_data(int(claim.rsplit("-", 1)[1]))
        )
    for watch in watches.values():
        watch.stop()


def test_deleting_the_claims_deprovisions_with_metadata_cleaning_back_to_available(env, api, controller):
    """As the tenant: delete each claim. The claim side releases its host (metadata cleaning forced), the
    provisioner boots the deploy ISO to wipe the disk, powers it off; the host is available without a consumer."""
    hosts = [host_name(index) for index in range(VMS)]
    watches = {host: SerialWatch(Path(vm_of(env, host)["serial_log"]), (CLEANED_MILESTONE,)) for host in hosts}
    started = time.monotonic()
    for index in range(VMS):
        api("HostClaim", TENANT).delete(name=claim_name(index), namespace=TENANT_NAMESPACE)

    def released() -> bool:
        gone = all(read(api, "HostClaim", TENANT, claim_name(i), TENANT_NAMESPACE) is None for i in range(VMS))
        return gone and all(host_state(api, host) == "available" for host in hosts)

    eventually(
        released,
        timeout=DEPLOY_TIMEOUT,
        interval=1,
        message=f"claims gone, hosts available\n{[host_status(api, h) for h in hosts]}\n{controller.output()}",
    )
    env.state["phases"].record(f"claims deleted -> hosts cleaned and available ({VMS} at once)", started)
    for host in hosts:
        env.state["phases"].record(
            label(host, "deprovision: disk cleaned (writer)"), started, watches[host].stop().get("cleaned")
        )
        found = read(api, "BareMetalHost", "infra", host, INFRA_NAMESPACE)
        assert not found["spec"].get("consumerRef"), found["spec"]
        cleaned = next(c for c in found["status"]["conditions"] if c["type"] == "Cleaned")
        assert cleaned["status"] == "True" and cleaned["reason"] == "MetadataCleaned", cleaned
        assert found["status"]["poweredOn"] is False and not found["status"].get("errorType"), found["status"]
        disk = Path(vm_of(env, host)["disk"])
        assert signatures(disk) == "" and partition_table(disk) is None, signatures(disk)


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def server_time(created: dict) -> datetime.datetime:
    """An object's creationTimestamp: the API server's clock, which the controller's runs read as well."""
    return parse_time(created["metadata"]["creationTimestamp"])


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_booked_claim_binds_at_its_start_provisions_and_its_lease_end_cleans_the_vm(env, api, controller, images):
    """As the tenant: a claim booked BOOKING_LEAD seconds ahead for a lease of BOOKED_LEASE seconds. Until its start
    it is booked (no host shown, none consumed); at its start it binds (server times: the Association condition's
    transition against spec.lease.start) and deploys; at its lease's end the host goes back as a deleted claim's does:
    powered off, its disk cleaned, available; the claim stays, LeaseExpired."""
    host = host_name(0)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "booked-userdata", "namespace": TENANT_NAMESPACE},
    }
    made = api("Secret", TENANT, "v1").create(body={**secret, "stringData": {"userData": user_data(77)}}).to_dict()
    start = server_time(made) + datetime.timedelta(seconds=BOOKING_LEAD)
    watch = SerialWatch(Path(vm_of(env, host)["serial_log"]), (*DEPLOY_MILESTONES, CLEANED_MILESTONE))
    api("HostClaim", TENANT).create(
        body={
            "apiVersion": METAL3,
            "kind": "HostClaim",
            "metadata": {"name": "booked", "namespace": TENANT_NAMESPACE},
            "spec": {
                "online": True,
                "image": images["image"],
                "userData": {"name": "booked-userdata"},
                "lease": {"start": rfc3339(start), "duration": f"{BOOKED_LEASE}s"},
            },
        }
    )
    booked = eventually(
        lambda: (read(api, "HostClaim", TENANT, "booked", TENANT_NAMESPACE).get("status") or {}).get("booking"),
        timeout=30,
        message=f"the claim booked\n{controller.output()}",
    )
    assert parse_time(booked["start"]) == start, booked
    claim = read(api, "HostClaim", TENANT, "booked", TENANT_NAMESPACE)
    assert host not in str(claim) and INFRA_NAMESPACE not in str(claim), claim["status"]  # the tenant learns no host
    assert claim_host(api, "booked") is None  # booked, not bound: the host is nobody's yet
    association = eventually(
        lambda: condition_once(api, "booked", "Association", status="True"),
        timeout=BOOKING_LEAD + 60,
        interval=0.5,
        message=f"bound at its start\n{controller.output()}",
    )
    bound_seen = time.monotonic()
    bound_at = parse_time(association["lastTransitionTime"])
    late = (bound_at - start).total_seconds()
    env.state["phases"].record("booked claim: start -> bound (server times, 1 s steps)", bound_seen - late, bound_seen)
    assert 0 <= late <= NEXT_RUN, (association, rfc3339(start))  # never before its start; then the next run
    assert claim_host(api, "booked") == host
    eventually(
        lambda: claim_condition(api, "booked", "Provisioned").get("status") == "True",
        timeout=DEPLOY_TIMEOUT,
        interval=1,
        message=f"the booked claim Provisioned\n{read(api, 'BareMetalHost', 'infra', host, INFRA_NAMESPACE)}\n"
        f"{read(api, 'HostClaim', TENANT, 'booked', TENANT_NAMESPACE)}\n{controller.output()}",
    )
    env.state["phases"].record("booked claim: bound -> Provisioned=True", bound_seen)
    lease = read(api, "HostClaim", TENANT, "booked", TENANT_NAMESPACE)["status"]["lease"]
    end = parse_time(lease["end"])
    assert end == start + datetime.timedelta(seconds=BOOKED_LEASE), lease  # counted from the booked start
    expired = eventually(
        lambda: condition_once(api, "booked", "Lease", reason="LeaseExpired"),
        timeout=BOOKED_LEASE + 60,
        interval=0.5,
        message=f"the lease expired\n{controller.output()}",
    )
    expired_seen = time.monotonic()
    expired_at = parse_time(expired["lastTransitionTime"])
    expiry = (expired_at - end).total_seconds()
    env.state["phases"].record(
        "booked claim: lease end -> LeaseExpired (server times)", expired_seen - expiry, expired_seen
    )
    assert 0 <= expiry <= NEXT_RUN, (expired, lease)

    def released() -> bool:
        found = read(api, "BareMetalHost", "infra", host, INFRA_NAMESPACE)
        return not found["spec"].get("consumerRef") and host_state(api, host) == "available"

    eventually(
        released,
        timeout=DEPLOY_TIMEOUT,
        interval=1,
        message=f"released at the lease's end\n{host_status(api, host)}\n{controller.output()}",
    )
    env.state["phases"].record("booked claim: lease expired -> host cleaned, off, available", expired_seen)
    seen = watch.stop()
    assert "cleaned" in seen, sorted(seen)  # the deploy ISO wiped the disk
    found = read(api, "BareMetalHost", "infra", host, INFRA_NAMESPACE)
    cleaned = next(c for c in found["status"]["conditions"] if c["type"] == "Cleaned")
    assert cleaned["status"] == "True" and cleaned["reason"] == "MetadataCleaned", cleaned
    assert found["status"]["poweredOn"] is False and not found["status"].get("errorType"), found["status"]
    disk = Path(vm_of(env, host)["disk"])
    assert signatures(disk) == "" and partition_table(disk) is None, signatures(disk)
    assert claim_condition(api, "booked", "Lease").get("reason") == "LeaseExpired"  # it stays, for the tenant
    api("HostClaim", TENANT).delete(name="booked", namespace=TENANT_NAMESPACE)  # the tenant reads it, then goes
    eventually(
        lambda: read(api, "HostClaim", TENANT, "booked", TENANT_NAMESPACE) is None,
        timeout=60,
        message=f"the expired claim deleted\n{controller.output()}",
    )


def test_the_media_server_down_during_a_deploy_is_an_error_retried_after_backoff_until_provisioned(
    env, api, controller, images
):
    """The devenv's media server (config drives, the writer's callback) stopped twice during one claim's deploy.

    1. Down when the BMC fetches the config drive: the insert fails, a provisioning error naming the media URL on
       the host, provisioningError on the claim; the provisioner retries with Metal3's rule (errorCount counts the
       consecutive errors, each retry waits backoff_base * 2**(errorCount-1): 10 s, then 20 s).
    2. Up again: the retry inserts and boots the deploy ISO; down again once it runs: the writer's callback cannot
       reach it, so after --provision-callback-timeout the deploy is a timeout error (host powered off), retried.
    3. Up again: the retry deploys; the claim ends Provisioned and the VM boots its disk."""
    host = host_name(0)
    system = vm_of(env, host)
    controller.start_provisioner("--provision-callback-timeout", str(FAULT_CALLBACK_TIMEOUT))
    hosts = api("BareMetalHost", "infra")
    patch = {"metadata": {"labels": {"e2e-fault": "true"}}}  # the infra team marks the host the claim selects
    hosts.patch(body=patch, name=host, namespace=INFRA_NAMESPACE, content_type="application/merge-patch+json")
    phases = env.state["phases"]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "fault-userdata", "namespace": TENANT_NAMESPACE},
    }
    api("Secret", TENANT, "v1").create(body={**secret, "stringData": {"userData": user_data(99)}})

    stop_media_server(env)
    started = time.monotonic()
    api("HostClaim", TENANT).create(
        body={
            "apiVersion": METAL3,
            "kind": "HostClaim",
            "metadata": {"name": "fault", "namespace": TENANT_NAMESPACE},
            "spec": {
                "online": True,
                "image": images["image"],
                "userData": {"name": "fault-userdata"},
                "hostSelector": {"matchLabels": {"e2e-fault": "true"}},
            },
        }
    )
    errors: dict[int, float] = {}  # errorCount -> when first seen

    def error_count(upto: int) -> bool:
        count = int(host_status(api, host).get("errorCount") or 0)
        errors.setdefault(count, time.monotonic())
        return count >= upto

    eventually(lambda: error_count(2), timeout=120, interval=0.2, message=f"two errors\n{controller.output()}")
    status = host_status(api, host)
    assert status["errorType"] == "provisioning error", status
    assert status["errorMessage"].startswith(f"inserting {env.state['vms']['media_url']}/media/"), status
    assert "config-drive.iso into virtual media config" in status["errorMessage"], status
    condition = claim_error(api, "fault")
    assert GUEST_GATEWAY not in condition["message"], condition  # addresses are not the tenant's to see
    first_retry = errors[2] - errors[1]
    phases.record("fault 1: media server down -> first provisioning error", started, errors[1])
    phases.record("fault 1: first retry after (backoff 10 s)", errors[1], errors[2])
    assert first_retry >= 9, errors  # not before the backoff (10 s; polled every 0.2 s)

    watch = SerialWatch(Path(system["serial_log"]), (*DEPLOY_MILESTONES, ("marker", DISK_MARKER)))
    restarted = time.monotonic()
    start_media_server(env)
    eventually(
        lambda: "deploy ISO booted (init running)" in watch.seen,
        timeout=180,
        interval=0.5,
        message=f"the deploy ISO booting after the retry\n{host_status(api, host)}\n{controller.output()}",
    )
    assert errors[2] + 20 - 1 <= watch.seen["firmware boots the deploy ISO"], errors  # the second backoff: 20 s
    phases.record(
        "fault 1: media server up -> deploy ISO booted (retry after 20 s backoff)",
        restarted,
        watch.seen["deploy ISO booted (init running)"],
    )
    assert not host_status(api, host).get("errorType"), host_status(api, host)  # the insert went through

    stop_media_server(env)
    down = time.monotonic()
    eventually(
        lambda: host_status(api, host).get("errorType"),
        timeout=FAULT_CALLBACK_TIMEOUT + 120,
        interval=0.5,
        message=f"the callback timeout\n{host_status(api, host)}\n{controller.output()}",
    )
    timed_out = time.monotonic()
    status = host_status(api, host)
    assert status["errorType"] == "provisioning error" and status["errorCount"] == 1, status
    assert status["errorMessage"] == f"no callback from the image writer within {FAULT_CALLBACK_TIMEOUT:g}s", status
    assert status["poweredOn"] is False, status
    condition = claim_error(api, "fault")
    assert "no callback from the image writer" in condition["message"], condition
    assert "metalclaim-image-writer: callback: attempt 1 failed" in watch.text()  # the writer could not reach it
    assert "callback sent" not in watch.seen
    phases.record("fault 2: media server down during the deploy -> callback timeout error", down, timed_out)
    watch.stop()

    watch = SerialWatch(Path(system["serial_log"]), (*DEPLOY_MILESTONES, ("marker", DISK_MARKER)))
    start_media_server(env)
    restarted = time.monotonic()
    eventually(
        lambda: claim_condition(api, "fault", "Provisioned").get("status") == "True",
        timeout=DEPLOY_TIMEOUT,
        interval=1,
        message=f"Provisioned after the retry\n{host_status(api, host)}\n{controller.output()}",
    )
    provisioned = time.monotonic()
    eventually(lambda: DISK_MARKER in watch.text(), timeout=180, interval=1, message="the disk image's marker")
    seen = watch.stop()
    assert seen["firmware boots the deploy ISO"] - timed_out >= 9, seen  # the retry waited its backoff (10 s)
    phases.record("fault 2: media server up -> claim Provisioned (retry after 10 s backoff)", restarted, provisioned)
    phases.record("fault 2: media server up -> marker from the disk", restarted, seen["marker"])
    status = host_status(api, host)
    assert status["provisioning"]["state"] == "provisioned" and not status.get("errorType"), status
    assert status["errorCount"] == 0, status
    check_disk_holds_the_image_and_config_drive(Path(system["disk"]), images["raw"], user_data(99))
