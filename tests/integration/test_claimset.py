"""HostClaimSets on the real API server: N claims as one object, driven through the controller.

The tenant writes sets (and scales them with kubectl) as its own identity; the controller's claim side makes and
deletes the member claims, the binder spreads them over zones, the garbage collector of kube-controller-manager
deletes a deleted set's claims, the namespace's ResourceQuota counts them.
"""

from __future__ import annotations

import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import METAL3, TENANT_A, TENANT_B, Rack
from metalclaim_dev.controllerproc import ControllerProcess, claim_side
from metalclaim_dev.support import eventually, run_tasks

pytestmark = pytest.mark.integration
REACTION = 30  # seconds
ZONE = "topology.kubernetes.io/zone"
SET_LABEL = "metalclaim.io/hostclaimset"


@pytest.fixture
def controller(devenv, rack, tmp_path):
    process = ControllerProcess(devenv, tmp_path, *claim_side(rack))
    yield process
    process.stop()


@pytest.fixture
def sets(clients):
    """Sets made by a test, deleted afterwards with their claims (finalizers dropped: no release runs then)."""
    made: list[tuple[str, str]] = []
    yield made
    api = clients["admin"].resources.get(api_version=METAL3, kind="HostClaimSet")
    claims = clients["admin"].resources.get(api_version=METAL3, kind="HostClaim")
    for namespace, name in made:
        try:
            api.delete(name=name, namespace=namespace)
        except ApiException as error:
            if error.status != 404:
                raise
        for claim in claims.get(namespace=namespace, label_selector=f"{SET_LABEL}={name}").items:
            try:
                claims.patch(
                    body={"metadata": {"finalizers": None}},
                    name=claim.metadata.name,
                    namespace=namespace,
                    content_type="application/merge-patch+json",
                )
                claims.delete(name=claim.metadata.name, namespace=namespace)
            except ApiException as error:
                if error.status != 404:
                    raise


def new_set(
    rack: Rack, sets: list, replicas: int, namespace: str = TENANT_A, identity: str = "tenant-a", **spec
) -> str:
    name = f"s{uuid.uuid4().hex[:6]}"
    template_spec = spec.pop("template_spec", {})
    body = {
        "apiVersion": METAL3,
        "kind": "HostClaimSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"online": False, "hostSelector": {"matchLabels": {"infra-kind": rack.kind}}, **template_spec},
            },
            **spec,
        },
    }
    if "template_metadata" in spec:  # what a tenant may try to put there, beside the selector's labels
        body["spec"]["template"]["metadata"].update(body["spec"].pop("template_metadata"))
    rack.api(identity, "HostClaimSet").create(body=body)
    sets.append((namespace, name))
    return name


def read_set(rack: Rack, name: str, namespace: str = TENANT_A) -> dict:
    return rack.api("admin", "HostClaimSet").get(name=name, namespace=namespace).to_dict()


def status_of(rack: Rack, name: str, namespace: str = TENANT_A) -> dict:
    return read_set(rack, name, namespace).get("status") or {}


def members(rack: Rack, name: str, namespace: str = TENANT_A) -> list[dict]:
    found = rack.api("admin", "HostClaim").get(namespace=namespace, label_selector=f"{SET_LABEL}={name}").to_dict()
    return sorted(found["items"], key=lambda c: c["metadata"]["name"])


def live_names(rack: Rack, name: str, namespace: str = TENANT_A) -> list[str]:
    return [c["metadata"]["name"] for c in members(rack, name, namespace) if not c["metadata"].get("deletionTimestamp")]


def held_hosts(rack: Rack) -> dict:
    """host name -> the claim its consumerRef names, for the rack's hosts."""
    hosts = rack.api("admin", "BareMetalHost").get(namespace=rack.namespace).to_dict()["items"]
    return {
        h["metadata"]["name"]: (h["spec"].get("consumerRef") or {}).get("name")
        for h in hosts
        if (h["spec"].get("consumerRef") or {}).get("name")
    }


def step(devenv, tmp_path, namespace: str, name: str) -> dict:
    """One run of the set's step as the claim side's identity."""
    task = {"metalclaim.hostclaim.hostclaimset_reconcile": {"claimsets": [{"namespace": namespace, "name": name}]}}
    (result,) = run_tasks(tmp_path / uuid.uuid4().hex[:6], [task], devenv.kubeconfig("controller"))
    assert not result["failed"], result
    return result


def test_a_set_of_three_binds_three_hosts_in_three_zones_and_scale_to_one_releases_two_by_the_rule(
    controller, rack, sets, devenv
):
    rack.policy()
    for zone in "abc":
        for index in range(2):
            rack.host(f"{zone}{index}", labels={ZONE: zone})
    name = new_set(rack, sets, 3, spreadBy=ZONE)
    eventually(
        lambda: status_of(rack, name).get("boundReplicas") == 3,
        timeout=REACTION,
        message=f"3 bound\n{controller.output()}",
    )
    held = held_hosts(rack)
    assert sorted(held.values()) == [f"{name}-0", f"{name}-1", f"{name}-2"]
    assert sorted(host[0] for host in held) == ["a", "b", "c"], held  # one claim per zone
    status = status_of(rack, name)
    assert (status["replicas"], status["waitingReplicas"], status["selector"]) == (3, 0, f"app={name}")
    for claim in members(rack, name):
        [owner] = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("HostClaimSet", name, True)
    # The rule: none is Ready (no image), all bound and made in the same run: the highest numbers go first.
    devenv.kubectl("tenant-a", "scale", f"hostclaimset/{name}", "--replicas=1", "-n", TENANT_A)
    eventually(
        lambda: live_names(rack, name) == [f"{name}-0"],
        timeout=REACTION,
        message=f"scaled to 1\n{controller.output()}",
    )
    eventually(
        lambda: list(held_hosts(rack).values()) == [f"{name}-0"] and len(members(rack, name)) == 1,
        timeout=REACTION,
        message=f"two hosts released, their claims gone\n{controller.output()}",
    )
    eventually(
        lambda: (status_of(rack, name).get("replicas"), status_of(rack, name).get("boundReplicas")) == (1, 1),
        timeout=REACTION,
        message="the status counts one",
    )
    got = devenv.kubectl("tenant-a", "get", "hostclaimset", name, "-n", TENANT_A).stdout
    assert got.split("\n")[0].split()[:6] == ["NAME", "DESIRED", "CURRENT", "BOUND", "READY", "WAITING"]


def test_a_set_of_five_with_three_free_hosts_binds_three_and_says_two_wait(controller, rack, sets):
    rack.policy()
    for index in range(3):
        rack.host(f"h{index}")
    name = new_set(rack, sets, 5)

    def settled():
        status = status_of(rack, name)
        return (status.get("replicas"), status.get("boundReplicas"), status.get("waitingReplicas")) == (5, 3, 2)

    eventually(settled, timeout=REACTION, message=f"3 bound, 2 waiting\n{controller.output()}")
    bound = next(c for c in status_of(rack, name)["conditions"] if c["type"] == "Bound")
    assert (bound["status"], bound["reason"]) == ("False", "HostsWaiting")
    assert bound["message"].startswith("3 of 5 claims hold a host; 2 wait (NoBareMetalHost 2)"), bound
    assert "rack-" not in bound["message"]  # nothing of the hosts' names or namespaces
    rack.host("h3")  # one more host: one waiting claim binds, and the set says so
    eventually(
        lambda: status_of(rack, name).get("boundReplicas") == 4,
        timeout=REACTION,
        message=f"4 bound\n{controller.output()}",
    )


def test_deleting_the_set_deletes_its_claims_and_releases_their_hosts(controller, rack, sets):
    rack.policy()
    rack.host("h0")
    rack.host("h1")
    name = new_set(rack, sets, 2)
    eventually(lambda: status_of(rack, name).get("boundReplicas") == 2, timeout=REACTION, message="2 bound")
    rack.api("tenant-a", "HostClaimSet").delete(name=name, namespace=TENANT_A)
    eventually(
        lambda: members(rack, name) == [] and held_hosts(rack) == {},
        timeout=REACTION * 2,
        message=f"claims collected, hosts released\n{controller.output()}",
    )


def test_a_second_run_with_nothing_new_writes_nothing(rack, sets, devenv, tmp_path):
    name = new_set(rack, sets, 2)
    first = step(devenv, tmp_path, TENANT_A, name)
    assert first["claimsets"][0]["created"] == [f"{name}-0", f"{name}-1"]
    assert first["api_calls"].get("create", 0) >= 2 and first["changed"]
    second = step(devenv, tmp_path, TENANT_A, name)
    writes = {verb: n for verb, n in second["api_calls"].items() if verb not in ("list", "get")}
    assert (second["writes"], writes, second["changed"]) == (0, {}, False), second["api_calls"]
    assert second["outcomes"] == [
        {"namespace": TENANT_A, "name": name, "result": "done", "after": None, "reason": "ScaledToReplicas"}
    ]


def test_a_claim_the_set_did_not_make_is_never_touched(rack, sets, devenv, tmp_path):
    name = new_set(rack, sets, 1)
    # The tenant's own claim with the set's labels and the name the set would take first.
    rack.claim(f"{name}-0", labels={"app": name, SET_LABEL: name})
    step(devenv, tmp_path, TENANT_A, name)
    assert live_names(rack, name) == [f"{name}-0", f"{name}-1"]
    assert not rack.read_claim(f"{name}-0")["metadata"].get("ownerReferences")
    rack.api("tenant-a", "HostClaimSet").patch(
        body={"spec": {"replicas": 0}}, name=name, namespace=TENANT_A, content_type="application/merge-patch+json"
    )
    step(devenv, tmp_path, TENANT_A, name)
    assert live_names(rack, name) == [f"{name}-0"]  # only the set's own claim went


def test_a_tenant_cannot_make_a_set_create_claims_in_another_namespace(rack, sets, devenv, tmp_path):
    """As tenant-a: a set in tenant-b's namespace is refused; a template naming tenant-b (its metadata, a data Secret)
    makes no claim there, nor reads anything there."""
    with pytest.raises(ApiException) as refused:
        new_set(rack, sets, 1, namespace=TENANT_B)
    assert refused.value.status == 403
    before = {c["metadata"]["name"] for c in rack.api("admin", "HostClaim").get(namespace=TENANT_B).to_dict()["items"]}
    # metadata.namespace and ownerReferences in the template are not fields of it: the API server drops them.
    moved = new_set(rack, sets, 1, template_metadata={"namespace": TENANT_B, "ownerReferences": []})
    step(devenv, tmp_path, TENANT_A, moved)
    # a data Secret of another namespace: refused before any claim is made
    crossing = new_set(rack, sets, 1, template_spec={"userData": {"name": "theirs", "namespace": TENANT_B}})
    result = step(devenv, tmp_path, TENANT_A, crossing)
    assert result["claimsets"][0]["created"] == []
    scaled = next(c for c in status_of(rack, crossing)["conditions"] if c["type"] == "Scaled")
    assert (scaled["status"], scaled["reason"]) == ("False", "InvalidSpec")
    assert "spec.template.spec.userData.namespace" in scaled["message"]
    after = {c["metadata"]["name"] for c in rack.api("admin", "HostClaim").get(namespace=TENANT_B).to_dict()["items"]}
    assert after == before
    assert live_names(rack, moved) == [f"{moved}-0"]  # made in the set's own namespace
    assert rack.read_claim(f"{moved}-0")["metadata"]["labels"] == {"app": moved, SET_LABEL: moved}


def test_the_namespaces_quota_counts_the_sets_claims(clients, sets, devenv, tmp_path):
    rack = Rack(clients, tenants=1)
    try:
        namespace = rack.tenants[0]
        rack.api("admin", "ResourceQuota", "v1").create(
            body={
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "claims", "namespace": namespace},
                "spec": {"hard": {"count/hostclaims.metal3.io": "2"}},
            }
        )
        name = new_set(rack, sets, 3, namespace=namespace, identity="admin")
        eventually(
            lambda: step(devenv, tmp_path, namespace, name)["claimsets"][0]["replicas"] == 2,
            timeout=REACTION,
            message="two claims made within the quota",
        )
        result = step(devenv, tmp_path, namespace, name)
        assert result["claimsets"][0]["refused"] and result["outcomes"][0]["result"] == "wait"
        assert result["outcomes"][0]["after"] == 30.0
        scaled = next(c for c in status_of(rack, name, namespace)["conditions"] if c["type"] == "Scaled")
        assert (scaled["status"], scaled["reason"]) == ("False", "CreateRefused")
        assert "2 of 3 claims made" in scaled["message"] and "exceeded quota" in scaled["message"]
        assert len(members(rack, name, namespace)) == 2
    finally:
        rack.teardown()
