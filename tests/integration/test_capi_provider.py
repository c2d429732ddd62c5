"""Cluster API builds a tenant's machines on shared hosts (issue 39): metalclaim as a v1beta2 infrastructure provider.

Real Cluster API core (built from its Go module, metalclaim_dev.devenv.capi), both controller sides as processes and
their own identities, the Redfish emulator. The tenant writes only Cluster API objects and the provider's, in its own
namespace, as its own identity: a Cluster, a MetalClaimCluster, a MetalClaimMachineTemplate and a MachineDeployment
whose bootstrap data is a Secret it wrote (no kubeadm). Cluster API makes the Machines and MetalClaimMachines; the
provider makes one HostClaim per machine; the claim layer binds and the provisioner boots each host.
"""

from __future__ import annotations

import base64
import json
import time
import uuid

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from metalclaim_dev import REPO_ROOT
from metalclaim_dev.controllerproc import ControllerProcess
from metalclaim_dev.controllerproc import provisioner as provisioner_side
from metalclaim_dev.site import TENANT
from metalclaim_dev.support import eventually, run_tasks

pytestmark = [pytest.mark.integration, pytest.mark.minutes(3)]
CAPI = "cluster.x-k8s.io/v1beta2"
PROVIDER = "infrastructure.cluster.x-k8s.io/v1alpha1"
TENANT_B, TENANT_B_NAMESPACE = "tenant-b", "tenant-b"


def api(clients, identity: str, kind: str, api_version: str = CAPI):
    return clients[identity].resources.get(api_version=api_version, kind=kind)


def conditions(obj: dict) -> dict:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


SAMPLE = REPO_ROOT / "config" / "samples" / "capi" / "cluster.yaml"


def sample_cluster(name: str, kind: str, iso_url: str) -> list[dict]:
    """config/samples/capi/cluster.yaml, its names made unique and pointed at the site's hosts and a served ISO."""
    text = SAMPLE.read_text()
    for sample, ours in (
        ("my-cluster", name),
        ("workers-bootstrap", f"{name}-bootstrap"),
        ("infra-kind: medium", f"infra-kind: {kind}"),
        ("http://images.example.com/live.iso", iso_url),
    ):
        assert sample in text, sample
        text = text.replace(sample, ours)
    return yaml.safe_load(text)["items"]


def create_as(clients, identity: str, objects: list[dict]) -> None:
    for body in objects:
        api(clients, identity, body["kind"], body["apiVersion"]).create(body=body)


@pytest.fixture
def capi_cleanup(clients):
    """Cluster API objects a test leaves (a failed one): deleted with every finalizer dropped."""
    namespaces = [TENANT, TENANT_B_NAMESPACE]
    yield
    kinds = [
        ("MachineDeployment", CAPI),
        ("MachineSet", CAPI),
        ("Machine", CAPI),
        ("MetalClaimMachine", PROVIDER),
        ("MetalClaimMachineTemplate", PROVIDER),
        ("Cluster", CAPI),
        ("MetalClaimCluster", PROVIDER),
        ("HostClaim", "metal3.io/v1alpha1"),
    ]
    for kind, api_version in kinds:
        resource = api(clients, "admin", kind, api_version)
        for namespace in namespaces:
            for item in resource.get(namespace=namespace).items:
                name = item.metadata.name
                try:
                    resource.delete(name=name, namespace=namespace)
                    resource.patch(
                        body={"metadata": {"finalizers": None}},
                        name=name,
                        namespace=namespace,
                        content_type="application/merge-patch+json",
                    )
                except ApiException as error:
                    if error.status != 404:
                        raise


def test_a_machine_deployment_runs_on_shared_hosts_and_gives_them_back(
    devenv, cluster_api, clients, site, files, tmp_path, capi_cleanup
):
    cluster_api.wait_ready()
    iso_url = files.add("live.iso", b"live iso for cluster api\n" * 64)
    for index in range(3):
        site.host(f"h{index}", index)
    claims_side = ControllerProcess(
        devenv, tmp_path / "claims", "--infra-namespaces", site.namespace, "--controllers", "claims", "--cluster-api"
    )
    provisioner = provisioner_side(devenv, tmp_path / "provisioner", site.namespace)
    started = time.monotonic()
    laps: dict[str, float] = {}

    def both() -> str:
        return (
            f"claims:\n{claims_side.output()}\nprovisioner:\n{provisioner.output()}\ncapi:\n{cluster_api.log_tail(20)}"
        )

    def lap(what: str) -> None:
        nonlocal started
        laps[what] = round(time.monotonic() - started, 1)
        print(f"\n{what}: {laps[what]} s", end="")
        started = time.monotonic()

    name = f"c{uuid.uuid4().hex[:5]}"
    machines = api(clients, "tenant-a", "Machine")
    metal_machines = api(clients, "tenant-a", "MetalClaimMachine", PROVIDER)
    claims = api(clients, "tenant-a", "HostClaim", "metal3.io/v1alpha1")

    def listed(resource, namespace: str = TENANT) -> list[dict]:
        return [item.to_dict() for item in resource.get(namespace=namespace).items]

    def provisioned_machines() -> list[dict]:
        found = listed(machines)
        ready = [
            m
            for m in found
            if (m.get("spec") or {}).get("providerID")
            and ((m.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned")
        ]
        return ready if len(ready) == len(found) else []

    try:
        eventually(
            lambda: all(site.state(f"h{i}") == "available" for i in range(3)), timeout=120, message=f"hosts\n{both()}"
        )
        lap("3 hosts registered, inspected, available")
        create_as(clients, "tenant-a", sample_cluster(name, site.kind, iso_url))
        eventually(lambda: len(provisioned_machines()) == 3, timeout=180, message=f"3 machines provisioned\n{both()}")
        lap("MachineDeployment of 3 applied -> 3 Machines provisioned")

        # Each Machine: the providerID of the host its claim holds, CAPM3's form; three distinct hosts.
        held = {}
        for metal_machine in listed(metal_machines):
            claim = claims.get(name=metal_machine["metadata"]["name"], namespace=TENANT).to_dict()
            host = claim["status"]["hardwareData"]
            owner = metal_machine["metadata"]["ownerReferences"][0]["name"]
            assert metal_machine["spec"]["providerID"] == f"metal3://{host['namespace']}/{host['name']}/{owner}"
            assert metal_machine["status"]["initialization"] == {"provisioned": True}
            assert {"type": "Hostname", "address": owner} in metal_machine["status"]["addresses"]
            assert claim["spec"]["consumerRef"]["kind"] == "MetalClaimMachine"
            assert claim["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == name
            held[metal_machine["metadata"]["name"]] = host["name"]
            # What cloud-init's metaData gives the kubelet went beside the host (the claim layer's copy).
            metadata = json.loads(
                base64.b64decode(
                    api(clients, "tenant-a", "Secret", "v1")
                    .get(name=f"{metal_machine['metadata']['name']}-metadata", namespace=TENANT)
                    .data["metaData"]
                )
            )
            assert metadata == {
                "instance-id": metal_machine["metadata"]["uid"],
                "local-hostname": owner,
                "providerid": metal_machine["spec"]["providerID"],
            }
            assert site.read(host["name"])["spec"]["userData"]["name"] == f"{host['name']}-userdata"
        assert sorted(held.values()) == ["h0", "h1", "h2"], held
        for machine in listed(machines):
            assert machine["spec"]["providerID"].startswith(f"metal3://{site.namespace}/")
            assert conditions(machine)["InfrastructureReady"]["status"] == "True", machine

        # Settled: a run of both steps as the claim side, with nothing new, writes nothing.
        again = run_tasks(
            tmp_path / "again",
            [
                {"metalclaim.hostclaim.metalclaim_cluster_reconcile": {}, "register": "clusters"},
                {"metalclaim.hostclaim.metalclaim_machine_reconcile": {}, "register": "machines"},
            ],
            devenv.kubeconfig("controller"),
        )
        assert [task["writes"] for task in again] == [0, 0], again
        assert {m["state"] for m in again[1]["machines"]} == {"Provisioned"}, again[1]
        # Tenant B's claim on the same pool gets none of A's hosts while A's cluster holds them.
        api(clients, TENANT_B, "HostClaim", "metal3.io/v1alpha1").create(
            body={
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "HostClaim",
                "metadata": {"name": "b", "namespace": TENANT_B_NAMESPACE},
                "spec": {"hostSelector": {"matchLabels": {"infra-kind": site.kind}}, "online": False},
            }
        )
        claim_b = api(clients, TENANT_B, "HostClaim", "metal3.io/v1alpha1")
        eventually(
            lambda: "Association" in conditions(claim_b.get(name="b", namespace=TENANT_B_NAMESPACE).to_dict()),
            timeout=30,
            message=f"B looked at\n{both()}",
        )
        assert conditions(claim_b.get(name="b", namespace=TENANT_B_NAMESPACE).to_dict())["Association"]["status"] == (
            "False"
        )
        claim_b.delete(name="b", namespace=TENANT_B_NAMESPACE)

        # Scale to 1: two machines deleted, their claims released, their hosts powered off and back in the pool.
        api(clients, "tenant-a", "MachineDeployment").patch(
            body={"spec": {"replicas": 1}},
            name=f"{name}-workers",
            namespace=TENANT,
            content_type="application/merge-patch+json",
        )
        eventually(
            lambda: len(listed(machines)) == 1 and len(listed(claims)) == 1,
            timeout=180,
            message=f"scaled to 1\n{both()}",
        )
        [kept] = listed(claims)
        freed = sorted(set(held.values()) - {kept["status"]["hardwareData"]["name"]})
        eventually(
            lambda: all(site.state(h) == "available" and "consumerRef" not in site.read(h)["spec"] for h in freed),
            timeout=120,
            message=f"two hosts back in the pool\n{both()}",
        )
        lap("scaled to 1 -> 2 hosts available")

        # Deleting the Cluster deletes its machines and releases the last host.
        api(clients, "tenant-a", "Cluster").delete(name=name, namespace=TENANT)
        eventually(
            lambda: not listed(machines) and not listed(claims) and not listed(metal_machines),
            timeout=180,
            message=f"cluster deleted\n{both()}",
        )
        eventually(
            lambda: all(
                site.state(f"h{i}") == "available" and "consumerRef" not in site.read(f"h{i}")["spec"] for i in range(3)
            ),
            timeout=120,
            message=f"every host back\n{both()}",
        )
        lap("Cluster deleted -> every host available")
        assert '"run_failed"' not in claims_side.output(full=True), both()
    finally:
        claims_side.stop()
        provisioner.stop()


def test_failure_domains_are_the_published_ones_and_a_machine_lands_in_its_own(
    devenv, cluster_api, clients, site, files, tmp_path, capi_cleanup
):
    """The infra team publishes the failure-domain label (its policy's catalog); the MetalClaimCluster lists the
    domains the tenant's catalog shows, Cluster API copies them to the Cluster, and a MachineDeployment placed in
    one gets a host of that domain."""
    cluster_api.wait_ready()
    label = "infrastructure.cluster.x-k8s.io/failure-domain"
    for index, domain in enumerate(("rack-a", "rack-b", "rack-c")):
        site.host(f"h{index}", index, labels={label: domain})
    site.api("HostDeployPolicy").patch(
        body={"spec": {"catalog": {"publicLabels": [label]}}},
        name="policy",
        namespace=site.namespace,
        content_type="application/merge-patch+json",
    )
    serve = ("--infra-namespaces", site.namespace, "--controllers", "claims", "--cluster-api")
    claims_side = ControllerProcess(devenv, tmp_path / "claims", *serve, "--catalog-interval", "1")
    provisioner = provisioner_side(devenv, tmp_path / "provisioner", site.namespace)

    def both() -> str:
        return (
            f"claims:\n{claims_side.output()}\nprovisioner:\n{provisioner.output()}\ncapi:\n{cluster_api.log_tail(20)}"
        )

    name = f"c{uuid.uuid4().hex[:5]}"
    try:
        eventually(
            lambda: all(site.state(f"h{i}") == "available" for i in range(3)), timeout=120, message=f"hosts\n{both()}"
        )
        objects = sample_cluster(name, site.kind, files.add("live.iso", b"live iso\n" * 64))
        deployment = next(o for o in objects if o["kind"] == "MachineDeployment")
        deployment["spec"]["replicas"] = 1
        deployment["spec"]["template"]["spec"]["failureDomain"] = "rack-b"
        create_as(clients, "tenant-a", objects)

        def domains() -> list[str]:
            found = api(clients, "tenant-a", "Cluster").get(name=name, namespace=TENANT).to_dict()
            return sorted(d["name"] for d in (found.get("status") or {}).get("failureDomains") or [])

        eventually(lambda: domains() == ["rack-a", "rack-b", "rack-c"], timeout=60, message=f"domains\n{both()}")
        claims = api(clients, "tenant-a", "HostClaim", "metal3.io/v1alpha1")

        def held() -> str:
            items = [c.to_dict() for c in claims.get(namespace=TENANT).items]
            bound = [c for c in items if (c.get("status") or {}).get("hardwareData")]
            return bound[0]["status"]["hardwareData"]["name"] if bound else ""

        eventually(held, timeout=60, message=f"the machine's claim bound\n{both()}")
        [claim] = [c.to_dict() for c in claims.get(namespace=TENANT).items]
        assert claim["spec"]["failureDomain"] == "rack-b"
        assert held() == "h1", both()
    finally:
        claims_side.stop()
        provisioner.stop()
