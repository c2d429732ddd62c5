"""Fast track on real VMs (issue 27): the same disk image deployed cold (the deploy ISO boots) and warm (the writer
its last cleaning booted is still running and takes the job), in one run, with the controller's two sides.

METALCLAIM_WARM_VMS=N VMs (default 1, as CI runs it; 4 for the issue's figures): N claims at once cold,
released (cleaned, kept warm: the infrastructure namespace's warm pool is N), N claims at once warm; then (N > 1) one
claim alone on one warm VM; then a warm VM killed while it waits (libvirt destroys it, as a power loss would) falls
back to the deploy ISO and its claim is still Provisioned.
Each phase's duration is printed and written to <devenv>/vm-phases.json, Redfish requests per VM to vm-redfish.json.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import WARM_ANNOTATION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import warm

from metalclaim_dev.devenv.env import INFRA_NAMESPACE
from metalclaim_dev.e2e import (
    METAL3,
    TENANT,
    TENANT_NAMESPACE,
    Controller,
    api_as,
    claim_condition,
    claim_host,
    host_name,
    host_status,
    infra_objects,
    read,
    vm_of,
)
from metalclaim_dev.support import eventually
from metalclaim_dev.vmenv import (
    DEPLOY_MILESTONES,
    DISK_MARKER,
    RedfishRequests,
    SerialWatch,
    publish_images,
    vm_environment,
)

pytestmark = pytest.mark.minutes(7)

VMS = int(os.environ.get("METALCLAIM_WARM_VMS", "1"))
# What a warm writer prints on the serial console as it takes a job (no firmware, no deploy ISO boot before it).
WARM_MILESTONES = (
    ("writer took the job", "metalclaim-image-writer: start: mode deploy"),
    ("image written", "metalclaim-image-writer: config-drive"),
    ("callback sent", "metalclaim-image-writer: callback: success reported"),
)
DEPLOY_TIMEOUT = 300 + 150 * VMS


@pytest.fixture(scope="module")
def env(tmp_path_factory, pytestconfig):
    yield from vm_environment(tmp_path_factory, pytestconfig, "warm", count=VMS)


@pytest.fixture(scope="module")
def images(env) -> dict:
    return publish_images(env)


@pytest.fixture(scope="module")
def api(env):
    return api_as(env, "admin", "infra", TENANT)


@pytest.fixture(autouse=True)
def redfish_cost(env, request):
    counter = RedfishRequests(env)
    yield
    env.state["phases"].requests(request.node.name.removeprefix("test_").replace("_", " "), counter.take())


@pytest.fixture(scope="module")
def controller(env, images, tmp_path_factory):
    # Standby runs on both sides: a run waits started for the next batch, as a latency-minded operator runs it.
    sides = Controller(env, images, tmp_path_factory.mktemp("warm-controller"), "--standby")
    try:
        yield sides
    finally:
        sides.stop()


def warm_hosts(api) -> list[str]:
    hosts = [h.to_dict() for h in api("BareMetalHost", "infra").get(namespace=INFRA_NAMESPACE).items]
    return sorted(h["metadata"]["name"] for h in hosts if WARM_ANNOTATION in (h["metadata"].get("annotations") or {}))


def claim(api, name: str, images) -> None:
    api("HostClaim", TENANT).create(
        body={
            "apiVersion": METAL3,
            "kind": "HostClaim",
            "metadata": {"name": name, "namespace": TENANT_NAMESPACE},
            "spec": {"online": True, "image": images["image"]},
        }
    )


def deploy(env, api, controller, images, names: list[str], phase: str, milestones=DEPLOY_MILESTONES) -> dict:
    """Claims created at once; {claim: (host, seconds to Provisioned=True)}, each VM seen booting its disk."""
    watches = {
        system["name"]: SerialWatch(Path(system["serial_log"]), (*milestones, ("marker", DISK_MARKER)))
        for system in env.state["vms"]["systems"]
    }
    started = time.monotonic()
    for name in names:
        claim(api, name, images)
    provisioned_at: dict[str, float] = {}

    def all_provisioned() -> bool:
        for name in names:
            if name not in provisioned_at and claim_condition(api, name, "Provisioned").get("status") == "True":
                provisioned_at[name] = time.monotonic()
        return len(provisioned_at) == len(names)

    eventually(
        all_provisioned,
        timeout=DEPLOY_TIMEOUT,
        interval=0.2,
        message=f"{phase}: every claim Provisioned\n{controller.output()}",
    )
    result = {}
    for name in names:
        host = claim_host(api, name)
        result[name] = (host, round(provisioned_at[name] - started, 1))
        env.state["phases"].record(f"{phase}: {host} claim -> Provisioned", started, provisioned_at[name])
        watch = watches[vm_of(env, host)["name"]]
        eventually(lambda watch=watch: DISK_MARKER in watch.text(), timeout=180, message=f"{host} boots its disk")
        seen = watch.stop()
        for milestone, _needle in (*milestones, ("marker", DISK_MARKER)):
            if seen.get(milestone):
                env.state["phases"].record(f"{phase}: {host} {milestone}", started, seen[milestone])
    for watch in watches.values():
        watch.stop()
    env.state["phases"].record(f"{phase}: all {len(names)} Provisioned", started, max(provisioned_at.values()))
    return result


def release(env, api, controller, names: list[str], phase: str, warm_expected: int) -> None:
    started = time.monotonic()
    for name in names:
        api("HostClaim", TENANT).delete(name=name, namespace=TENANT_NAMESPACE)
    eventually(
        lambda: (
            all(read(api, "HostClaim", TENANT, n, TENANT_NAMESPACE) is None for n in names)
            and len(warm_hosts(api)) == warm_expected
        ),
        timeout=DEPLOY_TIMEOUT,
        interval=1,
        message=f"{phase}: claims gone, {warm_expected} hosts warm\n{controller.output()}",
    )
    env.state["phases"].record(f"{phase}: claims deleted -> hosts cleaned and warm", started)


def test_infra_registers_the_vms_with_a_warm_pool(env, api, controller):
    objects = infra_objects(env)
    # The infrastructure team's opt-in: every host of the namespace may stay warm.
    api("Namespace", "admin", "v1").patch(
        body={"metadata": {"annotations": {warm.POOL_ANNOTATION: str(VMS)}}},
        name=INFRA_NAMESPACE,
        content_type="application/merge-patch+json",
    )
    started = time.monotonic()
    env.apply("infra", objects)
    eventually(
        lambda: all(
            (host_status(api, host_name(i)).get("provisioning") or {}).get("state") == "available" for i in range(VMS)
        ),
        timeout=120 + 30 * VMS,
        interval=1,
        message=f"every host available\n{controller.output()}",
    )
    env.state["phases"].record(f"register + inspect ({VMS} hosts)", started)


def test_cold_every_vm_at_once(env, api, controller, images):
    """The usual path, as the baseline: the deploy ISO boots on each VM."""
    deploy(env, api, controller, images, [f"cold-{i}" for i in range(VMS)], f"cold ({VMS} at once)")


def test_released_vms_are_cleaned_and_kept_warm(env, api, controller):
    release(env, api, controller, [f"cold-{i}" for i in range(VMS)], "cold", warm_expected=VMS)
    for index in range(VMS):
        status = host_status(api, host_name(index))
        assert status["poweredOn"] is True and status["provisioning"]["state"] == "available", status


def test_warm_every_vm_at_once_then_one_alone(env, api, controller, images):
    """The same image again: each warm VM's writer takes its job; no deploy ISO boot. With more than one VM, one is
    then released (cleaned, warm again) and deployed alone: the single-host figure beside the at-once one."""
    deploy(env, api, controller, images, [f"warm-{i}" for i in range(VMS)], f"warm ({VMS} at once)", WARM_MILESTONES)
    assert warm_hosts(api) == []
    reasons = {e.reason for e in api("Event", "infra", "v1").get(namespace=INFRA_NAMESPACE).items}
    assert "WarmFallback" not in reasons and "WarmHostLost" not in reasons, reasons
    if VMS > 1:
        release(env, api, controller, ["warm-0"], "one", warm_expected=1)
        deploy(env, api, controller, images, ["warm-0"], "warm (one alone)", WARM_MILESTONES)


def test_a_warm_vm_killed_while_it_waits_falls_back_and_its_claim_is_provisioned(env, api, controller, images):
    release(env, api, controller, ["warm-0"], "before the kill", warm_expected=1)
    (host,) = warm_hosts(api)
    import libvirt  # the VM environment's: only here, where the VMs are

    connection = libvirt.open(env.state["vms"]["libvirt_uri"])
    try:
        connection.lookupByName(vm_of(env, host)["name"]).destroy()  # the plug pulled: no shutdown, no goodbye
    finally:
        connection.close()
    deploy(env, api, controller, images, ["after-kill"], "killed warm host: fallback to the deploy ISO")
    events = api("Event", "infra", "v1").get(namespace=INFRA_NAMESPACE).items
    assert {e.reason for e in events if e.involvedObject.name == host} & {"WarmHostLost", "WarmFallback"}
