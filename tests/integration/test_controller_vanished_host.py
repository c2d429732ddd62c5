"""A bound host deleted by the infra team, through the controller: the claim loses it and binds another (issue 40).

Metal3's rule: a claim whose BareMetalHost is gone says so (`MissingBareMetalHost`) and re-enters selection; the
copies of its Secrets went with the old host and are made again beside the new one. Nobody runs a playbook here.
"""

from __future__ import annotations

import base64
import contextlib
import time

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A
from metalclaim_dev.controllerproc import ControllerProcess, associated, claim_side
from metalclaim_dev.devenv.env import role_binding
from metalclaim_dev.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.minutes(3)]
REACTION = 60  # seconds: a run took ~10 s on a loaded 2-core machine
PROVISIONER_FINALIZER = "baremetalhost.metal3.io"  # what a provisioner puts on the hosts it registered


@pytest.fixture
def controller(devenv, rack, tmp_path):
    process = ControllerProcess(devenv, tmp_path, *claim_side(rack))
    yield process
    process.stop()


def infra_may_edit_hosts(rack) -> None:
    """The infra team's identity in the rack's namespace, as in the devenv's infra namespace."""
    binding = role_binding("infra", rack.namespace, "metalclaim-infra", "infra")
    rack.api("admin", "RoleBinding", "rbac.authorization.k8s.io/v1").create(body=binding)


def host_of(rack, name: str) -> str:
    return ((rack.read_claim(name).get("status") or {}).get("hardwareData") or {}).get("name", "")


def reason(rack, name: str) -> str:
    conditions = (rack.read_claim(name).get("status") or {}).get("conditions") or []
    return next((c.get("reason", "") for c in conditions if c["type"] == "Association"), "")


def copy_text(rack, host: str) -> str:
    try:
        copied = rack.api("admin", "Secret", "v1").get(name=f"{host}-userdata", namespace=rack.namespace)
    except ApiException:
        return ""
    return base64.b64decode((copied.data or {}).get("userData", "")).decode()


@pytest.fixture
def finalized_hosts_let_go(rack):
    """The provisioner's finalizer, put on the rack's hosts by the test, dropped after it: no provisioner runs here to
    let them go, and a host left deleting, naming its claim, would stall the claim runs of this devenv's next tests."""
    yield
    hosts = rack.api("admin", "BareMetalHost")
    for host in hosts.get(namespace=rack.namespace).items:
        if PROVISIONER_FINALIZER in (host.metadata.finalizers or []):
            with contextlib.suppress(ApiException):
                hosts.patch(
                    body={"metadata": {"finalizers": None}},
                    name=host.metadata.name,
                    namespace=rack.namespace,
                    content_type="application/merge-patch+json",
                )


@pytest.mark.parametrize("finalizer", [False, True], ids=["no-finalizer", "provisioner-finalizer"])
def test_a_deleted_host_is_lost_and_the_claim_binds_the_other(controller, rack, finalizer, finalized_hosts_let_go):
    infra_may_edit_hosts(rack)
    rack.policy()
    hosts = rack.api("admin", "BareMetalHost")
    for name in ("first", "second"):
        rack.host(name)
        if finalizer:
            hosts.patch(
                body={"metadata": {"finalizers": [PROVISIONER_FINALIZER]}},
                name=name,
                namespace=rack.namespace,
                content_type="application/merge-patch+json",
            )
    ref = rack.tenant_secret("user-data", userData="#cloud-config\nsurvivor: 1\n")
    rack.claim("survivor", userData=ref)
    eventually(lambda: associated(rack, "survivor"), timeout=REACTION, message=f"bound\n{controller.output()}")
    held = host_of(rack, "survivor")
    other = "second" if held == "first" else "first"
    eventually(lambda: "survivor" in copy_text(rack, held), timeout=REACTION, message="userData copied")

    deleted = time.monotonic()
    rack.api("infra", "BareMetalHost").delete(name=held, namespace=rack.namespace)
    if finalizer:  # the provisioner's part: it powers the host off, then lets it go
        rack.set_state(held, "deleting")
        hosts.patch(
            body={"metadata": {"finalizers": None}},
            name=held,
            namespace=rack.namespace,
            content_type="application/merge-patch+json",
        )

    def gone() -> bool:
        try:
            rack.read_host(held)
        except ApiException as error:
            return error.status == 404
        return False

    eventually(gone, timeout=REACTION, message=f"{held} gone")
    eventually(
        lambda: host_of(rack, "survivor") == other and associated(rack, "survivor"),
        timeout=REACTION,
        message=f"survivor bound to {other} (now {host_of(rack, 'survivor')!r}, {reason(rack, 'survivor')})\n"
        f"{controller.output()}",
    )
    print(f"\nhost deleted -> Association=True on {other} in {time.monotonic() - deleted:.2f} s")
    assert rack.read_host(other)["spec"]["consumerRef"]["name"] == "survivor"
    eventually(lambda: "survivor" in copy_text(rack, other), timeout=REACTION, message=f"userData copied to {other}")
    print(f"host deleted -> userData beside {other} in {time.monotonic() - deleted:.2f} s")
    # The copy beside the host gone went with it (its owner reference: kube-controller-manager's garbage collector).
    eventually(lambda: copy_text(rack, held) == "", timeout=REACTION, message=f"{held}-userdata gone with {held}")
    uid = rack.read_claim("survivor")["metadata"]["uid"]  # Events outlive claims: this test's claim's own

    def missing_events() -> list:  # sent after the run's last status write
        found = rack.api("admin", "Event", "v1").get(
            namespace=TENANT_A, field_selector=f"involvedObject.uid={uid},reason=MissingBareMetalHost"
        )
        return [e.message for e in found.items]

    eventually(missing_events, timeout=REACTION, message="the MissingBareMetalHost Event")
    assert missing_events() == [f"BareMetalHost {rack.namespace}/{held} no longer exists"]
