"""One bad claim fails only itself (issue 22): a claim that makes the API server refuse a request of its own, batched
with healthy ones into one reconcile.yml run, gets a condition explaining it, and the run's outcome names only it;
the healthy claims of the batch are bound and synchronized as if it were not there.

The attacker is a tenant with kubectl: no write it makes is refused at admission (that is the point), each poison is
something only the reconcile run finds out.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim.controller import outcomes
from metalclaim.controller.mapper import CLAIM
from metalclaim_dev.claimlayer import TENANT_A, condition
from metalclaim_dev.devenv.env import namespace, role_binding, tenant_namespace_bindings
from metalclaim_dev.support import REPO_ROOT, run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = REPO_ROOT / "playbooks" / "reconcile.yml"
RECONCILE = "Reconcile the claims (release, bind, copy data Secrets, sync)"
# Keyed reboot requests of the longest name Kubernetes allows (reboot.metal3.io/ + 63 characters), empty values:
# ~160 KiB on the claim (under its own 256 KiB), twice that on a host (each key, and the list of keys ours).
REBOOT_REQUESTS = 2000


def reconcile(devenv, tmp_path, keys: list[tuple[str, str]], name: str) -> tuple[dict, dict]:
    """One reconcile.yml run for `keys`, as the controller starts it; (the module's result, per-key outcomes as the
    controller reads them)."""
    refs = [{"namespace": ns, "name": claim} for ns, claim in keys]
    tasks = run_playbook(tmp_path / name, PLAYBOOK, devenv.kubeconfig("controller"), {"claims_list": refs})
    by_name = {t["task"]: t for t in tasks}
    result = by_name[RECONCILE]
    # What the controller does with a failed task: every key of the batch backs off (`run_failed`).
    assert not result["failed"], f"the run failed for the whole batch: {result.get('msg', '')[:400]}"
    found = outcomes.read(CLAIM, [(CLAIM, ns, claim) for ns, claim in keys], result)
    return result, found


def failed_keys(found: dict) -> set[tuple[str, str]]:
    return {(ns, name) for (_kind, ns, name), outcome in found.items() if outcome.result == outcomes.RETRY}


@pytest.fixture
def unlisted_namespace(clients):
    """A namespace of tenant-a's own that the infra team never onboarded: tenant-a may make claims and Secrets there
    (it holds the tenant role in it), but the claim side was not given the right to read its Secrets."""
    name = f"unlisted-{uuid.uuid4().hex[:6]}"
    admin_namespaces = clients["admin"].resources.get(api_version="v1", kind="Namespace")
    admin_namespaces.create(body=namespace(name, {}))
    bindings = clients["admin"].resources.get(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding")
    bindings.create(body=role_binding("tenant", name, "metalclaim-tenant", "tenant-a"))
    yield name
    _drop_finalizers(clients, name)
    try:
        admin_namespaces.delete(name=name)
    except ApiException as error:
        if error.status not in (404, 409):  # gone, or already terminating
            raise


def _drop_finalizers(clients, ns: str) -> None:
    claims = clients["admin"].resources.get(api_version="metal3.io/v1alpha1", kind="HostClaim")
    for claim in claims.get(namespace=ns).items:
        claims.patch(
            body={"metadata": {"finalizers": None}},
            name=claim.metadata.name,
            namespace=ns,
            content_type="application/merge-patch+json",
        )


def test_a_poisoned_claim_fails_only_itself(devenv, clients, rack, tmp_path, unlisted_namespace):
    rack.policy()  # every namespace may use the rack's hosts
    for index in range(4):
        rack.host(f"h{index}")
    rack.claim("healthy-0")
    rack.claim("bomb")
    first, _found = reconcile(devenv, tmp_path, rack.claims, "first")
    assert first["summary"]["bound"] == 2
    bomb_host = rack.read_claim("bomb")["status"]["hardwareData"]["name"]
    rack.set_state(bomb_host, "provisioned")  # reboot requests now reach the host

    # Poison 1: ~160 KiB of keyed reboot requests; copied to the host they would overflow its 256 KiB of annotations.
    requests = {f"reboot.metal3.io/{index:04d}-{'x' * 58}": "" for index in range(REBOOT_REQUESTS)}
    rack.api("tenant-a", "HostClaim").patch(
        body={"metadata": {"annotations": requests}},
        name="bomb",
        namespace=TENANT_A,
        content_type="application/merge-patch+json",
    )
    # Poison 2: a claim in a namespace whose Secrets the claim side may not read (403 on its userData Secret).
    rack.api("tenant-a", "Secret", "v1").create(
        body={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "userdata", "namespace": unlisted_namespace},
            "stringData": {"userData": "#cloud-config"},
        }
    )
    rack.claim("unreadable", namespace=unlisted_namespace, userData={"name": "userdata"})
    # Healthy ones in the same batch: one already bound, one new.
    rack.claim("healthy-1")

    started = time.monotonic()
    second, found = reconcile(devenv, tmp_path, rack.claims, "second")
    seconds = time.monotonic() - started

    for name in ("healthy-0", "healthy-1"):
        claim = rack.read_claim(name)
        assert condition(claim, "Association")["status"] == "True", claim["status"]
        assert condition(claim, "Synchronization")["reason"] == "ConfigurationSynced"

    # The bounded reboot requests never reach the host; the claim says why.
    sync = condition(rack.read_claim("bomb"), "Synchronization")
    assert (sync["status"], sync["reason"]) == ("False", "RebootRequestsTooLarge"), sync
    assert str(REBOOT_REQUESTS) in sync["message"]
    host_annotations = rack.read_host(bomb_host)["metadata"].get("annotations") or {}
    assert not [key for key in host_annotations if key.startswith("reboot.metal3.io")]

    # The refused read is the claim's own failure: its condition quotes it, it alone is retried.
    unreadable = rack.read_claim("unreadable", unlisted_namespace)
    assert condition(unreadable, "Association")["status"] == "True"
    sync = condition(unreadable, "Synchronization")
    assert (sync["status"], sync["reason"]) == ("False", "ReconcileError"), sync
    assert "403" in sync["message"] and "Secret userdata" in sync["message"]
    ready = condition(unreadable, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "IssuesReported")
    assert failed_keys(found) == {(unlisted_namespace, "unreadable")}, found
    assert [(e["namespace"], e["name"]) for e in second["errors"]] == [(unlisted_namespace, "unreadable")]
    print(f"\nbatch of {len(rack.claims)} with two poisoned claims: {seconds:.1f} s; outcomes {found}")

    # A settled run writes no status again: the error's condition is stable.
    third, found = reconcile(devenv, tmp_path, rack.claims, "third")
    assert third["status_writes"] == 0, third
    assert failed_keys(found) == {(unlisted_namespace, "unreadable")}


def test_a_claim_in_a_terminating_namespace_is_released_though_its_events_are_refused(
    devenv, clients, rack, tmp_path, unlisted_namespace
):
    """Deleting a namespace deletes its claims; the API server then refuses every new Event there (403). The release
    goes on (an Event is not worth a stuck namespace), and the batch's other claims are bound."""
    for binding in tenant_namespace_bindings(unlisted_namespace):  # onboarded this time: its Secrets are readable
        clients["admin"].resources.get(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding").create(
            body=binding
        )
    rack.policy()
    rack.host("h0")
    rack.host("h1")
    rack.claim("leaving", namespace=unlisted_namespace)
    reconcile(devenv, tmp_path, rack.claims, "bind")
    assert condition(rack.read_claim("leaving", unlisted_namespace), "Association")["status"] == "True"

    clients["admin"].resources.get(api_version="v1", kind="Namespace").delete(name=unlisted_namespace)
    deadline = time.monotonic() + 60
    while not rack.read_claim("leaving", unlisted_namespace)["metadata"].get("deletionTimestamp"):
        assert time.monotonic() < deadline, "the namespace controller did not delete the claim"
        time.sleep(0.5)
    rack.claim("staying")

    result, found = reconcile(devenv, tmp_path, rack.claims, "release")
    assert [(c["name"], c["state"]) for c in result["release"]["claims"]] == [("leaving", "released")]
    with pytest.raises(ApiException) as gone:
        rack.read_claim("leaving", unlisted_namespace)
    assert gone.value.status == 404
    assert condition(rack.read_claim("staying"), "Association")["status"] == "True"
    assert failed_keys(found) == set()
    assert any("Released" in warning for warning in result.get("warnings", [])), result.get("warnings")


def test_a_secret_name_no_secret_can_have_is_refused_at_admission(rack):
    """The 40,000-character Secret name of issue 22 never reaches a run: the tenant gets a 422 naming the field."""
    with pytest.raises(ApiException) as refused:
        rack.claim("long-name", userData={"name": "u" * 40_000})
    assert refused.value.status == 422
    assert "spec.userData.name" in refused.value.body and "253" in refused.value.body
