"""Test fixtures for the claim layer: a rack of hosts driven as a provisioner would, claims, steps."""

from __future__ import annotations

import uuid

from kubernetes.client.exceptions import ApiException

from metalclaim_dev.devenv.env import infra_namespace_bindings
from metalclaim_dev.support import run_tasks

TENANT_A = "cluster-ns"
TENANT_B = "tenant-b"
METAL3 = "metal3.io/v1alpha1"


class Rack:
    """A fresh infrastructure namespace with hosts in state `available` and (optionally) a policy."""

    def __init__(self, clients):
        self.clients = clients
        self.namespace = f"rack-{uuid.uuid4().hex[:6]}"
        self.kind = f"k-{uuid.uuid4().hex[:6]}"  # the label value this test's claims select
        self.claims: list[tuple[str, str]] = []
        self.api("admin", "Namespace", "v1").create(
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        )
        for binding in infra_namespace_bindings(self.namespace):  # the controller's sides' Secret rights here
            self.api("admin", "RoleBinding", "rbac.authorization.k8s.io/v1").create(body=binding)

    def api(self, identity: str, kind: str, api_version: str = METAL3):
        return self.clients[identity].resources.get(api_version=api_version, kind=kind)

    def policy(self, rule: dict | None = None, metadata_copy: dict | None = None, name: str = "policy") -> None:
        spec = {"hostclaimNamespaces": rule if rule is not None else {}}
        if metadata_copy is not None:
            spec["metadataCopy"] = metadata_copy
        self.api("admin", "HostDeployPolicy").create(
            body={
                "apiVersion": METAL3,
                "kind": "HostDeployPolicy",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": spec,
            }
        )

    def host(
        self, name: str, state: str = "available", labels: dict | None = None, annotations: dict | None = None
    ) -> dict:
        hosts = self.api("admin", "BareMetalHost")
        hosts.create(
            body={
                "apiVersion": METAL3,
                "kind": "BareMetalHost",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {"infra-kind": self.kind, **(labels or {})},
                    "annotations": annotations or {},
                },
                "spec": {
                    "online": False,
                    "bmc": {
                        "address": "redfish+http://127.0.0.1:9/redfish/v1/Systems/x",
                        "credentialsName": f"{name}-bmc-secret",
                    },
                },
            }
        )
        return hosts.status.patch(
            body={"status": {"provisioning": {"state": state}, "operationalStatus": "OK", "poweredOn": False}},
            name=name,
            namespace=self.namespace,
            content_type="application/merge-patch+json",
        ).to_dict()

    def set_state(self, name: str, state: str) -> None:
        """Move a host to a provisioning state, as its provisioner would."""
        self.api("admin", "BareMetalHost").status.patch(
            body={"status": {"provisioning": {"state": state}}},
            name=name,
            namespace=self.namespace,
            content_type="application/merge-patch+json",
        )

    def claim(
        self, name: str, namespace: str = TENANT_A, identity: str = "tenant-a", labels: dict | None = None, **spec
    ) -> None:
        spec.setdefault("hostSelector", {"matchLabels": {"infra-kind": self.kind}})
        spec.setdefault("online", False)
        self.api(identity, "HostClaim").create(
            body={
                "apiVersion": METAL3,
                "kind": "HostClaim",
                "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
                "spec": spec,
            }
        )
        self.claims.append((namespace, name))

    def tenant_secret(self, name: str, **data) -> dict:
        """A tenant Secret named for this rack (tests share the tenant namespace); the claim's reference to it."""
        unique = f"{self.namespace}-{name}"
        self.api("tenant-a", "Secret", "v1").create(
            body={
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": unique, "namespace": TENANT_A},
                "stringData": data,
            }
        )
        return {"name": unique}

    def read_claim(self, name: str, namespace: str = TENANT_A) -> dict:
        return self.api("admin", "HostClaim").get(name=name, namespace=namespace).to_dict()

    def read_host(self, name: str) -> dict:
        return self.api("admin", "BareMetalHost").get(name=name, namespace=self.namespace).to_dict()

    def claim_args(self) -> list[dict]:
        return [{"namespace": ns, "name": name} for ns, name in self.claims]

    def cleanup(self) -> None:
        claims = self.api("admin", "HostClaim")
        for namespace, name in self.claims:
            try:  # drop our finalizer so deletion does not wait for a release no test runs
                claims.patch(
                    body={"metadata": {"finalizers": None}},
                    name=name,
                    namespace=namespace,
                    content_type="application/merge-patch+json",
                )
                claims.delete(name=name, namespace=namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
        self.api("admin", "Namespace", "v1").delete(name=self.namespace)


def step(module: str, devenv, tmp_path, rack, check_mode: bool = False, diff: bool = False) -> dict:
    """Run one claim-layer module for the rack's claims, as the controller (with --diff when `diff`)."""
    task = {f"metalclaim.hostclaim.{module}": {"claims": rack.claim_args()}}
    if check_mode:
        task["check_mode"] = True
    if diff:
        task["diff"] = True
    (result,) = run_tasks(tmp_path / uuid.uuid4().hex[:6], [task], devenv.kubeconfig("controller"))
    assert not result["failed"], result
    return result


def condition(claim: dict, type_: str) -> dict:
    return next(c for c in claim["status"]["conditions"] if c["type"] == type_)
