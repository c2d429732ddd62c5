"""What the Tenant tests share: reading Tenants, the tenants side's rights, and the controller running it."""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from metalclaim_dev.controllerproc import ControllerProcess
from metalclaim_dev.support import eventually

# The claim side, as the tenant step binds its Secret rights in each tenant namespace (the devenv's user).
CLAIM_SIDE = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "metalclaim-controller"}]

TENANCY = "tenancy.metalclaim.io/v1alpha1"
RBAC = "rbac.authorization.k8s.io/v1"


def read_tenant(clients, name: str) -> dict | None:
    try:
        return clients["admin"].resources.get(api_version=TENANCY, kind="Tenant").get(name=name).to_dict()
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def condition(tenant: dict, type_: str) -> dict:
    return next(c for c in tenant["status"]["conditions"] if c["type"] == type_)


@contextlib.contextmanager
def tenancy_rights(clients, user: str = "metalclaim-controller"):
    """`user` bound to config/rbac/tenancy_role.yaml, as a cluster binds its tenants side; unbound afterwards."""
    bindings = clients["admin"].resources.get(api_version=RBAC, kind="ClusterRoleBinding")
    name = f"test-tenancy-{uuid.uuid4().hex[:6]}"
    bindings.create(
        body={
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metalclaim-tenancy"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )
    try:
        _until_authorized(clients, user)
        yield
    finally:
        bindings.delete(name=name)


def _until_authorized(clients, user: str, timeout: float = 30.0) -> None:
    """Until the API server's authorizer has the new binding (its RBAC cache follows a watch: under load, the
    first requests after the create may still be refused): the role's first rule, asked as a SubjectAccessReview."""
    role = clients["admin"].resources.get(api_version=RBAC, kind="ClusterRole").get(name="metalclaim-tenancy")
    rule = role.to_dict()["rules"][0]
    attributes = {"group": rule["apiGroups"][0], "resource": rule["resources"][0], "verb": rule["verbs"][0]}
    reviews = clients["admin"].resources.get(api_version="authorization.k8s.io/v1", kind="SubjectAccessReview")
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
    body["spec"] = {"user": user, "resourceAttributes": attributes}
    eventually(
        lambda: reviews.create(body=body).to_dict()["status"].get("allowed"),
        timeout=timeout,
        interval=0.1,
        message=f"{user} authorized by the tenancy role",
    )


def as_user(devenv, user: str, group: str) -> DynamicClient:
    """A client that acts as `user` in `group`, impersonated by the admin, as an OIDC login in that group would."""
    api_client = kube_config.new_client_from_config(config_file=devenv.kubeconfig("admin"))
    api_client.set_default_header("Impersonate-User", user)
    api_client.set_default_header("Impersonate-Group", group)
    return DynamicClient(api_client)


def tenants_side(devenv, directory: Path, infra_namespace: str) -> ControllerProcess:
    """One controller process serving claims and Tenants, the claim side named for the tenants' Secret bindings."""
    return ControllerProcess(
        devenv,
        directory,
        "--controllers",
        "claims,tenants",
        "--infra-namespaces",
        infra_namespace,
        "--tenant-claim-side",
        "user:metalclaim-controller",
    )


def reconcile(devenv, names: list[str]) -> dict:
    """One tenant_reconcile run in process, as the module runs it (for the tests that need many)."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.io.reconcile import (
        TenantRun,
        reconcile_tenants,
    )

    run = TenantRun(Kube({"kubeconfig": devenv.kubeconfig("admin")}), False, "", CLAIM_SIDE)
    return reconcile_tenants(run, names)


def delete_tenants(clients, devenv, names: list[str]) -> None:
    """A test's Tenants deleted, their hooks removed first so none can hold the deletion; reconciled until gone."""
    tenants = clients["admin"].resources.get(api_version=TENANCY, kind="Tenant")
    for name in names:
        try:
            tenants.patch(body={"spec": {"hooks": None}}, name=name, content_type="application/merge-patch+json")
            tenants.delete(name=name)
        except ApiException as error:
            if error.status != 404:
                raise
    for _attempt in range(15):
        present = [n for n in names if read_tenant(clients, n)]
        if not present:
            break
        reconcile(devenv, present)
        time.sleep(1)
