"""The controller's tenants side as a process: a Tenant applied is Deployed with nobody running a playbook, and a
deleted Tenant with a bound claim gives its host back and leaves nothing behind."""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.support import eventually
from metalclaim_dev.tenancy import RBAC, TENANCY, tenancy_rights, tenants_side

pytestmark = pytest.mark.integration

METAL3 = "metal3.io/v1alpha1"
TENANT_LABEL = "tenancy.metalclaim.io/tenant"


@pytest.fixture
def rights(clients):
    with tenancy_rights(clients):
        yield


def read(clients, kind: str, name: str, namespace: str | None = None, api_version: str = TENANCY) -> dict | None:
    try:
        return (
            clients["admin"]
            .resources.get(api_version=api_version, kind=kind)
            .get(name=name, namespace=namespace)
            .to_dict()
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def test_the_controller_deploys_a_tenant_and_takes_it_apart(devenv, clients, rack, rights, tmp_path):
    name = f"c{uuid.uuid4().hex[:6]}"
    rack.host("h1")
    controller = tenants_side(devenv, tmp_path, rack.namespace)
    tenants = clients["admin"].resources.get(api_version=TENANCY, kind="Tenant")
    try:
        applied = time.monotonic()
        tenants.create(
            body={
                "apiVersion": TENANCY,
                "kind": "Tenant",
                "metadata": {"name": name},
                "spec": {
                    "tenantName": name,
                    "childNamespaces": ["work"],
                    "hostPools": [{"namespace": rack.namespace}],
                    "quota": {"maxHostClaims": 3},
                },
            }
        )
        eventually(
            lambda: ((read(clients, "Tenant", name) or {}).get("status") or {}).get("state") == "Deployed",
            timeout=60,
            message="Tenant Deployed",
        )
        print(f"\nTenant applied -> Deployed: {time.monotonic() - applied:.1f}s")
        namespace = f"{name}-work"
        assert read(clients, "Namespace", namespace, api_version="v1")["metadata"]["labels"][TENANT_LABEL] == name
        assert read(clients, "RoleBinding", "metalclaim-tenant-admin", namespace, RBAC)["subjects"][0]["name"] == (
            f"{name}-tenant-admin"
        )
        assert read(clients, "ResourceQuota", "metalclaim-tenant", namespace, "v1")["spec"]["hard"] == {
            "count/hostclaims.metal3.io": "3"
        }
        assert read(clients, "HostDeployPolicy", f"tenant-{name}", rack.namespace, METAL3) is not None

        # The quota counted first: until the quota controller has discovered a custom resource (up to its 30 s
        # discovery resync in a control plane whose CRDs are new, as this devenv's may be), the API server refuses
        # every HostClaim create the quota covers ("status unknown for quota").
        eventually(
            lambda: (
                "count/hostclaims.metal3.io"
                in (
                    (read(clients, "ResourceQuota", "metalclaim-tenant", namespace, "v1").get("status") or {}).get(
                        "used"
                    )
                    or {}
                )
            ),
            timeout=60,
            message="the tenant's quota counted",
        )
        # A claim of the tenant binds the pool's host through the policy entry the tenants side wrote.
        rack.claim("work-claim", namespace=namespace, identity="admin")
        eventually(
            lambda: (rack.read_claim("work-claim", namespace).get("status") or {}).get("hardwareData"),
            timeout=60,
            message="the tenant's claim bound",
        )
        assert rack.read_host("h1")["spec"]["consumerRef"]["name"] == "work-claim"

        # Deleting the Tenant: its claim is released (the host back, free), then its namespace, then its policy.
        deleted = time.monotonic()
        tenants.delete(name=name)
        eventually(lambda: read(clients, "Tenant", name) is None, timeout=120, message="Tenant gone")
        print(f"Tenant deleted -> gone (claim released, namespace removed): {time.monotonic() - deleted:.1f}s")
        host = rack.read_host("h1")
        assert not host["spec"].get("consumerRef") and host["status"]["provisioning"]["state"] == "available"
        assert read(clients, "Namespace", namespace, api_version="v1") is None
        assert read(clients, "HostDeployPolicy", f"tenant-{name}", rack.namespace, METAL3) is None
        rack.claims.clear()  # released and gone with the namespace
    except BaseException:
        print(controller.output())
        raise
    finally:
        controller.stop()
