"""The controller as its own process on the real API server: API changes alone drive the claim layer.

The tenant and the infra team only write objects (as their own identities); nobody runs a
playbook. Each reaction must come within seconds, not at the next resync (set to an hour here).
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from metalclaim.controller.scope import shard_of
from metalclaim_dev.claimlayer import TENANT_A, TENANT_B
from metalclaim_dev.controllerproc import ControllerProcess, associated, association, claim_side, fence, runs_of
from metalclaim_dev.controllerproc import provisioner as provisioner_side
from metalclaim_dev.site import TENANT
from metalclaim_dev.support import REPO_ROOT, eventually, run_playbook

pytestmark = [pytest.mark.integration, pytest.mark.minutes(5)]
REACTION = 20  # seconds: a run is ~1-2 s of ansible-runner; generous for a loaded CI machine


@pytest.fixture
def controller(devenv, rack, tmp_path):
    process = ControllerProcess(devenv, tmp_path, *claim_side(rack))
    yield process
    process.stop()


def test_a_claim_binds_with_nobody_running_a_playbook(controller, rack):
    rack.policy()
    rack.host("h1")
    created = time.monotonic()
    rack.claim("c1")
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{controller.output()}")
    print(f"\ncreate -> Association=True in {time.monotonic() - created:.2f} s")
    assert rack.read_host("h1")["spec"]["consumerRef"]["name"] == "c1"
    # The run's own writes (finalizer, lock, status, the host's consumerRef) caused no further run.
    key = f"claim/{TENANT_A}/c1"
    eventually(lambda: runs_of(controller, key) == 1, timeout=10, message="the binding run logged")
    fence(controller, rack)
    assert runs_of(controller, key) == 1, controller.output()
    assert controller.metric("metalclaim_events_dropped_total", kind="HostClaim") >= 1


def test_a_policy_admitting_the_namespace_binds_its_waiting_claim(controller, rack):
    rack.host("h1")
    rack.claim("c1")
    eventually(lambda: association(rack, "c1") == "False", timeout=REACTION, message="c1 waiting")
    rack.policy()
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{controller.output()}")


def test_a_host_becoming_available_binds_a_waiting_claim(controller, rack):
    rack.policy()
    rack.host("h1", state="deprovisioning")
    rack.claim("c1")
    eventually(
        lambda: association(rack, "c1") == "False",
        timeout=REACTION,
        message="c1 waiting",
    )
    rack.set_state("h1", "available")
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{controller.output()}")


def test_a_claim_gone_runs_again_only_while_a_host_still_names_it(controller, rack, clients):
    # Names of their own: Events outlive the claims, and other files count those of "c1" in the shared namespace.
    rack.policy()
    rack.host("h1")
    rack.claim("gone-a")
    eventually(
        lambda: associated(rack, "gone-a"), timeout=REACTION, message=f"gone-a associated\n{controller.output()}"
    )
    claims = rack.api("admin", "HostClaim")
    fence(controller, rack, "fence0")  # the binding run logged
    # Released the usual way: one run for the deletion; the claim going (our finalizer's removal) causes none.
    runs = runs_of(controller, f"claim/{TENANT_A}/gone-a")
    claims.delete(name="gone-a", namespace=TENANT_A)
    eventually(lambda: "gone-a" not in claim_names(claims), timeout=REACTION, message="gone-a gone")
    fence(controller, rack, "fence1")
    assert runs_of(controller, f"claim/{TENANT_A}/gone-a") == runs + 1, controller.output()
    assert not rack.read_host("h1")["spec"].get("consumerRef")
    # Its finalizer stripped by an admin while bound: the host still names the claim gone, and is given back.
    rack.claim("gone-b", hostSelector={"matchLabels": {"infra-kind": rack.kind}})
    eventually(
        lambda: associated(rack, "gone-b"), timeout=REACTION, message=f"gone-b associated\n{controller.output()}"
    )
    host = next(
        h
        for h in ("h1", "fence0-host", "fence1-host")
        if rack.read_host(h)["spec"].get("consumerRef", {}).get("name") == "gone-b"
    )
    claims.patch(
        name="gone-b",
        namespace=TENANT_A,
        body={"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    claims.delete(name="gone-b", namespace=TENANT_A)
    eventually(
        lambda: not rack.read_host(host)["spec"].get("consumerRef"),
        timeout=REACTION,
        message=f"{host} given back\n{controller.output()}",
    )


def claim_names(claims) -> set:
    return {c["metadata"]["name"] for c in claims.get(namespace=TENANT_A).to_dict()["items"]}


def test_a_revoked_policy_shows_on_the_bound_claim(controller, rack, clients):
    rack.policy()
    rack.host("h1")
    rack.claim("c1")
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message="c1 associated")
    rack.api("admin", "HostDeployPolicy").delete(name="policy", namespace=rack.namespace)

    def revoked() -> bool:
        claim = rack.read_claim("c1")
        return any(c.get("reason") == "AuthorizationRevoked" for c in claim["status"]["conditions"])

    eventually(revoked, timeout=REACTION, message=f"revocation on c1\n{controller.output()}")


def test_an_edited_tenant_secret_is_copied_again(controller, rack, clients):
    """The claim side watches Secrets' metadata in the claim's namespace: an edit reaches the copy in seconds."""
    rack.policy()
    rack.host("h1")
    ref = rack.tenant_secret("user-data", userData="#cloud-config\nfirst: 1\n")
    rack.claim("c1", userData=ref)
    copies = clients["admin"].resources.get(api_version="v1", kind="Secret")

    def copied() -> str:
        try:
            copy = copies.get(name="h1-userdata", namespace=rack.namespace)
        except ApiException:
            return ""
        return base64.b64decode(copy.data["userData"]).decode()

    eventually(lambda: "first" in copied(), timeout=REACTION, message=f"copied\n{controller.output()}")
    rack.api("tenant-a", "Secret", "v1").patch(
        body={"stringData": {"userData": "#cloud-config\nsecond: 2\n"}},
        name=ref["name"],
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    eventually(lambda: "second" in copied(), timeout=REACTION, message=f"copied again\n{controller.output()}")


def test_a_namespace_label_removed_shows_on_the_bound_claim(controller, rack):
    """hasLabels is read from the claim's Namespace: losing the label revokes the claim's authorization."""
    namespaces = rack.api("admin", "Namespace", "v1")
    label = {rack.namespace: "yes"}  # a label of this test's own, on the shared tenant namespace
    namespaces.patch(body={"metadata": {"labels": label}}, name=TENANT_A, content_type="application/merge-patch+json")
    try:
        rack.policy({"hasLabels": [{"name": rack.namespace, "value": "yes"}]})
        rack.host("h1")
        rack.claim("c1")
        eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{controller.output()}")
        namespaces.patch(
            body={"metadata": {"labels": {rack.namespace: None}}},
            name=TENANT_A,
            content_type="application/merge-patch+json",
        )

        def revoked() -> bool:
            claim = rack.read_claim("c1")
            return any(c.get("reason") == "AuthorizationRevoked" for c in claim["status"]["conditions"])

        eventually(revoked, timeout=REACTION, message=f"revocation on c1\n{controller.output()}")
    finally:
        namespaces.patch(
            body={"metadata": {"labels": {rack.namespace: None}}},
            name=TENANT_A,
            content_type="application/merge-patch+json",
        )


def test_two_shards_split_the_claims_by_namespace(devenv, rack, tmp_path):
    """--shard 0/2 and 1/2 (each its own Lease): every claim is reconciled by the shard of its namespace only."""
    assert shard_of(TENANT_A, 2) != shard_of(TENANT_B, 2)  # the devenv's two tenants fall in different shards
    shards = {
        index: ControllerProcess(
            devenv, tmp_path / str(index), *claim_side(rack, leader_elect=True), "--shard", f"{index}/2"
        )
        for index in range(2)
    }
    try:
        rack.policy()
        rack.host("h1")
        rack.host("h2")
        rack.claim("a1")
        rack.claim("b1", namespace=TENANT_B, identity="tenant-b")
        for name, namespace in (("a1", TENANT_A), ("b1", TENANT_B)):
            eventually(
                lambda name=name, namespace=namespace: association(rack, name, namespace) == "True",
                timeout=REACTION,
                message=f"{namespace}/{name} associated\n{shards[0].output()}\n{shards[1].output()}",
            )
        for index, process in shards.items():
            mine = TENANT_A if shard_of(TENANT_A, 2) == index else TENANT_B
            other = TENANT_B if mine == TENANT_A else TENANT_A
            ran = f"claim/{mine}/{'a1' if mine == TENANT_A else 'b1'}"
            eventually(lambda process=process, ran=ran: runs_of(process, ran) >= 1, timeout=10, message=ran)
            assert runs_of(process, f"claim/{other}/{'a1' if other == TENANT_A else 'b1'}") == 0
            assert process.metric("leader_election_master_status") == 1  # one Lease per shard
    finally:
        for process in shards.values():
            process.stop()


def test_a_namespace_selector_leaves_other_tenants_to_another_controller(devenv, rack, tmp_path):
    process = ControllerProcess(
        devenv, tmp_path, *claim_side(rack), "--namespace-selector", "metalclaim.io/tenant=tenant-a"
    )
    try:
        rack.policy()
        rack.host("h1")
        rack.host("h2")
        rack.claim("b1", namespace=TENANT_B, identity="tenant-b")
        rack.claim("a1")
        eventually(lambda: associated(rack, "a1"), timeout=REACTION, message=f"a1 associated\n{process.output()}")
        assert runs_of(process, f"claim/{TENANT_B}/b1") == 0
        assert not (rack.read_claim("b1", TENANT_B).get("status") or {}).get("conditions")
    finally:
        process.stop()


def test_two_runner_slots_share_the_queue(devenv, rack, tmp_path):
    """--runner-slots 2: both slots take batches from the one queue; every claim still ends with one host."""
    process = ControllerProcess(devenv, tmp_path, *claim_side(rack), "--runner-slots", "2", "--batch-max-size", "2")
    try:
        rack.policy()
        for index in range(6):
            rack.host(f"h{index}")
        for index in range(6):
            rack.claim(f"c{index}")
        for index in range(6):
            eventually(lambda i=index: associated(rack, f"c{i}"), timeout=60, message=f"c{index}\n{process.output()}")
        runs = [json.loads(line) for line in process.output(full=True).splitlines() if '"event": "run"' in line]
        assert {run["slot"] for run in runs} == {0, 1}, runs
        hosts = [rack.read_host(f"h{index}")["spec"].get("consumerRef", {}).get("name") for index in range(6)]
        assert sorted(hosts) == [f"c{index}" for index in range(6)]  # one host each: no claim bound twice
    finally:
        process.stop()


def test_sigterm_stops_the_controller_within_seconds(devenv, rack, tmp_path):
    process = ControllerProcess(devenv, tmp_path, *claim_side(rack))
    took = process.stop()
    assert process.process.returncode == 0
    assert took < 10


def test_only_the_lease_holder_runs_and_a_follower_takes_over(devenv, rack, tmp_path):
    options = [
        *claim_side(rack, leader_elect=True),
        "--leader-elect-lease-duration",
        "4",
        "--leader-elect-renew-deadline",
        "3",
        "--leader-elect-retry-period",
        "0.5",
    ]
    first = ControllerProcess(devenv, tmp_path / "a", *options)
    eventually(lambda: first.metric("leader_election_master_status") == 1, timeout=10, message="first leads")
    second = ControllerProcess(devenv, tmp_path / "b", *options)
    try:
        rack.policy()
        rack.host("h1")
        rack.host("h2")
        rack.claim("c1")
        eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{first.output()}")
        assert second.metric("leader_election_master_status") == 0
        assert second.metric("metalclaim_runs_total") == 0  # a follower keeps its stores warm, runs nothing
        first.process.kill()  # no release: the follower waits out the lease (4 s)
        killed = time.monotonic()
        rack.claim("c2")
        eventually(lambda: associated(rack, "c2"), timeout=REACTION, message=f"c2 associated\n{second.output()}")
        print(f"\nleader killed -> the follower bound a new claim in {time.monotonic() - killed:.1f} s")
    finally:
        first.stop()
        second.stop()


def test_labelling_the_infra_namespace_hands_its_hosts_to_the_running_provisioner(devenv, site, tmp_path):
    """The opt-in is a namespace label: set after the provisioner started, it takes the hosts up without a resync."""
    namespaces = site.api("Namespace", "v1")
    opt_out = {"metadata": {"labels": {"metalclaim.io/provisioner": None}}}
    namespaces.patch(name=site.namespace, body=opt_out, content_type="application/merge-patch+json")
    site.host("h0", 0)
    provisioner = provisioner_side(devenv, tmp_path / "provisioner", site.namespace)
    try:
        host_key = f"host/{site.namespace}/h0"
        eventually(lambda: runs_of(provisioner, host_key) >= 1, timeout=REACTION, message=provisioner.output())
        assert not site.read("h0").get("status"), "an unmarked namespace's host is left alone"
        opt_in = {"metadata": {"labels": {"metalclaim.io/provisioner": "metalclaim"}}}
        namespaces.patch(name=site.namespace, body=opt_in, content_type="application/merge-patch+json")
        labelled = time.monotonic()
        eventually(lambda: site.state("h0") == "available", timeout=90, message=f"h0 available\n{provisioner.output()}")
        print(f"\nnamespace labelled -> host available in {time.monotonic() - labelled:.1f} s", end="")
    finally:
        provisioner.stop()


def test_the_guides_lifecycle_driven_only_by_api_changes(devenv, site, files, tmp_path):
    """Register, claim, provision a live ISO, deprovision, delete: the tenant and the infra team only write objects.
    The provisioner as config/manager deploys it: its standby run serves batch after batch, keeping the BMC
    connection."""
    iso_url = files.add("live.iso", b"live iso for the controller\n" * 64)
    site.host("h0", 0)  # as the infra team registers it: no status yet
    # Each side as its own identity, as config/manager deploys them.
    claims = ControllerProcess(
        devenv, tmp_path / "claims", "--infra-namespaces", site.namespace, "--controllers", "claims"
    )
    provisioner = provisioner_side(devenv, tmp_path / "provisioner", site.namespace, "--standby=true")
    started = time.monotonic()

    def both() -> str:
        return f"claims:\n{claims.output()}\nprovisioner:\n{provisioner.output()}"

    def lap(what: str) -> None:
        nonlocal started
        print(f"\n{what}: {time.monotonic() - started:.1f} s", end="")
        started = time.monotonic()

    try:
        eventually(lambda: site.state("h0") == "available", timeout=90, message=f"h0 available\n{both()}")
        lap("registered, inspected, available")
        site.claim("live", image={"url": iso_url, "format": "live-iso"}, online=True)

        def provisioned() -> bool:
            claim = site.read_claim("live") or {}
            status = claim.get("status") or {}
            conditions = {c["type"]: c for c in status.get("conditions") or []}
            return (conditions.get("Provisioned") or {}).get("status") == "True" and status.get("poweredOn") is True

        eventually(provisioned, timeout=120, message=f"live provisioned\n{both()}")
        lap("claimed -> Provisioned, powered on")
        site.patch_claim("live", {"metadata": {"annotations": {"reboot.metal3.io": ""}}})

        def rebooted() -> bool:
            claim_annotations = (site.read_claim("live") or {})["metadata"].get("annotations") or {}
            host_annotations = site.read("h0")["metadata"].get("annotations") or {}
            return "reboot.metal3.io" not in claim_annotations and "reboot.metal3.io" not in host_annotations

        # The claim layer hands the one-shot request to the host, the provisioner reboots it and clears it.
        eventually(rebooted, timeout=120, message=f"rebooted\n{both()}")
        eventually(provisioned, timeout=60, message=f"powered on again after the reboot\n{both()}")
        lap("reboot annotation -> rebooted, back on")
        site.patch_claim("live", {"spec": {"image": None, "online": False}})
        eventually(lambda: site.state("h0") == "available", timeout=120, message=f"deprovisioned\n{both()}")
        lap("image removed -> deprovisioned, available")
        site.api("HostClaim", identity="tenant-a").delete(name="live", namespace=TENANT)
        eventually(lambda: site.read_claim("live") is None, timeout=120, message=f"claim gone\n{both()}")
        lap("claim deleted -> released, finalizer gone")
        host = site.read("h0")
        assert "consumerRef" not in host["spec"] and host["status"]["provisioning"]["state"] == "available"
        # Every step went to the one standby run serving them (none cold, none failed).
        served = provisioner.metric("metalclaim_standby_batches_total", path="standby")
        assert served >= 8 and provisioner.metric("metalclaim_standby_batches_total", path="cold") == 0, both()
        assert '"run_failed"' not in provisioner.output(full=True), both()
    finally:
        claims.stop()
        provisioner.stop()


def test_the_installed_service_account_runs_the_controller(devenv, clients, rack, tmp_path):
    """In-cluster identity: install.yml with the controller switch, a token for its ServiceAccount (TokenRequest),
    and the controller run with that token binds a claim: the manifests' RBAC is what is exercised."""
    results = run_playbook(
        tmp_path / "install",
        REPO_ROOT / "playbooks" / "install.yml",
        devenv.kubeconfig("admin"),
        {"install_controller": True},
    )
    assert not any(r["failed"] for r in results), results
    deployment = rack.api("admin", "Deployment", "apps/v1").get(
        name="metalclaim-controller", namespace="metalclaim-system"
    )
    assert deployment.spec.template.spec.serviceAccountName == "metalclaim-controller"
    core = kube_client.CoreV1Api(kube_config.new_client_from_config(config_file=devenv.kubeconfig("admin")))
    token = core.create_namespaced_service_account_token(
        "metalclaim-controller",
        "metalclaim-system",
        kube_client.AuthenticationV1TokenRequest(
            spec=kube_client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        ),
    ).status.token
    admin = yaml.safe_load(Path(devenv.kubeconfig("admin")).read_text())
    cluster = admin["clusters"][0]["cluster"]
    kubeconfig = tmp_path / "service-account.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "devenv", "cluster": cluster}],
                "users": [{"name": "controller-sa", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "devenv", "user": "controller-sa"}}],
                "current-context": "sa",
            }
        )
    )
    process = ControllerProcess(
        devenv,
        tmp_path,
        "--kubeconfig",
        str(kubeconfig),
        *claim_side(rack),
        "--leader-elect",  # on its own Lease, metalclaim-controller, as the Deployment: the only one it may hold
        "true",
        kubeconfig_identity=None,
    )
    try:
        rack.policy()
        rack.host("h1")
        rack.claim("c1")
        eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{process.output()}")
        # Its Lease rights are the namespaced Role's: none in a tenant's namespace.
        review = kube_client.AuthorizationV1Api(kube_config.new_client_from_config(config_file=str(kubeconfig)))
        allowed = review.create_self_subject_access_review(
            kube_client.V1SelfSubjectAccessReview(
                spec=kube_client.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=kube_client.V1ResourceAttributes(
                        verb="create", group="coordination.k8s.io", resource="leases", namespace=TENANT_A
                    )
                )
            )
        ).status.allowed
        assert allowed is False
    finally:
        process.stop()
