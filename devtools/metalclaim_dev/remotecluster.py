"""A second, independent cluster for remote claims: the hardware cluster, its tenant identity and kubeconfig.

The workload cluster is the session's devenv; the hardware cluster is another devenv (own ports, PKI and
Redfish fleet), reused from METALCLAIM_HARDWARE_DEVENV=<dir> when set (as METALCLAIM_DEVENV is).
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import METAL3, TENANT_A, Rack
from metalclaim_dev.devenv.env import Devenv, tenant_namespace_bindings
from metalclaim_dev.support import clients_of, session_devenv

HARDWARE_FLEET = 2


@pytest.fixture(scope="session")
def hardware(tmp_path_factory) -> Devenv:
    yield from session_devenv("METALCLAIM_HARDWARE_DEVENV", tmp_path_factory.mktemp("hardware") / "env", HARDWARE_FLEET)


@pytest.fixture(scope="session")
def hardware_clients(hardware):
    return clients_of(hardware)


class HardwareTenant:
    """A namespace of the hardware cluster and a ServiceAccount with the tenant role there: the remote identity."""

    def __init__(self, hardware: Devenv, clients, rights: bool = True):
        self.hardware = hardware
        self.clients = clients
        self.namespace = f"hw-{uuid.uuid4().hex[:6]}"
        self.account = "remote-claims"
        self.api("Namespace").create(
            body={
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.namespace, "labels": {"metalclaim.io/role": "tenant"}},
            }
        )
        self.api("ServiceAccount").create(
            body={
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": self.account, "namespace": self.namespace},
            }
        )
        for binding in tenant_namespace_bindings(self.namespace):  # the hardware claim layer reads its Secrets
            self.api("RoleBinding", "rbac.authorization.k8s.io/v1").create(body=binding)
        if rights:
            self.api("RoleBinding", "rbac.authorization.k8s.io/v1").create(
                body={
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": "remote-claims", "namespace": self.namespace},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "metalclaim-tenant",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": self.account, "namespace": self.namespace}],
                }
            )
        self.token = hardware.kubectl(
            "admin", "create", "token", self.account, "-n", self.namespace, "--duration", "2h"
        ).stdout.strip()

    def api(self, kind: str, api_version: str = "v1", identity: str = "admin"):
        return self.clients[identity].resources.get(api_version=api_version, kind=kind)

    def kubeconfig(self, namespace: str | None = None, **user_extra) -> dict:
        """A self-contained kubeconfig for the ServiceAccount, its context naming `namespace` (default: its own)."""
        ca = Path(self.hardware.state["ca"]).read_bytes()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "hardware",
                    "cluster": {
                        "server": self.hardware.state["apiserver"],
                        "certificate-authority-data": base64.b64encode(ca).decode(),
                    },
                }
            ],
            "users": [{"name": "remote", "user": {"token": self.token, **user_extra}}],
            "contexts": [
                {
                    "name": "hw",
                    "context": {"cluster": "hardware", "user": "remote", "namespace": namespace or self.namespace},
                }
            ],
            "current-context": "hw",
        }

    def quota(self, count: int) -> None:
        self.api("ResourceQuota").create(
            body={
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "hostclaims", "namespace": self.namespace},
                "spec": {"hard": {"count/hostclaims.metal3.io": str(count)}},
            }
        )

    def claim(self, name: str) -> dict | None:
        try:
            return self.api("HostClaim", METAL3).get(name=name, namespace=self.namespace).to_dict()
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def secret(self, name: str) -> dict | None:
        try:
            return self.api("Secret").get(name=name, namespace=self.namespace).to_dict()
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def cleanup(self) -> None:
        claims = self.api("HostClaim", METAL3)
        for claim in claims.get(namespace=self.namespace).to_dict()["items"]:
            claims.patch(
                body={"metadata": {"finalizers": None}},
                name=claim["metadata"]["name"],
                namespace=self.namespace,
                content_type="application/merge-patch+json",
            )
        self.api("Namespace").delete(name=self.namespace)


def hardware_rack(hardware_clients, tenant: HardwareTenant, hosts: int = 1) -> Rack:
    """An infrastructure namespace of the hardware cluster, its hosts available, its policy admitting the tenant's."""
    rack = Rack(hardware_clients)
    rack.policy({"names": [tenant.namespace]})
    for index in range(hosts):
        rack.host(f"h{index}")
    return rack


class WorkloadTenant:
    """The tenant of the workload cluster: its kubeconfig Secrets and remote claims (in TENANT_A's namespace)."""

    def __init__(self, clients):
        self.clients = clients
        self.suffix = uuid.uuid4().hex[:6]
        self.created: list[tuple[str, str]] = []

    def api(self, kind: str, api_version: str = METAL3, identity: str = "tenant-a"):
        return self.clients[identity].resources.get(api_version=api_version, kind=kind)

    def kubeconfig_secret(self, kubeconfig: dict | str, name: str = "hw-kubeconfig", namespace: str = TENANT_A) -> str:
        name = f"{name}-{self.suffix}"
        text = kubeconfig if isinstance(kubeconfig, str) else json.dumps(kubeconfig)
        identity = "tenant-a" if namespace == TENANT_A else "admin"
        self.api("Secret", "v1", identity).create(
            body={
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace},
                "stringData": {"kubeconfig": text},
            }
        )
        self.created.append(("Secret", name if namespace == TENANT_A else f"{namespace}/{name}"))
        return name

    def data_secret(self, name: str, **data) -> dict:
        name = f"{name}-{self.suffix}"
        self.api("Secret", "v1").create(
            body={
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": TENANT_A},
                "stringData": data,
            }
        )
        self.created.append(("Secret", name))
        return {"name": name}

    def claim(self, name: str, secret: str, secret_namespace: str | None = None, **spec) -> str:
        name = f"{name}-{self.suffix}"
        ref = {"name": secret, **({"namespace": secret_namespace} if secret_namespace else {})}
        remote = {"kubeconfigSecretRef": ref, **spec.pop("remote", {})}
        self.api("HostClaim").create(
            body={
                "apiVersion": METAL3,
                "kind": "HostClaim",
                "metadata": {"name": name, "namespace": TENANT_A},
                "spec": {"kind": "remote", "remote": remote, "online": False, **spec},
            }
        )
        self.created.append(("HostClaim", name))
        return name

    def read(self, name: str) -> dict | None:
        try:
            return self.api("HostClaim", identity="admin").get(name=name, namespace=TENANT_A).to_dict()
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def events(self, name: str) -> list[dict]:
        events = self.api("Event", "v1", "admin").get(namespace=TENANT_A).to_dict()["items"]
        return [e for e in events if e["involvedObject"].get("name") == name]

    def cleanup(self) -> None:
        for kind, name in reversed(self.created):
            namespace, _slash, short = name.rpartition("/")
            api = self.api(kind, METAL3 if kind == "HostClaim" else "v1", "admin")
            try:
                if kind == "HostClaim":
                    api.patch(
                        body={"metadata": {"finalizers": None}},
                        name=short,
                        namespace=namespace or TENANT_A,
                        content_type="application/merge-patch+json",
                    )
                api.delete(name=short, namespace=namespace or TENANT_A)
            except ApiException as error:
                if error.status != 404:
                    raise


def condition(claim: dict, type_: str) -> dict:
    return next((c for c in (claim.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


@pytest.fixture
def hw_tenant(hardware, hardware_clients):
    """The remote identity: a namespace of the hardware cluster and its ServiceAccount."""
    tenant = HardwareTenant(hardware, hardware_clients)
    yield tenant
    tenant.cleanup()


@pytest.fixture
def tenant(clients):
    """tenant-a of the workload cluster: its kubeconfig Secrets and remote claims."""
    tenant = WorkloadTenant(clients)
    yield tenant
    tenant.cleanup()
