"""Identities that cannot be turned against the fleet (issue 22), played as attacks on the devenv's API server.

The claim side (the devenv's `controller`, as the ServiceAccount of config/manager in a cluster) may update every
BareMetalHost: binding, syncing and releasing write a host's spec. Whoever holds its token tries to redirect a
host's BMC (spec.bmc.address, the credentials Secret, the boot MAC, ...) by every way of writing an object: an
update (PUT), a JSON merge patch, a JSON patch and a server-side apply. config/admission/host_fields_policy.yaml
refuses each; the fields the claim layer owns still pass, and the infra team still changes the BMC.

And each side holds only its own Lease: the claim side cannot take the provisioner's (config/rbac/
leader_election_role.yaml names each side's Leases; config/admission/lease_policy.yaml refuses the other side's,
create included, where RBAC cannot say it).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid

import pytest
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from metalclaim.controller.leader import LeaderElector
from metalclaim_dev.support import REPO_ROOT, run_playbook, status_of
from metalclaim_dev.tenancy import as_user, tenancy_rights

pytestmark = pytest.mark.integration

METAL3 = "metal3.io/v1alpha1"
SYSTEM = "metalclaim-system"
CLAIMS_SA = "system:serviceaccount:metalclaim-system:metalclaim-controller"
PROVISIONER_SA = "system:serviceaccount:metalclaim-system:metalclaim-provisioner"
TENANCY_SA = "system:serviceaccount:metalclaim-system:metalclaim-tenancy"
EVIL_BMC = "redfish+http://203.0.113.66:8000/redfish/v1/Systems/stolen"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def hosts(clients, identity: str):
    return clients[identity].resources.get(api_version=METAL3, kind="BareMetalHost")


@pytest.fixture
def host(clients, rack):
    """A registered host of a fresh infrastructure namespace, with the provisioner's finalizer (as it adds it)."""
    name = f"guarded-{uuid.uuid4().hex[:4]}"
    rack.host(name)
    admin = hosts(clients, "admin")
    admin.patch(
        body={
            "metadata": {"finalizers": ["metalclaim.io/provisioner"]},
            "spec": {"bootMACAddress": "52:54:00:00:00:aa", "rootDeviceHints": {"deviceName": "/dev/sda"}},
        },
        name=name,
        namespace=rack.namespace,
        content_type=MERGE,
    )
    yield rack.namespace, name
    with contextlib.suppress(ApiException):  # whatever an attack left, the namespace must be able to go
        admin.patch(body={"metadata": {"finalizers": None}}, name=name, namespace=rack.namespace, content_type=MERGE)


def read(clients, identity: str, key: tuple[str, str]) -> dict:
    return hosts(clients, identity).get(name=key[1], namespace=key[0]).to_dict()


def put(clients, identity: str, key, change) -> int:
    """Read the host as `identity`, change it, write it back whole (what the claim layer does)."""
    body = read(clients, identity, key)
    change(body)
    return status_of(lambda: hosts(clients, identity).replace(body=body))


def merge(clients, identity: str, key, patch: dict) -> int:
    return status_of(
        lambda: hosts(clients, identity).patch(body=patch, name=key[1], namespace=key[0], content_type=MERGE)
    )


def json_patch(clients, identity: str, key, ops: list) -> int:
    return status_of(
        lambda: hosts(clients, identity).patch(body=ops, name=key[1], namespace=key[0], content_type=JSON_PATCH)
    )


def apply(clients, identity: str, key, fields: dict) -> int:
    body = {"apiVersion": METAL3, "kind": "BareMetalHost", "metadata": {"name": key[1], "namespace": key[0]}}
    for part, value in fields.items():
        body.setdefault(part, {}).update(value)
    return status_of(
        lambda: clients[identity].server_side_apply(
            hosts(clients, identity), body=body, field_manager="attacker", force_conflicts=True
        )
    )


def setter(path: str, value):
    """A change for put(): set the dotted path (None: remove it)."""

    def change(body: dict) -> None:
        *parents, last = path.split(".")
        node = body
        for part in parents:
            node = node.setdefault(part, {}) if node.get(part) is None else node[part]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value

    return change


# What a stolen claim-side token tries: (case, dotted path, value for PUT/apply, merge patch, JSON patch op).
ATTACKS = [
    ("spec.bmc.address", "spec.bmc.address", EVIL_BMC),
    ("spec.bmc.credentialsName", "spec.bmc.credentialsName", "attacker-bmc-secret"),
    ("spec.bmc.disableCertificateVerification", "spec.bmc.disableCertificateVerification", True),
    ("spec.bootMACAddress", "spec.bootMACAddress", "52:54:00:66:66:66"),
    ("spec.rootDeviceHints", "spec.rootDeviceHints", {"deviceName": "/dev/sdb"}),
    ("spec.externallyProvisioned", "spec.externallyProvisioned", True),
    ("metadata.labels (a selector's)", "metadata.labels", {"infra-kind": "stolen"}),
    ("metadata.annotations (paused)", "metadata.annotations", {"baremetalhost.metal3.io/paused": "mine"}),
    # The provisioner's warm mark lets a powered-on host count as given back and free: never the claim side's.
    ("metadata.annotations (warm)", "metadata.annotations", {"provisioner.metalclaim.io/warm": "2026-11-26T00:00:00Z"}),
]


def _json_patch_ops(path: str, value) -> list:
    pointer = "/" + path.replace(".", "/")
    if path == "metadata.labels":
        return [{"op": "add", "path": "/metadata/labels/infra-kind", "value": "stolen"}]
    if path == "metadata.annotations":
        return [{"op": "add", "path": "/metadata/annotations", "value": value}]
    return [{"op": "add", "path": pointer, "value": value}]


def _nested(path: str, value) -> dict:
    result: dict = value
    for part in reversed(path.split(".")):
        result = {part: result}
    return result


def test_the_claim_side_cannot_redirect_a_hosts_bmc_by_any_write(clients, host):
    """Every field the claim side does not own, by every way of writing: 403 each, the host unchanged."""
    before = read(clients, "admin", host)
    verdicts = {}

    def attempt(case: str, method: str, status: int) -> None:
        verdicts[(case, method)] = status
        if status != 403:  # it got through: put the host back, so that each attack starts from the same host
            current = read(clients, "admin", host)
            current["spec"] = before["spec"]
            for field in ("labels", "annotations", "finalizers"):
                current["metadata"][field] = before["metadata"].get(field)
            hosts(clients, "admin").replace(body=current)

    for case, path, value in ATTACKS:
        nested = _nested(path, value)
        change = (
            (lambda body, v=value: body["metadata"].setdefault("annotations", {}).update(v))
            if path == "metadata.annotations"
            else setter(path, value)
        )
        attempt(case, "update (PUT)", put(clients, "controller", host, change))
        attempt(case, "JSON merge patch", merge(clients, "controller", host, nested))
        attempt(case, "JSON patch", json_patch(clients, "controller", host, _json_patch_ops(path, value)))
        attempt(case, "server-side apply", apply(clients, "controller", host, nested))
    # Finalizers: adding one of its own (holding the host's deletion), or removing the provisioner's (ending its
    # clean-up).
    hold = ["metalclaim.io/provisioner", "attacker.io/hold"]
    attempt(
        "metadata.finalizers (add)",
        "JSON merge patch",
        merge(clients, "controller", host, {"metadata": {"finalizers": hold}}),
    )
    attempt(
        "metadata.finalizers (remove another's)",
        "update (PUT)",
        put(clients, "controller", host, setter("metadata.finalizers", [])),
    )
    attempt(
        "metadata.finalizers (remove another's)",
        "JSON patch",
        json_patch(clients, "controller", host, [{"op": "remove", "path": "/metadata/finalizers/0"}]),
    )
    # The status is the provisioner's: the subresource (RBAC refuses it already; so does the guard).
    attempt(
        "status (subresource)",
        "JSON merge patch",
        status_of(
            lambda: hosts(clients, "controller").status.patch(
                body={"status": {"operationalStatus": "OK", "errorMessage": "x"}},
                name=host[1],
                namespace=host[0],
                content_type=MERGE,
            )
        ),
    )
    print("\nclaim side (user metalclaim-controller) against a host's fields:")
    for (case, method), status in verdicts.items():
        print(f"  {case:45} {method:20} {status}")
    assert {k: v for k, v in verdicts.items() if v != 403} == {}
    after = read(clients, "admin", host)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["finalizers"] == ["metalclaim.io/provisioner"]
    assert after["metadata"].get("labels") == before["metadata"].get("labels")
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")


def test_the_refusal_names_the_fields_and_the_identity(clients, host):
    body = read(clients, "controller", host)
    body["spec"]["bmc"]["address"] = EVIL_BMC
    body["spec"]["online"] = True  # an owned field beside it does not make it pass
    with pytest.raises(ApiException) as refused:
        hosts(clients, "controller").replace(body=body)
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert "metalclaim-host-fields" in message
    assert f"BareMetalHost {host[0]}/{host[1]}: user metalclaim-controller (the metalclaim claim side)" in message
    assert "may not change spec.bmc:" in message
    print(f"\n{message}")


def test_the_claim_side_still_writes_what_it_owns(clients, host):
    """Bind, sync, copies, reboot and the release scrub, as the claim layer writes them: whole-host updates."""
    consumer = {"apiVersion": METAL3, "kind": "HostClaim", "name": "c", "namespace": "cluster-ns", "uid": "u-1"}
    image = {"url": "http://example.test/os.qcow2", "checksum": "0" * 64, "checksumType": "sha256"}
    data = {"name": f"{host[1]}-userdata", "namespace": host[0]}
    annotations = {
        "reboot.metal3.io": "",
        "reboot.metal3.io/maintenance": '{"mode": "hard"}',
        "metalclaim.io/reboot-keys": "reboot.metal3.io/maintenance",
        "metalclaim.io/copies": json.dumps({"userData": {"uid": "x", "digest": "y"}}),
    }

    def bind_and_sync(body: dict) -> None:
        body["spec"].update(consumerRef=consumer, online=True, image=image, userData=data, metaData=data)
        body["spec"]["networkData"] = data
        body["metadata"].setdefault("annotations", {}).update(annotations)

    assert put(clients, "controller", host, bind_and_sync) == 200

    def scrub(body: dict) -> None:  # release.scrubbed_spec, then the consumerRef cleared
        for name in ("image", "userData", "metaData", "networkData", "consumerRef"):
            body["spec"].pop(name, None)
        body["spec"].update(online=False, automatedCleaningMode="metadata")
        for name in annotations:
            body["metadata"]["annotations"].pop(name)

    assert put(clients, "controller", host, scrub) == 200
    assert merge(clients, "controller", host, {"spec": {"online": True}}) == 200
    assert apply(clients, "controller", host, {"spec": {"online": False}}) == 200
    after = read(clients, "admin", host)
    assert after["spec"]["automatedCleaningMode"] == "metadata" and "consumerRef" not in after["spec"]
    assert after["spec"]["bmc"]["address"] != EVIL_BMC


def test_the_infra_team_still_changes_the_bmc(clients, host):
    namespace, _name = host
    bindings = clients["admin"].resources.get(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding")
    bindings.create(
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "infra", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metalclaim-infra"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "infra"}],
        }
    )
    moved = "redfish+http://127.0.0.1:10/redfish/v1/Systems/moved"
    assert put(clients, "infra", host, setter("spec.bmc.address", moved)) == 200
    assert merge(clients, "infra", host, {"spec": {"bmc": {"credentialsName": "rotated-bmc-secret"}}}) == 200
    assert merge(clients, "infra", host, {"metadata": {"labels": {"infra-kind": "relabelled"}}}) == 200
    after = read(clients, "admin", host)
    assert after["spec"]["bmc"] == {"address": moved, "credentialsName": "rotated-bmc-secret"}


def test_the_tenants_side_writes_only_reservations(devenv, clients, host):
    """The tenants side updates hosts too (exclusive reservations): only its annotation."""
    with tenancy_rights(clients, TENANCY_SA):
        tenancy = as_user(devenv, TENANCY_SA, "system:serviceaccounts").resources.get(
            api_version=METAL3, kind="BareMetalHost"
        )

        def write(change) -> int:
            body = tenancy.get(name=host[1], namespace=host[0]).to_dict()
            change(body)
            return status_of(lambda: tenancy.replace(body=body))

        reserve = {"tenancy.metalclaim.io/reserved-for": "blue"}
        assert write(lambda b: b["metadata"].setdefault("annotations", {}).update(reserve)) == 200
        assert write(setter("spec.bmc.address", EVIL_BMC)) == 403
        assert write(setter("spec.consumerRef", {"kind": "HostClaim", "name": "x", "namespace": "y"})) == 403
        assert write(setter("spec.online", True)) == 403
    assert read(clients, "admin", host)["spec"]["bmc"]["address"] != EVIL_BMC


# -- Leases -----------------------------------------------------------------------------------------------------


def leases(devenv, identity: str) -> kube_client.CoordinationV1Api:
    return kube_client.CoordinationV1Api(kube_config.new_client_from_config(config_file=devenv.kubeconfig(identity)))


def allowed(devenv, user: str, verb: str, name: str | None) -> bool:
    """The authorizer's answer (a SubjectAccessReview, as admin) for `user` on a Lease of metalclaim-system."""
    review = kube_client.AuthorizationV1Api(kube_config.new_client_from_config(config_file=devenv.kubeconfig("admin")))
    attributes = kube_client.V1ResourceAttributes(
        group="coordination.k8s.io", resource="leases", verb=verb, namespace=SYSTEM, name=name
    )
    spec = kube_client.V1SubjectAccessReviewSpec(user=user, resource_attributes=attributes)
    return review.create_subject_access_review(kube_client.V1SubjectAccessReview(spec=spec)).status.allowed


def test_each_installed_side_may_hold_only_its_own_leases(devenv, tmp_path):
    """install.yml with the controller and two claim-side shards: each ServiceAccount's Lease rights, by name."""
    started = time.monotonic()
    results = run_playbook(
        tmp_path / "install",
        REPO_ROOT / "playbooks" / "install.yml",
        devenv.kubeconfig("admin"),
        {
            "install_crds": False,
            "install_metal3_crds": False,
            "install_controller": True,
            "install_claims_shards": 2,
        },
    )
    failed = [
        (r["task"], i.get("item"), i.get("msg")) for r in results for i in r.get("results", [r]) if i.get("failed")
    ]
    assert failed == [], failed
    print(f"\ninstall.yml (RBAC, admission, controller): {time.monotonic() - started:.1f} s")
    claims = ["metalclaim-controller", "metalclaim-controller-shard-0-of-2", "metalclaim-controller-shard-1-of-2"]
    provisioner = ["metalclaim-provisioner"]
    names = [*claims, *provisioner, "metalclaim-provisioner-shard-0-of-2", "kube-controller-manager"]
    table = {
        (user, verb, name): allowed(devenv, user, verb, name)
        for user in (CLAIMS_SA, PROVISIONER_SA)
        for verb in ("get", "update", "patch", "delete", "create")
        for name in names
    }
    granted = sorted(key for key, yes in table.items() if yes)
    assert granted == sorted(
        [
            *((CLAIMS_SA, verb, name) for verb in ("get", "update") for name in claims),
            *((PROVISIONER_SA, verb, name) for verb in ("get", "update") for name in provisioner),
        ]
    )
    # Neither may create a Lease of any name (RBAC cannot restrict create by name): the install created them.
    assert not allowed(devenv, CLAIMS_SA, "create", None) and not allowed(devenv, PROVISIONER_SA, "create", None)
    existing = {lease.metadata.name for lease in leases(devenv, "admin").list_namespaced_lease(SYSTEM).items}
    assert set(claims + provisioner) <= existing


@pytest.fixture
def side_leases(devenv):
    """Each side's Lease as the manifests make it (created here too when missing), free."""
    admin = leases(devenv, "admin")
    for name in ("metalclaim-controller", "metalclaim-provisioner"):
        try:
            lease = admin.read_namespaced_lease(name, SYSTEM)
            lease.spec = kube_client.V1LeaseSpec()
            admin.replace_namespaced_lease(name, SYSTEM, lease)
        except ApiException as error:
            if error.status != 404:
                raise
            admin.create_namespaced_lease(
                SYSTEM,
                kube_client.V1Lease(metadata=kube_client.V1ObjectMeta(name=name), spec=kube_client.V1LeaseSpec()),
            )
    yield admin


def test_the_claim_side_cannot_take_the_provisioners_lease(devenv, side_leases):
    claims, provisioner = leases(devenv, "controller"), leases(devenv, "provisioner")
    taken = kube_client.V1LeaseSpec(holder_identity="attacker", lease_duration_seconds=3600)
    verdicts = {}
    stolen = side_leases.read_namespaced_lease("metalclaim-provisioner", SYSTEM)
    stolen.spec = taken
    verdicts["claim side: update the provisioner's Lease"] = status_of(
        lambda: claims.replace_namespaced_lease("metalclaim-provisioner", SYSTEM, stolen)
    )
    verdicts["claim side: merge-patch the provisioner's Lease"] = status_of(
        lambda: claims.patch_namespaced_lease("metalclaim-provisioner", SYSTEM, {"spec": {"holderIdentity": "x"}})
    )
    verdicts["claim side: create a provisioner shard's Lease"] = status_of(
        lambda: claims.create_namespaced_lease(
            SYSTEM,
            kube_client.V1Lease(
                metadata=kube_client.V1ObjectMeta(name="metalclaim-provisioner-shard-0-of-2"), spec=taken
            ),
        )
    )
    own = side_leases.read_namespaced_lease("metalclaim-controller", SYSTEM)
    own.spec = kube_client.V1LeaseSpec(holder_identity="provisioner-attacker", lease_duration_seconds=3600)
    verdicts["provisioner: update the claim side's Lease"] = status_of(
        lambda: provisioner.replace_namespaced_lease("metalclaim-controller", SYSTEM, own)
    )
    print()
    for case, status in verdicts.items():
        print(f"  {case:50} {status}")
    with contextlib.suppress(ApiException):  # on a guard that let it through
        side_leases.delete_namespaced_lease("metalclaim-provisioner-shard-0-of-2", SYSTEM)
    assert verdicts == dict.fromkeys(verdicts, 403)
    assert side_leases.read_namespaced_lease("metalclaim-provisioner", SYSTEM).spec.holder_identity is None


def _lead(devenv, identity: str, lease: str) -> tuple[bool, list]:
    """Run an elector as `identity` on `lease` until it leads (or 5 s), then stop it (it releases the Lease)."""
    events: list = []
    led = threading.Event()
    elector = LeaderElector(
        kube_config.new_client_from_config(config_file=devenv.kubeconfig(identity)),
        namespace=SYSTEM,
        name=lease,
        identity=f"{identity}-{uuid.uuid4().hex[:4]}",
        lease_duration=2.0,
        renew_deadline=1.5,
        retry_period=0.3,
        on_started_leading=led.set,
        log=lambda event, **fields: events.append((event, fields)),
    )
    stop = threading.Event()
    thread = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        return led.wait(5), events
    finally:
        stop.set()
        thread.join(10)


def test_each_side_still_holds_its_own_lease(devenv, side_leases):
    for identity, lease in (("controller", "metalclaim-controller"), ("provisioner", "metalclaim-provisioner")):
        led, events = _lead(devenv, identity, lease)
        assert led, (identity, events)
        assert side_leases.read_namespaced_lease(lease, SYSTEM).spec.holder_identity in (None, "")  # released
