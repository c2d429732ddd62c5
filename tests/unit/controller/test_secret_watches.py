"""Per-namespace Secret watches: which namespaces are watched (pure), and the controller starting and stopping them.

The watches here are stand-ins (no API server): tests/integration/test_controller_secret_watches.py runs them for
real.
"""

from __future__ import annotations

import threading

import pytest

from metalclaim.controller import manager as manager_module
from metalclaim.controller import mapper
from metalclaim.controller.manager import Controller, Settings
from metalclaim.controller.reflector import Store


def claim(namespace: str, name: str, kind: str | None = None, rv: str = "1") -> dict:
    spec = {"userData": {"name": "ud"}}
    if kind:
        spec["kind"] = kind
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"{namespace}/{name}", "resourceVersion": rv},
        "spec": spec,
    }


def served_kinds(*kinds):
    return lambda key: key is not None and mapper.CLAIM_KIND_OF_KEY[key[0]] in kinds


# -- the plan (pure) ------------------------------------------------------------------------------


def test_a_namespace_is_watched_while_it_holds_a_served_claim_and_only_then():
    claims = [claim("a", "c1"), claim("a", "c2"), claim("b", "c1"), claim("c", "r1", kind="remote")]
    start, stop = mapper.secret_watch_plan({"b", "gone"}, claims, served_kinds("baremetal"))
    assert (start, stop) == ({"a"}, {"gone"})  # "c" holds a remote claim only: another controller's
    start, stop = mapper.secret_watch_plan(set(), claims, served_kinds("baremetal", "remote"))
    assert (start, stop) == ({"a", "b", "c"}, set())
    assert mapper.secret_watch_plan({"a", "b"}, [], served_kinds("baremetal")) == (set(), {"a", "b"})


def test_a_claim_kind_no_playbook_serves_needs_no_watch():
    assert mapper.secret_watch_plan(set(), [claim("a", "v1", kind="vm")], lambda key: key is not None) == (
        set(),
        set(),
    )


# -- the controller's watches ---------------------------------------------------------------------


class FakeReflector:
    """A Secret watch as the controller starts it: records its start; ends when its stop flag is set."""

    def __init__(self, api_client, *, namespace, store, stop, **_options):
        self.namespace, self.store, self.stop = namespace, store, stop
        self.started = False

    def start(self):
        self.started = True

    def is_alive(self):
        return self.started and not self.stop.is_set()


@pytest.fixture
def controller(monkeypatch):
    monkeypatch.setattr(manager_module, "Reflector", FakeReflector)
    return Controller(Settings(), api_client=None)


def add(controller: Controller, obj: dict) -> None:
    old, new = controller.stores["HostClaim"].apply("ADDED", obj)
    controller.handlers.on_claim(old, new)


def delete(controller: Controller, obj: dict) -> None:
    old, _new = controller.stores["HostClaim"].apply("DELETED", obj)
    controller.handlers.on_claim(old, None)


def metric(controller: Controller, name: str) -> float:
    return controller.metrics.registry.get_sample_value(name)


def test_the_watch_of_a_namespace_stops_with_its_last_claim_and_starts_again_with_the_next(controller):
    c1, c2 = claim("tenant-a", "c1"), claim("tenant-a", "c2")
    add(controller, c1)
    first = controller.handlers.secret_reflectors["tenant-a"]
    assert first.started and metric(controller, "metalclaim_secret_watches") == 1
    add(controller, c2)
    assert controller.handlers.secret_reflectors["tenant-a"] is first  # one watch per namespace
    first.store.apply("ADDED", {"metadata": {"namespace": "tenant-a", "name": "ud", "resourceVersion": "5"}})
    assert metric(controller, "metalclaim_secrets_cached") == 1

    delete(controller, c1)
    assert controller.handlers.secret_reflectors == {"tenant-a": first} and not first.stop.is_set()
    delete(controller, c2)  # the last one: the watch ends, its Secrets with it
    assert controller.handlers.secret_reflectors == {} and first.stop.is_set()
    assert metric(controller, "metalclaim_secret_watches") == 0
    assert metric(controller, "metalclaim_secrets_cached") == 0
    assert not controller.stop.is_set()  # the controller goes on

    add(controller, c1)
    again = controller.handlers.secret_reflectors["tenant-a"]
    assert again is not first and again.started and not again.stop.is_set()
    assert len(again.store) == 0  # a fresh Store: the namespace is listed again


def test_each_namespace_has_its_own_store_so_a_relist_keeps_the_others_secrets(controller):
    add(controller, claim("tenant-a", "c1"))
    add(controller, claim("tenant-b", "c1"))
    a, b = controller.handlers.secret_reflectors["tenant-a"], controller.handlers.secret_reflectors["tenant-b"]
    assert isinstance(a.store, Store) and a.store is not b.store
    a.store.apply("ADDED", {"metadata": {"namespace": "tenant-a", "name": "ud", "resourceVersion": "5"}})
    # tenant-b's watch (re)lists: its store is replaced by what tenant-b holds, tenant-a's Secret is not deleted.
    changes = b.store.replace_all([{"metadata": {"namespace": "tenant-b", "name": "ud", "resourceVersion": "6"}}])
    assert [new["metadata"]["namespace"] for _old, new in changes] == ["tenant-b"]
    assert ("tenant-a", "ud") in a.store


def test_claims_of_kinds_or_namespaces_not_served_start_no_watch(monkeypatch):
    monkeypatch.setattr(manager_module, "Reflector", FakeReflector)
    controller = Controller(Settings(namespace_selector="metalclaim.io/tenant=yes"), api_client=None)
    namespaces = controller.stores["Namespace"]
    add(controller, claim("tenant-a", "v1", kind="vm"))  # no playbook serves it
    add(controller, claim("tenant-a", "r1", kind="remote"))  # --kinds baremetal (the default)
    add(controller, claim("tenant-a", "c1"))  # a namespace the selector does not (yet) select
    assert controller.handlers.secret_reflectors == {}

    selected = {"metadata": {"name": "tenant-a", "resourceVersion": "1", "labels": {"metalclaim.io/tenant": "yes"}}}
    controller.handlers.on_namespace(*namespaces.apply("ADDED", selected))
    watch = controller.handlers.secret_reflectors["tenant-a"]
    old, _ = namespaces.apply("DELETED", selected)  # its label removed: out of the selector's watch
    controller.handlers.on_namespace(old, None)
    assert controller.handlers.secret_reflectors == {} and watch.stop.is_set()

    # A side that serves no claims, or told not to watch Secrets (--watch-secrets=false): none either.
    for settings in (Settings(watch_secrets=False), Settings(controllers=("tenants",))):
        other = Controller(settings, api_client=None)
        add(other, claim("tenant-a", "c1"))
        assert other.handlers.secret_reflectors == {}


def test_a_resync_stops_watches_whose_claims_went_unseen_and_shutdown_stops_every_watch(controller):
    add(controller, claim("tenant-a", "c1"))
    add(controller, claim("tenant-b", "c1"))
    a = controller.handlers.secret_reflectors["tenant-a"]
    controller.stores["HostClaim"].apply("DELETED", claim("tenant-a", "c1"))  # no event reached the controller
    controller.handlers.sync_secret_watches()
    assert set(controller.handlers.secret_reflectors) == {"tenant-b"} and a.stop.is_set()
    b = controller.handlers.secret_reflectors["tenant-b"]
    controller.shutdown()
    assert b.stop.is_set()
    add(controller, claim("tenant-c", "c1"))  # after the stop: no new watch
    assert "tenant-c" not in controller.handlers.secret_reflectors


def test_watches_started_and_stopped_from_several_threads_end_as_the_claims_say(controller):
    """The claim reflector, the namespace reflector and the resync all call in: the last plan wins, no watch leaks."""
    claims = [claim(f"ns-{i % 5}", f"c{i}") for i in range(50)]

    def churn(offset: int):
        for obj in claims[offset::2]:
            add(controller, obj)
            controller.handlers.sync_secret_watches()
        for obj in claims[offset::2]:
            delete(controller, obj)

    threads = [threading.Thread(target=churn, args=(offset,)) for offset in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert controller.handlers.secret_reflectors == {}
    assert metric(controller, "metalclaim_secret_watches") == 0
