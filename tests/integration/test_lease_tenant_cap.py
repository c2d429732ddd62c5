"""A Tenant's lease cap (spec.maxLeaseDuration) on the real API server, through the controller (claims and tenants
sides): written on each of its namespaces as a label, it refuses a lease over it at `kubectl apply` (the HostClaim
lease-cap admission policy, played as the tenant's own admin identity, for a duration) and at binding (the claim
layer, for a claim made before the cap), the smaller of it and the policies' cap applying; a lease within it binds."""

from __future__ import annotations

import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.support import eventually
from metalclaim_dev.tenancy import TENANCY, as_user, read_tenant, tenants_side
from tests.integration import test_tenant_hooks as hook_tests
from tests.integration.test_tenant_hooks import METAL3, api, association

tenancy_side = hook_tests.tenancy_side
tenants = hook_tests.tenants

pytestmark = pytest.mark.integration
REACTION = 60
CAP_LABEL = "tenancy.metalclaim.io/max-lease-duration"


def tenant_body(name: str, namespace: str, **spec) -> dict:
    return {
        "apiVersion": TENANCY,
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"tenantName": name, "childNamespaces": ["work"], "hostPools": [{"namespace": namespace}], **spec},
    }


def cap_label(clients, namespace: str):
    labels = api(clients, "Namespace").get(name=namespace).metadata.labels or {}
    return labels.get(CAP_LABEL)


def claim_body(rack, namespace: str, name: str, lease: dict | None) -> dict:
    body = rack.claim_body(namespace, name)
    if lease is not None:
        body["spec"]["lease"] = lease
    return body


def test_the_tenant_cap_refuses_at_apply_and_at_binding(devenv, clients, tenancy_side, tenants, rack, tmp_path):
    name = tenants()
    namespace = f"{name}-work"
    controller = tenants_side(devenv, tmp_path / "controller", rack.namespace)
    try:
        api(clients, "Tenant", TENANCY).create(body=tenant_body(name, rack.namespace))
        eventually(lambda: (read_tenant(clients, name).get("status") or {}).get("state") == "Deployed", timeout=60)
        admin = as_user(devenv, f"{name}-alice", f"{name}-tenant-admin").resources.get(
            api_version=METAL3, kind="HostClaim"
        )
        # Made before any cap, and no host yet: it waits.
        admin.create(body=claim_body(rack, namespace, "early", {"duration": "3h"}))

        tenants_api = api(clients, "Tenant", TENANCY)
        tenants_api.patch(
            name=name, body={"spec": {"maxLeaseDuration": "2h"}}, content_type="application/merge-patch+json"
        )
        eventually(lambda: cap_label(clients, namespace) == "2h", timeout=REACTION, message="the cap on the namespace")

        def refused(body: dict, dry_run: bool = True) -> str:
            try:
                admin.create(body=body, dry_run="All" if dry_run else None)
            except ApiException as error:
                assert error.status == 403, error.body
                return error.body
            return ""

        over = refused(claim_body(rack, namespace, "over", {"duration": "2h30m"}))
        print(f"\nover the Tenant cap, at apply: {over}")
        assert "LeaseOverCap: spec.lease asks for duration 2h30m; this namespace's Tenant allows at most 2h" in over
        assert rack.namespace not in over  # no infra namespace, no host
        assert "LeaseRequired" in refused(claim_body(rack, namespace, "none", None))
        # An end is the claim layer's to count (from the binding): admission lets it through.
        assert refused(claim_body(rack, namespace, "far", {"end": "2099-01-01T00:00:00Z"})) == ""
        assert refused(claim_body(rack, namespace, "within", {"duration": "2h"})) == ""
        # An extension over the cap of a stored claim is refused too; the claim's other fields stay editable.
        with pytest.raises(ApiException) as extension:
            admin.patch(
                name="early",
                namespace=namespace,
                body={"spec": {"lease": {"duration": "4h"}}},
                content_type="application/merge-patch+json",
            )
        assert "LeaseOverCap" in extension.value.body
        admin.patch(
            name="early",
            namespace=namespace,
            body={"metadata": {"labels": {"edited": "yes"}}},
            content_type="application/merge-patch+json",
        )

        # The claim layer: the claim made before the cap is not bound, the Tenant named with its cap only.
        rack.host("h1")
        eventually(
            lambda: association(rack, "early", namespace)[1] == "LeaseOverCap", timeout=REACTION, message="refused"
        )
        message = association(rack, "early", namespace)[2]
        assert message.endswith("this namespace's Tenant allows at most 2h0m0s"), message
        assert rack.namespace not in message and "h1" not in message
        # Shortened within the cap: it binds.
        admin.patch(
            name="early",
            namespace=namespace,
            body={"spec": {"lease": {"duration": "90m"}}},
            content_type="application/merge-patch+json",
        )
        eventually(lambda: association(rack, "early", namespace)[0] == "True", timeout=REACTION, message="bound")

        # The cap lifted: the label goes, a long lease is accepted again.
        tenants_api.patch(
            name=name, body={"spec": {"maxLeaseDuration": None}}, content_type="application/merge-patch+json"
        )
        eventually(lambda: cap_label(clients, namespace) is None, timeout=REACTION, message="the cap lifted")
        assert refused(claim_body(rack, namespace, f"long-{uuid.uuid4().hex[:4]}", {"duration": "300h"})) == ""
    except BaseException:
        print(controller.output())
        raise
    finally:
        controller.stop()
