"""playbooks/tenant.yml on the real API server: onboarding from a YAML file, what the admin group may do,
the quota, refusals that write nothing, deletion that leaves nothing behind."""

from __future__ import annotations

import uuid

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A, step
from metalclaim_dev.claimlayer import condition as claim_condition
from metalclaim_dev.support import REPO_ROOT, eventually, run_playbook
from metalclaim_dev.tenancy import TENANCY, as_user, condition, read_tenant

pytestmark = pytest.mark.integration

PLAYBOOK = REPO_ROOT / "playbooks" / "tenant.yml"
RECONCILE = "Reconcile the Tenants"
METAL3 = "metal3.io/v1alpha1"
TENANT_LABEL = "tenancy.metalclaim.io/tenant"
# The devenv's claim side is a user, not the ServiceAccount of a cluster install.
CLAIM_SIDE = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "metalclaim-controller"}]


def tenant_manifest(name: str, **spec) -> dict:
    return {"apiVersion": TENANCY, "kind": "Tenant", "metadata": {"name": name}, "spec": {"tenantName": name, **spec}}


def onboard(devenv, tmp_path, run: str, **extravars) -> dict:
    extravars.setdefault("tenancy_claim_side_subjects", CLAIM_SIDE)
    tasks = run_playbook(tmp_path / run, PLAYBOOK, devenv.kubeconfig("admin"), extravars)
    return {t["task"]: t for t in tasks}


def api(clients, kind: str, api_version: str = "v1", identity: str = "admin"):
    return clients[identity].resources.get(api_version=api_version, kind=kind)


def claim_body(namespace: str, name: str) -> dict:
    return {"apiVersion": METAL3, "kind": "HostClaim", "metadata": {"name": name, "namespace": namespace}, "spec": {}}


def owned(clients, kind: str, name: str, api_version: str = "v1") -> list[str]:
    items = api(clients, kind, api_version).get(label_selector=f"{TENANT_LABEL}={name}").items
    return sorted(f"{i.metadata.namespace or ''}/{i.metadata.name}" for i in items)


def set_body(namespace: str, name: str) -> dict:
    return {
        "apiVersion": METAL3,
        "kind": "HostClaimSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"set": name}},
            "template": {"metadata": {"labels": {"set": name}}, "spec": {}},
        },
    }


def claim_side(devenv, clients, tmp_path, run: str, namespaces: list[str]) -> None:
    """What the controller's claim side would run meanwhile: playbooks/claimsets.yml over every HostClaimSet, then
    playbooks/reconcile.yml over the claims of `namespaces` (a deleted claim carries the finalizer from its
    creation: the claim layer lets it go)."""
    kubeconfig = devenv.kubeconfig("controller")
    tasks = run_playbook(tmp_path / f"{run}-sets", REPO_ROOT / "playbooks" / "claimsets.yml", kubeconfig)
    assert not any(t["failed"] for t in tasks), tasks
    listed = [c for ns in namespaces for c in api(clients, "HostClaim", METAL3).get(namespace=ns).items]
    if listed:
        wanted = {"claims_list": [{"namespace": c.metadata.namespace, "name": c.metadata.name} for c in listed]}
        tasks = run_playbook(tmp_path / f"{run}-claims", REPO_ROOT / "playbooks" / "reconcile.yml", kubeconfig, wanted)
        assert not any(t["failed"] for t in tasks), tasks


@pytest.fixture
def tenants(clients, devenv, tmp_path):
    """Tenant names for one test; each is deleted afterwards (and taken apart by the playbook)."""
    names: list[str] = []

    def new(prefix: str = "t") -> str:
        names.append(f"{prefix}{uuid.uuid4().hex[:6]}")
        return names[-1]

    yield new
    for name in names:
        try:
            api(clients, "Tenant", TENANCY).delete(name=name)
        except ApiException as error:
            if error.status != 404:
                raise
    for attempt in range(10):
        if not any(read_tenant(clients, name) for name in names):
            break
        onboard(devenv, tmp_path, f"cleanup-{attempt}", tenancy_names=names)


def test_onboarding_from_a_yaml_file(devenv, clients, tenants, tmp_path):
    name = tenants()
    manifest = tenant_manifest(
        name, childNamespaces=["slurm", "user"], hostPools=[{"namespace": "infrahost"}], quota={"maxHostClaims": 2}
    )
    source = tmp_path / "tenant.yaml"
    source.write_text(yaml.safe_dump(manifest))
    first = onboard(devenv, tmp_path, "first", tenancy_src=str(source))
    assert not first[RECONCILE]["failed"], first[RECONCILE]
    children = [f"{name}-slurm", f"{name}-user"]

    tenant = read_tenant(clients, name)
    assert tenant["status"]["state"] == "Deployed"
    assert tenant["status"]["childNamespaces"] == children
    assert all(c["status"] == "True" for c in tenant["status"]["conditions"]), tenant["status"]["conditions"]
    assert owned(clients, "Namespace", name) == [f"/{c}" for c in children]
    assert owned(clients, "RoleBinding", name, "rbac.authorization.k8s.io/v1") == sorted(
        f"{c}/{b}" for c in children for b in ("metalclaim-tenant-admin", "metalclaim-tenant-secrets-reader")
    )
    assert owned(clients, "ResourceQuota", name) == [f"{c}/metalclaim-tenant" for c in children]
    policy = api(clients, "HostDeployPolicy", METAL3).get(name=f"tenant-{name}", namespace="infrahost").to_dict()
    assert policy["spec"]["hostclaimNamespaces"] == {
        "names": children,
        "hasLabels": [{"name": TENANT_LABEL, "value": name}],
    }
    listed = {(o["kind"], o.get("namespace", ""), o["name"]) for o in tenant["status"]["objects"]}
    assert ("HostDeployPolicy", "infrahost", f"tenant-{name}") in listed and len(listed) == 9

    # Idempotent: a second run (the manifest applied again too) writes nothing.
    second = onboard(devenv, tmp_path, "second", tenancy_src=str(source))
    assert second[RECONCILE]["writes"] == 0, second[RECONCILE]["tenants"]
    assert read_tenant(clients, name)["metadata"]["resourceVersion"] == tenant["metadata"]["resourceVersion"]

    # The admin group: claims in the tenant's namespaces, 403 anywhere else.
    admin = as_user(devenv, "alice", f"{name}-tenant-admin")
    claims = admin.resources.get(api_version=METAL3, kind="HostClaim")
    # The API server refuses a create ("status unknown for quota") until kube-controller-manager has counted the
    # new quota; on a control plane this fresh, its monitor of the HostClaim CRD may not even exist yet.
    quotas = clients["admin"].resources.get(api_version="v1", kind="ResourceQuota")

    def counted() -> bool:
        status = quotas.get(name="metalclaim-tenant", namespace=children[0]).to_dict().get("status") or {}
        return all("count/hostclaims.metal3.io" in (status.get(part) or {}) for part in ("hard", "used"))

    eventually(counted, timeout=90, message="the tenant quota counted")
    claims.create(body=claim_body(children[0], "first"))
    for elsewhere in (TENANT_A, "infrahost"):
        with pytest.raises(ApiException) as refused:
            claims.create(body=claim_body(elsewhere, "sneaky"))
        assert refused.value.status == 403
    with pytest.raises(ApiException) as refused:
        admin.resources.get(api_version="v1", kind="Secret").get(namespace="infrahost")
    assert refused.value.status == 403
    # Someone of another group gets nothing in the tenant's namespaces.
    other = as_user(devenv, "mallory", "someone-else-tenant-admin").resources.get(api_version=METAL3, kind="HostClaim")
    with pytest.raises(ApiException) as refused:
        other.create(body=claim_body(children[0], "intruder"))
    assert refused.value.status == 403

    # The quota: two claims per namespace; the API server refuses the third with its quota error.
    quota = api(clients, "ResourceQuota")
    eventually(
        lambda: (quota.get(name="metalclaim-tenant", namespace=children[0]).to_dict().get("status") or {}).get("hard"),
        timeout=30,
        message="the quota's status computed by the resourcequota controller",
    )
    claims.create(body=claim_body(children[0], "second"))

    def used() -> str | None:
        status = quota.get(name="metalclaim-tenant", namespace=children[0]).to_dict().get("status") or {}
        return (status.get("used") or {}).get("count/hostclaims.metal3.io")

    # kube-controller-manager recounts `used` from its own informer: under load, a recount that has not seen the
    # second claim yet writes 1 back, and the quota admission then lets a third through. Both counted first.
    eventually(lambda: used() == "2", timeout=30, message="both claims counted by the quota")
    with pytest.raises(ApiException) as refused:
        claims.create(body=claim_body(children[0], "third"))
    assert refused.value.status == 403
    assert "exceeded quota: metalclaim-tenant" in refused.value.body, refused.value.body
    assert "count/hostclaims.metal3.io=2" in refused.value.body

    # A HostClaimSet in the other namespace, its member made by the claim side's step.
    api(clients, "HostClaimSet", METAL3).create(body=set_body(children[1], "workers"))
    claim_side(devenv, clients, tmp_path, "made", [])
    assert [c.metadata.name for c in claims.get(namespace=children[1]).items] == ["workers-0"]

    # Deletion: the sets and claims go first (nothing binds them here, so the claim layer, run after each tenant
    # step as the controller would, lets them go at once; the sets' step makes no claim again), then the
    # namespaces, then the policy; nothing of the tenant's is left.
    api(clients, "Tenant", TENANCY).delete(name=name)
    for attempt in range(8):
        onboard(devenv, tmp_path, f"delete-{attempt}", tenancy_names=[name])
        claim_side(devenv, clients, tmp_path, f"step-{attempt}", children)
        if read_tenant(clients, name) is None:
            break
        assert read_tenant(clients, name)["status"]["state"] == "Deleting"
    assert read_tenant(clients, name) is None
    assert owned(clients, "Namespace", name) == []
    assert owned(clients, "HostDeployPolicy", name, METAL3) == []


def test_refused_specs_write_nothing_and_say_which_field(devenv, clients, tenants, tmp_path):
    taken = tenants("t")
    api(clients, "Namespace").create(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{taken}-x"}})
    unprefixed, missing_host, missing_pool = tenants("t"), tenants("t"), tenants("t")
    manifests = [
        tenant_manifest(taken, childNamespaces=["ok", "x"], hostPools=[{"namespace": "infrahost"}]),
        tenant_manifest(unprefixed, childNamespaces=["ok"]),
        tenant_manifest(
            missing_host,
            childNamespaces=["ok"],
            exclusiveHosts={"hosts": [{"namespace": "infrahost", "name": "no-such-host"}]},
        ),
        tenant_manifest(missing_pool, childNamespaces=["ok"], hostPools=[{"namespace": "no-such-pool"}]),
    ]
    try:
        run = onboard(devenv, tmp_path, "refused", tenancy_definitions=manifests, tenancy_fail_on_refusal=False)
        assert not run[RECONCILE]["failed"]
        expected = {
            taken: ("NamespaceOwnedElsewhere", "spec.childNamespaces[1]"),
            missing_host: ("ExclusiveHostNotFound", "spec.exclusiveHosts.hosts[0]"),
            missing_pool: ("HostPoolNotFound", "spec.hostPools[0].namespace"),
        }
        for name, (reason, field) in expected.items():
            tenant = read_tenant(clients, name)
            accepted = condition(tenant, "Accepted")
            assert (tenant["status"]["state"], accepted["status"], accepted["reason"]) == ("New", "False", reason)
            assert accepted["message"].startswith(field), accepted["message"]
            assert condition(tenant, "Ready")["status"] == "False"
            # Nothing half-created: not even the namespaces that were free.
            assert owned(clients, "Namespace", name) == []
            assert tenant["metadata"].get("finalizers") is None
        assert read_tenant(clients, unprefixed)["status"]["state"] == "Deployed"

        # The site's required prefix (TAPMS's namespace manager's): the playbook fails, naming the field.
        prefixed = onboard(devenv, tmp_path, "prefix", tenancy_names=[unprefixed], tenancy_required_prefix="vcluster-")
        failure = prefixed["Fail on a refused Tenant"]
        assert failure["failed"] and "spec.tenantName" in failure["msg"] and "vcluster-" in failure["msg"]
        refused = condition(read_tenant(clients, unprefixed), "Accepted")
        assert (refused["status"], refused["reason"]) == ("False", "InvalidTenantName")
    finally:
        api(clients, "Namespace").delete(name=f"{taken}-x")


def test_an_invalid_tenant_name_is_refused_by_the_api_server(clients):
    tenants = api(clients, "Tenant", TENANCY)
    with pytest.raises(ApiException) as refused:
        tenants.create(body=tenant_manifest("Blue_1"))
    assert refused.value.status == 422 and "spec.tenantName" in refused.value.body
    with pytest.raises(ApiException) as refused:
        tenants.create(body={**tenant_manifest("blue-x"), "spec": {"tenantName": "blue-y"}})
    assert refused.value.status == 422 and "spec.tenantName must equal metadata.name" in refused.value.body


def test_an_exclusive_host_is_never_bound_to_another_tenant(devenv, clients, tenants, rack, tmp_path):
    owner, other, rival = tenants("a"), tenants("b"), tenants("c")
    rack.host("reserved")
    pool = [{"namespace": rack.namespace}]
    exclusive = {"enforceExclusive": True, "hosts": [{"namespace": rack.namespace, "name": "reserved"}]}
    onboard(
        devenv,
        tmp_path,
        "exclusive",
        tenancy_definitions=[
            tenant_manifest(owner, childNamespaces=["w"], hostPools=pool, exclusiveHosts=exclusive),
            tenant_manifest(other, childNamespaces=["w"], hostPools=pool),
        ],
    )
    assert rack.read_host("reserved")["metadata"]["annotations"]["tenancy.metalclaim.io/reserved-for"] == owner

    # The other tenant is admitted to the pool and the reserved host is its only free match: it stays unbound.
    rack.claim("wants-it", namespace=f"{other}-w", identity="admin")
    step("hostclaim_bind", devenv, tmp_path, rack)
    association = claim_condition(rack.read_claim("wants-it", f"{other}-w"), "Association")
    assert (association["status"], association["reason"]) == ("False", "NoBareMetalHost")
    assert not rack.read_host("reserved")["spec"].get("consumerRef")
    # The owner's claim gets it.
    rack.claim("owns-it", namespace=f"{owner}-w", identity="admin")
    step("hostclaim_bind", devenv, tmp_path, rack)
    assert rack.read_host("reserved")["spec"]["consumerRef"]["name"] == "owns-it"

    # A second enforcing tenant listing the same host is refused, and nothing of it is written.
    onboard(
        devenv,
        tmp_path,
        "rival",
        tenancy_definitions=[tenant_manifest(rival, childNamespaces=["w"], hostPools=pool, exclusiveHosts=exclusive)],
        tenancy_fail_on_refusal=False,
    )
    accepted = condition(read_tenant(clients, rival), "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "ExclusiveHostTaken")
    assert accepted["message"].startswith("spec.exclusiveHosts.hosts[0]") and repr(owner) in accepted["message"]
    assert owned(clients, "Namespace", rival) == [] and owned(clients, "HostDeployPolicy", rival, METAL3) == []
    assert rack.read_host("reserved")["metadata"]["annotations"]["tenancy.metalclaim.io/reserved-for"] == owner


def test_a_tenant_at_its_bound_host_limit_waits_until_one_of_its_hosts_is_released(
    devenv, clients, tenants, rack, tmp_path
):
    """The limit holds over all the tenant's namespaces, and another tenant is not counted against it."""
    name, other = tenants("m"), tenants("o")
    for host in ("h1", "h2", "h3"):
        rack.host(host)
    pool = [{"namespace": rack.namespace}]
    onboard(
        devenv,
        tmp_path,
        "limited",
        tenancy_definitions=[
            tenant_manifest(name, childNamespaces=["a", "b"], hostPools=pool, quota={"maxBoundHosts": 1}),
            tenant_manifest(other, childNamespaces=["a"], hostPools=pool),
        ],
    )
    namespace = api(clients, "Namespace").get(name=f"{name}-b").to_dict()
    assert namespace["metadata"]["labels"]["tenancy.metalclaim.io/max-bound-hosts"] == "1"

    rack.claim("first", namespace=f"{other}-a", identity="admin")  # the other tenant's host counts for it only
    rack.claim("second", namespace=f"{name}-a", identity="admin")
    rack.claim("third", namespace=f"{name}-b", identity="admin")
    result = step("hostclaim_bind", devenv, tmp_path, rack)
    assert result["bound"] == 2
    third = claim_condition(rack.read_claim("third", f"{name}-b"), "Association")
    assert (third["status"], third["reason"]) == ("False", "TenantHostLimit")
    assert f"{name!r} holds 1 hosts" in third["message"] and "maxBoundHosts: 1" in third["message"]
    assert sum(bool(rack.read_host(h)["spec"].get("consumerRef")) for h in ("h1", "h2", "h3")) == 2

    # The tenant's bound claim goes: its host is released (never provisioned: at once), and the waiting claim binds.
    api(clients, "HostClaim", METAL3).delete(name="second", namespace=f"{name}-a")
    released = step("hostclaim_release", devenv, tmp_path, rack)["claims"]
    assert next(c for c in released if c["name"] == "second")["state"] == "released"
    step("hostclaim_bind", devenv, tmp_path, rack)
    third = claim_condition(rack.read_claim("third", f"{name}-b"), "Association")
    assert (third["status"], third["reason"]) == ("True", "BareMetalHostAssociated")

    # Lifting the limit takes the label away.
    onboard(
        devenv,
        tmp_path,
        "lifted",
        tenancy_definitions=[tenant_manifest(name, childNamespaces=["a", "b"], hostPools=pool)],
    )
    for child in ("a", "b"):
        labels = api(clients, "Namespace").get(name=f"{name}-{child}").to_dict()["metadata"]["labels"]
        assert "tenancy.metalclaim.io/max-bound-hosts" not in labels and labels[TENANT_LABEL] == name


def test_a_host_pool_selector_narrows_the_tenants_claims_to_the_hosts_it_selects(
    devenv, clients, tenants, rack, tmp_path
):
    """hostPools[].hostSelector: the pool is some of the namespace's hosts; lifting it gives the tenant all of them."""
    name = tenants("p")
    rack.host("gpu-1", labels={"pool": "gpu"})
    rack.host("plain-1")
    narrowed = [{"namespace": rack.namespace, "hostSelector": {"matchLabels": {"pool": "gpu"}}}]
    onboard(
        devenv,
        tmp_path,
        "narrowed",
        tenancy_definitions=[tenant_manifest(name, childNamespaces=["a"], hostPools=narrowed)],
    )
    namespace = f"{name}-a"
    rack.claim("first", namespace=namespace, identity="admin")
    rack.claim("second", namespace=namespace, identity="admin")
    assert step("hostclaim_bind", devenv, tmp_path, rack)["bound"] == 1
    assert rack.read_host("gpu-1")["spec"]["consumerRef"]["namespace"] == namespace
    assert not rack.read_host("plain-1")["spec"].get("consumerRef")  # free, matching the claim, not in the pool
    waiting = next(
        claim_condition(rack.read_claim(c, namespace), "Association")
        for c in ("first", "second")
        if not rack.read_claim(c, namespace)["status"].get("hardwareData")
    )
    assert (waiting["status"], waiting["reason"]) == ("False", "NoBareMetalHost")

    # The selector lifted: the namespace's annotation goes, and the waiting claim binds the other host.
    whole = [{"namespace": rack.namespace}]
    onboard(
        devenv, tmp_path, "whole", tenancy_definitions=[tenant_manifest(name, childNamespaces=["a"], hostPools=whole)]
    )
    annotations = api(clients, "Namespace").get(name=namespace).to_dict()["metadata"].get("annotations") or {}
    assert "tenancy.metalclaim.io/host-pools" not in annotations
    assert step("hostclaim_bind", devenv, tmp_path, rack)["bound"] == 2
    assert rack.read_host("plain-1")["spec"]["consumerRef"]["namespace"] == namespace


def test_a_tenants_quota_bounds_its_sets_and_their_members(devenv, clients, tenants, tmp_path):
    """Issue 40: a set of 1000 replicas was admitted and the claim side made its members with nothing to bound them,
    nor the number of sets. The Tenant's quota counts both: as the tenant's admin, a second set is refused by the
    API server, and a set of 1000 gets only the claims the quota allows, saying why."""
    name = tenants()
    manifest = tenant_manifest(name, childNamespaces=["w"], quota={"maxHostClaims": 3, "maxHostClaimSets": 1})
    api(clients, "Tenant", TENANCY).create(body=manifest)
    assert not onboard(devenv, tmp_path, "onboard", tenancy_names=[name])[RECONCILE]["failed"]
    namespace = f"{name}-w"
    quotas = api(clients, "ResourceQuota")

    def counted() -> bool:
        status = quotas.get(name="metalclaim-tenant", namespace=namespace).to_dict().get("status") or {}
        wanted = ("count/hostclaims.metal3.io", "count/hostclaimsets.metal3.io")
        return all(r in (status.get(part) or {}) for r in wanted for part in ("hard", "used"))

    eventually(counted, timeout=90, message="the tenant quota counted")  # kcm discovers new CRDs every 30 s
    admin = as_user(devenv, "alice", f"{name}-tenant-admin").resources.get(api_version=METAL3, kind="HostClaimSet")
    big = set_body(namespace, "big")
    big["spec"]["replicas"] = 1000
    admin.create(body=big)
    with pytest.raises(ApiException) as refused:
        admin.create(body=set_body(namespace, "second"))
    assert refused.value.status == 403 and "exceeded quota" in refused.value.body
    claim_side(devenv, clients, tmp_path, "sets", [])
    claims = api(clients, "HostClaim", METAL3).get(namespace=namespace).items
    assert len(claims) == 3
    status = api(clients, "HostClaimSet", METAL3).get(name="big", namespace=namespace).to_dict()["status"]
    scaled = next(c for c in status["conditions"] if c["type"] == "Scaled")
    assert (scaled["status"], scaled["reason"]) == ("False", "CreateRefused"), scaled
    assert "exceeded quota" in scaled["message"]
