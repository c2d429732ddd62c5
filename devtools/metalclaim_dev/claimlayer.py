"""Racks of hosts driven as a provisioner would, claims, steps: the claim layer's tests and benches."""

from __future__ import annotations

import datetime
import uuid
from concurrent.futures import ThreadPoolExecutor

from kubernetes.client.exceptions import ApiException

from metalclaim_dev.devenv.env import infra_namespace_bindings, tenant_namespace_bindings
from metalclaim_dev.support import create_namespace, delete_namespaces, run_tasks

TENANT_A = "cluster-ns"
TENANT_B = "tenant-b"
# A host at rest as its provisioner reports it: available, healthy, powered off.
IDLE_STATUS = {"provisioning": {"state": "available"}, "operationalStatus": "OK", "poweredOn": False}
METAL3 = "metal3.io/v1alpha1"


def stamp(moment: datetime.datetime) -> str:
    """An RFC 3339 time in whole seconds, as the API server writes them (and as spec.lease takes them)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text) -> datetime.datetime:
    """A time the API server wrote (RFC 3339 text, or the client's datetime), in UTC."""
    if isinstance(text, datetime.datetime):
        return text.astimezone(datetime.UTC)
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


class Rack:
    """A fresh infrastructure namespace (<prefix>rack-<tag>) for hosts in state `available` without BMCs, the
    controller's sides' Secret rights in it, and (optionally) a policy. `tenants` > 0 also makes that many tenant
    namespaces of its own (<prefix>t<i>-<tag>, self.tenants, with the claim side's Secret rights); a test uses the
    devenv's tenant namespaces instead. `clients`: identity -> DynamicClient ("admin" is enough to build it)."""

    def __init__(self, clients, tenants: int = 0, prefix: str = ""):
        self.clients = clients
        tag = uuid.uuid4().hex[:6]
        self.namespace = f"{prefix}rack-{tag}"
        self.kind = f"k-{uuid.uuid4().hex[:6]}"  # the label value this test's claims select
        self.claims: list[tuple[str, str]] = []
        self.tenants = [f"{prefix}t{index}-{tag}" for index in range(tenants)]
        self.hosts = 0  # hosts made by add_hosts
        self.torn_down = False
        bindings = [*infra_namespace_bindings(self.namespace)]  # the controller's sides' Secret rights here
        bindings += [binding for tenant in self.tenants for binding in tenant_namespace_bindings(tenant)]
        for name in (self.namespace, *self.tenants):
            create_namespace(clients["admin"], name)
        for binding in bindings:
            self.api("admin", "RoleBinding", "rbac.authorization.k8s.io/v1").create(body=binding)

    def api(self, identity: str, kind: str, api_version: str = METAL3):
        return self.clients[identity].resources.get(api_version=api_version, kind=kind)

    def policy(
        self, rule: dict | None = None, metadata_copy: dict | None = None, name: str = "policy", **fields
    ) -> None:
        """The infra team's HostDeployPolicy over the rack's namespace (`fields`: more of its spec)."""
        spec = {"hostclaimNamespaces": rule if rule is not None else {}, **fields}
        if metadata_copy is not None:
            spec["metadataCopy"] = metadata_copy
        self.api("admin", "HostDeployPolicy").create(
            body={
                "apiVersion": METAL3,
                "kind": "HostDeployPolicy",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": spec,
            }
        )

    def host(
        self, name: str, state: str = "available", labels: dict | None = None, annotations: dict | None = None
    ) -> dict:
        self.api("admin", "BareMetalHost").create(body=self._host_body(name, labels, annotations))
        return self._set_status(name, {**IDLE_STATUS, "provisioning": {"state": state}})

    def add_hosts(self, count: int, threads: int = 8) -> None:
        """`count` more available hosts h0000, h0001... created `threads` at a time (a bench's rack), each reporting
        itself off as an idle host does: a released host then passes the release path's checks at once."""

        def one(index: int) -> None:
            name = f"h{index:04d}"
            self.api("admin", "BareMetalHost").create(body=self._host_body(name))
            self._set_status(name, IDLE_STATUS)

        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(one, range(self.hosts, self.hosts + count)))
        self.hosts += count

    def _host_body(self, name: str, labels: dict | None = None, annotations: dict | None = None) -> dict:
        bmc = {"address": "redfish+http://127.0.0.1:9/redfish/v1/Systems/x", "credentialsName": f"{name}-bmc-secret"}
        return host_body(self.namespace, name, {"infra-kind": self.kind, **(labels or {})}, {"bmc": bmc}, annotations)

    def _set_status(self, name: str, status: dict) -> dict:
        return (
            self.api("admin", "BareMetalHost")
            .status.patch(
                body={"status": status},
                name=name,
                namespace=self.namespace,
                content_type="application/merge-patch+json",
            )
            .to_dict()
        )

    def set_state(self, name: str, state: str) -> None:
        """Move a host to a provisioning state, as its provisioner would."""
        self._set_status(name, {"provisioning": {"state": state}})

    def claim(
        self, name: str, namespace: str = TENANT_A, identity: str = "tenant-a", labels: dict | None = None, **spec
    ) -> None:
        self.api(identity, "HostClaim").create(body=self.claim_body(namespace, name, labels, **spec))
        self.claims.append((namespace, name))

    def claim_body(self, namespace: str, name: str, labels: dict | None = None, **spec) -> dict:
        """A HostClaim selecting this rack's hosts, offline unless `spec` says otherwise."""
        spec.setdefault("hostSelector", {"matchLabels": {"infra-kind": self.kind}})
        spec.setdefault("online", False)
        return {
            "apiVersion": METAL3,
            "kind": "HostClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": spec,
        }

    def tenant_secret(self, name: str, **data) -> dict:
        """A tenant Secret named for this rack (tests share the tenant namespace); the claim's reference to it."""
        unique = f"{self.namespace}-{name}"
        self.api("tenant-a", "Secret", "v1").create(
            body={
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": unique, "namespace": TENANT_A},
                "stringData": data,
            }
        )
        return {"name": unique}

    def server_now(self) -> datetime.datetime:
        """The API server's time, as it wrote it on a fresh object (whole seconds): tests and benches that place
        windows in time read no clock of their own."""
        made = self.api("admin", "ConfigMap", "v1").create(
            body={
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"generateName": "clock-", "namespace": self.namespace},
            }
        )
        return parse_time(made.metadata.creationTimestamp)

    def read_claim(self, name: str, namespace: str = TENANT_A) -> dict:
        return self.api("admin", "HostClaim").get(name=name, namespace=namespace).to_dict()

    def read_host(self, name: str) -> dict:
        return self.api("admin", "BareMetalHost").get(name=name, namespace=self.namespace).to_dict()

    def claim_args(self) -> list[dict]:
        return [{"namespace": ns, "name": name} for ns, name in self.claims]

    def cleanup(self, threads: int = 8) -> None:
        claims = self.api("admin", "HostClaim")

        def one(key: tuple[str, str]) -> None:
            namespace, name = key
            try:  # drop our finalizer so deletion does not wait for a release no test runs
                claims.patch(
                    body={"metadata": {"finalizers": None}},
                    name=name,
                    namespace=namespace,
                    content_type="application/merge-patch+json",
                )
                claims.delete(name=name, namespace=namespace)
            except ApiException as error:
                if error.status != 404:
                    raise

        with ThreadPoolExecutor(max_workers=threads) as pool:  # a storm-sized rack has a thousand claims
            list(pool.map(one, self.claims))
        # Its policies and hosts go now, not with the namespace seconds later: the next test of this devenv shares
        # the tenant namespaces and runs claim steps over every namespace, where a policy left admitting them would
        # let its claims bind here and a host left naming a deleted claim would be an orphan its runs release.
        for kind in ("HostDeployPolicy", "BareMetalHost"):
            self.api("admin", kind).delete(
                namespace=self.namespace, field_selector=f"metadata.namespace={self.namespace}"
            )
        self.api("admin", "Namespace", "v1").delete(name=self.namespace)

    def teardown(self, wait: float = 180) -> None:
        """The rack's and its tenants' namespaces deleted, every claim's and host's finalizer dropped; waits up to
        `wait` s for them to go. Once."""
        if not self.torn_down:
            self.torn_down = True
            delete_namespaces(self.clients["admin"], [*self.tenants, self.namespace], wait=wait)


def host_body(namespace: str, name: str, labels: dict, spec: dict, annotations: dict | None = None) -> dict:
    """A BareMetalHost, offline unless `spec` says otherwise."""
    return {
        "apiVersion": METAL3,
        "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations or {}},
        "spec": {"online": False, **spec},
    }


def step(module: str, devenv, tmp_path, rack, check_mode: bool = False, diff: bool = False) -> dict:
    """Run one claim-layer module for the rack's claims, as the controller (with --diff when `diff`)."""
    task = {f"metalclaim.hostclaim.{module}": {"claims": rack.claim_args()}}
    if check_mode:
        task["check_mode"] = True
    if diff:
        task["diff"] = True
    (result,) = run_tasks(tmp_path / uuid.uuid4().hex[:6], [task], devenv.kubeconfig("controller"))
    assert not result["failed"], result
    return result


def condition(claim: dict, type_: str) -> dict:
    return next(c for c in claim["status"]["conditions"] if c["type"] == type_)
