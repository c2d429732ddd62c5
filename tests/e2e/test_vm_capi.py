"""End to end on a real VM: a Cluster API Machine deploys the disk image onto a VM and its bootstrap data reaches it.

Cluster API's real core manager (metalclaim_dev.devenv.capi) on the VM environment's control plane; the controller's
claim side (with --cluster-api) and the Redfish provisioner as processes and their own identities. The test acts as
the infra team (the VM's BareMetalHost, a policy) and as the tenant (Cluster API objects only). What the VM gets is
read where it lands: its disk holds the image, then the config drive whose user-data is the Machine's bootstrap
data and whose meta-data names the Machine's providerID, and the VM boots the image (its marker on the serial
console). The disk image here runs no cloud-init, so the bootstrap data is checked on the disk, not executed.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import yaml

from metalclaim_dev.configdrive_reader import read_config_drive
from metalclaim_dev.devenv import capi
from metalclaim_dev.devenv.env import INFRA_NAMESPACE
from metalclaim_dev.e2e import TENANT, TENANT_NAMESPACE, Controller, api_as, host_name, infra_objects, read, vm_of
from metalclaim_dev.support import eventually
from metalclaim_dev.vmenv import (
    DISK_MARKER,
    SerialWatch,
    partition_table,
    publish_images,
    read_at,
    vm_environment,
)

pytestmark = pytest.mark.minutes(10)
CAPI = "cluster.x-k8s.io/v1beta2"
PROVIDER = "infrastructure.cluster.x-k8s.io/v1alpha1"
BOOTSTRAP = "#cloud-config\nruncmd:\n  - echo metalclaim-capi-e2e > /run/metalclaim-capi-marker\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory, pytestconfig):
    yield from vm_environment(tmp_path_factory, pytestconfig, "capi", count=1)


def test_a_machine_deployment_of_one_deploys_the_vm_with_its_bootstrap_data(env, tmp_path):
    images = publish_images(env)
    phases = env.state.pop("phases")  # not part of the state file, which capi.start saves
    try:
        capi.start(env)
    finally:
        env.state["phases"] = phases
    api = api_as(env, "infra", TENANT)
    controller = Controller(env, images, tmp_path / "controller", "--cluster-api")
    host = host_name(0)
    vm = vm_of(env, host)
    watch = SerialWatch(Path(vm["serial_log"]), (("marker", DISK_MARKER),))
    try:
        started = time.monotonic()
        env.apply("infra", infra_objects(env))
        eventually(
            lambda: (
                (read(api, "BareMetalHost", "infra", host, INFRA_NAMESPACE) or {})
                .get("status", {})
                .get("provisioning", {})
                .get("state")
                == "available"
            ),
            timeout=180,
            interval=1,
            message=f"the VM available\n{controller.output()}",
        )
        phases.record("register + inspect (1 host)", started)
        name = f"e2e-{uuid.uuid4().hex[:4]}"
        objects = [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "cluster.x-k8s.io/secret",
                "metadata": {"name": f"{name}-bootstrap"},
                "stringData": {"value": BOOTSTRAP, "format": "cloud-config"},
            },
            {"apiVersion": PROVIDER, "kind": "MetalClaimCluster", "metadata": {"name": name}, "spec": {}},
            {
                "apiVersion": CAPI,
                "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "MetalClaimCluster",
                        "name": name,
                    }
                },
            },
            {
                "apiVersion": PROVIDER,
                "kind": "MetalClaimMachineTemplate",
                "metadata": {"name": name},
                "spec": {"template": {"spec": {"image": images["image"]}}},
            },
            {
                "apiVersion": CAPI,
                "kind": "MachineDeployment",
                "metadata": {"name": name},
                "spec": {
                    "clusterName": name,
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "clusterName": name,
                            "bootstrap": {"dataSecretName": f"{name}-bootstrap"},
                            "infrastructureRef": {
                                "apiGroup": "infrastructure.cluster.x-k8s.io",
                                "kind": "MetalClaimMachineTemplate",
                                "name": name,
                            },
                        }
                    },
                },
            },
        ]
        started = time.monotonic()
        for body in objects:
            body["metadata"]["namespace"] = TENANT_NAMESPACE
            api(body["kind"], TENANT, body["apiVersion"]).create(body=body)

        def provisioned_machine() -> dict | None:
            items = api("Machine", TENANT, CAPI).get(namespace=TENANT_NAMESPACE).to_dict()["items"]
            done = [
                m
                for m in items
                if ((m.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned")
            ]
            return done[0] if done else None

        machine = eventually(
            provisioned_machine, timeout=600, interval=2, message=f"provisioned\n{controller.output()}"
        )
        phases.record("MachineDeployment of 1 applied -> Machine provisioned (VM deployed)", started)
        eventually(lambda: DISK_MARKER in watch.text(), timeout=180, interval=1, message="the image's marker")
        watch.stop()
        machine_name = machine["metadata"]["name"]
        assert machine["spec"]["providerID"] == f"metal3://{INFRA_NAMESPACE}/{host}/{machine_name}", machine
        [metal_machine] = api("MetalClaimMachine", TENANT, PROVIDER).get(namespace=TENANT_NAMESPACE).to_dict()["items"]
        addresses = metal_machine["status"]["addresses"]
        assert {"type": "Hostname", "address": machine_name} in addresses, addresses
        # What the VM got, read on its disk: the image, then the config drive of the Machine's data.
        disk = Path(vm["disk"])
        table = partition_table(disk)
        assert table is not None and table["label"] == "gpt", table
        config = table["partitions"][-1]
        files = read_config_drive(read_at(disk, config["start"] * 512, config["size"] * 512))
        assert files["user-data"] == BOOTSTRAP.encode()
        meta = json.loads(files["meta-data"])
        assert meta["providerid"] == machine["spec"]["providerID"] and meta["local-hostname"] == machine_name
        assert yaml.safe_load(files["meta-data"])["instance-id"] == metal_machine["metadata"]["uid"]

        started = time.monotonic()
        api("Cluster", TENANT, CAPI).delete(name=name, namespace=TENANT_NAMESPACE)

        def released() -> bool:
            found = read(api, "BareMetalHost", "infra", host, INFRA_NAMESPACE)
            gone = not api("Machine", TENANT, CAPI).get(namespace=TENANT_NAMESPACE).to_dict()["items"]
            state = found["status"]["provisioning"]["state"]
            return gone and state == "available" and not found["spec"].get("consumerRef")

        eventually(released, timeout=600, interval=2, message=f"released\n{controller.output()}")
        phases.record("Cluster deleted -> VM cleaned and available", started)
    finally:
        watch.stop()
        controller.stop()
