"""The host-field and Lease guards (config/admission/host_fields_policy.yaml, lease_policy.yaml) agree with the code
and manifests they guard: what the claim layer writes on a host, the sides' names, and each side's Leases."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.release import scrubbed_spec
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.secrets import (
    COPIES_ANNOTATION,
    plan_copies,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.sync import (
    REBOOT_KEYS_ANNOTATION,
    plan_sync,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metadata import CopyRules
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    DATA_ROLES,
    REBOOT_ANNOTATION,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import RESERVED_FOR_ANNOTATION

from metalclaim_dev.support import manifest_objects

REPO = Path(__file__).resolve().parents[2]


def documents(path: str) -> list[dict]:
    return manifest_objects(yaml.safe_load_all((REPO / path).read_text()))


def variables(name: str) -> dict[str, str]:
    [policy] = documents(f"config/admission/{name}")
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def quoted(expression: str) -> list[str]:
    return re.findall(r"'([^']*)'", expression)


def tasks_text() -> str:
    return (REPO / "roles/install/tasks/main.yml").read_text()


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


HOST = {
    "apiVersion": "metal3.io/v1alpha1",
    "kind": "BareMetalHost",
    "metadata": {"name": "h1", "namespace": "rack", "uid": "host-uid", "annotations": {"infra": "kept"}},
    "spec": {
        "online": False,
        "bootMACAddress": "52:54:00:00:00:01",
        "bmc": {"address": "redfish://10.0.0.1/redfish/v1/Systems/1", "credentialsName": "h1-bmc-secret"},
        "rootDeviceHints": {"deviceName": "/dev/sda"},
        "consumerRef": {"kind": "HostClaim", "name": "c1", "namespace": "t", "uid": "claim-uid"},
    },
    "status": {"provisioning": {"state": "provisioned"}, "poweredOn": True},
}
CLAIM = {
    "apiVersion": "metal3.io/v1alpha1",
    "kind": "HostClaim",
    "metadata": {
        "name": "c1",
        "namespace": "t",
        "uid": "claim-uid",
        "annotations": {REBOOT_ANNOTATION: "", f"{REBOOT_ANNOTATION}/maintenance": ""},
    },
    "spec": {
        "online": True,
        "image": {"url": "http://images/os.qcow2", "checksum": "0" * 64, "checksumType": "sha256"},
        **{role: {"name": f"c1-{role.lower()}"} for role in DATA_ROLES},
    },
}


def test_the_guard_lets_the_claim_side_write_every_field_the_claim_layer_writes_and_no_other():
    owned_spec = set(quoted(variables("host_fields_policy.yaml")["ownedSpec"]))
    sync = plan_sync(CLAIM, HOST, True, CopyRules())
    sources = {role: {"metadata": {"name": f"c1-{role.lower()}"}, "data": {"value": "eA=="}} for role in DATA_ROLES}
    copies = plan_copies(CLAIM, HOST, sources)
    bound = copy.deepcopy(HOST)
    bound["spec"].update(sync.host_spec, **copies.host_spec)
    bound["metadata"]["annotations"] = {**sync.host_annotations, COPIES_ANNOTATION: "{}"}
    written = (
        changed(HOST["spec"], sync.host_spec)
        | changed(HOST["spec"], copies.host_spec)
        | changed(bound["spec"], scrubbed_spec(bound)["spec"])
        | {"consumerRef"}  # bind sets it, give-back and release clear it
    )
    assert written == owned_spec, "the claim layer writes what the guard refuses, or the guard allows more"
    assert {"bmc", "bootMACAddress", "rootDeviceHints"}.isdisjoint(owned_spec)
    annotations = changed(HOST["metadata"]["annotations"], bound["metadata"]["annotations"])
    annotations |= changed(bound["metadata"]["annotations"], scrubbed_spec(bound)["metadata"]["annotations"])
    assert annotations == {
        REBOOT_ANNOTATION,
        f"{REBOOT_ANNOTATION}/maintenance",
        REBOOT_KEYS_ANNOTATION,
        COPIES_ANNOTATION,
    }
    allowed = variables("host_fields_policy.yaml")["changedAnnotations"]
    for name in (REBOOT_ANNOTATION, f"{REBOOT_ANNOTATION}/", REBOOT_KEYS_ANNOTATION, COPIES_ANNOTATION):
        assert f"'{name}'" in allowed
    assert f"variables.tenancySide && k == '{RESERVED_FOR_ANNOTATION}'" in " ".join(allowed.split())


def test_the_guards_hold_the_shipped_identities_and_the_install_role_adds_its_own():
    defaults = yaml.safe_load((REPO / "roles/install/defaults/main.yml").read_text())
    hosts, leases = variables("host_fields_policy.yaml"), variables("lease_policy.yaml")
    claim_side = defaults["install_claim_side_users"]
    assert quoted(hosts["claimSideUsers"]) == quoted(leases["claimSideUsers"]) == claim_side
    # The tenants side's names on hosts and claims: the role's, but for the claim side's ServiceAccount (its
    # Deployment runs the claim side only), as the role writes the Extra lists (install_claim_side_users left out).
    claim_account = "system:serviceaccount:metalclaim-system:metalclaim-controller"
    tenancy = [name for name in defaults["install_tenancy_users"] if name != claim_account]
    members = variables("hostclaim_members_policy.yaml")
    assert quoted(hosts["tenancySideUsers"]) == quoted(members["tenancySideUsers"]) == tenancy
    assert quoted(members["claimSideUsers"]) == claim_side
    assert claim_account in claim_side and claim_account not in tenancy
    assert tasks_text().count("install_tenancy_users | difference(install_claim_side_users)") == 2
    assert quoted(leases["provisionerSideUsers"]) == defaults["install_provisioner_users"]
    tasks = tasks_text()
    for policy in (hosts, leases, members):
        extra = [name for name in policy if name.endswith("ExtraUsers")]
        assert list(policy)[: len(extra)] == extra and all(policy[name] == "[]" for name in extra)
        assert all(f"{{variable: {name}," in tasks for name in extra)  # the role writes each


def test_each_side_holds_the_leases_its_deployment_elects_on():
    leases = variables("lease_policy.yaml")
    roles = {
        d["metadata"]["name"]: d for d in documents("config/rbac/leader_election_role.yaml") if d["kind"] == "Role"
    }
    created = [
        d["metadata"]["name"] for d in documents("config/rbac/leader_election_role.yaml") if d["kind"] == "Lease"
    ]
    bindings = {
        b["subjects"][0]["name"]: b["roleRef"]["name"]
        for b in documents("config/manager/leader_election_role_binding.yaml")
    }
    for deployment, default in (("deployment.yaml", "metalclaim-controller"), ("provisioner_deployment.yaml", None)):
        [manifest] = documents(f"config/manager/{deployment}")
        pod = manifest["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        lease = next((a.split("=", 1)[1] for a in args if a.startswith("--leader-election-id=")), default)
        assert "--leader-elect=true" in args and lease in created
        [rule] = roles[bindings[pod["serviceAccountName"]]]["rules"]
        assert rule["resourceNames"] == [lease] and rule["verbs"] == ["get", "update"]  # no create: made with the Role
        side = "claimSideLease" if pod["serviceAccountName"] == "metalclaim-controller" else "provisionerSideLease"
        assert quoted(leases[side]) == [lease, f"{lease}-shard-"]
