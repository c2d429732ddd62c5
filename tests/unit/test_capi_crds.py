"""The Cluster API provider's CRDs (config/crd/infrastructure.cluster.x-k8s.io_*.yaml) are what hack/capi-crds.py
writes from the HostClaim CRD, and carry what Cluster API's v1beta2 contract reads (cluster-api v1.14,
docs/book/src/developer/providers/contracts/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "capi-crds.py"


def generator():
    spec = importlib.util.spec_from_file_location("capi_crds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_files_are_what_the_script_writes_from_the_hostclaim_crd():
    for name, text in generator().rendered().items():
        assert (REPO / "config" / "crd" / name).read_text() == text, f"run python3 hack/capi-crds.py ({name})"


@pytest.mark.parametrize("name", sorted(generator().rendered()))
def test_each_crd_carries_clusterctl_and_the_contract_version_labels(name):
    crd = yaml.safe_load((REPO / "config" / "crd" / name).read_text())
    labels = crd["metadata"]["labels"]
    assert labels["cluster.x-k8s.io/v1beta2"] == "v1alpha1"  # the version Cluster API reads of each kind
    assert "clusterctl.cluster.x-k8s.io" in labels
    assert labels["cluster.x-k8s.io/provider"] == "infrastructure-metalclaim"
    assert crd["spec"]["group"] == "infrastructure.cluster.x-k8s.io"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]


def test_the_machine_has_the_contract_fields_and_a_template_carries_a_hostclaims_fields():
    rendered = {k: yaml.safe_load(v.split("---\n", 1)[1]) for k, v in generator().rendered().items()}
    machine = rendered["infrastructure.cluster.x-k8s.io_metalclaimmachines.yaml"]
    schema = machine["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    assert schema["spec"]["properties"]["providerID"]["type"] == "string"
    status = schema["status"]["properties"]
    assert status["initialization"]["properties"]["provisioned"]["type"] == "boolean"
    assert {"Hostname", "InternalIP"} <= set(status["addresses"]["items"]["properties"]["type"]["enum"])
    template = rendered["infrastructure.cluster.x-k8s.io_metalclaimmachinetemplates.yaml"]
    template_spec = template["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    carried = template_spec["properties"]["template"]["properties"]["spec"]["properties"]
    claim = yaml.safe_load((REPO / "config" / "crd" / "metal3.io_hostclaims.yaml").read_text())
    claim_spec = claim["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for field in ("hostSelector", "image", "kind", "lease", "nodeReuse", "firmware", "networkData"):
        assert carried[field] == claim_spec[field], field
    cluster = rendered["infrastructure.cluster.x-k8s.io_metalclaimclusters.yaml"]
    cluster_spec = cluster["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(cluster_spec["controlPlaneEndpoint"]["properties"]) == {"host", "port"}
