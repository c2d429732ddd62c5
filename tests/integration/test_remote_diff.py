"""--diff of hostclaim_remote, two real control planes: the writes in both clusters shown (or, in check mode,
what they would be), a data Secret copy's keys and never its values, at no request of its own."""

# ruff: noqa: F811 (the hardware fixtures are imported, then named as test arguments)
from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

from metalclaim_dev.claimlayer import TENANT_A
from metalclaim_dev.remotecluster import (  # noqa: F401 (fixtures)
    hardware,
    hardware_clients,
    hw_tenant,
    tenant,
)
from metalclaim_dev.support import run_tasks

WRITE_VERBS = ("create", "replace", "patch", "delete")
USER_DATA = "#cloud-config\npassword: remote-diff-s3cret-Px7\n"


def mirror(devenv, tmp_path: Path, name: str, check_mode: bool = False, diff: bool = False) -> dict:
    task = {"metalclaim.hostclaim.hostclaim_remote": {"claims": [{"namespace": TENANT_A, "name": name}]}}
    if check_mode:
        task["check_mode"] = True
    if diff:
        task["diff"] = True
    (result,) = run_tasks(tmp_path / uuid.uuid4().hex[:6], [task], devenv.kubeconfig("controller"))
    assert not result["failed"], result
    return result


def writes(result: dict) -> int:
    local = sum(result["api_calls"].get(verb, 0) for verb in WRITE_VERBS)
    return local + sum(result["remote_api_calls"].get(verb, 0) for verb in WRITE_VERBS)


def requests(result: dict) -> tuple[dict, dict]:
    return result["api_calls"], result["remote_api_calls"]


def headers(result: dict) -> list[str]:
    return [e["before_header"] for e in result["diff"]]


def only(result: dict, header: str) -> dict:
    (found,) = [e for e in result["diff"] if e["before_header"] == header]
    return found


def assert_no_secret(result: dict) -> None:
    text = json.dumps(result)
    for shown in (USER_DATA, base64.b64encode(USER_DATA.encode()).decode(), USER_DATA.splitlines()[-1]):
        assert shown not in text, f"{shown!r} leaked into the result"


def test_diff_shows_both_clusters_writes_and_never_a_secrets_value(devenv, hardware, hw_tenant, tenant, tmp_path):
    secret = tenant.kubeconfig_secret(hw_tenant.kubeconfig())
    user_data = tenant.data_secret("userdata", userData=USER_DATA)
    name = tenant.claim(
        "diff", secret, userData=user_data, image={"url": "http://127.0.0.1/live.iso", "format": "live-iso"}
    )
    remote_ns = hw_tenant.namespace

    plain = mirror(devenv, tmp_path, name, check_mode=True)
    checked = mirror(devenv, tmp_path, name, check_mode=True, diff=True)
    assert "diff" not in plain
    assert checked["changed"] is True and writes(checked) == 0
    assert requests(checked) == requests(plain)  # a diff costs no request
    finalizer, *_back = [e for e in checked["diff"] if e["before_header"] == f"HostClaim {TENANT_A}/{name}"]
    assert finalizer["after"] == {"metadata": {"finalizers": ["metalclaim.io/remote"]}}
    copy = only(checked, f"Secret (hardware cluster) {remote_ns}/{name}-userdata")
    assert copy["before"] == {} and copy["after"]["data"] == {"userData": f"<redacted, {len(USER_DATA)} bytes>"}
    created = only(checked, f"HostClaim (hardware cluster) {remote_ns}/{name}")
    assert created["before"] == {} and created["after"]["spec"]["userData"] == {"name": f"{name}-userdata"}
    assert_no_secret(checked)
    assert hw_tenant.claim(name) is None and hw_tenant.secret(f"{name}-userdata") is None  # nothing written
    assert "finalizers" not in tenant.read(name)["metadata"]

    done = mirror(devenv, tmp_path, name, diff=True)
    assert writes(done) > 0 and hw_tenant.claim(name) is not None
    for header in (f"Secret (hardware cluster) {remote_ns}/{name}-userdata", f"HostClaim {TENANT_A}/{name}"):
        assert header in headers(done)
    status = [e for e in done["diff"] if e["before_header"] == f"HostClaim {TENANT_A}/{name}"][-1]
    assert status["after"]["status"]["conditions"]["Mirrored"]["reason"] == "RemoteClaimSynced"
    assert_no_secret(done)

    again = mirror(devenv, tmp_path, name, diff=True)
    assert (again["changed"], again["diff"], writes(again)) == (False, [], 0)
