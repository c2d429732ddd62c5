"""`up --clusters 2`: a hardware cluster beside the workload cluster, for remote claims (docs/remote.md).

The hardware cluster is a second devenv in <dir>/hardware (own ports, PKI, Redfish fleet). In it: a namespace
for the workload cluster's tenant-a, a ServiceAccount there with the tenant role (the remote identity: the only
authority the workload side has in the hardware cluster), and a policy admitting that namespace to infrahost's
hosts. In the workload cluster: a Secret in tenant-a's namespace holding a kubeconfig for that identity, which
a claim of kind remote names in spec.remote.kubeconfigSecretRef.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from .env import INFRA_NAMESPACE, TENANT_NAMESPACES, Devenv, namespace, tenant_namespace_bindings

HARDWARE_DIR = "hardware"
REMOTE_NAMESPACE = "remote-tenant-a"  # in the hardware cluster
REMOTE_ACCOUNT = "remote-claims"
KUBECONFIG_SECRET = "hardware-kubeconfig"  # in the workload cluster, tenant-a's namespace
TOKEN_DURATION = "24h"  # the devenv's lifetime, give or take: `up` again mints a new one


def hardware_dir(directory: Path) -> Path:
    return directory / HARDWARE_DIR


def up(workload: Devenv, hosts: int) -> Devenv:
    """Start (or reuse) the hardware cluster and wire tenant-a's remote identity into the workload cluster."""
    hardware = Devenv.up(hardware_dir(workload.directory), hosts)
    rbac = "rbac.authorization.k8s.io/v1"
    tenant_role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metalclaim-tenant"}
    hardware.apply(
        "admin",
        [
            namespace(REMOTE_NAMESPACE, {"metalclaim.io/role": "tenant"}),
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": REMOTE_ACCOUNT, "namespace": REMOTE_NAMESPACE},
            },
            {
                "apiVersion": rbac,
                "kind": "RoleBinding",
                "metadata": {"name": REMOTE_ACCOUNT, "namespace": REMOTE_NAMESPACE},
                "roleRef": tenant_role,
                "subjects": [{"kind": "ServiceAccount", "name": REMOTE_ACCOUNT, "namespace": REMOTE_NAMESPACE}],
            },
            *tenant_namespace_bindings(REMOTE_NAMESPACE),  # the hardware claim layer reads the copied Secrets
            {
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "HostDeployPolicy",
                "metadata": {"name": "remote-tenants", "namespace": INFRA_NAMESPACE},
                "spec": {"hostclaimNamespaces": {"names": [REMOTE_NAMESPACE]}},
            },
        ],
    )
    token = hardware.kubectl(
        "admin", "create", "token", REMOTE_ACCOUNT, "-n", REMOTE_NAMESPACE, "--duration", TOKEN_DURATION
    ).stdout.strip()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": KUBECONFIG_SECRET, "namespace": TENANT_NAMESPACES["tenant-a"]},
        "stringData": {"kubeconfig": json.dumps(remote_kubeconfig(hardware, token))},
    }
    workload.apply("admin", [secret])
    return hardware


def remote_kubeconfig(hardware: Devenv, token: str) -> dict:
    """Self-contained (CA inline, a bearer token, no file paths, no exec plugin): what a remote claim accepts."""
    ca = Path(hardware.state["ca"]).read_bytes()
    server = {"server": hardware.state["apiserver"], "certificate-authority-data": base64.b64encode(ca).decode()}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hardware", "cluster": server}],
        "users": [{"name": REMOTE_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": "hardware",
                "context": {"cluster": "hardware", "user": REMOTE_ACCOUNT, "namespace": REMOTE_NAMESPACE},
            }
        ],
        "current-context": "hardware",
    }


def load(workload_dir: Path) -> Devenv | None:
    return Devenv.load(hardware_dir(workload_dir).resolve())


def summary() -> str:
    return (
        f"  remote claims: tenant-a's Secret {KUBECONFIG_SECRET} (namespace {TENANT_NAMESPACES['tenant-a']}) names "
        f"the hardware cluster's\n  namespace {REMOTE_NAMESPACE}; spec: {{kind: remote, remote: "
        f"{{kubeconfigSecretRef: {{name: {KUBECONFIG_SECRET}}}}}}}"
    )
