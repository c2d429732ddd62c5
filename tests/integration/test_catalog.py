"""HostCatalogs on the real API server, driven through the controller: what a tenant namespace may claim, by kind of
host, and how many are free, bound, booked.

Infra publishes a rack's hosts with a HostDeployPolicy's spec.catalog.publicLabels; the controller's claim side
(--catalog-interval 2s) writes the catalog of each namespace the policy admits, once per interval however many host
events come, and deletes it when the policy no longer admits the namespace. The tenant reads it as its own identity,
cannot write it nor read another namespace's, and finds no host name, infra namespace or BMC in it.
"""

from __future__ import annotations

import datetime
import itertools
import json
import threading
import time
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from metalclaim_dev.claimlayer import METAL3, TENANT_A, TENANT_B, Rack
from metalclaim_dev.controllerproc import ControllerProcess, claim_side
from metalclaim_dev.support import eventually, run_tasks

pytestmark = pytest.mark.integration
CLASS = "example.com/hostclass"
INTERVAL = 2.0  # --catalog-interval of this module's controller
REACTION = 30  # seconds
# Tenant A's catalog once its claim holds a gpu host and its booking ahead holds the other: (total, free, bound, booked)
BOOKED = {"gpu": (2, 1, 1, 1), "small": (1, 1, 0, 0), "HIDDEN": (1, 1, 0, 0)}


@pytest.fixture(scope="module")
def rack(clients):
    rack = Rack(clients)
    rack.host("g0", labels={CLASS: "gpu"})
    rack.host("g1", labels={CLASS: "gpu"})
    rack.host("s0", labels={CLASS: "small"})
    rack.host("odd", labels={CLASS: "odd"})  # its own name as its class: shown HIDDEN
    rack.api("admin", "HostDeployPolicy").create(body=policy_body(rack))
    yield rack
    try:
        rack.api("admin", "HostDeployPolicy").delete(name="catalog", namespace=rack.namespace)
    except ApiException as error:
        if error.status != 404:
            raise
    rack.cleanup()
    delete_catalog(rack, TENANT_A)


@pytest.fixture(scope="module")
def controller(devenv, rack, tmp_path_factory):
    options = [*claim_side(rack), "--catalog-interval", f"{INTERVAL:g}s"]
    process = ControllerProcess(devenv, tmp_path_factory.mktemp("catalog-controller"), *options)
    yield process
    process.stop()


def policy_body(rack: Rack, names=(TENANT_A,), public=(CLASS,)) -> dict:
    return {
        "apiVersion": METAL3,
        "kind": "HostDeployPolicy",
        "metadata": {"name": "catalog", "namespace": rack.namespace},
        "spec": {"hostclaimNamespaces": {"names": list(names)}, "catalog": {"publicLabels": list(public)}},
    }


def delete_catalog(rack: Rack, namespace: str) -> None:
    try:
        rack.api("admin", "HostCatalog").delete(name="hosts", namespace=namespace)
    except ApiException as error:
        if error.status != 404:
            raise


def catalog(rack: Rack, namespace: str = TENANT_A, identity: str = "admin") -> dict | None:
    try:
        return rack.api(identity, "HostCatalog").get(name="hosts", namespace=namespace).to_dict()
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def classes(found: dict | None) -> dict:
    """class value -> (total, free, bound, booked)."""
    entries = ((found or {}).get("status") or {}).get("classes") or []
    return {e["labels"].get(CLASS): (e["total"], e["free"], e["bound"], e["booked"]) for e in entries}


def counted(found: dict | None) -> dict | None:
    """The catalog once counted: a new one is created first and its counts come in the status write after it."""
    return found if classes(found) else None


def wait_for(rack: Rack, expected: dict, timeout: float = REACTION) -> dict:
    return eventually(lambda: classes(catalog(rack)) == expected and catalog(rack), timeout, 0.2, f"catalog {expected}")


def step(devenv, tmp_path) -> dict:
    """One run of the catalog step for TENANT_A's catalog, as the claim side's identity."""
    task = {"metalclaim.hostclaim.hostclaim_catalog": {"catalogs": [{"namespace": TENANT_A, "name": "hosts"}]}}
    (result,) = run_tasks(tmp_path / uuid.uuid4().hex[:6], [task], devenv.kubeconfig("controller"))
    assert not result["failed"], result
    return result


def test_the_tenant_reads_its_catalog_by_class_and_it_follows_a_binding(devenv, rack, controller, clients, tmp_path):
    start = time.monotonic()
    found = wait_for(rack, {"gpu": (2, 2, 0, 0), "small": (1, 1, 0, 0), "HIDDEN": (1, 1, 0, 0)})
    status = found["status"]
    assert (status["total"], status["free"], status["bound"], status["booked"], status["classCount"]) == (4, 4, 0, 0, 3)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "ValuesHidden")
    print(f"\ncatalog written {time.monotonic() - start:.1f} s after the controller's start (interval {INTERVAL} s)")
    # The tenant reads it, and kubectl shows it usefully.
    assert classes(catalog(rack, identity="tenant-a")) == classes(found)
    lines = devenv.kubectl("tenant-a", "get", "hostcatalogs", "-n", TENANT_A).stdout.splitlines()
    assert lines[0].split() == ["NAME", "CLASSES", "FREE", "BOUND", "BOOKED", "TOTAL", "FREE-BY-CLASS", "AGE"]
    assert lines[1].split()[:7] == ["hosts", "3", "4", "0", "0", "4", "gpu=2/2"]
    # No catalog where no publishing policy admits the namespace.
    assert catalog(rack, TENANT_B) is None

    # A claim of the tenant binds a gpu host (the controller's claim side): the catalog follows.
    rack.claim("cat-gpu", hostSelector={"matchLabels": {"infra-kind": rack.kind, CLASS: "gpu"}})
    found = wait_for(rack, {"gpu": (2, 1, 1, 0), "small": (1, 1, 0, 0), "HIDDEN": (1, 1, 0, 0)})
    # A booking ahead of the tenant's (spec.lease.start in an hour) is accepted on the other gpu host: booked 1.
    start = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    selector = {"matchLabels": {"infra-kind": rack.kind, CLASS: "gpu"}}
    rack.claim("cat-booked", hostSelector=selector, lease={"start": start, "duration": "1h"})
    found = wait_for(rack, BOOKED)
    assert found["status"]["booked"] == 1
    updated = found["status"]["lastUpdated"]
    assert updated >= status["lastUpdated"]

    # A second run over an unchanged fleet writes nothing, and lastUpdated stays.
    result = step(devenv, tmp_path)
    assert result["writes"] == 0 and not result["changed"], result
    assert set(result["api_calls"]) <= {"list", "get"}, result["api_calls"]
    assert catalog(rack)["status"]["lastUpdated"] == updated


def test_a_storm_of_host_changes_writes_the_catalog_once_per_interval(rack, controller, clients):
    wait_for(rack, BOOKED)
    writes: list[float] = []
    stop = threading.Event()
    api = rack.api("admin", "HostCatalog")

    def watch() -> None:
        """Every write of the catalog, by its resourceVersion read every 50 ms (writes 2 s apart are all seen; a
        write per host change, ~20 a second, would show as many more than the interval allows)."""
        seen = api.get(name="hosts", namespace=TENANT_A).metadata.resourceVersion
        while not stop.is_set():
            version = api.get(name="hosts", namespace=TENANT_A).metadata.resourceVersion
            if version != seen:
                seen = version
                writes.append(time.monotonic())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    hosts = rack.api("admin", "BareMetalHost")

    def label(value: str) -> None:
        body = {"metadata": {"labels": {CLASS: value}}}
        hosts.patch(body=body, name="s0", namespace=rack.namespace, content_type="application/merge-patch+json")

    flips = 61  # s0 moves between classes every 0.1 s for ~3 intervals, and ends as a gpu host
    runs_before = controller.metric("metalclaim_runs_total", playbook="catalog")
    try:
        began = time.monotonic()
        for index in range(flips):
            label("gpu" if index % 2 == 0 else "small")
            time.sleep(0.1)  # the storm's pace, not a wait: each change is a count change
        storm = time.monotonic() - began
        after = {"gpu": (3, 2, 1, 1), "HIDDEN": (1, 1, 0, 0)}
        eventually(lambda: classes(catalog(rack)) == after, REACTION, 0.2, "the catalog after the storm")
        settled = time.monotonic()
        eventually(lambda: time.monotonic() - settled > 2 * INTERVAL, REACTION, 0.2, "two more intervals")
    finally:
        stop.set()
        watcher.join()
    runs = controller.metric("metalclaim_runs_total", playbook="catalog") - runs_before
    seconds = [
        json.loads(line)["seconds"]
        for line in controller.output(full=True).splitlines()
        if '"event": "run"' in line and '"playbook": "catalog"' in line
    ]
    gaps = [b - a for a, b in itertools.pairwise(writes)]
    print(
        f"\n{flips} host changes in {storm:.1f} s: {runs:.0f} catalog runs"
        f" (each {min(seconds):.1f}-{max(seconds):.1f} s), {len(writes)} catalog writes,"
        f" gaps {[round(g, 1) for g in gaps]}"
    )
    # Once per interval at most (each run starts an interval after the first event since the last one), and a
    # write only when a run's count differs from the last written.
    assert 1 <= len(writes) <= runs <= storm / INTERVAL + 3, (writes, runs)
    assert all(gap >= INTERVAL * 0.8 for gap in gaps), gaps
    label("small")  # back as it was for the next tests
    wait_for(rack, BOOKED)


def test_the_tenant_cannot_write_a_catalog_nor_read_another_namespaces(rack, controller, clients):
    wait_for(rack, BOOKED)
    mine = rack.api("tenant-a", "HostCatalog")
    found = catalog(rack, identity="tenant-a")

    def refused(call) -> int:
        with pytest.raises(ApiException) as error:
            call()
        return error.value.status

    patch = {"status": {"free": 99}}
    merge = "application/merge-patch+json"
    attacks = {
        "create": lambda: mine.create(
            body={"apiVersion": METAL3, "kind": "HostCatalog", "metadata": {"name": "hosts", "namespace": TENANT_A}}
        ),
        "update": lambda: mine.replace(body=found, name="hosts", namespace=TENANT_A),
        "patch": lambda: mine.patch(body=patch, name="hosts", namespace=TENANT_A, content_type=merge),
        "patch status": lambda: mine.status.patch(body=patch, name="hosts", namespace=TENANT_A, content_type=merge),
        "delete": lambda: mine.delete(name="hosts", namespace=TENANT_A),
        "read tenant-b's": lambda: mine.get(name="hosts", namespace=TENANT_B),
        "list every namespace's": lambda: mine.get(),
    }
    assert {name: refused(call) for name, call in attacks.items()} == dict.fromkeys(attacks, 403)
    assert catalog(rack)["status"]["free"] == 3  # untouched
    # Tenant B cannot read tenant A's either.
    with pytest.raises(ApiException) as error:
        rack.api("tenant-b", "HostCatalog").get(name="hosts", namespace=TENANT_A)
    assert error.value.status == 403
    # Nothing in it names a host, the infra namespace or a BMC.
    text = json.dumps(found)
    hosts = rack.api("admin", "BareMetalHost").get(namespace=rack.namespace).to_dict()["items"]
    for host in hosts:
        assert host["metadata"]["name"] not in text.replace("HIDDEN", "")
        assert host["spec"]["bmc"]["address"] not in text
    assert rack.namespace not in text
    assert "cat-gpu" not in text and "cat-booked" not in text  # nor the claims holding or booking them


def test_infra_cannot_publish_a_label_that_names_hosts(rack, controller):
    body = policy_body(rack, public=("kubernetes.io/hostname",))
    body["metadata"]["name"] = "hostnames"
    with pytest.raises(ApiException) as error:
        rack.api("admin", "HostDeployPolicy").create(body=body)
    assert error.value.status == 422 and "kubernetes.io/hostname" in error.value.body


def test_a_policy_that_no_longer_admits_the_namespace_withdraws_its_catalog(rack, controller):
    wait_for(rack, BOOKED)
    rack.api("admin", "HostDeployPolicy").patch(
        body={"spec": {"hostclaimNamespaces": {"names": [TENANT_B]}}},
        name="catalog",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    eventually(lambda: catalog(rack) is None, REACTION, 0.2, "tenant A's catalog withdrawn")
    moved = eventually(lambda: counted(catalog(rack, TENANT_B)), REACTION, 0.2, "tenant B's catalog counted")
    assert classes(moved)["gpu"] == (2, 1, 1, 1)  # tenant A's claim still holds its host, its booking stands
    assert classes(catalog(rack, TENANT_B, identity="tenant-b")) == classes(moved)
    rack.api("admin", "HostDeployPolicy").delete(name="catalog", namespace=rack.namespace)
    eventually(lambda: catalog(rack, TENANT_B) is None, REACTION, 0.2, "tenant B's catalog withdrawn")


def test_no_value_tells_another_host_a_bmc_a_mac_or_another_tenant(rack, controller):
    """Issue 40's catalog leak, as tenant B reads its catalog: label values holding the BMC's IP (the rack's BMCs are
    at 127.0.0.1), the boot MAC with dashes, another host's name and another tenant's namespace were all shown in
    clear (only the host's own name, a full BMC URL and a colon MAC were compared); each is HIDDEN now."""
    leaks = {"leak-ip": "127.0.0.1", "leak-mac": "52-54-00-ab-cd-ef", "leak-host": "g1", "leak-tenant": TENANT_A}
    for name, value in leaks.items():
        rack.host(name, labels={CLASS: value})
    rack.api("admin", "BareMetalHost").patch(
        body={"spec": {"bootMACAddress": "52:54:00:ab:cd:ef"}},
        name="leak-mac",
        namespace=rack.namespace,
        content_type="application/merge-patch+json",
    )
    body = policy_body(rack, names=(TENANT_A, TENANT_B))
    body["metadata"]["name"] = "leaks"
    rack.api("admin", "HostDeployPolicy").create(body=body)
    try:
        found = eventually(
            lambda: (
                (c := catalog(rack, TENANT_B, identity="tenant-b")) and classes(c).get("HIDDEN", (0,))[0] == 5 and c
            ),
            REACTION,
            0.2,
            f"tenant B's catalog with 5 hidden values\n{controller.output()}",
        )
        shown = set(classes(found))
        assert shown == {"gpu", "small", "HIDDEN"}, shown  # odd (its own name) and the four leaks
        text = json.dumps(found["status"])
        assert "127.0.0.1" not in text and "52-54-00" not in text and TENANT_A not in text
    finally:
        rack.api("admin", "HostDeployPolicy").delete(name="leaks", namespace=rack.namespace)
        eventually(lambda: catalog(rack, TENANT_B) is None, REACTION, 0.2, "tenant B's catalog withdrawn")
