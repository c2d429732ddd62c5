"""The local environment as a whole: control plane, CRDs, identities, Redfish fleet.

`up` is idempotent (a running environment is reported, a broken one is replaced),
`down` stops every process it started and removes the directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT, redfish, vms
from .controlplane import IDENTITIES, ControlPlane, build_binaries
from .processes import DevenvError, alive, free_port, stop_process_group

STATE_FILE = "devenv.json"
CONFIG_DIR = REPO_ROOT / "config"

INFRA_NAMESPACE = "infrahost"
# tenant identity -> its namespace; tenant-a owns the guides' `cluster-ns`.
TENANT_NAMESPACES = {"tenant-a": "cluster-ns", "tenant-b": "tenant-b"}
HOST_PREFIX = "bm"
CLAIMS_USER = IDENTITIES["controller"][0]  # the controller's claim side
PROVISIONER_USER = IDENTITIES["provisioner"][0]  # the controller's provisioner side
TEST_LEASES_ROLE = "metalclaim-devenv-test-leases"


def progress(message: str) -> None:
    print(f"[devenv] {message}", file=sys.stderr, flush=True)


@dataclass
class Devenv:
    directory: Path
    state: dict

    @classmethod
    def load(cls, directory: Path) -> Devenv | None:
        path = directory / STATE_FILE
        if not path.exists():
            return None
        return cls(directory, json.loads(path.read_text()))

    # -- access -------------------------------------------------------------
    def kubeconfig(self, identity: str) -> str:
        return self.state["kubeconfigs"][identity]

    def kubectl(
        self, identity: str, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        argv = [self.state["binaries"]["kubectl"], f"--kubeconfig={self.kubeconfig(identity)}", *args]
        result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise DevenvError(f"kubectl {' '.join(args)} as {identity} failed: {result.stderr.strip()}")
        return result

    def apply(self, identity: str, objects: list[dict]) -> None:
        self.kubectl(
            identity,
            "apply",
            "--server-side",
            "--field-manager=metalclaim-devenv",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )

    def processes(self) -> dict[str, int]:
        return dict(self.state.get("pids", {}))

    def healthy(self) -> bool:
        return all(alive(pid) for pid in self.processes().values())

    def save(self) -> None:
        path = self.directory / STATE_FILE
        path.write_text(json.dumps(self.state, indent=2) + "\n")
        path.chmod(0o600)  # it names the BMC password file and client keys

    # -- lifecycle ----------------------------------------------------------
    @classmethod
    def up(cls, directory: Path, hosts: int, register: bool = True, bare: bool = False, vm_count: int = 0) -> Devenv:
        """Start (or reuse) an environment; `bare` stops after the control plane (no CRDs, RBAC, fleet).

        `vm_count` > 0: the fleet is that many real VMs (metalclaim_dev.devenv.vms) instead of `hosts` fake systems."""
        directory = directory.resolve()
        existing = cls.load(directory)
        if existing is not None:
            if existing.healthy() and existing.state.get("fleet_size") == hosts and existing.vm_count == vm_count:
                progress(f"already running in {directory}")
                return existing
            progress("found a stopped, broken or differently sized environment: replacing it")
            existing.down()
        elif directory.exists() and any(directory.iterdir()):
            raise DevenvError(f"{directory} exists and is not a devenv directory; refusing to use it")
        directory.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        binaries = build_binaries()
        env = cls(directory, {"directory": str(directory), "pids": {}})
        env.state["versions"] = {"kubernetes": binaries.kubernetes_version, "etcd": binaries.etcd_version}
        env.state["binaries"] = {"kubectl": str(binaries.kubectl), "kube_bin": str(binaries.kube_bin)}
        try:
            progress(
                f"starting etcd {binaries.etcd_version}, kube-apiserver and kube-controller-manager "
                f"{binaries.kubernetes_version}"
            )
            env.state.update(ControlPlane(binaries, directory).start())
            env.save()
            env.state["fleet_size"] = hosts
            if not bare:
                progress("installing CRDs, RBAC and admission policies")
                env._install()
            if vm_count and not bare:
                env._start_vms(vm_count, register)
            elif hosts and not bare:
                progress(f"starting the Redfish emulator with {hosts} systems")
                fleet = redfish.start_fleet(directory / "redfish", hosts, free_port())
                env.state["pids"]["redfish"] = fleet.pid
                password_file = directory / "redfish" / "bmc-password"
                password_file.write_text(fleet.password)
                password_file.chmod(0o600)
                env.state["redfish"] = {
                    "endpoint": fleet.endpoint,
                    "username": fleet.username,
                    "password_file": str(password_file),
                    "systems": [s.__dict__ for s in fleet.systems],
                    "log": fleet.log_file,
                }
                env.save()
                if register:
                    progress(f"registering {hosts} BareMetalHosts in {INFRA_NAMESPACE} as infra")
                    env.apply("infra", host_inventory(fleet))
            env.state["startup_seconds"] = round(time.monotonic() - started, 1)
            env.save()
        except BaseException:
            env.down()
            raise
        return env

    @property
    def vm_count(self) -> int:
        return len(self.state.get("vms", {}).get("systems", []))

    def _start_vms(self, count: int, register: bool) -> None:
        progress(f"starting {count} VMs behind sushy-tools' libvirt driver")
        root = self.directory / "vms"
        fleet = vms.start_vm_fleet(root, count, progress=progress)
        self.state["pids"].update({f"vm-{name}": pid for name, pid in fleet.pids.items()})
        password_file = root / "bmc-password"
        password_file.write_text(fleet.password)
        password_file.chmod(0o600)
        # The same shape as the fake fleet's: whatever drives hosts from the state file drives VMs alike.
        self.state["redfish"] = {
            "endpoint": fleet.endpoint,
            "username": fleet.username,
            "password_file": str(password_file),
            "systems": [{k: getattr(s, k) for k in ("name", "uuid", "boot_mac", "address")} for s in fleet.systems],
            "log": str(root / "redfish.log"),
        }
        self.state["vms"] = {
            "root": str(root),
            "libvirt_uri": fleet.libvirt_uri,
            "media_dir": fleet.media_dir,
            "media_url": fleet.media_url,
            "images_dir": fleet.images_dir,
            "images_url": fleet.images_url,
            "systems": [s.__dict__ for s in fleet.systems],
        }
        self.save()
        if register:
            progress(f"registering {count} BareMetalHosts in {INFRA_NAMESPACE} as infra")
            self.apply("infra", host_inventory(fleet, boot_mode="UEFI"))

    def down(self) -> None:
        if "vms" in self.state:  # QEMUs run in sessions of their own: stopped first, before libvirtd
            vms.stop_guests(Path(self.state["vms"]["root"]))
        for name, pid in reversed(list(self.processes().items())):
            if alive(pid):
                progress(f"stopping {name} (pid {pid})")
            stop_process_group(pid)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _install(self) -> None:
        self.kubectl("admin", "apply", "--server-side", "-k", str(CONFIG_DIR / "crd"))
        self.kubectl("admin", "apply", "--server-side", "-k", str(CONFIG_DIR / "namespace"))
        self.kubectl("admin", "apply", "--server-side", "-k", str(CONFIG_DIR / "rbac"))
        self.kubectl("admin", "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        # The admission policies (CEL, in the API server) once the CRDs they type-check against exist.
        self.kubectl("admin", "apply", "--server-side", "-k", str(CONFIG_DIR / "admission"))
        self.apply("admin", tenancy_objects())
        self.state["namespaces"] = {"infra": INFRA_NAMESPACE, "tenants": TENANT_NAMESPACES}


def tenancy_objects() -> list[dict]:
    """Namespaces and the bindings that give each devenv identity its rights."""
    objects: list[dict] = [
        # Opted in to metalclaim's provisioner (bmh_redfish takes only hosts that opt in, by host or namespace).
        namespace(INFRA_NAMESPACE, {"metalclaim.io/role": "infrastructure", "metalclaim.io/provisioner": "metalclaim"}),
        role_binding("infra", INFRA_NAMESPACE, "metalclaim-infra", "infra"),
        *infra_namespace_bindings(INFRA_NAMESPACE),
        cluster_role_binding("metalclaim-controller", CLAIMS_USER),
        cluster_role_binding("metalclaim-provisioner", PROVISIONER_USER),
        # Each side's leader-election Role (config/rbac/leader_election_role.yaml: its own Lease by name), as
        # config/manager binds the ServiceAccounts.
        leader_election_binding("metalclaim-leader-election", CLAIMS_USER),
        leader_election_binding("metalclaim-provisioner-leader-election", PROVISIONER_USER),
        # Devenv only: the tests elect as the claim side on Leases of their own names (one per test, so that xdist
        # workers share the environment), which no Role can name in advance. The claim side may take any Lease of
        # metalclaim-system here but the provisioner's, which config/admission/lease_policy.yaml refuses it.
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": TEST_LEASES_ROLE, "namespace": "metalclaim-system"},
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
            ],
        },
        leader_election_binding(TEST_LEASES_ROLE, CLAIMS_USER),
    ]
    for tenant, ns in TENANT_NAMESPACES.items():
        objects.append(namespace(ns, {"metalclaim.io/role": "tenant", "metalclaim.io/tenant": tenant}))
        objects.append(role_binding(tenant, ns, "metalclaim-tenant", tenant))
        objects += tenant_namespace_bindings(ns)
    return objects


def infra_namespace_bindings(name: str) -> list[dict]:
    """An infrastructure namespace's Secret rights for the controller's sides (config/rbac/copies_writer_role.yaml,
    bmc_secrets_reader_role.yaml): the claim side writes copies there, the provisioner reads BMC credentials and copies.
    """
    return [
        role_binding("metalclaim-copies", name, "metalclaim-copies-writer", CLAIMS_USER),
        role_binding("metalclaim-bmc-secrets", name, "metalclaim-bmc-secrets-reader", PROVISIONER_USER),
    ]


def tenant_namespace_bindings(name: str) -> list[dict]:
    """A tenant namespace's Secret rights for the claim side: it reads the Secrets claims reference."""
    return [role_binding("metalclaim-tenant-secrets", name, "metalclaim-tenant-secrets-reader", CLAIMS_USER)]


def leader_election_binding(role: str, user: str) -> dict:
    """`user` bound to the Role `role` of metalclaim-system (a RoleBinding of the Role's name)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": "metalclaim-system"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def cluster_role_binding(role: str, user: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def namespace(name: str, labels: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def role_binding(name: str, ns: str, cluster_role: str, user: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def host_inventory(fleet: redfish.RedfishFleet | vms.VmFleet, boot_mode: str = "UEFI") -> list[dict]:
    """One BMC Secret and one BareMetalHost per emulated system, as an infra team writes them.

    Hosts alternate between the guide's `infra-kind: medium` and `large`, and two zones,
    so selectors and failure domains have something to choose between.
    """
    objects: list[dict] = []
    for index, system in enumerate(fleet.systems):
        name = f"{HOST_PREFIX}-{index:02d}"
        secret = f"{name}-bmc-secret"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": INFRA_NAMESPACE},
                "type": "Opaque",
                "stringData": {"username": fleet.username, "password": fleet.password},
            }
        )
        objects.append(
            {
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "BareMetalHost",
                "metadata": {
                    "name": name,
                    "namespace": INFRA_NAMESPACE,
                    "labels": {
                        "infra-kind": "medium" if index % 2 == 0 else "large",
                        "topology.kubernetes.io/zone": f"zone-{index % 2 + 1}",
                    },
                },
                "spec": {
                    "online": False,
                    "bootMACAddress": system.boot_mac,
                    "bootMode": boot_mode,
                    "bmc": {"address": system.address, "credentialsName": secret},
                },
            }
        )
    return objects
