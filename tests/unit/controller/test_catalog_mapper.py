"""HostCatalog events -> keys: a host counted differently, a publishing policy or a namespace's labels wake the catalogs
of the namespaces concerned; the handlers queue them --catalog-interval late, once however many events come."""

from __future__ import annotations

import pytest

from metalclaim.controller import manager as manager_module
from metalclaim.controller import mapper
from metalclaim.controller.manager import Controller, Settings
from metalclaim.controller.workqueue import WorkQueue

CLASS = "example.com/hostclass"


def policy(names=("team-a",), public=(CLASS,), namespace="infra") -> dict:
    spec = {"hostclaimNamespaces": {"names": list(names)}}
    if public is not None:
        spec["catalog"] = {"publicLabels": list(public)}
    return {"metadata": {"namespace": namespace, "name": "p"}, "spec": spec}


def host(state="available", labels=None, consumer=None, namespace="infra", **meta) -> dict:
    spec = {"consumerRef": {"kind": "HostClaim", "namespace": "team-a", "name": consumer}} if consumer else {}
    metadata = {"namespace": namespace, "name": "h1", "uid": "u1", "labels": labels or {}, **meta}
    return {"metadata": metadata, "spec": spec, "status": {"provisioning": {"state": state}}}


def namespace(name="team-a", labels=None, annotations=None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}}


NAMESPACES = {"team-a": {}, "team-b": {}}
KEY_A = ("catalog", "team-a", "hosts")


def test_a_host_counted_differently_wakes_the_catalogs_its_namespace_publishes_to():
    policies = [policy()]
    assert mapper.host_changed_for_catalogs(None, host(), policies, NAMESPACES).keys == [KEY_A]
    assert mapper.host_changed_for_catalogs(host(), host(consumer="c"), policies, NAMESPACES).keys == [KEY_A]
    assert mapper.host_changed_for_catalogs(host(), host(labels={CLASS: "gpu"}), policies, NAMESPACES).keys == [KEY_A]
    # What a catalog does not count (an annotation of nobody's, the resourceVersion) wakes nothing.
    assert mapper.host_changed_for_catalogs(host(), host(annotations={"x": "y"}), policies, NAMESPACES).keys == []
    # A host of an infra namespace that publishes nothing, or whose policy publishes no catalog: nothing.
    assert mapper.host_changed_for_catalogs(None, host(namespace="other"), policies, NAMESPACES).keys == []
    assert mapper.host_changed_for_catalogs(None, host(), [policy(public=None)], NAMESPACES).keys == []


def test_a_policy_wakes_the_catalogs_it_published_to_and_publishes_to():
    before, after = policy(names=("team-a",)), policy(names=("team-b",))
    assert mapper.policy_changed_for_catalogs(before, after, NAMESPACES).keys == [
        ("catalog", "team-a", "hosts"),  # to be deleted by the run
        ("catalog", "team-b", "hosts"),
    ]
    assert mapper.policy_changed_for_catalogs(before, before, NAMESPACES).keys == []
    assert mapper.policy_changed_for_catalogs(before, None, NAMESPACES).keys == [KEY_A]
    assert mapper.policy_changed_for_catalogs(policy(public=None), policy(public=None), NAMESPACES).keys == []


def test_a_namespace_whose_labels_or_pools_change_wakes_its_own_catalog():
    by_label = [
        {
            "metadata": {"namespace": "infra", "name": "p"},
            "spec": {
                "hostclaimNamespaces": {"hasLabels": [{"name": "tier", "value": "gold"}]},
                "catalog": {"publicLabels": [CLASS]},
            },
        }
    ]
    gold, plain = namespace(labels={"tier": "gold"}), namespace()
    assert mapper.namespace_changed_for_catalogs(plain, gold, by_label).keys == [KEY_A]  # admitted now
    assert mapper.namespace_changed_for_catalogs(gold, plain, by_label).keys == [KEY_A]  # its catalog goes
    assert mapper.namespace_changed_for_catalogs(plain, plain, by_label).keys == []
    pools = namespace(labels={"tier": "gold"}, annotations={"tenancy.metalclaim.io/host-pools": "{}"})
    assert mapper.namespace_changed_for_catalogs(gold, pools, by_label).keys == [KEY_A]
    assert mapper.namespace_changed_for_catalogs(gold, None, by_label).keys == []  # gone with its namespace


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def controller(monkeypatch):
    class Idle:
        def __init__(self, *args, **kwargs):
            pass

    monkeypatch.setattr(manager_module, "Reflector", Idle)
    controller = Controller(Settings(catalog_interval=10.0), api_client=None)
    clock = Clock()
    controller.handlers.queue = WorkQueue(clock=clock)
    controller.clock = clock
    return controller


def test_a_storm_of_host_events_queues_each_catalog_once_ready_an_interval_after_the_first(controller):
    stores, on = controller.stores, controller.handlers
    for name in ("team-a", "team-b", "team-c"):
        stores["Namespace"].apply("ADDED", namespace(name))
    stores["HostDeployPolicy"].apply("ADDED", policy(names=("team-a", "team-b")))
    queue, clock = on.queue, controller.clock
    previous = None
    for i in range(200):  # 200 events over 5 s: each changes what a catalog counts
        current = host(labels={CLASS: f"c{i % 7}"}, consumer="c" if i % 2 else None)
        on.on_host(previous, current)
        previous = current
        clock.now += 0.025
    catalogs = sorted(key for key in queue._queued if key[0] == "catalog")
    assert catalogs == [("catalog", "team-a", "hosts"), ("catalog", "team-b", "hosts")]
    assert queue.get_batch(timeout=0, quiet=0, group=lambda k: k[0], accept=lambda k: k[0] == "catalog") == []
    clock.now = 1000.0 + 10.0  # the first event's time plus the interval
    batch = queue.get_batch(timeout=0, quiet=0, group=lambda k: k[0], accept=lambda k: k[0] == "catalog")
    assert sorted(batch) == catalogs


def test_no_catalog_keys_without_the_claims_side(monkeypatch):
    class Idle:
        def __init__(self, *args, **kwargs):
            pass

    monkeypatch.setattr(manager_module, "Reflector", Idle)
    controller = Controller(Settings(controllers=("provisioner",), catalog_interval=10.0), api_client=None)
    controller.stores["Namespace"].apply("ADDED", namespace())
    controller.stores["HostDeployPolicy"].apply("ADDED", policy())
    controller.handlers.on_host(None, host())
    assert not [key for key in controller.handlers.queue._queued if key[0] == "catalog"]
