"""What the controller e2e tests on VMs share: both controller sides as processes, and reads as infra and tenant."""

from __future__ import annotations

import time
import types
from pathlib import Path

from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from metalclaim_dev.controllerproc import ControllerProcess
from metalclaim_dev.devenv.env import INFRA_NAMESPACE, TENANT_NAMESPACES, host_inventory
from metalclaim_dev.support import eventually

TENANT = "tenant-a"
TENANT_NAMESPACE = TENANT_NAMESPACES[TENANT]
METAL3 = "metal3.io/v1alpha1"


class Controller:
    """Both sides as processes; their logs are shown when a wait fails (output())."""

    def __init__(self, env, images, directory: Path, *options: str):
        """`options`: given to both sides (e.g. --standby)."""
        self.env, self.images, self.directory, self.options = env, images, directory, options
        self.claims = ControllerProcess(
            env, directory / "claims", "--controllers", "claims", "--infra-namespaces", INFRA_NAMESPACE, *options
        )
        self.provisioner = None
        try:
            self.start_provisioner()
        except BaseException:
            self.claims.stop()
            raise

    def start_provisioner(self, *options: str) -> None:
        """(Re)start the provisioner side with `options` beside the media ones (an operator's config change)."""
        if self.provisioner is not None:
            self.provisioner.stop()
        self.provisioner = ControllerProcess(
            self.env,
            self.directory / f"provisioner-{time.monotonic_ns()}",
            *("--controllers", "provisioner", "--infra-namespaces", INFRA_NAMESPACE),
            *("--deploy-iso-url", self.images["deploy_iso_url"]),
            *("--media-dir", self.env.state["vms"]["media_dir"], "--media-url", self.env.state["vms"]["media_url"]),
            *self.options,
            *options,
            kubeconfig_identity="provisioner",
        )

    def output(self) -> str:
        return f"claim side:\n{self.claims.output()}\nprovisioner side:\n{self.provisioner.output()}"

    def stop(self) -> None:
        for side in (self.provisioner, self.claims):
            if side is not None:
                side.stop()


def host_name(index: int) -> str:
    return f"bm-{index:02d}"


def vm_of(env, host: str) -> dict:
    return env.state["vms"]["systems"][int(host.rsplit("-", 1)[1])]


def read(api, kind: str, identity: str, name: str, namespace: str) -> dict | None:
    try:
        return api(kind, identity).get(name=name, namespace=namespace).to_dict()
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def host_status(api, host: str) -> dict:
    return (read(api, "BareMetalHost", "infra", host, INFRA_NAMESPACE) or {}).get("status") or {}


def host_state(api, host: str) -> str:
    return (host_status(api, host).get("provisioning") or {}).get("state", "")


def claim_condition(api, claim: str, kind: str) -> dict:
    claim_object = read(api, "HostClaim", TENANT, claim, TENANT_NAMESPACE) or {}
    conditions = (claim_object.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def condition_once(api, claim: str, kind: str, **expected) -> dict | None:
    """The claim's condition of that type once its fields have the expected values, else None."""
    condition = claim_condition(api, claim, kind)
    return condition if all(condition.get(field) == value for field, value in expected.items()) else None


def claim_error(api, claim: str) -> dict:
    """The claim's Provisioned condition once it shows its host's provisioning error (the claim side follows the
    host's status change within seconds)."""

    def shown() -> dict | None:
        condition = claim_condition(api, claim, "Provisioned")
        return (
            condition if (condition.get("status"), condition.get("reason")) == ("False", "provisioningError") else None
        )

    return eventually(shown, timeout=60, message=f"Provisioned=False provisioningError on {claim}")


def claim_host(api, claim: str) -> str | None:
    """The host whose consumerRef is the claim (the one truth about a binding), as the infra team sees it."""
    for host in api("BareMetalHost", "infra").get(namespace=INFRA_NAMESPACE).items:
        consumer = (host.to_dict().get("spec") or {}).get("consumerRef") or {}
        if consumer.get("name") == claim and consumer.get("namespace") == TENANT_NAMESPACE:
            return host.metadata.name
    return None


def infra_objects(env) -> list[dict]:
    """What the infra team applies for the VM fleet: BMC Secrets and BareMetalHosts (metadata cleaning), and the
    guide's policy admitting the tenant's namespace."""
    fleet = types.SimpleNamespace(
        username=env.state["redfish"]["username"],
        password=Path(env.state["redfish"]["password_file"]).read_text().strip(),
        systems=[types.SimpleNamespace(**system) for system in env.state["vms"]["systems"]],
    )
    inventory = host_inventory(fleet)
    for item in inventory:
        if item["kind"] == "BareMetalHost":
            item["spec"]["automatedCleaningMode"] = "metadata"
    policy = {
        "apiVersion": METAL3,
        "kind": "HostDeployPolicy",
        "metadata": {"name": "policy", "namespace": INFRA_NAMESPACE},
        "spec": {"hostclaimNamespaces": {"names": [TENANT_NAMESPACE]}},
    }
    return [*inventory, policy]


def api_as(env, *identities: str):
    """api(kind, identity, api_version) -> the dynamic client's resource, as that identity (one of `identities`)."""
    clients = {
        identity: DynamicClient(kube_config.new_client_from_config(config_file=env.kubeconfig(identity)))
        for identity in identities
    }
    return lambda kind, identity, api_version=METAL3: clients[identity].resources.get(
        api_version=api_version, kind=kind
    )
