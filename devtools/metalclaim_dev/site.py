"""An infrastructure namespace of BareMetalHosts on the session's emulated Redfish fleet (the provisioner's tests and
benches)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.media import token_key
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.redfish import RedfishClient
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.bmc_address import (
    parse_bmc_address,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.machine import OPERATION_ANNOTATION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.media_protocol import (
    opened_operation,
)
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import host_body
from metalclaim_dev.devenv.env import infra_namespace_bindings
from metalclaim_dev.support import create_namespace, delete_namespaces, run_tasks

METAL3 = "metal3.io/v1alpha1"
TENANT = "cluster-ns"
FAST = {"backoff_base": 1, "backoff_cap": 4, "power_off_timeout": 20, "redfish_timeout": 3, "redfish_retries": 0}


class Site:
    """An infrastructure namespace (<prefix>-<tag>) of hosts on the emulated fleet, opted in to the provisioner, the
    controller's sides' Secret rights in it, and (unless `policy` is False) a policy admitting every tenant.
    `clients`: identity -> DynamicClient; `tmp_path`: where run() puts its ansible-runner directories."""

    def __init__(self, devenv, clients, tmp_path: Path, prefix: str = "site", policy: bool = True):
        self.devenv = devenv
        self.clients = clients
        self.tmp_path = tmp_path
        self.namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kind = f"k-{uuid.uuid4().hex[:6]}"
        fleet = devenv.state["redfish"]
        self.username = fleet["username"]
        self.password = Path(fleet["password_file"]).read_text().strip()
        self.systems = fleet["systems"]
        self.claims: list[str] = []
        self.results: list[dict] = []  # every module result, to grep for leaks
        # opted in to metalclaim's provisioner (an unmarked namespace's hosts are left alone)
        create_namespace(clients["admin"], self.namespace, {"metalclaim.io/provisioner": "metalclaim"})
        devenv.apply("admin", infra_namespace_bindings(self.namespace))  # the controller's sides' Secret rights
        if not policy:
            return
        self.api("HostDeployPolicy").create(
            body={
                "apiVersion": METAL3,
                "kind": "HostDeployPolicy",
                "metadata": {"name": "policy", "namespace": self.namespace},
                "spec": {"hostclaimNamespaces": {}},
            }
        )

    def api(self, kind: str, api_version: str = METAL3, identity: str = "admin"):
        return self.clients[identity].resources.get(api_version=api_version, kind=kind)

    def host(
        self,
        name: str,
        system: int,
        address: str | None = None,
        password: str | None = None,
        labels: dict | None = None,
        **spec,
    ) -> None:
        secret = f"{name}-bmc-secret"
        self.api("Secret", "v1").create(
            body={
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": self.namespace},
                "stringData": {"username": self.username, "password": password or self.password},
            }
        )
        bmc = {"address": address or self.systems[system]["address"], "credentialsName": secret}
        spec = {"bootMACAddress": self.systems[system]["boot_mac"], "bmc": bmc, **spec}
        self.api("BareMetalHost").create(
            body=host_body(self.namespace, name, {"infra-kind": self.kind, **(labels or {})}, spec)
        )

    def set_password(self, host: str, password: str) -> None:
        self.api("Secret", "v1").patch(
            body={"stringData": {"password": password}},
            name=f"{host}-bmc-secret",
            namespace=self.namespace,
            content_type="application/merge-patch+json",
        )

    def patch_hosts(self, spec: dict) -> None:
        """Every host of the site's spec patched (merge), as the infra team would, in name order (the API lists so)."""
        hosts = self.api("BareMetalHost")
        for host in hosts.get(namespace=self.namespace).items:
            hosts.patch(
                body={"spec": spec},
                name=host.metadata.name,
                namespace=self.namespace,
                content_type="application/merge-patch+json",
            )

    def states(self) -> dict:
        """Provisioning state -> how many of the site's hosts are in it ("-": none yet)."""
        counts: dict = {}
        for host in self.api("BareMetalHost").get(namespace=self.namespace).items:
            state = ((host.status or {}).get("provisioning") or {}).get("state") or "-"
            counts[state] = counts.get(state, 0) + 1
        return counts

    def read(self, name: str) -> dict:
        return self.api("BareMetalHost").get(name=name, namespace=self.namespace).to_dict()

    def state(self, name: str) -> str:
        return ((self.read(name).get("status") or {}).get("provisioning") or {}).get("state", "")

    def operation(self, name: str, media_dir: str | None = None) -> dict:
        """The provisioner's operation in flight on a host (its annotation), {} when none. It records references to its
        media tokens; given the media directory, they are opened with its key into the tokens (what the provisioner
        and the machine it boots know, and no reader of the host)."""
        recorded = json.loads((self.read(name)["metadata"].get("annotations") or {}).get(OPERATION_ANNOTATION) or "{}")
        return opened_operation(recorded, token_key(str(media_dir)))[0] if media_dir else recorded

    def provision(self, wait: float = 0, diff: bool = False, check_mode: bool = False, **options) -> dict:
        args = {"namespaces": [self.namespace], "wait": wait, **FAST, **self.as_provisioner(), **options}
        (result,) = self.run([{"metalclaim.hostclaim.bmh_redfish": args, "diff": diff, "check_mode": check_mode}])
        return result

    def reconcile_and_provision(self, wait: float = 20, **options) -> list[dict]:
        """One round of the claim layer and the provisioner, as the controller would run them."""
        claims = [{"namespace": TENANT, "name": name} for name in self.claims]
        steps = [
            {f"metalclaim.hostclaim.{module}": {"claims": claims}}
            for module in ("hostclaim_release", "hostclaim_bind", "hostclaim_secrets", "hostclaim_sync")
        ]
        provision = {
            "metalclaim.hostclaim.bmh_redfish": {
                "namespaces": [self.namespace],
                "wait": wait,
                **FAST,
                **self.as_provisioner(),
                **options,
            }
        }
        return self.run([*steps, provision, steps[3]])

    def as_provisioner(self) -> dict:
        """bmh_redfish runs as the controller's provisioner side (the claim steps as its claim side)."""
        return {"kubeconfig": self.devenv.kubeconfig("provisioner")}

    def run(self, tasks: list[dict]) -> list[dict]:
        results = run_tasks(self.tmp_path / uuid.uuid4().hex[:6], tasks, self.devenv.kubeconfig("controller"))
        for result in results:
            assert not result["failed"], result
        self.results += results
        return results

    def claim(self, name: str, **spec) -> None:
        spec.setdefault("hostSelector", {"matchLabels": {"infra-kind": self.kind}})
        self.api("HostClaim", identity="tenant-a").create(
            body={
                "apiVersion": METAL3,
                "kind": "HostClaim",
                "metadata": {"name": name, "namespace": TENANT},
                "spec": spec,
            }
        )
        self.claims.append(name)

    def patch_claim(self, name: str, patch: dict) -> None:
        self.api("HostClaim", identity="tenant-a").patch(
            body=patch, name=name, namespace=TENANT, content_type="application/merge-patch+json"
        )

    def read_claim(self, name: str) -> dict | None:
        try:
            return self.api("HostClaim").get(name=name, namespace=TENANT).to_dict()
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def claim_powered_on(self, name: str) -> bool:
        """Whether the claim says it holds a host that is powered on: the claim side bound it and the provisioner
        powered it (the BMC alone cannot tell: a warm host is on before any claim)."""
        status = (self.read_claim(name) or {}).get("status") or {}
        return bool(status.get("hostUID")) and status.get("poweredOn") is True

    def bmc(self, system: int) -> RedfishClient:
        address = parse_bmc_address(self.systems[system]["address"])
        return RedfishClient(address, self.username, self.password, timeout=5)

    def events(self) -> list[dict]:
        return [e.to_dict() for e in self.api("Event", "v1").get(namespace=self.namespace).items]

    def reset_fleet(self) -> None:
        """The emulator is shared: give every system back powered off with nothing inserted."""
        for index in range(len(self.systems)):
            bmc = self.bmc(index)
            try:
                for device in ("cd", "config"):
                    if bmc.media(device)["inserted"]:
                        bmc.eject_media(device)
                if bmc.power_state() != "Off":
                    bmc.set_power("ForceOff")
            finally:
                bmc.close()

    def cleanup(self) -> None:
        for name in self.claims:
            try:
                self.api("HostClaim").patch(
                    body={"metadata": {"finalizers": None}},
                    name=name,
                    namespace=TENANT,
                    content_type="application/merge-patch+json",
                )
                self.api("HostClaim").delete(name=name, namespace=TENANT)
            except ApiException as error:
                if error.status != 404:
                    raise
        hosts = self.api("BareMetalHost")
        for host in hosts.get(namespace=self.namespace).items:
            hosts.patch(
                body={"metadata": {"finalizers": None}},
                name=host.metadata.name,
                namespace=self.namespace,
                content_type="application/merge-patch+json",
            )
        self.api("Namespace", "v1").delete(name=self.namespace)

    def teardown(self, wait: float = 180) -> None:
        """The namespace deleted, its hosts' finalizers dropped; waits up to `wait` s for it to go (a bench's)."""
        delete_namespaces(self.clients["admin"], [self.namespace], kinds=("BareMetalHost",), wait=wait)


def settle(site: Site, host: str, state: str, rounds: int = 12, **options) -> dict:
    for _round in range(rounds):
        site.provision(wait=15, **options)
        if site.state(host) == state:
            return site.read(host)
    raise AssertionError(f"{host} did not reach {state!r}; it is {site.state(host)!r}: {site.read(host).get('status')}")
