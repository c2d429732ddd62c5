"""Node reuse through the controller on the real API server: a released claim's host is held for the next claim of
its namespace with its reuse key (the HostDeployPolicy's spec.nodeReuse), nobody else binds it meanwhile (attacks:
a claim of another namespace with the same key, one of the same namespace without it or with another), and at the
hold's end it returns to the pool (cleaned first when the hold kept its disks). A policy that offers nothing binds
such a claim normally and says so.

Nobody runs a playbook and nothing polls: the controller wakes the released claim's key at the hold's end (the
outcome's `after`). The rack's hosts have no BMC: the test plays the provisioner where a host must be cleaned.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.request

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.reconcile import reconcile_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import now
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A, TENANT_B
from metalclaim_dev.configdrive_reader import read_config_drive
from metalclaim_dev.controllerproc import ControllerProcess, associated, association, claim_side
from metalclaim_dev.netfixtures import post_json
from metalclaim_dev.support import create_namespace, delete_namespaces, eventually

pytestmark = [pytest.mark.integration, pytest.mark.minutes(2)]
REACTION = 20  # seconds: a run is ~0.2-2 s
LATENCY = 5.0  # seconds from a hold's end to its mark removed: ~0.8 s measured, the rest is CI load
HOLD = "metalclaim.io/reuse-hold"
IN_USE = "provisioner.metalclaim.io/in-use"
UNCLEANED = "metalclaim.io/uncleaned"


@pytest.fixture
def controller(devenv, rack, tmp_path):
    process = ControllerProcess(devenv, tmp_path / "claims", *claim_side(rack), "--standby=true")
    yield process
    process.stop()


def reuse_policy(rack, hold: str | None = "1h", clean: bool | None = None, **fields) -> None:
    spec: dict = {"hostclaimNamespaces": {}, **fields}
    if hold is not None:
        spec["nodeReuse"] = {"maxHoldDuration": hold}
        if clean is not None:
            spec["nodeReuse"]["clean"] = clean
    rack.api("admin", "HostDeployPolicy").create(
        body={
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostDeployPolicy",
            "metadata": {"name": "policy", "namespace": rack.namespace},
            "spec": spec,
        }
    )


def condition(rack, name: str, type_: str, namespace: str = TENANT_A) -> dict:
    status = rack.read_claim(name, namespace).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def hold_of(rack, host: str) -> dict | None:
    text = (rack.read_host(host)["metadata"].get("annotations") or {}).get(HOLD)
    return json.loads(text) if text else None


def bound_to(rack, name: str, namespace: str = TENANT_A) -> str | None:
    recorded = (rack.read_claim(name, namespace).get("status") or {}).get("hardwareData") or {}
    return recorded.get("name")


def delete_claim(rack, name: str, identity: str = "tenant-a") -> None:
    rack.api(identity, "HostClaim").delete(name=name, namespace=TENANT_A)


def gone(rack, name: str) -> bool:
    names = [c["metadata"]["name"] for c in rack.api("admin", "HostClaim").get(namespace=TENANT_A).to_dict()["items"]]
    return name not in names


def seconds(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def unbound_for_no_host(rack, name: str, namespace: str = TENANT_A) -> bool:
    return condition(rack, name, "Association", namespace).get("reason") == "NoBareMetalHost"


def test_a_held_host_goes_only_to_the_next_claim_with_its_key(controller, rack):
    reuse_policy(rack, hold="1h")
    rack.host("h1")
    rack.claim("c1", nodeReuse={"key": "md-0"})
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 bound\n{controller.output()}")
    offered = condition(rack, "c1", "NodeReuse")
    assert (offered["status"], offered["reason"]) == ("True", "NodeReuseOffered"), offered
    assert "1h0m0s" in offered["message"]

    delete_claim(rack, "c1")
    eventually(lambda: gone(rack, "c1"), timeout=REACTION, message=f"c1 released\n{controller.output()}")
    host = rack.read_host("h1")
    assert "consumerRef" not in host["spec"]
    assert host["spec"]["online"] is False and "image" not in host["spec"]
    assert host["spec"]["automatedCleaningMode"] == "metadata"  # clean: true (the default)
    hold = hold_of(rack, "h1")
    assert (hold["namespace"], hold["key"], hold["claim"], hold["cleaned"]) == (TENANT_A, "md-0", "c1", True)
    assert 3500 < seconds(hold["until"]) - time.time() <= 3600

    # Attacks, each with the identity its tenant has: the same key from another namespace, the same namespace
    # without the key, with another key. None gets the held host, and none learns of it.
    rack.claim("x-ns", namespace=TENANT_B, identity="tenant-b", nodeReuse={"key": "md-0"})
    rack.claim("x-nokey")
    rack.claim("x-key", nodeReuse={"key": "md-1"})
    for name, namespace in (("x-ns", TENANT_B), ("x-nokey", TENANT_A), ("x-key", TENANT_A)):
        eventually(
            lambda name=name, namespace=namespace: unbound_for_no_host(rack, name, namespace),
            timeout=REACTION,
            message=f"{name} refused\n{controller.output()}",
        )
        shown = json.dumps(rack.read_claim(name, namespace).get("status"))
        assert rack.namespace not in shown and "h1" not in shown, shown
    assert hold_of(rack, "h1") is not None and "consumerRef" not in rack.read_host("h1")["spec"]

    rack.claim("c2", nodeReuse={"key": "md-0"})
    eventually(lambda: associated(rack, "c2"), timeout=REACTION, message=f"c2 bound\n{controller.output()}")
    assert bound_to(rack, "c2") == "h1"
    assert hold_of(rack, "h1") is None  # the binding write took the mark off
    reused = condition(rack, "c2", "NodeReuse")
    assert (reused["status"], reused["reason"]) == ("True", "ReusedHost"), reused
    for name, namespace in (("x-ns", TENANT_B), ("x-nokey", TENANT_A), ("x-key", TENANT_A)):
        assert association(rack, name, namespace) == "False"


def startup(controller) -> float:
    """Seconds from the controller's start to its first standby run ready (from its log; 0 when not seen yet)."""
    for line in controller.output().splitlines():
        if '"standby_ready"' in line:
            return float(json.loads(line)["seconds"])
    return 0.0


def wait_hold_end(rack, host: str, until: float, controller) -> float:
    """Poll the host until its hold mark is gone; the wall time it was seen gone."""
    deadline = until + REACTION
    while hold_of(rack, host) is not None and time.time() < deadline:
        time.sleep(0.05)
    assert hold_of(rack, host) is None, controller.output()
    return time.time()


def test_an_uncleaned_hold_ends_on_time_across_a_restart_and_is_cleaned_first(devenv, rack, tmp_path):
    """The controller is restarted during the hold: the new one never saw the release, and ends it on time all the
    same. The host held uncleaned goes to nobody before its provisioner cleaned it."""
    reuse_policy(rack, hold="10s", clean=False)
    rack.host("h1")
    rack.claim("c1", nodeReuse={"key": "md-0"})
    first = ControllerProcess(devenv, tmp_path / "first", *claim_side(rack), "--standby=true")
    try:
        eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 bound\n{first.output()}")
        delete_claim(rack, "c1")
        # Held once given back (the mark is written with the scrub already, beside the disabled cleaning).
        eventually(
            lambda: hold_of(rack, "h1") is not None and "consumerRef" not in rack.read_host("h1")["spec"],
            timeout=REACTION,
            message=f"held\n{first.output()}",
        )
        hold = hold_of(rack, "h1")
        assert hold["cleaned"] is False
        assert rack.read_host("h1")["spec"]["automatedCleaningMode"] == "disabled"  # the disks kept for md-0
        rack.claim("other")  # no key: waits through the hold
        eventually(lambda: unbound_for_no_host(rack, "other"), timeout=REACTION, message="other waits")
    finally:
        first.stop()
    restarted = time.time()
    second = ControllerProcess(devenv, tmp_path / "second", *claim_side(rack), "--standby=true")
    try:
        until = seconds(hold["until"])
        ended = wait_hold_end(rack, "h1", until, second)
        print(f"\nhold end -> mark removed (controller restarted during the hold): {ended - until:+.2f} s")
        assert ended - until >= -0.5, second.output()  # never early
        # On time when the new controller was up before the end (its first run carries the deadline); else at once.
        assert ended - max(until, restarted + startup(second)) <= LATENCY, second.output()
        host = rack.read_host("h1")
        assert host["spec"]["automatedCleaningMode"] == "metadata"
        assert IN_USE in host["metadata"]["annotations"]  # deprovisioned with cleaning before anyone binds it
        assert association(rack, "other") == "False"

        assert UNCLEANED in host["metadata"]["annotations"]  # only the wipe takes it off
        # The provisioner's part, played: it cleans the host and takes the marks off. The waiting claim binds it.
        rack.api("admin", "BareMetalHost").patch(
            body={"metadata": {"annotations": {IN_USE: None, UNCLEANED: None}}},
            name="h1",
            namespace=rack.namespace,
            content_type="application/merge-patch+json",
        )
        eventually(lambda: associated(rack, "other"), timeout=REACTION, message=f"other bound\n{second.output()}")
    finally:
        second.stop()


def test_a_lease_end_holds_the_host_for_the_key(controller, rack):
    reuse_policy(rack, hold="1h")
    rack.host("h1")
    rack.host("h2")
    rack.claim("c1", nodeReuse={"key": "cp"}, lease={"duration": "4s"})
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 bound\n{controller.output()}")
    first = bound_to(rack, "c1")
    eventually(
        lambda: condition(rack, "c1", "Lease").get("reason") == "LeaseExpired",
        timeout=REACTION,
        message=f"c1 expired\n{controller.output()}",
    )
    eventually(lambda: hold_of(rack, first) is not None, timeout=REACTION, message="held after the lease")
    assert hold_of(rack, first)["claim"] == "c1"
    rack.claim("c2", nodeReuse={"key": "cp"})  # two hosts free to it: the held one wins
    eventually(lambda: associated(rack, "c2"), timeout=REACTION, message=f"c2 bound\n{controller.output()}")
    assert bound_to(rack, "c2") == first


def test_a_lease_end_where_leases_are_capped_returns_the_host_to_the_pool(controller, rack):
    """Issue 40: a lease ending into a hold, then the next leased claim with the key taking it, and so on, kept one
    host from the pool past maxLeaseDuration for ever. Where leases are capped, no hold: another tenant gets it."""
    reuse_policy(rack, hold="1h", maxLeaseDuration="1h")
    rack.host("h1")
    rack.claim("c1", nodeReuse={"key": "cp"}, lease={"duration": "4s"})
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 bound\n{controller.output()}")
    said = condition(rack, "c1", "NodeReuse")
    assert (said["status"], said["reason"]) == ("False", "NodeReuseNotOffered") and "maxLeaseDuration" in said[
        "message"
    ]
    eventually(
        lambda: condition(rack, "c1", "Lease").get("reason") == "LeaseExpired",
        timeout=REACTION,
        message=f"c1 expired\n{controller.output()}",
    )
    rack.claim("other", namespace=TENANT_B, identity="tenant-b", lease={"duration": "1h"})  # no key
    eventually(
        lambda: associated(rack, "other", TENANT_B), timeout=REACTION, message=f"other bound\n{controller.output()}"
    )
    assert hold_of(rack, "h1") is None


def test_a_policy_without_node_reuse_binds_normally_and_holds_nothing(controller, rack):
    reuse_policy(rack, hold=None)
    rack.host("h1")
    rack.claim("c1", nodeReuse={"key": "md-0"})
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 bound\n{controller.output()}")
    refused = condition(rack, "c1", "NodeReuse")
    assert (refused["status"], refused["reason"]) == ("False", "NodeReuseNotOffered"), refused
    assert rack.namespace not in refused["message"] and "h1" not in refused["message"]
    delete_claim(rack, "c1")
    rack.claim("c2")
    eventually(lambda: associated(rack, "c2"), timeout=REACTION, message=f"c2 bound\n{controller.output()}")
    assert hold_of(rack, "h1") is None


def release_uncleaned(rack, controller, namespace: str = TENANT_A, identity: str = "tenant-a") -> None:
    """Claim c1 (key md-0) bound to h1, then deleted: h1 held for `namespace` with its disks kept."""
    rack.claim("c1", namespace=namespace, identity=identity, nodeReuse={"key": "md-0"})
    eventually(lambda: associated(rack, "c1", namespace), timeout=REACTION, message=f"c1 bound\n{controller.output()}")
    rack.api(identity, "HostClaim").delete(name="c1", namespace=namespace)
    eventually(
        lambda: hold_of(rack, "h1") is not None and "consumerRef" not in rack.read_host("h1")["spec"],
        timeout=REACTION,
        message=f"held\n{controller.output()}",
    )
    assert hold_of(rack, "h1")["cleaned"] is False
    assert UNCLEANED in rack.read_host("h1")["metadata"]["annotations"]


def test_a_hold_removed_by_hand_sends_no_uncleaned_disks_to_another_tenant(controller, rack):
    """Issue 40: the infra guide said to remove the hold annotation to end a hold early; on a clean: false hold
    that sent tenant A's uncleaned disks to tenant B's next claim. Now the host stays marked uncleaned (a mark
    only the provisioner's wipe removes): B's claim waits, and the host is sent to cleaning first."""
    reuse_policy(rack, hold="1h", clean=False)
    rack.host("h1")
    release_uncleaned(rack, controller)
    rack.api("admin", "BareMetalHost").patch(  # the infra team, ending the hold by hand
        body={"metadata": {"annotations": {HOLD: None}}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    rack.claim("b", namespace=TENANT_B, identity="tenant-b")  # tenant B, no key
    eventually(
        lambda: IN_USE in (rack.read_host("h1")["metadata"].get("annotations") or {}),
        timeout=REACTION,
        message=f"sent to cleaning\n{controller.output()}",
    )
    eventually(lambda: unbound_for_no_host(rack, "b", TENANT_B), timeout=REACTION, message="b waits")
    host = rack.read_host("h1")
    assert host["spec"]["automatedCleaningMode"] == "metadata" and "consumerRef" not in host["spec"]
    assert UNCLEANED in host["metadata"]["annotations"]
    # The provisioner's wipe, played: both marks go. B gets a cleaned host.
    rack.api("admin", "BareMetalHost").patch(
        body={"metadata": {"annotations": {IN_USE: None, UNCLEANED: None}}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    eventually(lambda: associated(rack, "b", TENANT_B), timeout=REACTION, message=f"b bound\n{controller.output()}")


def test_a_namespace_made_again_under_the_same_name_inherits_no_held_host(controller, rack):
    """Issue 40: a hold matched its namespace by name, so a namespace deleted and created again under that name
    (or another tenant's child namespace of the same name) inherited the host and its uncleaned disks."""
    name = f"reuse-{rack.namespace}"[:63]
    admin = rack.clients["admin"]
    create_namespace(admin, name)
    try:
        reuse_policy(rack, hold="1h", clean=False)
        rack.host("h1")
        release_uncleaned(rack, controller, namespace=name, identity="admin")
        first_uid = hold_of(rack, "h1")["namespaceUID"]
        delete_namespaces(admin, [name], kinds=("HostClaim",))
        create_namespace(admin, name)  # another namespace object of the same name: a new owner
        rack.claim("c2", namespace=name, identity="admin", nodeReuse={"key": "md-0"})
        eventually(
            lambda: unbound_for_no_host(rack, "c2", name),
            timeout=REACTION,
            message=f"c2 not given the held host\n{controller.output()}",
        )
        assert "consumerRef" not in rack.read_host("h1")["spec"]
        assert hold_of(rack, "h1")["namespaceUID"] == first_uid
        current = rack.api("admin", "Namespace", "v1").get(name=name).metadata.uid
        assert current != first_uid
    finally:
        delete_namespaces(admin, [name], kinds=("HostClaim",))


def reconcile(devenv, rack) -> dict:
    """One hostclaim_reconcile run over the rack's claims in this process, as the controller identity (its writes
    counted exactly)."""
    run = ClaimRun(Kube({"kubeconfig": devenv.kubeconfig("controller")}), rack.claim_args(), now(), False)
    return run.finish(reconcile_claims(run))


def writes(result: dict) -> int:
    return sum(n for verb, n in result["api_calls"].items() if verb in ("create", "replace", "patch", "delete"))


def test_each_step_is_idempotent(devenv, rack):
    """hostclaim_reconcile run twice at each stage of a reuse: the second run writes nothing."""
    reuse_policy(rack, hold="1h")
    rack.host("h1")
    rack.claim("c1", nodeReuse={"key": "md-0"})

    def twice() -> dict:
        first = reconcile(devenv, rack)
        again = reconcile(devenv, rack)
        assert writes(again) == 0 and not again["changed"], again
        return first

    assert twice()["bind"]["bound"] == 1
    delete_claim(rack, "c1")
    released = twice()
    assert released["release"]["claims"][0]["state"] == "released"
    assert writes(released) == 3, released["api_calls"]  # scrub, consumerRef cleared and marked, finalizer
    assert hold_of(rack, "h1")["key"] == "md-0"
    rack.claims.remove((TENANT_A, "c1"))
    # A run that does not hold the released claim's key (as after a restart) carries the hold's end on a claim of
    # its own: the controller runs that one again then.
    rack.claim("bystander")
    run = ClaimRun(
        Kube({"kubeconfig": devenv.kubeconfig("controller")}),
        [{"namespace": TENANT_A, "name": "bystander"}],
        now(),
        False,
    )
    outcome = next(o for o in run.finish(reconcile_claims(run))["outcomes"] if o["name"] == "bystander")
    assert (outcome["result"], outcome["reason"]) == ("wait", "NoBareMetalHost"), outcome
    assert 3500 < outcome["after"] <= 3600, outcome
    rack.claim("c2", nodeReuse={"key": "md-0"})
    twice()
    assert bound_to(rack, "c2") == "h1" and hold_of(rack, "h1") is None
    assert condition(rack, "c2", "NodeReuse")["reason"] == "ReusedHost"


def test_the_claim_side_may_add_the_in_use_mark_but_never_take_it_off(rack):
    """The host-fields admission policy, attacked as the claim side's identity: the hold mark is its own; the
    provisioner's in-use mark it may add (a hold ended uncleaned), never change or remove (which would hand a dirty
    host to the next tenant)."""
    rack.host("h1")
    hosts = rack.api("controller", "BareMetalHost")

    def merge(annotations: dict) -> int:
        try:
            hosts.patch(
                body={"metadata": {"annotations": annotations}},
                name="h1",
                namespace=rack.namespace,
                content_type="application/merge-patch+json",
            )
        except ApiException as error:  # the API server refusing is the point
            return getattr(error, "status", 0)
        return 200

    assert merge({HOLD: '{"namespace":"x"}'}) == 200
    assert merge({HOLD: None}) == 200
    assert merge({IN_USE: '{"consumer":""}'}) == 200
    assert merge({IN_USE: '{"consumer":"other"}'}) == 403  # changed
    assert merge({IN_USE: None}) == 403  # removed
    assert merge({"provisioner.metalclaim.io/operation": "{}"}) == 403  # any other provisioner mark
    assert IN_USE in rack.read_host("h1")["metadata"]["annotations"]
    # The uncleaned mark likewise: added by a release that keeps the disks; only the provisioner's wipe removes it.
    assert merge({UNCLEANED: '{"namespace":"t"}'}) == 200
    assert merge({UNCLEANED: '{"namespace":"other"}'}) == 403  # changed
    assert merge({UNCLEANED: None}) == 403  # removed
    assert UNCLEANED in rack.read_host("h1")["metadata"]["annotations"]


def test_with_the_provisioner_an_uncleaned_hold_is_wiped_before_the_pool(devenv, site, files, media_server, tmp_path):
    """On the emulated BMC with the real provisioner: clean: false deprovisions the released host without wiping it
    (no cleaning medium goes in); when the hold ends unused, the provisioner wipes it (the image writer's cleaning,
    played by the test from its config drive) before the waiting claim gets it."""
    options = [
        *("--deploy-iso-url", files.add("writer.iso", b"image writer live system\n" * 64)),
        *("--media-dir", media_server["dir"], "--media-url", media_server["url"]),
    ]
    site.api("HostDeployPolicy").patch(
        body={"spec": {"nodeReuse": {"maxHoldDuration": "5s", "clean": False}}},
        name="policy",
        namespace=site.namespace,
        content_type="application/merge-patch+json",
    )
    site.host("h0", 0)
    serve = ("--infra-namespaces", site.namespace, "--controllers")
    claims_side = ControllerProcess(devenv, tmp_path / "claims", *serve, "claims", "--standby=true")
    provisioner = ControllerProcess(
        devenv, tmp_path / "provisioner", *serve, "provisioner", *options, kubeconfig_identity="provisioner"
    )

    def both() -> str:
        return f"claims:\n{claims_side.output()}\nprovisioner:\n{provisioner.output()}"

    def host_conditions() -> dict:
        return {c["type"]: c for c in (site.read("h0").get("status") or {}).get("conditions") or []}

    def claim_association(name: str) -> str | None:
        found = (site.read_claim(name) or {}).get("status") or {}
        return next((c["status"] for c in found.get("conditions") or [] if c["type"] == "Association"), None)

    bmc = site.bmc(0)
    try:
        eventually(lambda: site.state("h0") == "available", timeout=90, message=f"h0 available\n{both()}")
        site.claim("a", online=True, nodeReuse={"key": "md-0"})
        eventually(
            lambda: site.claim_powered_on("a") and bmc.power_state() == "On",
            timeout=60,
            message=f"a's host powered on\n{both()}",
        )
        site.api("HostClaim", identity="tenant-a").delete(name="a", namespace=TENANT_A)

        # Held once given back: the mark (written with the scrub already, as the host-fields guard wants it beside
        # a disabled cleaning) and no consumerRef.
        def held() -> bool:
            host = site.read("h0")
            return HOLD in (host["metadata"].get("annotations") or {}) and not host["spec"].get("consumerRef")

        eventually(held, timeout=60, message=f"held\n{both()}")
        kept = host_conditions()["Cleaned"]
        assert (kept["status"], kept["reason"]) == ("False", "CleaningDisabled"), kept  # the disks kept for md-0
        assert bmc.power_state() == "Off"
        site.claim("other", online=False)  # no key: waits through the hold, then through the wipe

        def writer_booted() -> bool:
            media = bmc.media("config")
            return bool(media["inserted"]) and bmc.power_state() == "On"

        eventually(writer_booted, timeout=60, message=f"the hold ended: cleaning writer booted\n{both()}")
        assert claim_association("other") == "False"
        drive = read_config_drive(urllib.request.urlopen(bmc.media("config")["image"], timeout=5).read())
        deploy = json.loads(drive["metalclaim/deploy.json"])
        assert deploy["mode"] == "clean"
        post_json(deploy["callback"]["url"], {"status": "success", "message": "metadata wiped on /dev/sda"})
        eventually(lambda: claim_association("other") == "True", timeout=60, message=f"other bound\n{both()}")
        wiped = host_conditions()["Cleaned"]
        assert (wiped["status"], wiped["reason"]) == ("True", "MetadataCleaned"), wiped
    finally:
        bmc.close()
        claims_side.stop()
        provisioner.stop()
