"""hostclaim_bind on the real API server, run by the controller identity through ansible.

Hosts are driven to `available` as the infra identity would see a provisioner do it.
Each test uses its own rack namespace and label value, and names its claims, so the
tests do not see each other's objects.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from metalclaim_dev.claimlayer import METAL3, TENANT_A, TENANT_B, condition, step
from metalclaim_dev.runner import run
from metalclaim_dev.support import REPO_ROOT

PLAYBOOK = REPO_ROOT / "playbooks" / "reconcile.yml"
RECONCILE = "Reconcile the claims (release, bind, copy data Secrets, sync)"

pytestmark = [pytest.mark.integration, pytest.mark.minutes(3)]


def bind(devenv, tmp_path, rack, check_mode: bool = False) -> dict:
    return step("hostclaim_bind", devenv, tmp_path, rack, check_mode)


def test_bind_writes_consumer_ref_then_status(devenv, clients, rack, tmp_path):
    rack.policy()
    rack.host("h1")
    rack.claim("web")

    preview = bind(devenv, tmp_path, rack, check_mode=True)
    assert preview["changed"] is True and preview["claims"][0]["host"] == f"{rack.namespace}/h1"
    assert "consumerRef" not in rack.read_host("h1")["spec"]  # check mode wrote nothing

    result = bind(devenv, tmp_path, rack)
    assert (result["changed"], result["bound"], result["claims"][0]["action"]) == (True, 1, "bind")
    claim = rack.read_claim("web")
    host = rack.read_host("h1")
    assert host["spec"]["consumerRef"] == {
        "apiVersion": METAL3,
        "kind": "HostClaim",
        "namespace": TENANT_A,
        "name": "web",
        "uid": claim["metadata"]["uid"],
    }
    assert claim["status"]["hardwareData"] == {"name": "h1", "namespace": rack.namespace}
    assert claim["status"]["hostUID"] == host["metadata"]["uid"]
    association = condition(claim, "Association")
    assert (association["status"], association["reason"], association["observedGeneration"]) == (
        "True",
        "BareMetalHostAssociated",
        claim["metadata"]["generation"],
    )
    assert condition(claim, "Ready")["status"] == "True"
    assert "metal3.io/hostclaim" in claim["metadata"]["finalizers"]

    # The tenant sees why in its own namespace, through an Event.
    events = rack.api("tenant-a", "Event", "v1").get(
        namespace=TENANT_A, field_selector=f"involvedObject.uid={claim['metadata']['uid']}"
    )
    assert [(e.reason, e.message) for e in events.items] == [("Bound", f"bound to BareMetalHost {rack.namespace}/h1")]

    again = bind(devenv, tmp_path, rack)
    assert again["changed"] is False
    assert rack.read_claim("web")["status"]["conditions"] == claim["status"]["conditions"]


def test_claims_from_unauthorized_namespaces_are_refused(devenv, rack, tmp_path):
    rack.policy({"names": [TENANT_A]})
    rack.host("h1")
    selector = {"matchLabels": {"infra-kind": rack.kind}, "inNamespace": rack.namespace}
    rack.claim("intruder", namespace=TENANT_B, identity="tenant-b", hostSelector=selector)
    result = bind(devenv, tmp_path, rack)
    assert result["bound"] == 0
    assert "consumerRef" not in rack.read_host("h1")["spec"]
    association = condition(rack.read_claim("intruder", TENANT_B), "Association")
    assert (association["status"], association["reason"]) == ("False", "NotAuthorized")
    # The tenant learns it is refused, not which policies of the infra team say what.
    assert association["message"] == f"no HostDeployPolicy in namespace '{rack.namespace}' admits namespace 'tenant-b'"


def test_no_free_host_and_failure_domain_preference(devenv, rack, tmp_path):
    rack.policy()
    rack.host("busy", state="provisioning")
    rack.host("z1", labels={"topology.kubernetes.io/zone": "zone-1"})
    rack.host("z2", labels={"topology.kubernetes.io/zone": "zone-2"})
    rack.claim("pinned", failureDomain="zone-2")
    rack.claim("second")
    rack.claim("third")
    result = bind(devenv, tmp_path, rack)
    outcome = {c["name"]: c for c in result["claims"]}
    assert outcome["pinned"]["host"] == f"{rack.namespace}/z2"
    assert outcome["second"]["host"] == f"{rack.namespace}/z1"
    assert outcome["third"]["reason"] == "NoBareMetalHost"
    ready = condition(rack.read_claim("third"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "IssuesReported")
    assert ready["message"] == (
        "* Association: no free BareMetalHost matches spec.hostSelector among the hosts this namespace may use"
    )


def test_deleted_host_is_missing_and_the_claim_binds_again(devenv, rack, tmp_path):
    rack.policy()
    rack.host("first")
    rack.claim("survivor")
    bind(devenv, tmp_path, rack)
    rack.api("admin", "BareMetalHost").delete(name="first", namespace=rack.namespace)
    result = bind(devenv, tmp_path, rack)
    assert result["claims"][0]["reason"] == "MissingBareMetalHost"
    claim = rack.read_claim("survivor")
    assert "hardwareData" not in claim["status"]
    assert condition(claim, "Association")["reason"] == "MissingBareMetalHost"
    rack.host("second")
    result = bind(devenv, tmp_path, rack)
    assert result["claims"][0]["host"] == f"{rack.namespace}/second"


def test_stale_status_is_cleared_when_the_host_does_not_name_the_claim(devenv, rack, tmp_path):
    rack.policy()
    rack.host("h1")
    rack.claim("c1")
    bind(devenv, tmp_path, rack)
    # The infra team takes the host back by hand; the claim's status still names it.
    rack.api("admin", "BareMetalHost").patch(
        body={"spec": {"consumerRef": None}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    rack.api("admin", "BareMetalHost").status.patch(
        body={"status": {"provisioning": {"state": "provisioning"}}},
        name="h1",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    bind(devenv, tmp_path, rack)
    claim = rack.read_claim("c1")
    assert "hardwareData" not in claim["status"]
    assert condition(claim, "Association")["reason"] == "NoBareMetalHost"


def test_concurrent_binders_never_bind_a_host_twice(devenv, rack, tmp_path):
    """4 concurrent ansible runs over 24 claims for 6 hosts: exactly 6 bound, each host once."""
    rack.policy()
    for index in range(6):
        rack.host(f"h{index}")
    for index in range(24):
        rack.claim(f"c{index:02d}")
    task = [{"metalclaim.hostclaim.hostclaim_bind": {"claims": rack.claim_args()}}]
    play = [{"name": "bind", "hosts": "localhost", "gather_facts": False, "tasks": task}]

    def one_run(index: int):
        private = tmp_path / f"run{index}"
        (private / "project").mkdir(parents=True)
        (private / "project" / "playbook.yml").write_text(json.dumps(play))
        return run(private, devenv.kubeconfig("controller"), playbook="playbook.yml")

    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(one_run, range(4)))
    assert [r.status for r in runs] == ["successful"] * 4, [r.tasks[-1].get("msg") for r in runs if r.tasks]

    hosts = rack.api("admin", "BareMetalHost").get(namespace=rack.namespace).to_dict()["items"]
    consumers = [h["spec"]["consumerRef"]["name"] for h in hosts if h["spec"].get("consumerRef")]
    assert len(consumers) == 6 and len(set(consumers)) == 6
    claims = {name: rack.read_claim(name) for _namespace, name in rack.claims}
    bound = {name for name, c in claims.items() if c["status"].get("hardwareData")}
    assert bound == set(consumers)
    for name, claim in claims.items():
        expected = "BareMetalHostAssociated" if name in bound else "NoBareMetalHost"
        assert condition(claim, "Association")["reason"] == expected, name


def test_the_race_200_claims_50_hosts_4_concurrent_reconcile_runs(devenv, rack, tmp_path):
    """4 concurrent playbooks/reconcile.yml runs over 200 claims for 50 hosts: each host bound once; 50 bound after
    one more run (for a host given back after a lost commit)."""
    rack.policy()
    for index in range(50):
        rack.host(f"h{index:02d}")
    for index in range(200):
        rack.claim(f"c{index:03d}")
    _race(devenv, rack, tmp_path, hosts=50, runs=4)


def test_the_race_1000_claims_250_hosts_4_concurrent_reconcile_runs(devenv, rack, tmp_path):
    """The same at a storm's size: each run plans its claims in chunks and commits them several at once, and still
    no claim ends on two hosts, nor a host with a claim whose status names another."""
    rack.policy()
    rack.add_hosts(250)
    claims = rack.api("tenant-a", "HostClaim")
    names = [f"c{index:04d}" for index in range(1000)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda name: claims.create(body=rack.claim_body(TENANT_A, name)), names))
    rack.claims += [(TENANT_A, name) for name in names]
    _race(devenv, rack, tmp_path, hosts=250, runs=4)


def _race(devenv, rack, tmp_path, hosts: int, runs: int) -> None:
    """`runs` concurrent reconcile.yml runs over the rack's claims, then one more: never a claim on two hosts, every
    host bound once, each claim's status agreeing with the hosts, and runs spread over the claims."""
    extravars = {"claims_list": rack.claim_args()}

    def one_run(index: int):
        kubeconfig = devenv.kubeconfig("controller")
        return run(tmp_path / f"run{index}", kubeconfig, playbook=str(PLAYBOOK), extravars=extravars)

    with ThreadPoolExecutor(max_workers=runs) as pool:
        results = list(pool.map(one_run, range(runs)))
    assert [r.status for r in results] == ["successful"] * runs, [r.tasks[-1].get("msg") for r in results if r.tasks]

    def claims_on_hosts() -> list[str]:
        listed = rack.api("admin", "BareMetalHost").get(namespace=rack.namespace).to_dict()["items"]
        return [h["spec"]["consumerRef"]["name"] for h in listed if h["spec"].get("consumerRef")]

    # A run whose commit of a binding lost to another run's gives its host back: on a loaded machine a host or two
    # can end free with claims waiting. Its consumerRef write is an event: the controller runs the waiting claims
    # again; here, one more run does.
    concurrent = claims_on_hosts()
    print(f"\nbound by the {runs} concurrent runs: {len(concurrent)} of {hosts} hosts")
    assert len(set(concurrent)) == len(concurrent) and len(concurrent) >= 0.9 * hosts
    again = run(tmp_path / "again", devenv.kubeconfig("controller"), playbook=str(PLAYBOOK), extravars=extravars)
    assert again.status == "successful"
    consumers = claims_on_hosts()
    assert len(consumers) == hosts and len(set(consumers)) == hosts
    listed = rack.api("admin", "HostClaim").get(namespace=TENANT_A).to_dict()["items"]
    claims = {c["metadata"]["name"]: c for c in listed if (TENANT_A, c["metadata"]["name"]) in rack.claims}
    assert len(claims) == len(rack.claims)
    bound = {name for name, c in claims.items() if (c.get("status") or {}).get("hardwareData")}
    assert bound == set(consumers)
    for name, claim in claims.items():
        expected = "BareMetalHostAssociated" if name in bound else "NoBareMetalHost"
        assert condition(claim, "Association")["reason"] == expected, name
    summaries = [t["summary"] for r in results for t in r.tasks if t["task"] == RECONCILE]
    # Concurrent runs spread over the claims instead of colliding on each (bench/bind.py: 600 before for 200 claims).
    assert sum(s["conflicts"] for s in summaries) < len(rack.claims), summaries
