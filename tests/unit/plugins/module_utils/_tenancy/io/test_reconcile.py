"""Which namespaces a Tenant's hooks hear about (the tenant step's I/O edge, over a fake API)."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import Snapshot
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.io import reconcile
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import tenant as plan


class _Kube:
    def __init__(self, objects: dict):
        self.objects = objects

    def list(self, api_version, kind, namespace=None, label_selector=None):
        return [dict(o) for o in self.objects.get(kind, [])]


def _namespace(name: str, tenant: str | None) -> dict:
    labels = {plan.TENANT_LABEL: tenant} if tenant else {}
    return {"metadata": {"name": name, "labels": labels}}


def test_a_tenant_hears_only_of_claims_in_namespaces_labelled_its_own():
    # Tenant "b" names child "x-y": b-x-y, which is tenant "b-x"'s child "y". Its hooks must not hear of b-x's claims.
    b = {"metadata": {"name": "b"}, "spec": {"tenantName": "b", "childNamespaces": ["x-y", "own"]}}
    kube = _Kube(
        {
            "Namespace": [_namespace("b-own", "b"), _namespace("b-x-y", "b-x")],
            "HostClaim": [
                {"metadata": {"namespace": "b-own", "name": "mine"}},
                {"metadata": {"namespace": "b-x-y", "name": "theirs"}},
            ],
        }
    )
    snapshot = reconcile.Batch(Snapshot(kube))
    namespaces = reconcile._namespaces_of(snapshot, b)
    assert namespaces == ["b-own"]
    assert [c["metadata"]["name"] for c in snapshot.claims_in(namespaces)] == ["mine"]
