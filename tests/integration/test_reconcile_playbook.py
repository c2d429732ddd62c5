"""playbooks/reconcile.yml: the claim layer's steps for a batch of claims, in one ansible-playbook run."""

from __future__ import annotations

import pytest

from metalclaim_dev.claimlayer import TENANT_A, condition
from metalclaim_dev.support import REPO_ROOT, run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = REPO_ROOT / "playbooks" / "reconcile.yml"
RECONCILE = "Reconcile the claims (release, bind, copy data Secrets, sync)"


def reconcile(devenv, tmp_path, rack, name: str) -> dict:
    tasks = run_playbook(tmp_path / name, PLAYBOOK, devenv.kubeconfig("controller"), {"claims_list": rack.claim_args()})
    assert not any(t["failed"] for t in tasks), tasks
    return {t["task"]: t for t in tasks}


def test_one_run_binds_and_a_later_run_releases(devenv, rack, tmp_path):
    rack.policy()
    for index in range(3):
        rack.host(f"h{index}")
    for index in range(4):
        rack.claim(f"c{index}")
    first = reconcile(devenv, tmp_path, rack, "first")
    assert first["Summarize"]["msg"].startswith("3 bound, 1 waiting for a host")
    # One list call per kind for the whole run: claims, hosts, policies, namespaces. No Secret is listed,
    # not even beside hosts whose claim vanished (an earlier test's rack being deleted): copies are recorded.
    assert first[RECONCILE]["summary"]["list_calls"] == 4
    bound = [name for _namespace, name in rack.claims if rack.read_claim(name)["status"].get("hardwareData")]
    assert len(bound) == 3

    rack.api("tenant-a", "HostClaim").delete(name=bound[0], namespace=TENANT_A)
    second = reconcile(devenv, tmp_path, rack, "second")
    # The released host (never provisioned, still available) goes to the claim that was waiting.
    assert second[RECONCILE]["release"]["claims"][0]["state"] == "released"
    waiting = next(name for _namespace, name in rack.claims if name not in bound)
    assert condition(rack.read_claim(waiting), "Association")["status"] == "True"


def test_the_user_guides_lifecycle(devenv, rack, tmp_path):
    """The guide's story through reconcile.yml, the provisioner's part played by the infra identity."""
    rack.policy()
    rack.host("bm-01")
    claims = rack.api("tenant-a", "HostClaim")
    secrets = rack.api("tenant-a", "Secret", "v1")
    secrets.create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "guide-userdata", "namespace": TENANT_A},
            "stringData": {"userData": "#cloud-config"},
        }
    )
    image = {
        "checksum": "http://127.0.0.1:8080/images/jammy/img.md5",
        "format": "qcow2",
        "url": "http://127.0.0.1:8080/images/jammy/img.qcow2",
    }
    rack.claim("guide", image=image, userData={"name": "guide-userdata", "namespace": TENANT_A})
    try:
        reconcile(devenv, tmp_path, rack, "associate")
        claim = rack.read_claim("guide")
        summary = {c["type"]: (c["status"], c["reason"], c["message"]) for c in claim["status"]["conditions"]}
        assert summary == {
            "Ready": ("False", "IssuesReported", "* Provisioned: available"),
            "Association": ("True", "BareMetalHostAssociated", ""),
            "Provisioned": ("False", "available", ""),
            "Synchronization": ("True", "ConfigurationSynced", ""),
        }
        assert claim["status"]["hardwareData"] == {"name": "bm-01", "namespace": rack.namespace}
        host = rack.read_host("bm-01")
        assert host["spec"]["image"] == image and host["spec"]["online"] is False

        claims.patch(
            body={"spec": {"online": True}},
            name="guide",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
        reconcile(devenv, tmp_path, rack, "online")
        assert rack.read_host("bm-01")["spec"]["online"] is True
        rack.api("admin", "BareMetalHost").status.patch(  # the provisioner did its job
            body={
                "status": {
                    "provisioning": {"state": "provisioned"},
                    "poweredOn": True,
                    "hardware": {"nics": [{"name": "eno1", "mac": "52:54:00:00:00:01", "ip": "192.0.2.10"}]},
                }
            },
            name="bm-01",
            namespace=rack.namespace,
            content_type="application/merge-patch+json",
        )
        reconcile(devenv, tmp_path, rack, "provisioned")
        claim = rack.read_claim("guide")
        ready = condition(claim, "Ready")
        assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "InfoReported", 2)
        assert condition(claim, "Provisioned")["reason"] == "provisioned"
        assert claim["status"]["poweredOn"] is True
        assert claim["status"]["hostUID"] == rack.read_host("bm-01")["metadata"]["uid"]
        assert claim["status"]["hardware"] == {
            "nics": [{"name": "eno1", "mac": "52:54:00:00:00:01", "ip": "192.0.2.10"}]
        }
        assert "127.0.0.1:9" not in repr(claim)  # nothing of the BMC address

        claims.patch(
            body={"metadata": {"annotations": {"reboot.metal3.io": ""}}},
            name="guide",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
        reconcile(devenv, tmp_path, rack, "reboot")
        assert "reboot.metal3.io" in rack.read_host("bm-01")["metadata"]["annotations"]
        assert "reboot.metal3.io" not in (rack.read_claim("guide")["metadata"].get("annotations") or {})

        claims.patch(
            body={"spec": {"image": dict(image, url="http://127.0.0.1:8080/images/noble/img.qcow2")}},
            name="guide",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
        reconcile(devenv, tmp_path, rack, "new-url")
        assert rack.read_host("bm-01")["spec"]["image"] == image  # not applied under a running host
        sync = condition(rack.read_claim("guide"), "Synchronization")
        assert (sync["status"], sync["reason"]) == ("False", "ImageChangeRejected")

        claims.patch(
            body={"spec": {"image": None}},
            name="guide",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
        reconcile(devenv, tmp_path, rack, "deprovision")
        assert "image" not in rack.read_host("bm-01")["spec"]
        claim = rack.read_claim("guide")
        assert condition(claim, "Association")["status"] == "True"  # still bound
        assert condition(claim, "Synchronization")["reason"] == "ConfigurationSynced"
    finally:
        secrets.delete(name="guide-userdata", namespace=TENANT_A)
