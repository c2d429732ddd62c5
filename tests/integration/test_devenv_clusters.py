"""`python -m metalclaim_dev.devenv up --clusters 2`: the hardware cluster beside the workload cluster, wired for remote
claims. Driven through the CLI as a developer would, then one remote.yml run as the workload's controller identity
mirrors tenant-a's remote claim into the hardware cluster with the kubeconfig Secret the devenv wrote."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kubernetes import config as kube_config
from kubernetes.dynamic import DynamicClient

from metalclaim_dev.devenv import clusters
from metalclaim_dev.devenv.env import TENANT_NAMESPACES, Devenv
from metalclaim_dev.support import REPO_ROOT, run_playbook

pytestmark = pytest.mark.integration
TENANT_NAMESPACE = TENANT_NAMESPACES["tenant-a"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "metalclaim_dev.devenv", *args], capture_output=True, text=True, check=False, timeout=300
    )


def _client(env: Devenv, identity: str) -> DynamicClient:
    return DynamicClient(kube_config.new_client_from_config(config_file=env.kubeconfig(identity)))


def test_up_clusters_2_wires_a_remote_claim_into_the_hardware_cluster(tmp_path):
    directory = tmp_path / "env"
    up = _cli("up", "--dir", str(directory), "--hosts", "1", "--clusters", "2")
    try:
        assert up.returncode == 0, up.stderr
        assert "hardware cluster in" in up.stdout and clusters.KUBECONFIG_SECRET in up.stdout
        workload, hardware = Devenv.load(directory.resolve()), clusters.load(directory)
        assert workload and hardware and workload.state["apiserver"] != hardware.state["apiserver"]
        claims = _client(workload, "tenant-a").resources.get(api_version="metal3.io/v1alpha1", kind="HostClaim")
        claims.create(
            body={
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "HostClaim",
                "metadata": {"name": "far", "namespace": TENANT_NAMESPACE},
                "spec": {
                    "kind": "remote",
                    "online": False,
                    "remote": {"kubeconfigSecretRef": {"name": clusters.KUBECONFIG_SECRET}},
                },
            }
        )
        tasks = run_playbook(
            tmp_path / "run",
            REPO_ROOT / "playbooks" / "remote.yml",
            workload.kubeconfig("controller"),
            {"remote_claims": [{"namespace": TENANT_NAMESPACE, "name": "far"}]},
        )
        assert not any(task["failed"] for task in tasks), tasks
        mirrored = (
            _client(hardware, "admin")
            .resources.get(api_version="metal3.io/v1alpha1", kind="HostClaim")
            .get(name="far", namespace=clusters.REMOTE_NAMESPACE)
        )
        assert mirrored.spec.online is False
        local = claims.get(name="far", namespace=TENANT_NAMESPACE).to_dict()
        conditions = {c["type"]: c for c in local["status"]["conditions"]}
        assert conditions["RemoteCluster"]["status"] == "True", conditions
        assert conditions["Mirrored"]["status"] == "True", conditions
    finally:
        down = _cli("down", "--dir", str(directory))
        assert down.returncode == 0, down.stderr
        assert clusters.load(directory) is None and not directory.exists()
