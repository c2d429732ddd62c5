"""Remote claims as Ansible (hostclaim_remote): a workload cluster's claim mirrored into a hardware cluster, two
real control planes on loopback, the remote identity a ServiceAccount with the tenant role in the hardware cluster.

The hardware cluster's own claim layer is run here as its playbook task (hostclaim_reconcile, as its controller);
test_remote_controller.py runs both sides as controllers.
"""

# ruff: noqa: F811 (the hardware fixtures are imported, then named as test arguments)
from __future__ import annotations

import json
import uuid
from pathlib import Path

from metalclaim_dev.claimlayer import TENANT_A
from metalclaim_dev.remotecluster import (  # noqa: F401 (fixtures)
    HardwareTenant,
    WorkloadTenant,
    condition,
    hardware,
    hardware_clients,
    hardware_rack,
    hw_tenant,
    tenant,
)
from metalclaim_dev.support import run_tasks

WRITE_VERBS = ("create", "replace", "patch", "delete")


def mirror(devenv, tmp_path: Path, claims: list[str], **options) -> dict:
    task = {
        "metalclaim.hostclaim.hostclaim_remote": {
            "claims": [{"namespace": TENANT_A, "name": name} for name in claims],
            **options,
        }
    }
    (result,) = run_tasks(tmp_path / uuid.uuid4().hex[:6], [task], devenv.kubeconfig("controller"))
    assert not result["failed"], result
    return result


def hardware_reconcile(hardware, tmp_path: Path, hw_tenant: HardwareTenant, names: list[str]) -> dict:
    task = {
        "metalclaim.hostclaim.hostclaim_reconcile": {
            "claims": [{"namespace": hw_tenant.namespace, "name": name} for name in names]
        }
    }
    (result,) = run_tasks(tmp_path / uuid.uuid4().hex[:6], [task], hardware.kubeconfig("controller"))
    assert not result["failed"], result
    return result


def writes(result: dict) -> int:
    local = sum(result["api_calls"].get(verb, 0) for verb in WRITE_VERBS)
    remote = sum(result["remote_api_calls"].get(verb, 0) for verb in WRITE_VERBS)
    return local + remote


def entry(result: dict, name: str) -> dict:
    return next(c for c in result["claims"] if c["name"] == name)


def test_remote_claim_lifecycle(devenv, hardware, hardware_clients, hw_tenant, tenant, tmp_path):
    rack = hardware_rack(hardware_clients, hw_tenant)
    try:
        secret = tenant.kubeconfig_secret(hw_tenant.kubeconfig())
        user_data = tenant.data_secret("userdata", **{"value": "#cloud-config\n"})
        name = tenant.claim(
            "remote",
            secret,
            hostSelector={"matchLabels": {"infra-kind": rack.kind}},
            userData=user_data,
            image={"url": "http://127.0.0.1/live.iso", "format": "live-iso"},
        )
        first = mirror(devenv, tmp_path, [name])
        assert entry(first, name)["state"] == "mirrored", first
        remote = hw_tenant.claim(name)
        assert remote["spec"]["hostSelector"] == {"matchLabels": {"infra-kind": rack.kind}}
        assert remote["spec"]["kind"] == "baremetal" and remote["spec"]["online"] is False
        assert remote["spec"]["userData"] == {"name": f"{name}-userdata"}
        copied = hw_tenant.secret(f"{name}-userdata")
        assert copied["data"] == {"value": "I2Nsb3VkLWNvbmZpZwo="}
        local = tenant.read(name)
        assert condition(local, "RemoteCluster")["status"] == "True"
        assert condition(local, "Mirrored")["reason"] == "RemoteClaimSynced"
        assert "metalclaim.io/remote" in local["metadata"]["finalizers"]

        # The hardware cluster's claim layer binds it; the next mirror brings the binding back.
        hardware_reconcile(hardware, tmp_path, hw_tenant, [name])
        back = mirror(devenv, tmp_path, [name])
        local = tenant.read(name)
        assert condition(local, "Association")["status"] == "True", local["status"]
        assert local["status"]["hostUID"] == rack.read_host("h0")["metadata"]["uid"]
        assert "hardwareData" not in local["status"]
        assert back["local_writes"] >= 1

        # Idempotent: nothing new on either side, nothing written on either side.
        again = mirror(devenv, tmp_path, [name])
        assert writes(again) == 0, again
        assert again["changed"] is False

        # A spec change and a keyed reboot request cross; the one-shot one moves.
        tenant.api("HostClaim").patch(
            body={
                "spec": {"online": True},
                "metadata": {"annotations": {"reboot.metal3.io/ops": "", "reboot.metal3.io": ""}},
            },
            name=name,
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
        mirror(devenv, tmp_path, [name])
        remote = hw_tenant.claim(name)
        assert remote["spec"]["online"] is True
        assert {"reboot.metal3.io/ops", "reboot.metal3.io"} <= set(remote["metadata"]["annotations"])
        local_annotations = tenant.read(name)["metadata"].get("annotations") or {}
        assert "reboot.metal3.io" not in local_annotations and "reboot.metal3.io/ops" in local_annotations

        # Deletion: the remote claim is deleted, and the local one goes only once the remote one is gone.
        tenant.api("HostClaim").delete(name=name, namespace=TENANT_A)
        deleting = mirror(devenv, tmp_path, [name])
        assert entry(deleting, name)["state"] == "deleting", deleting
        assert tenant.read(name) is not None and hw_tenant.claim(name)["metadata"].get("deletionTimestamp")
        assert condition(tenant.read(name), "Mirrored")["reason"] == "RemoteClaimDeleting"
        hardware_reconcile(hardware, tmp_path, hw_tenant, [name])  # releases the (never provisioned) host
        assert hw_tenant.claim(name) is None
        released = mirror(devenv, tmp_path, [name])
        assert entry(released, name)["state"] == "released", released
        assert tenant.read(name) is None
        assert hw_tenant.secret(f"{name}-userdata") is None
    finally:
        rack.cleanup()


def _leaked(tenant: WorkloadTenant, hw_tenant: HardwareTenant, hardware, names: list[str], *results) -> list[str]:
    """Pieces of the kubeconfig found in statuses, Events or module results (none may be)."""
    secrets = [hw_tenant.token, hardware.state["apiserver"], hardware.state["apiserver"].rsplit(":", 1)[1]]
    shown = json.dumps([results, [tenant.read(n) for n in names], [tenant.events(n) for n in names]], default=str)
    return [s for s in secrets if s in shown]


def test_attacks_are_refused_with_a_reason_and_nothing_leaks(devenv, hardware, hw_tenant, tenant, tmp_path):
    marker = Path(f"/tmp/metalclaim-exec-{uuid.uuid4().hex[:8]}")
    good = hw_tenant.kubeconfig()
    cases = {}

    # A kubeconfig Secret in another namespace (one the controller could read): refused unread.
    elsewhere = tenant.kubeconfig_secret(good, namespace="tenant-b")
    cases["cross"] = tenant.claim("cross", elsewhere, secret_namespace="tenant-b")
    cross = mirror(devenv, tmp_path, [cases["cross"]])
    assert cross["api_calls"].get("get", 0) == 0, cross  # no Secret read (the claims are listed, Events created)

    # exec and auth-provider run code in the controller; file paths read its files.
    exec_config = hw_tenant.kubeconfig()
    exec_config["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "touch", "args": [str(marker)]}
    }
    cases["exec"] = tenant.claim("exec", tenant.kubeconfig_secret(exec_config, "exec"))
    file_config = hw_tenant.kubeconfig()
    controller = json.loads(Path(devenv.kubeconfig("controller")).read_text())["users"][0]["user"]
    file_config["users"][0]["user"] = {
        "client-certificate": controller["client-certificate"],
        "client-key": controller["client-key"],
    }
    cases["file"] = tenant.claim("file", tenant.kubeconfig_secret(file_config, "file"))
    # A context namespace other than the claim pins, and one the operator does not allow.
    cases["pinned"] = tenant.claim(
        "pinned", tenant.kubeconfig_secret(good, "pinned"), remote={"namespace": "someone-else"}
    )
    # An identity without rights in its namespace.
    other = HardwareTenant(hardware, hw_tenant.clients, rights=False)
    try:
        cases["norights"] = tenant.claim("norights", tenant.kubeconfig_secret(other.kubeconfig(), "norights"))
        names = list(cases.values())
        result = mirror(devenv, tmp_path, names)
        disallowed = mirror(devenv, tmp_path, [cases["norights"]], allowed_namespaces=["prod-.*"])
    finally:
        other.cleanup()

    reasons = {case: condition(tenant.read(name), "Mirrored") for case, name in cases.items()}
    assert reasons["cross"]["reason"] == "CrossNamespaceReference", reasons["cross"]
    assert reasons["exec"]["reason"] == "KubeconfigRefused" and "exec (runs a command)" in reasons["exec"]["message"]
    assert not marker.exists()
    assert reasons["file"]["reason"] == "KubeconfigRefused" and "reads a file" in reasons["file"]["message"]
    assert reasons["pinned"]["reason"] == "RemoteNamespaceNotAllowed", reasons["pinned"]
    assert condition(tenant.read(cases["norights"]), "Mirrored")["reason"] == "RemoteNamespaceNotAllowed"
    assert entry(disallowed, cases["norights"])["reason"] == "RemoteNamespaceNotAllowed"
    forbidden = entry(result, cases["norights"])
    assert forbidden["reason"] == "RemoteForbidden" and "cannot" in forbidden["message"], forbidden
    for name in names:
        claim = tenant.read(name)
        assert condition(claim, "Ready")["status"] == "False"
        assert not [f for f in claim["metadata"].get("finalizers") or [] if f != "metalclaim.io/remote"]
        assert tenant.events(name), f"no Event for {name}"
    assert hw_tenant.claim(cases["pinned"]) is None and hw_tenant.claim(cases["cross"]) is None
    assert _leaked(tenant, hw_tenant, hardware, names, result, cross, disallowed) == []


def test_quota_and_unreachable_show_on_the_local_claim(devenv, hardware, hardware_clients, hw_tenant, tenant, tmp_path):
    hw_tenant.quota(1)
    secret = tenant.kubeconfig_secret(hw_tenant.kubeconfig())
    first = tenant.claim("first", secret)
    second = tenant.claim("second", secret)
    # The quota controller must have counted the namespace before it refuses anything.
    from metalclaim_dev.support import eventually

    eventually(
        lambda: (
            hw_tenant.api("ResourceQuota").get(name="hostclaims", namespace=hw_tenant.namespace).to_dict().get("status")
            or {}
        ).get("used"),
        timeout=30,
        message="quota counted",
    )
    result = mirror(devenv, tmp_path, [first, second])
    assert entry(result, first)["state"] == "mirrored"
    refused = condition(tenant.read(second), "Mirrored")
    assert refused["reason"] == "RemoteQuotaExceeded" and "exceeded quota" in refused["message"], refused
    assert hw_tenant.claim(second) is None

    # A hardware cluster that does not answer (a closed loopback port): said so, its address never shown.
    from metalclaim_dev.devenv.processes import free_port

    down = hw_tenant.kubeconfig()
    down["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    lost = tenant.claim("lost", tenant.kubeconfig_secret(down, "down"))
    unreachable = mirror(devenv, tmp_path, [lost])
    assert entry(unreachable, lost)["state"] == "unreachable" and entry(unreachable, lost)["requeue_after"] > 0
    reachable = condition(tenant.read(lost), "RemoteCluster")
    assert reachable["status"] == "False" and reachable["reason"] == "Unreachable", reachable
    assert down["clusters"][0]["cluster"]["server"].rsplit(":", 1)[1] not in json.dumps(
        [unreachable, tenant.read(lost)]
    )
