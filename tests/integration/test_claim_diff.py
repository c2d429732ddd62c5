"""--diff on the real API server: the claim steps show what they change (or would, in check mode), never a
Secret's value, and a diff costs no request."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A, Rack, step

pytestmark = pytest.mark.integration

WRITES = ("create", "replace", "patch", "delete")
USER_DATA = "#cloud-config\npassword: diff-s3cret-Zq81\n"


def writes(result: dict) -> int:
    return sum(n for verb, n in result["api_calls"].items() if verb in WRITES)


def entries(result: dict, header: str) -> list[dict]:
    return [e for e in result["diff"] if e["before_header"] == header]


def only(result: dict, header: str) -> dict:
    (found,) = entries(result, header)
    assert found["after_header"] == header
    return found


def ours(result: dict, rack: Rack) -> list[dict]:
    """The diff entries about this rack's hosts and Secrets and this test's claims (reconcile also
    releases other tests' orphaned hosts)."""
    claims = {f"HostClaim {ns}/{name}" for ns, name in rack.claims}
    return [e for e in result["diff"] if e["before_header"] in claims or f" {rack.namespace}/" in e["before_header"]]


def patch_claim(rack: Rack, name: str, body: dict) -> None:
    rack.api("tenant-a", "HostClaim").patch(
        body=body, name=name, namespace=TENANT_A, content_type="application/merge-patch+json"
    )


def set_user_data(rack: Rack, name: str, value: str) -> None:
    secrets = rack.api("tenant-a", "Secret", "v1")
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": TENANT_A}}
    body["stringData"] = {"userData": value}
    try:
        secrets.create(body=body)
    except ApiException as error:
        if error.status != 409:
            raise
        secrets.replace(body=body, name=name, namespace=TENANT_A)


def assert_no_secret(result: dict, *values: str) -> None:
    text = json.dumps(result)
    for value in values:
        for shown in (value, base64.b64encode(value.encode()).decode(), value.splitlines()[-1]):
            assert shown not in text, f"{shown!r} leaked into the result"


@pytest.fixture
def bound_claim(devenv, rack, tmp_path):
    """Claim `diff-claim` bound to host h1 (its status committed), nothing synchronized yet."""
    rack.policy()
    rack.host("h1")
    rack.claim("diff-claim")
    step("hostclaim_bind", devenv, tmp_path, rack)
    return rack


def test_sync_shows_the_hosts_changed_fields_in_check_mode_and_for_real(devenv, bound_claim, tmp_path):
    rack = bound_claim
    host_header = f"BareMetalHost {rack.namespace}/h1"
    step("hostclaim_sync", devenv, tmp_path, rack)  # the claim's status catches up with its host first
    patch_claim(rack, "diff-claim", {"spec": {"online": True}})

    plain = step("hostclaim_sync", devenv, tmp_path, rack, check_mode=True)
    checked = step("hostclaim_sync", devenv, tmp_path, rack, check_mode=True, diff=True)
    assert "diff" not in plain
    assert checked["changed"] is True and writes(checked) == 0
    assert checked["api_calls"] == plain["api_calls"]  # a diff costs no request
    host_entry = only(checked, host_header)
    assert (host_entry["before"], host_entry["after"]) == ({"spec": {"online": False}}, {"spec": {"online": True}})
    assert rack.read_host("h1")["spec"]["online"] is False  # check mode wrote nothing

    done = step("hostclaim_sync", devenv, tmp_path, rack, diff=True)
    assert only(done, host_header) == host_entry
    assert rack.read_host("h1")["spec"]["online"] is True

    again = step("hostclaim_sync", devenv, tmp_path, rack, diff=True)
    assert (again["changed"], again["diff"], writes(again)) == (False, [], 0)
    assert again["api_calls"] == step("hostclaim_sync", devenv, tmp_path, rack)["api_calls"]


def test_sync_shows_reboot_annotations_and_the_claims_status(devenv, bound_claim, tmp_path):
    rack = bound_claim
    rack.set_state("h1", "provisioned")
    patch_claim(rack, "diff-claim", {"metadata": {"annotations": {"reboot.metal3.io": ""}}})
    result = step("hostclaim_sync", devenv, tmp_path, rack, diff=True)
    host_entry = only(result, f"BareMetalHost {rack.namespace}/h1")
    assert host_entry["before"] == {"metadata": {}}  # no annotations on the host before
    assert host_entry["after"] == {"metadata": {"annotations": {"reboot.metal3.io": ""}}}
    claim_entries = entries(result, f"HostClaim {TENANT_A}/diff-claim")
    metadata = next(e for e in claim_entries if "metadata" in e["before"])
    assert metadata["before"] == {"metadata": {"annotations": {"reboot.metal3.io": ""}}}  # the one-shot, taken off
    status = next(e for e in claim_entries if "status" in e["after"])
    provisioned = status["after"]["status"]["conditions"]["Provisioned"]
    assert (provisioned["status"], provisioned["reason"]) == ("True", "provisioned")
    assert result["status_writes"] == 1


def test_secrets_diff_shows_keys_never_values(devenv, bound_claim, tmp_path):
    rack = bound_claim
    copy_header = f"Secret {rack.namespace}/h1-userdata"
    set_user_data(rack, "diff-userdata", USER_DATA)
    try:
        patch_claim(rack, "diff-claim", {"spec": {"userData": {"name": "diff-userdata", "namespace": TENANT_A}}})

        plain = step("hostclaim_secrets", devenv, tmp_path, rack, check_mode=True)
        checked = step("hostclaim_secrets", devenv, tmp_path, rack, check_mode=True, diff=True)
        assert checked["api_calls"] == plain["api_calls"] and writes(checked) == 0
        created = only(checked, copy_header)
        assert created["before"] == {}
        assert created["after"]["data"] == {"userData": f"<redacted, {len(USER_DATA)} bytes>"}
        assert created["after"]["metadata"]["labels"] == {
            "metalclaim.io/copy-of-claim": rack.read_claim("diff-claim")["metadata"]["uid"]
        }
        ref = {"name": "h1-userdata", "namespace": rack.namespace}
        host_after = only(checked, f"BareMetalHost {rack.namespace}/h1")["after"]
        assert host_after["spec"] == {"userData": ref}
        # What the copy would be is recorded with the host's refs (no uid yet: nothing was written).
        record = json.loads(host_after["metadata"]["annotations"]["metalclaim.io/copies"])
        assert list(record) == ["userData"] and record["userData"]["uid"] == ""
        assert_no_secret(checked, USER_DATA)
        with pytest.raises(ApiException):  # check mode created nothing
            rack.api("admin", "Secret", "v1").get(name="h1-userdata", namespace=rack.namespace)

        done = step("hostclaim_secrets", devenv, tmp_path, rack, diff=True)
        assert only(done, copy_header) == created
        assert_no_secret(done, USER_DATA)
        again = step("hostclaim_secrets", devenv, tmp_path, rack, diff=True)
        assert (again["changed"], again["diff"], writes(again)) == (False, [], 0)

        # The tenant changes its Secret: the copy's update shows the new size, still no value; what was
        # there is never read, so the before side is the digest recorded on the host.
        recorded = json.loads(rack.read_host("h1")["metadata"]["annotations"]["metalclaim.io/copies"])
        changed = "#cloud-config\npassword: other-s3cret-Yw42!\n"
        set_user_data(rack, "diff-userdata", changed)
        updated = only(step("hostclaim_secrets", devenv, tmp_path, rack, diff=True), copy_header)
        now_recorded = json.loads(rack.read_host("h1")["metadata"]["annotations"]["metalclaim.io/copies"])
        assert updated["before"] == {"digest": recorded["userData"]["digest"]}
        assert updated["after"] == {
            "data": {"userData": f"<redacted, {len(changed)} bytes>"},
            "digest": now_recorded["userData"]["digest"],
        }

        # The reference dropped: the copy's deletion (redacted) and the host's ref going.
        patch_claim(rack, "diff-claim", {"spec": {"userData": None}})
        dropped = step("hostclaim_secrets", devenv, tmp_path, rack, diff=True)
        deleted = only(dropped, copy_header)
        assert deleted["after"] == {} and deleted["before"] == {
            "metadata": {"name": "h1-userdata", "namespace": rack.namespace, "uid": now_recorded["userData"]["uid"]}
        }
        assert only(dropped, f"BareMetalHost {rack.namespace}/h1")["before"]["spec"] == {"userData": ref}
        assert_no_secret(dropped, USER_DATA, changed)
    finally:
        rack.api("tenant-a", "Secret", "v1").delete(name="diff-userdata", namespace=TENANT_A)


def test_reconcile_shows_its_steps_changes_bind_to_release(devenv, rack, tmp_path):
    rack.policy()
    rack.host("h1")
    set_user_data(rack, "diff-rec-userdata", USER_DATA)
    try:
        rack.claim("diff-rec", online=True, userData={"name": "diff-rec-userdata", "namespace": TENANT_A})
        host_header = f"BareMetalHost {rack.namespace}/h1"
        claim_header = f"HostClaim {TENANT_A}/diff-rec"

        checked = step("hostclaim_reconcile", devenv, tmp_path, rack, check_mode=True, diff=True)
        assert writes(checked) == 0
        bind = only(checked, host_header)
        assert bind["before"] == {"spec": {}} and bind["after"]["spec"]["consumerRef"]["name"] == "diff-rec"
        finalizer, status = entries(checked, claim_header)  # the binder writes the finalizer first
        assert finalizer["after"]["metadata"]["finalizers"] == ["metal3.io/hostclaim"]
        assert status["after"]["status"]["hardwareData"] == {"name": "h1", "namespace": rack.namespace}
        assert "consumerRef" not in rack.read_host("h1")["spec"]

        done = step("hostclaim_reconcile", devenv, tmp_path, rack, diff=True)
        host_changes = entries(done, host_header)
        assert host_changes[0]["after"]["spec"]["consumerRef"]["name"] == "diff-rec"  # bind, then secrets + sync
        assert host_changes[1]["after"]["spec"] == {
            "online": True,
            "userData": {"name": "h1-userdata", "namespace": rack.namespace},
        }
        assert only(done, f"Secret {rack.namespace}/h1-userdata")["after"]["data"] == {
            "userData": f"<redacted, {len(USER_DATA)} bytes>"
        }
        assert_no_secret(done, USER_DATA)
        again = step("hostclaim_reconcile", devenv, tmp_path, rack, diff=True)
        assert ours(again, rack) == []

        # Deleted: released in one run (the host is `available`): scrubbed, copy deleted, consumerRef cleared.
        rack.api("tenant-a", "HostClaim").delete(name="diff-rec", namespace=TENANT_A)
        released = step("hostclaim_reconcile", devenv, tmp_path, rack, diff=True)
        scrub, free = entries(released, host_header)
        assert scrub["before"]["spec"]["online"] is True and scrub["after"]["spec"]["online"] is False
        assert "userData" in scrub["before"]["spec"] and "userData" not in scrub["after"]["spec"]
        assert "consumerRef" in free["before"]["spec"] and free["after"] == {"spec": {}}
        assert only(released, f"Secret {rack.namespace}/h1-userdata")["after"] == {}
        assert only(released, claim_header)["before"]["metadata"]["finalizers"] == ["metal3.io/hostclaim"]
        assert_no_secret(released, USER_DATA)
    finally:
        rack.api("tenant-a", "Secret", "v1").delete(name="diff-rec-userdata", namespace=TENANT_A)
