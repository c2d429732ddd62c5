"""docs/ tells the truth: every condition reason and Event a tenant can see is in the tenant guide, the CRD
reference is what config/crd gives, and the guides' relative links lead somewhere."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import (
    binding,
    failures,
    lease,
    limits,
    secrets,
    sync,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3

from metalclaim_dev.support import REPO_ROOT, manifest_objects

DOCS = REPO_ROOT / "docs"
TENANT_GUIDE = DOCS / "tenant-guide.md"


def _documented() -> set[str]:
    return set(re.findall(r"`([A-Za-z]+)`", TENANT_GUIDE.read_text()))


def test_every_claim_condition_reason_is_in_the_tenant_guide():
    reasons = {binding.ASSOCIATED, binding.NO_HOST, binding.NOT_AUTHORIZED, binding.MISSING_HOST}
    reasons |= {binding.TENANT_HOST_LIMIT, binding.BINDING_HOOK_PENDING, binding.BINDING_HOOK_REFUSED}
    reasons |= {binding.INVALID_SELECTOR, secrets.SYNCED, secrets.CROSS_NAMESPACE, secrets.COPY_NAME_TAKEN}
    reasons |= {secrets.sync_failure(role) for role in metal3.DATA_ROLES}
    reasons |= {sync.IMAGE_CHANGE_REJECTED, sync.REBOOT_NOT_APPLICABLE, sync.AUTHORIZATION_REVOKED}
    reasons |= {failures.RECONCILE_ERROR, failures.STATUS_REFUSED, limits.REBOOT_REQUESTS_TOO_LARGE}
    reasons |= {"InfoReported", "IssuesReported", "UnknownReported"}  # Ready (conditions.with_ready)
    reasons |= {sync.state_reason(state) for state in metal3.STATES}  # Provisioned: every host state
    reasons |= {lease.LEASE_ACTIVE, lease.LEASE_ENDING, lease.LEASE_EXPIRED, lease.LEASE_OVER_CAP}
    reasons |= {lease.LEASE_REQUIRED, lease.LEASE_INVALID, lease.LEASE_HOST_BOOKED}
    missing = sorted(reasons - _documented())
    assert not missing, f"reasons a tenant can see that docs/tenant-guide.md does not explain: {missing}"


def test_the_reason_constants_are_all_accounted_for():
    """A new reason constant in the claim layer must be added above (and so to the guide)."""
    known = {"ASSOCIATED", "NO_HOST", "NOT_AUTHORIZED", "MISSING_HOST", "INVALID_SELECTOR", "SYNCED"}
    known |= {"CROSS_NAMESPACE", "COPY_NAME_TAKEN", "IMAGE_CHANGE_REJECTED", "REBOOT_NOT_APPLICABLE"}
    known |= {"AUTHORIZATION_REVOKED", "TENANT_HOST_LIMIT", "BINDING_HOOK_PENDING", "BINDING_HOOK_REFUSED"}
    known |= {"RECONCILE_ERROR", "STATUS_REFUSED", "REBOOT_REQUESTS_TOO_LARGE"}
    known |= {"CLAIM_KIND"}  # CLAIM_KIND: the kind HostClaim, not a reason
    known |= {"LEASE_ACTIVE", "LEASE_ENDING", "LEASE_EXPIRED", "LEASE_OVER_CAP", "LEASE_REQUIRED", "LEASE_INVALID"}
    known |= {"LEASE_HOST_BOOKED"}
    for module in (binding, secrets, sync, failures, limits, lease):
        tree = ast.parse(Path(module.__file__).read_text())
        constants = {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name)
            and isinstance(node.value.value, str)
            and re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+", node.value.value)
        }
        assert constants <= known, f"{module.__name__}: {sorted(constants - known)} not checked against the guide"


def test_every_event_reason_a_claim_gets_is_in_the_tenant_guide():
    literal = set()
    for path in (REPO_ROOT / "plugins" / "module_utils" / "_claims" / "io").glob("*.py"):
        literal |= set(re.findall(r'run\.event\(\s*claim,\s*"(?:Normal|Warning)",\s*"([A-Za-z]+)"', path.read_text()))
    assert {"Bound", "Provisioned", "Released", "Releasing"} <= literal
    missing = sorted(literal - _documented())
    assert not missing, missing


def test_the_crd_reference_is_generated_from_the_crds():
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "hack" / "crd-reference.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_relative_links_in_the_docs_resolve():
    for page in [REPO_ROOT / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: link to {target}"


def _guide_objects() -> list:
    """Every object of the guides' YAML blocks (a block may hold several documents)."""
    return [
        doc
        for page in DOCS.glob("*-guide.md")
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.DOTALL)
        for doc in yaml.safe_load_all(block)
        if doc
    ]


def test_the_guides_show_the_samples_as_they_are():
    """Each object of config/samples (applied by tests/integration/test_samples.py and test_capi_provider.py) is in a
    YAML block of a guide."""
    blocks = _guide_objects()
    for sample in (REPO_ROOT / "config" / "samples").rglob("*.yaml"):
        if sample.name == "kustomization.yaml" or "overlay" in sample.parts:
            continue
        for obj in manifest_objects([yaml.safe_load(sample.read_text())]):
            assert obj in blocks, f"{sample.name}: {obj['kind']} is not shown as is in docs/*-guide.md"


def test_every_cluster_api_reason_is_in_the_tenant_guide():
    """A MetalClaimMachine's and MetalClaimCluster's reasons (_capi) are in the tenant guide's Cluster API chapter."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure import cluster, machine

    reasons = {
        value
        for module in (machine, cluster)
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str) and re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)*", value)
    }
    reasons -= {machine.MACHINE_KIND, machine.CLUSTER_KIND, machine.READY, machine.PAUSED}
    assert {machine.WAITING_FOR_HOST, machine.PROVISIONED, cluster.ENDPOINT_GIVEN} <= reasons
    missing = sorted(reason for reason in reasons if f"`{reason}`" not in TENANT_GUIDE.read_text())
    assert not missing, f"Cluster API reasons docs/tenant-guide.md does not explain: {missing}"


def test_the_guides_show_metal3s_walkthrough_objects_as_they_are():
    """The policy and claim of Metal3's walkthrough (tests/fixtures, applied by test_foundation.py) are guide blocks."""
    blocks = _guide_objects()
    walkthrough = REPO_ROOT / "tests" / "fixtures" / "metal3_hostclaim_walkthrough.yaml"
    objects = [doc for doc in yaml.safe_load_all(walkthrough.read_text()) if doc and "kind" in doc]
    assert sorted(doc["kind"] for doc in objects) == ["HostClaim", "HostDeployPolicy"]
    for doc in objects:
        assert doc in blocks, f"the walkthrough's {doc['kind']} is not shown as is in docs/*-guide.md"


def test_every_tenant_condition_reason_is_in_the_infra_guide():
    """Each reason a Tenant's conditions can carry (the tenant step's and its hooks') is in the infra guide's table."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks, tenant

    reasons = set()
    for module in (tenant, hooks):
        tree = ast.parse(Path(module.__file__).read_text())
        reasons |= {
            node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+", node.value.value)
            and node.targets[0].id not in ("KIND",)
        }
    assert {"SpecAccepted", "HookRefused", "DeliveryRetrying", "DeliveryAbandoned"} <= reasons
    documented = set(re.findall(r"`([A-Za-z]+)`", (DOCS / "infra-guide.md").read_text()))
    missing = sorted(reasons - documented)
    assert not missing, f"Tenant reasons docs/infra-guide.md does not explain: {missing}"


def test_every_claimset_reason_and_event_is_in_the_tenant_guide():
    """A HostClaimSet's condition reasons and Events (_claimsets) are the tenant guide's too."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claimsets.pure import plan

    tree = ast.parse(Path(plan.__file__).read_text())
    reasons = {
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+", node.value.value)
    }
    assert {plan.SCALED_TO_REPLICAS, plan.CREATE_REFUSED, plan.HOSTS_WAITING, plan.CLAIMS_DELETED} <= reasons
    missing = sorted(reasons - {plan.KIND, plan.CLAIM_KIND} - _documented())
    assert not missing, f"HostClaimSet reasons docs/tenant-guide.md does not explain: {missing}"


def test_every_catalog_reason_is_in_the_tenant_guide():
    """A HostCatalog's Ready reasons (_catalog) are explained where tenants read about their catalog."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._catalog.pure import catalog

    reasons = {catalog.COUNTED, catalog.VALUES_HIDDEN, catalog.TOO_MANY_CLASSES, catalog.HIDDEN}
    missing = sorted(reason for reason in reasons if f"`{reason}`" not in TENANT_GUIDE.read_text())
    assert not missing, f"HostCatalog reasons docs/tenant-guide.md does not explain: {missing}"
