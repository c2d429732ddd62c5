"""playbooks/install.yml (role metalclaim.hostclaim.install) on the real API server."""

from __future__ import annotations

import json

import pytest
import yaml

from metalclaim_dev.support import REPO_ROOT, run_playbook

pytestmark = [pytest.mark.integration, pytest.mark.minutes(4)]

PLAYBOOK = REPO_ROOT / "playbooks" / "install.yml"
# The CRDs only metalclaim defines, in the order the role applies them.
OWN_CRDS = [
    "hostclaims.metal3.io",
    "hostclaimsets.metal3.io",
    "hostcatalogs.metal3.io",
    "hostdeploypolicies.metal3.io",
    "tenants.tenancy.metalclaim.io",
    "metalclaimclusters.infrastructure.cluster.x-k8s.io",
    "metalclaimmachines.infrastructure.cluster.x-k8s.io",
    "metalclaimmachinetemplates.infrastructure.cluster.x-k8s.io",
]


def test_install_is_idempotent_for_a_cluster_admin(devenv, tmp_path):
    first = run_playbook(tmp_path / "first", PLAYBOOK, devenv.kubeconfig("admin"))
    assert first and not any(r["failed"] for r in first), first
    second = run_playbook(tmp_path / "second", PLAYBOOK, devenv.kubeconfig("admin"))
    assert not any(r["failed"] for r in second), second
    # Every CRD and role is already as the manifests say: a second run changes nothing.
    assert [r for r in second if r.get("changed")] == []


def test_install_can_leave_metal3_crds_to_metal3(devenv, tmp_path):
    results = run_playbook(tmp_path, PLAYBOOK, devenv.kubeconfig("admin"), {"install_metal3_crds": False})
    assert _applied_crds(results) == OWN_CRDS


def test_infra_team_cannot_install_crds(devenv, tmp_path):
    results = run_playbook(tmp_path, PLAYBOOK, devenv.kubeconfig("infra"))
    assert results[-1]["failed"] is True
    assert "forbidden" in str(results[-1]).lower()


def _crd(devenv, name: str) -> dict:
    return json.loads(devenv.kubectl("admin", "get", "crd", name, "-o", "json", "--show-managed-fields").stdout)


def _applied_crds(results: list[dict]) -> list[str]:
    """The CRDs the role applied, in order: one module run, whose result lists each (or is the one)."""
    [applied] = [r for r in results if r["task"].startswith("Apply the CRDs")]
    if applied.get("skipped"):
        return []
    each = applied["result"].get("results") or [applied]
    return [r["result"]["metadata"]["name"] for r in each]


def test_install_leaves_a_metal3_owned_crd_alone_unless_told(devenv, tmp_path):
    # The BareMetalHost CRD as Metal3's baremetal-operator installs it: no metalclaim label, never applied
    # by the install role's field manager (managedFields cleared), a marker of its own.
    bmh = "baremetalhosts.metal3.io"
    marker = "controller-gen.kubebuilder.io/version"
    patch = {"metadata": {"labels": {"app.kubernetes.io/name": None}, "annotations": {marker: "v0.16.5"}}}
    devenv.kubectl("admin", "patch", "crd", bmh, "--type=merge", "-p", json.dumps(patch))
    devenv.kubectl("admin", "patch", "crd", bmh, "--type=merge", "-p", '{"metadata": {"managedFields": [{}]}}')
    try:
        before = _crd(devenv, bmh)
        assert "metalclaim-install" not in [f.get("manager") for f in before["metadata"].get("managedFields", [])]
        results = run_playbook(tmp_path / "default", PLAYBOOK, devenv.kubeconfig("admin"))
        assert not any(r["failed"] for r in results), results
        after = _crd(devenv, bmh)
        # Not written by the role (the API server's own status writes may bump its resourceVersion).
        assert "metalclaim-install" not in [f.get("manager") for f in after["metadata"].get("managedFields", [])]
        assert after["metadata"]["annotations"][marker] == "v0.16.5" and after["spec"] == before["spec"]
        assert "app.kubernetes.io/name" not in after["metadata"].get("labels", {})
        # metalclaim's own HardwareData and HostFirmwareSettings CRDs are still applied
        assert _applied_crds(results) == [*OWN_CRDS, "hardwaredata.metal3.io", "hostfirmwaresettings.metal3.io"]
        [notice] = [
            i
            for r in results
            for i in r.get("results", [])
            if r["task"].startswith("Leave the CRDs") and not i.get("skipped")
        ]
        assert bmh in notice["msg"] and "install_metal3_crds_take_over=true" in notice["msg"]

        told = run_playbook(
            tmp_path / "take-over",
            PLAYBOOK,
            devenv.kubeconfig("admin"),
            {"install_metal3_crds_take_over": True},
        )
        assert not any(r["failed"] for r in told), told
        assert "baremetalhosts.metal3.io" in _applied_crds(told)
        assert _crd(devenv, bmh)["metadata"]["labels"]["app.kubernetes.io/name"] == "metalclaim"
    finally:
        devenv.kubectl("admin", "annotate", "crd", bmh, f"{marker}-")
        run_playbook(
            tmp_path / "restore",
            PLAYBOOK,
            devenv.kubeconfig("admin"),
            {"install_metal3_crds_take_over": True},
        )


def test_install_controller_applies_the_disruption_budgets_and_the_pod_security_labels(devenv, tmp_path):
    """The controller as the role installs it is config/manager's and config/namespace's: each side's
    PodDisruptionBudget as its file says, the namespace with its Pod Security labels (tests/unit/test_kustomize.py
    checks the role lists every file)."""
    results = run_playbook(tmp_path, PLAYBOOK, devenv.kubeconfig("admin"), {"install_controller": True})
    assert not any(r["failed"] for r in results), results
    for path in ("pod_disruption_budget.yaml", "provisioner_pod_disruption_budget.yaml"):
        manifest = yaml.safe_load((REPO_ROOT / "config" / "manager" / path).read_text())
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        applied, deployment = (
            json.loads(devenv.kubectl("admin", "-n", namespace, "get", kind, name, "-o", "json").stdout)
            for kind in ("pdb", "deployment")
        )
        assert applied["spec"] == manifest["spec"], path
        assert applied["spec"]["selector"] == deployment["spec"]["selector"], path
    shipped = yaml.safe_load((REPO_ROOT / "config" / "namespace" / "namespace.yaml").read_text())
    labels = json.loads(devenv.kubectl("admin", "get", "namespace", "metalclaim-system", "-o", "json").stdout)
    labels = labels["metadata"]["labels"]
    security = {k: v for k, v in shipped["metadata"]["labels"].items() if k.startswith("pod-security.kubernetes.io/")}
    assert security and {k: labels.get(k) for k in security} == security
