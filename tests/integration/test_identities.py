"""The controller's two sides are two identities, and neither can reach the other's Secrets.

Attacks as the identities the devenv gives each side (the same ClusterRoles and namespace
RoleBindings the install role gives the ServiceAccounts; the last test checks those):
the claim side (`controller`) holding a stolen token tries to read a BMC password; the
provisioner side tries to read a tenant's Secret or touch a claim.
"""

from __future__ import annotations

import base64
import uuid

import pytest
from kubernetes import client as kube_client
from kubernetes import config as kube_config

from metalclaim_dev.devenv.env import INFRA_NAMESPACE, TENANT_NAMESPACES
from metalclaim_dev.support import REPO_ROOT, run_playbook, status_of

pytestmark = pytest.mark.integration
TENANT_NS = TENANT_NAMESPACES["tenant-a"]
CLAIMS_SA = "system:serviceaccount:metalclaim-system:metalclaim-controller"
PROVISIONER_SA = "system:serviceaccount:metalclaim-system:metalclaim-provisioner"


def core(devenv, identity: str) -> kube_client.CoreV1Api:
    return kube_client.CoreV1Api(kube_config.new_client_from_config(config_file=devenv.kubeconfig(identity)))


def custom(devenv, identity: str) -> kube_client.CustomObjectsApi:
    return kube_client.CustomObjectsApi(kube_config.new_client_from_config(config_file=devenv.kubeconfig(identity)))


@pytest.fixture(scope="module")
def bmc_secret(devenv) -> str:
    """The name of a registered host's BMC credentials Secret in the infra namespace."""
    hosts = custom(devenv, "admin").list_namespaced_custom_object
    listed = hosts("metal3.io", "v1alpha1", INFRA_NAMESPACE, "baremetalhosts")
    return listed["items"][0]["spec"]["bmc"]["credentialsName"]


@pytest.fixture
def tenant_secret(devenv):
    name = f"user-data-{uuid.uuid4().hex[:6]}"
    body = kube_client.V1Secret(
        metadata=kube_client.V1ObjectMeta(name=name), data={"userData": base64.b64encode(b"#cloud-config\n").decode()}
    )
    core(devenv, "tenant-a").create_namespaced_secret(TENANT_NS, body)
    yield name
    core(devenv, "admin").delete_namespaced_secret(name, TENANT_NS)


def test_the_claim_side_cannot_read_a_bmc_secret_in_any_way(devenv, bmc_secret):
    claims = core(devenv, "controller")
    assert status_of(lambda: claims.read_namespaced_secret(bmc_secret, INFRA_NAMESPACE)) == 403
    assert status_of(lambda: claims.list_namespaced_secret(INFRA_NAMESPACE)) == 403
    assert status_of(lambda: claims.list_namespaced_secret(INFRA_NAMESPACE, watch=True, timeout_seconds=1)) == 403
    assert status_of(claims.list_secret_for_all_namespaces) == 403
    # A PATCH answers with the whole object: an empty one would hand over the password.
    assert status_of(lambda: claims.patch_namespaced_secret(bmc_secret, INFRA_NAMESPACE, {})) == 403


def test_the_claim_side_reads_tenant_secrets_only_where_it_is_bound(devenv, tenant_secret):
    claims = core(devenv, "controller")
    assert status_of(lambda: claims.read_namespaced_secret(tenant_secret, TENANT_NS)) == 200
    assert status_of(lambda: claims.list_namespaced_secret("kube-system")) == 403
    assert status_of(lambda: claims.list_namespaced_secret("metalclaim-system")) == 403


def test_the_claim_side_cannot_write_what_the_provisioner_owns(devenv, bmc_secret):
    hosts = custom(devenv, "controller")
    host = bmc_secret.removesuffix("-bmc-secret")
    patch = {"status": {"operationalStatus": "OK"}}
    assert (
        status_of(
            lambda: hosts.patch_namespaced_custom_object_status(
                "metal3.io", "v1alpha1", INFRA_NAMESPACE, "baremetalhosts", host, patch
            )
        )
        == 403
    )


def test_the_provisioner_reads_bmc_secrets_but_nothing_of_a_tenant(devenv, bmc_secret, tenant_secret):
    provisioner = core(devenv, "provisioner")
    assert status_of(lambda: provisioner.read_namespaced_secret(bmc_secret, INFRA_NAMESPACE)) == 200
    assert status_of(lambda: provisioner.read_namespaced_secret(tenant_secret, TENANT_NS)) == 403
    assert status_of(lambda: provisioner.list_namespaced_secret(TENANT_NS)) == 403
    assert status_of(provisioner.list_secret_for_all_namespaces) == 403
    claims = custom(devenv, "provisioner")
    listing = claims.list_namespaced_custom_object
    assert status_of(lambda: listing("metal3.io", "v1alpha1", TENANT_NS, "hostclaims")) == 403


def allowed(devenv, user: str, verb: str, resource: str, namespace: str | None) -> bool:
    """What the API server's authorizer answers for `user` (a SubjectAccessReview, as admin)."""
    review = kube_client.AuthorizationV1Api(kube_config.new_client_from_config(config_file=devenv.kubeconfig("admin")))
    attributes = kube_client.V1ResourceAttributes(verb=verb, resource=resource, namespace=namespace)
    spec = kube_client.V1SubjectAccessReviewSpec(user=user, resource_attributes=attributes)
    return review.create_subject_access_review(kube_client.V1SubjectAccessReview(spec=spec)).status.allowed


def test_the_installed_service_accounts_have_the_same_split(devenv, tmp_path):
    """install.yml with the controller switch and the namespaces: what each ServiceAccount may do with Secrets."""
    results = run_playbook(
        tmp_path / "install",
        REPO_ROOT / "playbooks" / "install.yml",
        devenv.kubeconfig("admin"),
        {
            "install_controller": True,
            "install_infra_namespaces": [INFRA_NAMESPACE],
            "install_tenant_namespaces": [TENANT_NS],
        },
    )
    assert not any(r["failed"] for r in results), results
    table = {
        (user, verb, namespace): allowed(devenv, user, verb, "secrets", namespace)
        for user in (CLAIMS_SA, PROVISIONER_SA)
        for verb in ("get", "list", "watch", "patch", "create", "update", "delete")
        for namespace in (INFRA_NAMESPACE, TENANT_NS, None)
    }
    granted = sorted((key for key, yes in table.items() if yes), key=str)
    assert granted == sorted(
        [
            *((CLAIMS_SA, verb, INFRA_NAMESPACE) for verb in ("create", "update", "delete")),
            # create, update: Cluster API machines' metaData (held to labelled Secrets by claim_secrets_policy.yaml)
            *((CLAIMS_SA, verb, TENANT_NS) for verb in ("get", "list", "watch", "create", "update")),
            *((PROVISIONER_SA, verb, INFRA_NAMESPACE) for verb in ("get", "list", "watch")),
        ],
        key=str,
    )
