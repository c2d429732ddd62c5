"""hostdeploypolicy_check through ansible-playbook, as the controller identity, on the real API."""

from __future__ import annotations

import uuid

import pytest

from metalclaim_dev.support import run_tasks

pytestmark = pytest.mark.integration

TENANT_A = "cluster-ns"


@pytest.fixture
def rack(clients):
    """A fresh infrastructure namespace, so policies of other tests do not interfere."""
    name = f"rack-{uuid.uuid4().hex[:6]}"
    namespaces = clients["admin"].resources.get(api_version="v1", kind="Namespace")
    namespaces.create(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    namespaces.delete(name=name)


def add_policy(clients, namespace: str, name: str, rule: dict | None) -> None:
    spec = {} if rule is None else {"hostclaimNamespaces": rule}
    clients["admin"].resources.get(api_version="metal3.io/v1alpha1", kind="HostDeployPolicy").create(
        body={
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostDeployPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def check(namespace: str, rack: str, **extra) -> dict:
    return {
        "metalclaim.hostclaim.hostdeploypolicy_check": {"namespace": namespace, "infra_namespaces": [rack], **extra}
    }


def test_policies_decide_per_namespace(devenv, clients, rack, tmp_path):
    add_policy(clients, rack, "only-b", {"names": ["tenant-b"]})
    add_policy(clients, rack, "broken", {"nameMatches": "cluster-(("})
    add_policy(clients, rack, "nothing", None)
    a, b = run_tasks(tmp_path, [check(TENANT_A, rack), check("tenant-b", rack)], devenv.kubeconfig("controller"))
    assert not a["failed"], a
    assert a["changed"] is False
    assert a["authorized_namespaces"] == []
    reasons = {d["policy"]: d["reason"] for d in a["decisions"]}
    assert reasons == {
        f"{rack}/only-b": "NameNotListed",
        f"{rack}/broken": "InvalidPolicy",
        f"{rack}/nothing": "NoNamespaceRule",
    }
    assert f"{rack}/broken: nameMatches 'cluster-((' is not a valid regular expression" in a["message"]
    # The invalid policy does not stop the valid one from admitting tenant-b.
    assert b["authorized_namespaces"] == [rack]


def test_has_labels_reads_the_tenant_namespace(devenv, clients, rack, tmp_path):
    add_policy(clients, rack, "tenants", {"hasLabels": [{"name": "metalclaim.io/role", "value": "tenant"}]})
    (result,) = run_tasks(tmp_path, [check(TENANT_A, rack)], devenv.kubeconfig("controller"))
    assert result["authorized_namespaces"] == [rack]


def test_claim_in_namespace_narrows_the_search(devenv, clients, rack, tmp_path):
    add_policy(clients, rack, "all", {})
    claims = clients["tenant-a"].resources.get(api_version="metal3.io/v1alpha1", kind="HostClaim")
    name = f"pinned-{uuid.uuid4().hex[:6]}"
    claims.create(
        body={
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostClaim",
            "metadata": {"name": name, "namespace": TENANT_A},
            "spec": {"online": False, "hostSelector": {"inNamespace": "elsewhere"}},
        }
    )
    try:
        (result,) = run_tasks(tmp_path, [check(TENANT_A, rack, claim=name)], devenv.kubeconfig("controller"))
        assert result["authorized_namespaces"] == []
    finally:
        claims.delete(name=name, namespace=TENANT_A)


def test_a_tenant_cannot_use_it_to_read_policies(devenv, tmp_path):
    (result,) = run_tasks(tmp_path, [check(TENANT_A, "infrahost")], devenv.kubeconfig("tenant-a"))
    assert result["failed"] is True
    assert result["msg"].startswith("cannot get Namespace cluster-ns: 403 Forbidden")
