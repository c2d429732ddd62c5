"""--diff of tenant_reconcile on the real API server: what a Tenant's onboarding and deletion write (or would, in
check mode), field by field, at no request of its own."""

from __future__ import annotations

import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.support import run_tasks
from metalclaim_dev.tenancy import TENANCY, read_tenant

pytestmark = pytest.mark.integration

TENANT_LABEL = "tenancy.metalclaim.io/tenant"
# The devenv's claim side is a user, not the ServiceAccount of a cluster install.
CLAIM_SIDE = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "metalclaim-controller"}]


def reconcile(devenv, tmp_path, name: str, check_mode: bool = False, diff: bool = False) -> dict:
    task = {"metalclaim.hostclaim.tenant_reconcile": {"tenants": [name], "claim_side_subjects": CLAIM_SIDE}}
    if check_mode:
        task["check_mode"] = True
    if diff:
        task["diff"] = True
    (result,) = run_tasks(tmp_path / uuid.uuid4().hex[:6], [task], devenv.kubeconfig("admin"))
    assert not result["failed"], result
    return result


def headers(result: dict) -> list[str]:
    return [e["before_header"] for e in result["diff"]]


def only(result: dict, header: str) -> dict:
    (found,) = [e for e in result["diff"] if e["before_header"] == header]
    return found


def namespace_exists(clients, name: str) -> bool:
    try:
        clients["admin"].resources.get(api_version="v1", kind="Namespace").get(name=name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


@pytest.fixture
def tenant(clients, devenv, tmp_path):
    name = f"d{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": TENANCY, "kind": "Tenant", "metadata": {"name": name}}
    body["spec"] = {"tenantName": name, "childNamespaces": ["app"], "quota": {"maxHostClaims": 1}}
    tenants = clients["admin"].resources.get(api_version=TENANCY, kind="Tenant")
    tenants.create(body=body)
    yield name
    try:
        tenants.delete(name=name)
    except ApiException as error:
        if error.status != 404:
            raise
    for _attempt in range(8):
        if read_tenant(clients, name) is None:
            break
        reconcile(devenv, tmp_path, name)


def test_onboarding_shows_each_write_in_check_mode_and_for_real(devenv, clients, tenant, tmp_path):
    child = f"{tenant}-app"
    plain = reconcile(devenv, tmp_path, tenant, check_mode=True)
    checked = reconcile(devenv, tmp_path, tenant, check_mode=True, diff=True)
    assert "diff" not in plain
    assert checked["changed"] is True and checked["writes"] == 0
    assert checked["api_calls"] == plain["api_calls"]  # a diff costs no request
    assert f"Namespace {child}" in headers(checked)
    assert f"RoleBinding {child}/metalclaim-tenant-admin" in headers(checked)
    assert f"ResourceQuota {child}/metalclaim-tenant" in headers(checked)
    created = only(checked, f"Namespace {child}")
    assert created["before"] == {} and created["after"]["metadata"]["labels"][TENANT_LABEL] == tenant
    finalizer, *statuses = [e for e in checked["diff"] if e["before_header"] == f"Tenant {tenant}"]
    assert finalizer["after"] == {"metadata": {"finalizers": ["tenancy.metalclaim.io/tenant"]}}
    assert statuses and all(set(e["after"]) == {"status"} for e in statuses)
    assert not namespace_exists(clients, child)  # check mode wrote nothing
    assert "finalizers" not in read_tenant(clients, tenant)["metadata"]

    done = reconcile(devenv, tmp_path, tenant, diff=True)
    assert done["writes"] > 0 and namespace_exists(clients, child)
    assert headers(done) == headers(checked)
    assert only(done, f"Namespace {child}") == created
    deployed = [e for e in done["diff"] if e["before_header"] == f"Tenant {tenant}"][-1]
    assert deployed["after"]["status"]["state"] == "Deployed"

    again = reconcile(devenv, tmp_path, tenant, diff=True)
    assert (again["changed"], again["diff"], again["writes"]) == (False, [], 0)
    assert again["api_calls"] == reconcile(devenv, tmp_path, tenant)["api_calls"]


def test_deletion_shows_what_goes(devenv, clients, tenant, tmp_path):
    child = f"{tenant}-app"
    reconcile(devenv, tmp_path, tenant)
    clients["admin"].resources.get(api_version=TENANCY, kind="Tenant").delete(name=tenant)
    checked = reconcile(devenv, tmp_path, tenant, check_mode=True, diff=True)
    assert checked["writes"] == 0
    gone = only(checked, f"Namespace {child}")
    assert gone["after"] == {} and gone["before"]["metadata"]["name"] == child
    assert "managedFields" not in gone["before"]["metadata"]
    assert namespace_exists(clients, child)
    result = reconcile(devenv, tmp_path, tenant, diff=True)
    assert only(result, f"Namespace {child}") == gone
