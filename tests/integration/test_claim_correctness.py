"""Claim-layer correctness against the real API server: one status write per run, idempotence and its
request counts, the binding lock, orphaned hosts, revoked policies, hand-made Secrets, reboots, Events.

Runs call hostclaim_reconcile's code in this process, as the controller identity, so that two runs
can fall in the same second and each run's requests are counted exactly.
"""

from __future__ import annotations

import threading
import time

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.reconcile import reconcile_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.io.run import ClaimRun
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.sync import state_reason
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io import events
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.conditions import now
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import STATES
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import TENANT_A, condition

pytestmark = pytest.mark.integration

WRITES = ("create", "replace", "patch", "delete")


def reconcile(devenv, rack, check_mode: bool = False) -> dict:
    """One hostclaim_reconcile run over the rack's claims; its result carries api_calls and status_writes."""
    run = ClaimRun(Kube({"kubeconfig": devenv.kubeconfig("controller")}), rack.claim_args(), now(), check_mode)
    return run.finish(reconcile_claims(run))


def writes(result: dict) -> int:
    return sum(n for verb, n in result["api_calls"].items() if verb in WRITES)


def tenant_secret(rack, name: str, **data) -> dict:
    return rack.tenant_secret(name, **data)


def annotate(rack, identity: str, kind: str, name: str, namespace: str, annotations: dict) -> None:
    rack.api(identity, kind).patch(
        body={"metadata": {"annotations": annotations}},
        name=name,
        namespace=namespace,
        content_type="application/merge-patch+json",
    )


def test_a_first_reconcile_writes_each_claims_status_once_and_ready_never_flaps(devenv, rack):
    rack.policy()
    rack.host("h1")
    rack.claim("watched", userData=tenant_secret(rack, "ud", userData="#cloud-config"), online=True)
    start = rack.read_claim("watched")["metadata"]["resourceVersion"]
    seen: list[dict] = []
    stop = threading.Event()

    def watch():
        for event in rack.api("admin", "HostClaim").watch(
            namespace=TENANT_A, field_selector="metadata.name=watched", resource_version=start, timeout=20
        ):
            seen.append(event["raw_object"])
            if stop.is_set():
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(0.5)
    result = reconcile(devenv, rack)
    assert result["bind"]["bound"] == 1 and result["status_writes"] == 1
    time.sleep(1)
    stop.set()
    annotate(rack, "admin", "HostClaim", "watched", TENANT_A, {"test/wake-watcher": "1"})
    watcher.join(timeout=25)

    statuses = [event.get("status") or {} for event in seen]
    changes = [b for a, b in zip([{}, *statuses], statuses, strict=False) if a != b]
    assert len(changes) == 1, changes  # bind + secrets + sync: one status update
    ready = [condition({"status": s}, "Ready") for s in changes]
    assert [(r["status"], r["message"]) for r in ready] == [("False", "* Provisioned: available")]
    final = rack.read_claim("watched")
    assert {c["type"]: c["status"] for c in final["status"]["conditions"]} == {
        "Ready": "False",
        "Association": "True",
        "Provisioned": "False",
        "Synchronization": "True",
    }


def test_every_host_state_is_a_valid_provisioned_reason_for_the_api_server(devenv, rack):
    rack.policy()
    rack.host("h1")
    rack.claim("c")
    reconcile(devenv, rack)
    rack.set_state("h1", "externally provisioned")
    reconcile(devenv, rack)
    provisioned = condition(rack.read_claim("c"), "Provisioned")
    assert (provisioned["status"], provisioned["reason"]) == ("True", "externallyProvisioned")
    # The whole table, through the API server's own validation of the status subresource.
    claims = rack.api("controller", "HostClaim")
    accepted = {}
    for state in STATES:
        claim = rack.read_claim("c")
        conditions = [c for c in claim["status"]["conditions"] if c["type"] != "Provisioned"]
        conditions.append({**provisioned, "reason": state_reason(state)})
        claims.status.patch(
            body={"status": {"conditions": conditions}},
            name="c",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
        accepted[state] = condition(rack.read_claim("c"), "Provisioned")["reason"]
    assert accepted == {state: state_reason(state) for state in STATES}
    with pytest.raises(ApiException) as refused:  # what the raw state used to be
        claims.status.patch(
            body={"status": {"conditions": [{**provisioned, "reason": "externally provisioned"}]}},
            name="c",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
    assert refused.value.status == 422


def test_a_rerun_with_nothing_new_sends_no_write(devenv, rack):
    rack.policy()
    rack.host("plain")  # no annotations at all
    rack.host("annotated", annotations={"infra.example/rack": "r1"})
    user_data = tenant_secret(rack, "ud", userData="#cloud-config")
    meta_data = tenant_secret(rack, "md", metaData="instance-id: x")
    rack.claim("with-secrets", userData=user_data, metaData=meta_data, online=True)
    rack.claim("without-secrets")
    rack.claim("unbound")  # two hosts, three claims
    rack.claim("refused", hostSelector={"matchLabels": {"infra-kind": "nothing-has-this"}})
    first = reconcile(devenv, rack)
    assert first["summary"]["bound"] == 2
    for _rerun in range(2):
        again = reconcile(devenv, rack)
        assert writes(again) == 0, again["api_calls"]
        assert (again["changed"], again["status_writes"]) == (False, 0)
    # Reads: one list per kind (claims, hosts, policies, namespaces) and each referenced tenant Secret
    # once; no Secret beside a host (the copies are known from the hosts' records). Hosts of other
    # tests' racks, orphaned while their namespace is being deleted, cost a get (their claim) each.
    elsewhere = [o["host"].split("/")[0] for o in again["release"]["orphans"]]
    assert again["api_calls"] == {"get": 2 + len(elsewhere), "list": 4}
    print(f"\nreconcile API calls, 4 claims / 2 hosts: first run {first['api_calls']}, rerun {again['api_calls']}")


def test_a_new_claim_is_bound_in_two_writes_its_host_and_its_status(devenv, rack):
    """Issue 24: a claim that carries the finalizer from its creation (what config/admission-create's policy gives
    it, install_finalizer_on_create) is bound in the host's consumerRef and the claim's status, with its Bound
    Event: no lock, no claim metadata write."""
    rack.policy()
    rack.host("h1")
    rack.claim("fresh")
    rack.api("admin", "HostClaim").patch(
        body={"metadata": {"finalizers": ["metal3.io/hostclaim"]}},
        name="fresh",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    kube = Kube({"kubeconfig": devenv.kubeconfig("controller")})
    run = ClaimRun(kube, rack.claim_args(), now(), False)
    first = run.finish(reconcile_claims(run))
    assert first["summary"]["bound"] == 1, first["bind"]
    # This rack's objects only: hosts of other tests' racks, orphaned meanwhile, may be released by the same run.
    ours = {
        (verb, kind): n
        for (verb, kind, namespace), n in kube.requests.items()
        if verb in WRITES and namespace in (rack.namespace, TENANT_A)
    }
    assert ours == {
        ("replace", "BareMetalHost"): 1,  # its consumerRef
        ("patch", "HostClaim"): 1,  # the claim's status: the commit
        ("create", "Event"): 1,  # Bound
    }, kube.requests
    assert writes(reconcile(devenv, rack)) == 0


def test_two_runs_in_the_same_second_both_make_progress_and_a_dead_runs_lock_holds_nobody(devenv, rack):
    rack.policy()
    rack.host("h1")
    rack.claim("first")
    started = time.monotonic()
    one = reconcile(devenv, rack)
    assert one["summary"]["bound"] == 1
    # Run one locked "first" in this second; run two, in the same second, binds a new claim and
    # refreshes the first (a lock compared by time would have made it skip claims stamped "now").
    rack.host("h2")
    rack.claim("second")
    two = reconcile(devenv, rack)
    elapsed = time.monotonic() - started
    assert two["summary"]["bound"] == 2, two["bind"]
    assert condition(rack.read_claim("second"), "Association")["status"] == "True"
    assert two["bind"]["claims"][0]["action"] == "keep"
    print(f"\ntwo reconciles, a host and a claim in {elapsed:.2f}s")

    # A claim still carrying the lock token of a run of an older version (which locked claims by an annotation
    # before taking a host) binds as any other.
    rack.claim("third")
    rack.host("h3")
    annotate(rack, "admin", "HostClaim", "third", TENANT_A, {"metalclaim.io/binding-attempt": "token-of-a-killed-run"})
    three = reconcile(devenv, rack)
    assert three["summary"]["bound"] == 3, three["bind"]


def test_a_host_orphaned_by_a_vanished_claim_is_released_clean(devenv, rack):
    """A claim's finalizer removed by hand (break-glass, or a cluster without the admission policies):
    its host must not keep the tenant's image and data, out of the pool, forever."""
    rack.policy()
    rack.host("h1")
    user_data = tenant_secret(rack, "ud", userData="#cloud-config")
    image = {"url": "http://127.0.0.1/img.qcow2", "checksum": "abc", "format": "qcow2"}
    rack.claim("gone", userData=user_data, image=image, online=True)
    reconcile(devenv, rack)
    rack.set_state("h1", "provisioned")
    host = rack.read_host("h1")
    assert host["spec"]["image"]["url"] == image["url"] and host["spec"]["userData"]["name"] == "h1-userdata"

    rack.api("admin", "HostClaim").patch(
        body={"metadata": {"finalizers": None}},
        name="gone",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    rack.api("tenant-a", "HostClaim").delete(name="gone", namespace=TENANT_A)
    # The tenant re-creates a claim of the same name: another uid, another claim.
    rack.claims.remove((TENANT_A, "gone"))
    rack.claim("gone", hostSelector={"matchLabels": {"infra-kind": "nothing-has-this"}})

    waiting = reconcile(devenv, rack)
    (orphan,) = [o for o in waiting["release"]["orphans"] if o["host"].startswith(f"{rack.namespace}/")]
    assert (orphan["host"], orphan["state"]) == (f"{rack.namespace}/h1", "waiting")
    host = rack.read_host("h1")
    assert host["spec"]["consumerRef"]["name"] == "gone"  # never given away dirty
    assert not {"image", "userData"} & set(host["spec"])
    assert (host["spec"]["online"], host["spec"]["automatedCleaningMode"]) == (False, "metadata")
    with pytest.raises(ApiException):
        rack.api("admin", "Secret", "v1").get(name="h1-userdata", namespace=rack.namespace)

    rack.set_state("h1", "available")  # its provisioner deprovisioned and cleaned it
    released = reconcile(devenv, rack)
    assert {o["host"]: o["state"] for o in released["release"]["orphans"]}[f"{rack.namespace}/h1"] == "released"
    assert "consumerRef" not in rack.read_host("h1")["spec"]
    assert all(o["host"] != f"{rack.namespace}/h1" for o in reconcile(devenv, rack)["release"]["orphans"])


class TenantStripsTheFinalizerFirst(Kube):
    """The controller's client, with tenant-a removing the claim's finalizer just before the binder's first status
    write: the window between the binding lock and the status naming the host, where admission still allows it."""

    def __init__(self, devenv, rack, name: str):
        super().__init__({"kubeconfig": devenv.kubeconfig("controller")})
        self.rack, self.name, self.stripped = rack, name, False

    def patch_status(self, obj, status):
        if not self.stripped and obj["metadata"]["name"] == self.name:
            self.stripped = True
            self.rack.api("tenant-a", "HostClaim").patch(
                body={"metadata": {"finalizers": None}},
                name=self.name,
                namespace=TENANT_A,
                content_type="application/merge-patch+json",
            )
        return super().patch_status(obj, status)


def test_a_tenant_stripping_the_finalizer_while_the_binder_works_gets_no_host(devenv, rack):
    """Issue 22: the binder committed its binding over the newer claim version that had lost its finalizer, so the
    claim could vanish on delete before its host was released (the orphan sweep caught it later)."""
    rack.policy()
    rack.host("h1")
    rack.claim("racer", online=True)
    kube = TenantStripsTheFinalizerFirst(devenv, rack, "racer")
    run = ClaimRun(kube, rack.claim_args(), now(), check_mode=False)
    result = run.finish(reconcile_claims(run))
    assert kube.stripped
    (bound,) = result["bind"]["claims"]
    assert (bound["action"], bound["host"]) == ("conflict", None)
    claim = rack.read_claim("racer")
    assert "hardwareData" not in (claim.get("status") or {}) or not claim["status"]["hardwareData"]
    assert "consumerRef" not in rack.read_host("h1")["spec"]  # given back before anything reached it

    # The next run locks the claim again, finalizer first; now the finalizer is the tenant's no more.
    assert reconcile(devenv, rack)["bind"]["bound"] == 1
    claim = rack.read_claim("racer")
    assert "metal3.io/hostclaim" in claim["metadata"]["finalizers"] and claim["status"]["hardwareData"]["name"] == "h1"
    with pytest.raises(ApiException) as refused:
        rack.api("tenant-a", "HostClaim").patch(
            body={"metadata": {"finalizers": None}},
            name="racer",
            namespace=TENANT_A,
            content_type="application/merge-patch+json",
        )
    assert refused.value.status in (403, 422)


def test_a_revoked_policy_keeps_the_host_says_so_and_refuses_a_new_image(devenv, rack):
    rack.policy()
    rack.host("h1")
    rack.claim("c", online=True)
    reconcile(devenv, rack)
    rack.api("admin", "HostDeployPolicy").delete(name="policy", namespace=rack.namespace)
    rack.api("tenant-a", "HostClaim").patch(
        body={"spec": {"image": {"url": "http://127.0.0.1/new.qcow2", "checksum": "abc", "format": "qcow2"}}},
        name="c",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    reconcile(devenv, rack)
    claim = rack.read_claim("c")
    sync = condition(claim, "Synchronization")
    assert (sync["status"], sync["reason"]) == ("False", "AuthorizationRevoked")
    assert "admits namespace 'cluster-ns' any more" in sync["message"]
    assert condition(claim, "Association")["status"] == "True"
    host = rack.read_host("h1")
    assert host["spec"]["consumerRef"]["name"] == "c"  # the workload is not taken away
    assert "image" not in host["spec"] and host["spec"]["online"] is True
    # Release still works.
    rack.api("tenant-a", "HostClaim").delete(name="c", namespace=TENANT_A)
    assert reconcile(devenv, rack)["release"]["claims"][0]["state"] == "released"


def test_a_hand_made_secret_of_a_copys_name_is_never_overwritten(devenv, rack):
    rack.policy()
    rack.host("h1")
    rack.api("admin", "Secret", "v1").create(  # by the infra team (admin: racks are fresh namespaces)
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "h1-userdata", "namespace": rack.namespace},
            "stringData": {"userData": "#infra's own"},
        }
    )
    rack.claim("c", userData=tenant_secret(rack, "ud", userData="#cloud-config from the tenant"))
    reconcile(devenv, rack)
    sync = condition(rack.read_claim("c"), "Synchronization")
    assert (sync["status"], sync["reason"]) == ("False", "CopyNameTaken")
    assert rack.namespace not in sync["message"]
    kept = rack.api("admin", "Secret", "v1").get(name="h1-userdata", namespace=rack.namespace).to_dict()
    assert kept["data"]["userData"] == "I2luZnJhJ3Mgb3du"  # "#infra's own"
    assert "userData" not in rack.read_host("h1")["spec"]


def test_a_reboot_reaches_only_a_provisioned_host(devenv, rack):
    rack.policy()
    rack.host("h1")
    rack.claim("c", online=True)
    reconcile(devenv, rack)
    annotate(rack, "tenant-a", "HostClaim", "c", TENANT_A, {"reboot.metal3.io": ""})
    reconcile(devenv, rack)
    assert "reboot.metal3.io" not in (rack.read_host("h1")["metadata"].get("annotations") or {})
    claim = rack.read_claim("c")
    assert "reboot.metal3.io" in claim["metadata"]["annotations"]  # waits, visibly
    sync = condition(claim, "Synchronization")
    assert (sync["status"], sync["reason"]) == ("False", "RebootNotApplicable")
    rack.set_state("h1", "provisioned")
    reconcile(devenv, rack)
    assert "reboot.metal3.io" in rack.read_host("h1")["metadata"]["annotations"]
    claim = rack.read_claim("c")
    assert "reboot.metal3.io" not in (claim["metadata"].get("annotations") or {})
    assert condition(claim, "Synchronization")["status"] == "True"


def test_tenant_facing_messages_do_not_name_infrastructure_namespaces(devenv, rack):
    rack.policy()
    rack.claim("nothing-fits", hostSelector={"matchLabels": {"infra-kind": "nothing-has-this"}})
    reconcile(devenv, rack)
    claim = rack.read_claim("nothing-fits")
    assert condition(claim, "Association")["reason"] == "NoBareMetalHost"
    assert all(rack.namespace not in c["message"] for c in claim["status"]["conditions"])
    listed = rack.api("tenant-a", "Event", "v1").get(namespace=TENANT_A).to_dict()["items"]
    mine = [e for e in listed if e["involvedObject"]["name"] == "nothing-fits"]
    assert mine and all(rack.namespace not in e["message"] for e in mine)


def test_the_same_event_twice_is_one_event_counted_twice(devenv, rack):
    rack.claim("c")
    claim = rack.read_claim("c")
    kube = Kube({"kubeconfig": devenv.kubeconfig("controller")})
    for _repeat in range(2):
        events.record(kube, claim, "Warning", "Example", "the same thing again", now(), False)
    listed = rack.api("tenant-a", "Event", "v1").get(namespace=TENANT_A).to_dict()["items"]
    mine = [e for e in listed if e["involvedObject"]["uid"] == claim["metadata"]["uid"] and e["reason"] == "Example"]
    assert [e["count"] for e in mine] == [2]
    assert kube.calls == {"create": 2, "get": 1, "replace": 1}
