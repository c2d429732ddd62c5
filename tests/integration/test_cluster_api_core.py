"""Cluster API's real core manager on the devenv (the `cluster_api` fixture): it reconciles, its webhooks are served
and registered, and ClusterRoles labelled aggregate-to-manager extend its rights."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from metalclaim_dev.devenv import capi
from metalclaim_dev.support import eventually

INFRA_GROUP = "infrastructure.cluster.x-k8s.io"
# A stand-in provider's kinds, so that the core has refs to follow; named to collide with no real provider's.
TEST_KINDS = ("CapiCoreTestCluster", "CapiCoreTestMachineTemplate")


def get(devenv, *args: str) -> dict:
    return json.loads(devenv.kubectl("admin", "get", "-o", "json", *args).stdout)


def create(devenv, obj: dict, check: bool = True):
    return devenv.kubectl("admin", "create", "-f", "-", stdin=json.dumps(obj), check=check)


def stub_crd(kind: str) -> dict:
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # The contract label: the core finds a ref's version through it (and refuses CRDs without it).
        "metadata": {"name": f"{plural}.{INFRA_GROUP}", "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1"}},
        "spec": {
            "group": INFRA_GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": kind + "List"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def infra_kinds(devenv, cluster_api):
    crds = [stub_crd(kind) for kind in TEST_KINDS]
    devenv.apply("admin", crds)
    cluster_api.wait_established(*(crd["metadata"]["name"] for crd in crds))
    # Left installed: the session's manager watches them from now on, and a deleted CRD's watch fails in a loop.


@pytest.fixture
def namespace(devenv):
    name = f"capi-core-{uuid.uuid4().hex[:8]}"
    devenv.kubectl("admin", "create", "namespace", name)
    yield name
    # Cluster API's finalizers are the manager's: it must still be running here, and it is (session scope).
    devenv.kubectl("admin", "delete", "namespace", name, "--timeout=120s")


def cluster(name: str, namespace: str, **spec) -> dict:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def allowed(devenv, group: str, resource: str, verb: str) -> bool:
    """Whether the manager's user may `verb` `resource` ("name" or "name/subresource"), by a SubjectAccessReview."""
    name, _, subresource = resource.partition("/")
    attributes = {"group": group, "resource": name, "subresource": subresource, "verb": verb}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": capi.USER,
            "groups": list(capi.IDENTITIES[capi.IDENTITY][1]),
            "resourceAttributes": attributes,
        },
    }
    created = devenv.kubectl("admin", "create", "-o", "json", "-f", "-", stdin=json.dumps(review))
    return json.loads(created.stdout)["status"].get("allowed", False)


def test_the_manager_runs_as_its_own_identity(devenv, cluster_api):
    assert cluster_api.manager.alive()
    argv = Path(f"/proc/{cluster_api.manager.pid}/cmdline").read_text().split("\0")
    assert f"--kubeconfig={devenv.kubeconfig(capi.IDENTITY)}" in argv
    assert allowed(devenv, "cluster.x-k8s.io", "clusters/status", "patch")
    # Only its role: not an admin.
    assert not allowed(devenv, "rbac.authorization.k8s.io", "clusterroles", "create")


def test_a_cluster_gets_its_status_from_cluster_api(devenv, cluster_api, infra_kinds, namespace):
    # The infrastructure object first: the core then finds it on its first reconcile, not after a back-off.
    create(
        devenv,
        {
            "apiVersion": f"{INFRA_GROUP}/v1alpha1",
            "kind": "CapiCoreTestCluster",
            "metadata": {"name": "infra", "namespace": namespace},
            "spec": {},
        },
    )
    infra_ref = {"apiGroup": INFRA_GROUP, "kind": "CapiCoreTestCluster", "name": "infra"}
    create(devenv, cluster("c1", namespace, infrastructureRef=infra_ref))

    def reconciled():
        status = get(devenv, "clusters.v1beta2.cluster.x-k8s.io", "-n", namespace, "c1").get("status", {})
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        infra = conditions.get("InfrastructureReady", {})
        return status.get("phase") == "Provisioning" and infra.get("reason") == "NotReady" and status

    status = eventually(reconciled, timeout=60, message=f"the Cluster's status\n{cluster_api.log_tail()}")
    assert {c["observedGeneration"] for c in status["conditions"]} == {1}
    # The core took the infrastructure object as its own (the contract's ownerReference).
    owners = get(devenv, "capicoretestclusters", "-n", namespace, "infra")["metadata"].get("ownerReferences", [])
    assert [(o["kind"], o["name"]) for o in owners] == [("Cluster", "c1")]
    # v1beta1 is served through the conversion webhook: the ref gets its apiVersion from the CRD's contract label.
    old = get(devenv, "clusters.v1beta1.cluster.x-k8s.io", "-n", namespace, "c1")
    assert old["apiVersion"] == "cluster.x-k8s.io/v1beta1"
    assert old["spec"]["infrastructureRef"]["apiVersion"] == f"{INFRA_GROUP}/v1alpha1"


def test_webhooks_default_and_validate(devenv, cluster_api, infra_kinds, namespace):
    md = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": "md1", "namespace": namespace},
        "spec": {
            "clusterName": "c1",
            "replicas": 0,
            "template": {
                "spec": {
                    "clusterName": "c1",
                    "bootstrap": {"dataSecretName": "none"},
                    "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "CapiCoreTestMachineTemplate", "name": "t"},
                }
            },
        },
    }
    create(devenv, md)
    created = get(devenv, "machinedeployments.v1beta2.cluster.x-k8s.io", "-n", namespace, "md1")
    names = {"cluster.x-k8s.io/cluster-name": "c1", "cluster.x-k8s.io/deployment-name": "md1"}
    # The mutating webhook's defaults (/mutate-cluster-x-k8s-io-v1beta2-machinedeployment).
    assert created["spec"]["selector"] == {"matchLabels": names}
    assert created["spec"]["template"]["metadata"]["labels"] == names
    assert created["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "c1"
    # The validating one (/validate-cluster-x-k8s-io-v1beta2-cluster): a Cluster with nothing to reconcile.
    refused = create(devenv, cluster("empty", namespace, paused=True), check=False)
    assert refused.returncode != 0
    assert "one of spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set" in refused.stderr


def test_a_cluster_role_labelled_aggregate_to_manager_extends_the_managers_role(devenv, cluster_api):
    name = f"capi-core-test-{uuid.uuid4().hex[:8]}"
    rule = {"apiGroups": ["metalclaim.test"], "resources": [name], "verbs": ["get"]}
    devenv.apply(
        "admin",
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name, "labels": {capi.AGGREGATE_LABEL: "true"}},
                "rules": [rule],
            }
        ],
    )
    try:
        eventually(
            lambda: rule in get(devenv, "clusterrole", capi.AGGREGATED_ROLE).get("rules", []),
            timeout=30,
            message="the rule aggregated",
        )
        # The RBAC authorizer sees the aggregated rule a moment after the role has it.
        eventually(lambda: allowed(devenv, "metalclaim.test", name, "get"), timeout=30, message="the manager allowed")
        # The core's own rules arrive the same way, from capi-manager-role.
        rules = get(devenv, "clusterrole", capi.AGGREGATED_ROLE)["rules"]
        assert {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]} in (
            rules
        )
    finally:
        devenv.kubectl("admin", "delete", "clusterrole", name)
    eventually(
        lambda: rule not in get(devenv, "clusterrole", capi.AGGREGATED_ROLE).get("rules", []),
        timeout=30,
        message="the rule gone",
    )


def test_start_is_idempotent(devenv, cluster_api):
    again = capi.start(devenv)
    assert again.pid == cluster_api.manager.pid
    assert devenv.state["pids"][capi.PROCESS] == again.pid
