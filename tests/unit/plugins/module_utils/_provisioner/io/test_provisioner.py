"""Pure helpers of the provisioner's edge."""

from __future__ import annotations

import base64
import collections
import copy
import json
import os
import threading

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import provisioner
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.provisioner import (
    Connections,
    Fleet,
    HostKube,
    Options,
    provision_hosts,
    without_tokens,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import machine
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.settling import Settling

TOKEN = "h128PKc4zqNoP_2WL5CB6OJ-3p569jNRQfcPOl2Sti0"


def test_media_tokens_never_reach_an_error_message():
    message = f"inserting http://127.0.0.1:1/media/{TOKEN}/config-drive.iso into virtual media config: HTTP 500"
    scrubbed = without_tokens(message)
    assert TOKEN not in scrubbed
    assert "/media/h128PK.../config-drive.iso" in scrubbed


# -- the wait loop's bookkeeping ---------------------------------------------------------


def _result(name, state, requeue_after=None, requests=0, changed=False, previous=None, api_calls=None):
    return {
        "namespace": "rack",
        "name": name,
        "previous": previous or state,
        "state": state,
        "requeue_after": requeue_after,
        "redfish_requests": requests,
        "changed": changed,
        "api_calls": api_calls or {},
    }


def test_only_hosts_whose_requeue_has_passed_are_stepped_again():
    settling = Settling()
    settling.record(
        [
            _result("a", "provisioning", 2, 5, True, "available", {"get Secret": 1, "patch BareMetalHost": 1}),
            _result("b", "available"),
            _result("c", "x", 10),
        ],
        None,
        moment=100.0,
    )
    assert settling.next_at() == 102.0
    assert settling.due_now(101.9) == []
    assert settling.due_now(102.0) == [{"namespace": "rack", "name": "a"}]  # b settled, c not yet due
    again = _result("a", "provisioned", None, 3, False, "provisioning", {"get BareMetalHost": 1})
    settling.record([again], settling.due_now(102.0), 102.5)
    assert settling.next_at() == 110.0
    assert settling.requeue_after(105.0) == 5.0
    by_name = {host["name"]: host for host in settling.hosts()}
    # The run's figures: the state before the run, requests and changes over all its steps.
    assert by_name["a"] == _result(
        "a",
        "provisioned",
        None,
        8,
        True,
        "available",
        {"get BareMetalHost": 1, "get Secret": 1, "patch BareMetalHost": 1},
    )
    assert [host["name"] for host in settling.hosts()] == ["a", "b", "c"]


def test_a_host_that_vanished_between_steps_is_not_waited_for():
    settling = Settling()
    settling.record([_result("a", "deleting", 1)], None, moment=0.0)
    settling.record([], [{"namespace": "rack", "name": "a"}], moment=1.0)
    assert settling.next_at() is None and settling.requeue_after(1.0) is None


# -- what a run reads and writes (a fake API server and fake BMCs) -----------------------

T0 = "2026-11-23T10:00:00Z"
LIVE = {"url": "http://127.0.0.1:3/live.iso", "format": "live-iso"}


def _merge(target: dict, patch: dict) -> None:
    """A JSON merge patch: None removes a field."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeKube:
    """An API server in a dict: resourceVersions, compare-and-swap, requests counted like Kube.calls."""

    def __init__(self):
        self.objects: dict = {}
        self.calls: collections.Counter = collections.Counter()
        self.log: list[str] = []
        self._version = 0
        self._lock = threading.Lock()

    def writes(self) -> int:
        return sum(n for verb, n in self.calls.items() if verb not in ("list", "get"))

    def add(self, obj: dict) -> dict:
        return self._store(copy.deepcopy(obj))

    def _store(self, obj: dict) -> dict:
        with self._lock:
            self._version += 1
            meta = obj["metadata"]
            meta["resourceVersion"] = str(self._version)
            meta.setdefault("uid", f"uid-{meta['name']}")
            self.objects[(obj["kind"], meta.get("namespace"), meta["name"])] = obj
        return copy.deepcopy(obj)

    def _count(self, verb: str, kind: str) -> None:
        with self._lock:
            self.calls[verb] += 1
            self.log.append(f"{verb} {kind}")

    def list(self, api_version, kind, namespace=None, label_selector=None):
        self._count("list", kind)
        return [copy.deepcopy(o) for (k, ns, _n), o in sorted(self.objects.items()) if k == kind]

    def get(self, api_version, kind, name, namespace=None):
        self._count("get", kind)
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def create(self, obj):
        self._count("create", obj["kind"])
        meta = obj["metadata"]
        if (obj["kind"], meta.get("namespace"), meta["name"]) in self.objects:
            raise AlreadyExistsError(f"{obj['kind']} {meta['name']} exists")
        return self._store(copy.deepcopy(obj))

    def _current(self, obj):
        meta = obj["metadata"]
        current = self.objects.get((obj["kind"], meta.get("namespace"), meta["name"]))
        if current is None or current["metadata"]["resourceVersion"] != meta["resourceVersion"]:
            raise ConflictError(f"{obj['kind']} {meta['name']} changed")
        return current

    def replace(self, obj):
        self._count("replace", obj["kind"])
        current = self._current(obj)
        updated = copy.deepcopy(obj)
        updated.pop("status", None)  # the main resource ignores status
        if "status" in current:
            updated["status"] = copy.deepcopy(current["status"])
        if updated["metadata"].get("deletionTimestamp") and not updated["metadata"].get("finalizers"):
            del self.objects[(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])]
            return updated
        return self._store(updated)

    def patch_status(self, obj, status):
        self._count("patch", obj["kind"])
        updated = copy.deepcopy(self._current(obj))
        updated["status"] = updated.get("status") or {}
        _merge(updated["status"], status)
        return self._store(updated)

    def delete(self, api_version, kind, name, namespace=None):
        self._count("delete", kind)
        self.objects.pop((kind, namespace, name), None)


class FakeBmc:
    """A Redfish system in memory, as RedfishClient shows it."""

    systems: dict = {}  # address -> state, shared by the clients of one test

    def __init__(self, address, username, password, **_options):
        self.state = FakeBmc.systems.setdefault(
            address.root_url + (address.system_path or ""),
            {"power": "Off", "boot": {"target": "None", "enabled": "Disabled"}, "media": {}},
        )
        self.requests = 0
        self.password = password

    def _request(self):
        self.requests += 1
        if self.password != "s3cret":
            raise provisioner.RedfishError("credentials", "the BMC rejected the credentials (HTTP 401)", 401)

    def probe(self):
        self._request()

    def power_state(self):
        self._request()
        return self.state["power"]

    def set_power(self, action):
        self._request()
        self.state["power"] = "On" if action in ("On", "ForceRestart") else "Off"

    def boot_override(self):
        self._request()
        return dict(self.state["boot"])

    def set_boot_once(self, target="Cd", mode="UEFI"):
        self._request()
        self.state["boot"] = {"target": target, "enabled": "Once"}

    def clear_boot_override(self):
        self._request()
        self.state["boot"] = {"target": "None", "enabled": "Disabled"}

    def media(self, device="cd"):
        self._request()
        return dict(self.state["media"].get(device) or {"inserted": False, "image": None})

    def insert_media(self, url, device="cd"):
        self._request()
        self.state["media"][device] = {"inserted": True, "image": url}

    def eject_media(self, device="cd"):
        self._request()
        self.state["media"][device] = {"inserted": False, "image": None}

    def inventory(self):
        self._request()
        return {"nics": [{"mac": "52:54:00:00:00:01", "name": "eth0"}], "cpu": {"count": 2}, "ramMebibytes": 2048}

    def close(self):
        pass


@pytest.fixture
def fake_bmcs(monkeypatch):
    FakeBmc.systems = {}
    monkeypatch.setattr(provisioner, "RedfishClient", FakeBmc)
    return FakeBmc.systems


def _secret(name: str, password: str = "s3cret") -> dict:
    data = {"username": base64.b64encode(b"admin").decode(), "password": base64.b64encode(password.encode()).decode()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "rack"}, "data": data}


def _bmh(name: str, system: int, annotations: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": "rack", "annotations": annotations or {}},
        "spec": {
            "online": False,
            "bmc": {
                "address": f"redfish+http://127.0.0.1:8000/redfish/v1/Systems/{system}",
                "credentialsName": f"{name}-bmc",
            },
            **spec,
        },
    }


def _rack(kube: FakeKube, *hosts: dict) -> None:
    # The namespace opts in to this provisioner (machine.is_ours).
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "rack", "labels": {machine.PROVISIONER_ANNOTATION: machine.OURS}},
        }
    )
    for host in hosts:
        kube.add(_secret(f"{host['metadata']['name']}-bmc"))
        kube.add(host)


def _run(kube, wanted=None, fleet=None, connections=None, check_mode=False) -> dict:
    options = Options(settings=machine.Settings(backoff_base=1, backoff_cap=4), workers=4)
    return provision_hosts(kube, wanted, None, options, T0, check_mode, connections, fleet)


def _settle(kube, steps: int = 12) -> None:
    """Step a run's hosts until none wants another step (a `wait` run without the sleeping)."""
    options = Options(settings=machine.Settings())
    fleet, connections, wanted = Fleet(), Connections(options), None
    for _step in range(steps):
        result = _run(kube, wanted, fleet, connections)
        wanted = [
            {"namespace": h["namespace"], "name": h["name"]}
            for h in result["hosts"]
            if h.get("requeue_after") is not None
        ]
        if not wanted:
            return
    raise AssertionError(f"not settled: {result['hosts']}")


def _patch_host(kube: FakeKube, name: str, **meta) -> None:
    host = kube.objects[("BareMetalHost", "rack", name)]
    for field, value in meta.items():
        host["metadata"][field] = value
    kube._store(host)


def test_a_rerun_on_settled_hosts_writes_nothing(fake_bmcs):
    kube = FakeKube()
    _rack(
        kube,
        _bmh("plain", 1),
        _bmh("no-hardware-data", 2),
        _bmh("paused-new", 3, annotations={machine.PAUSED_ANNOTATION: ""}),  # paused before registering
        _bmh("paused", 4),
        _bmh("detached", 5),
        _bmh("live", 6, online=True, image=LIVE),
        _bmh("foreign", 7, annotations={machine.PROVISIONER_ANNOTATION: "metal3"}),
    )
    _settle(kube)
    kube.delete(API_VERSION, "HardwareData", "no-hardware-data", "rack")
    _patch_host(kube, "paused", annotations={machine.PAUSED_ANNOTATION: ""})
    _patch_host(kube, "detached", annotations={machine.DETACHED_ANNOTATION: ""})
    _settle(kube)  # detaching is written once (operationalStatus: detached)
    states = {name: machine.state_of(kube.objects[("BareMetalHost", "rack", name)]) for name in ("plain", "live")}
    assert states == {"plain": machine.AVAILABLE, "live": machine.PROVISIONED}

    kube.calls.clear()
    result = _run(kube)
    assert kube.writes() == 0, kube.log
    assert not result["changed"]
    assert kube.calls == {"list": 2, "get": 3}  # hosts and namespaces; the BMC Secrets of three hosts
    calls = {host["name"]: host["api_calls"] for host in result["hosts"]}
    assert calls == {
        "plain": {"get Secret": 1},
        "no-hardware-data": {"get Secret": 1},
        "live": {"get Secret": 1},
        "paused-new": {},  # paused and detached hosts need no BMC, hence no Secret
        "paused": {},
        "detached": {},
    }
    assert ("BareMetalHost", "rack", "foreign") in kube.objects
    assert "status" not in kube.objects[("BareMetalHost", "rack", "foreign")]
    assert "status" not in kube.objects[("BareMetalHost", "rack", "paused-new")]  # never written, not even once


def test_check_mode_reads_and_writes_nothing(fake_bmcs):
    kube = FakeKube()
    _rack(kube, _bmh("new", 1))
    result = _run(kube, check_mode=True)
    assert result["changed"] and result["hosts"][0]["state"] == machine.REGISTERING
    assert kube.writes() == 0


def test_later_steps_read_only_the_due_hosts_and_follow_their_own_writes(fake_bmcs):
    kube = FakeKube()
    _rack(kube, *[_bmh(f"h{index}", index) for index in range(4)])
    fleet, connections = Fleet(), Connections(Options(settings=machine.Settings()))
    first = _run(kube, None, fleet, connections)
    assert [h["state"] for h in first["hosts"]] == [machine.REGISTERING] * 4
    assert kube.calls["list"] == 2
    # One host due: one GET of it, no list; its Secret is not read again for its kept connection.
    kube.calls.clear()
    kube.log.clear()
    step = _run(kube, [{"namespace": "rack", "name": "h0"}], fleet, connections)
    assert kube.calls["list"] == 0
    assert step["hosts"][0]["state"] == machine.INSPECTING  # probed: the Secret read, the connection kept
    assert step["hosts"][0]["api_calls"]["get BareMetalHost"] == 1
    assert step["hosts"][0]["api_calls"]["get Secret"] == 1
    kube.calls.clear()
    step = _run(kube, [{"namespace": "rack", "name": "h0"}], fleet, connections)  # inspecting -> available
    assert step["hosts"][0]["state"] == machine.AVAILABLE
    assert kube.calls["list"] == 0 and step["hosts"][0]["api_calls"].get("get Secret") is None
    # Three of four due: one LIST instead of three GETs.
    kube.calls.clear()
    due = [{"namespace": "rack", "name": f"h{index}"} for index in (1, 2, 3)]
    step = _run(kube, due, fleet, connections)
    assert kube.calls["list"] == 1 and all("get BareMetalHost" not in h["api_calls"] for h in step["hosts"])
    # What the run wrote is what it holds: the next step's write is not a conflict.
    assert not any(h.get("conflict") for h in step["hosts"])
    connections.close()


def test_a_host_changed_by_someone_else_is_read_again_when_due(fake_bmcs):
    kube = FakeKube()
    _rack(kube, _bmh("h0", 0), _bmh("h1", 1), _bmh("h2", 2))
    _settle(kube)
    fleet, connections = Fleet(), Connections(Options(settings=machine.Settings()))
    _run(kube, None, fleet, connections)
    host = kube.objects[("BareMetalHost", "rack", "h0")]
    host["spec"]["online"] = True  # the claim layer, between two steps
    kube._store(host)
    step = _run(kube, [{"namespace": "rack", "name": "h0"}], fleet, connections)
    assert step["hosts"][0]["actions"] == ["power On"] and not step["hosts"][0].get("conflict")
    connections.close()


class _Secrets:
    """Only Secrets, counted."""

    def __init__(self):
        self.reads = 0
        self.password = "s3cret"

    def get(self, api_version, kind, name, namespace=None):
        self.reads += 1
        secret = _secret(name, self.password)
        secret["metadata"]["resourceVersion"] = str(self.reads)
        return secret


def _ctx():
    return machine.Context(now=T0)


def test_a_kept_connection_keeps_its_credentials_and_a_failed_one_reads_the_secret_again(fake_bmcs):
    connections = Connections(Options(settings=machine.Settings()))
    secrets = _Secrets()
    host = _bmh("h0", 1)
    first = connections.open(secrets, host, _ctx())
    ctx = _ctx()
    again = connections.open(secrets, host, ctx)
    assert again.client is first.client and secrets.reads == 1
    assert ctx.credentials_version == "1"  # the version the connection was opened with
    moved = _bmh("h0", 2)
    assert connections.open(secrets, moved, _ctx()).client is not first.client and secrets.reads == 2
    renamed = _bmh("h0", 1)
    renamed["spec"]["bmc"]["credentialsName"] = "other"
    assert connections.open(secrets, renamed, _ctx()).client is not first.client and secrets.reads == 3
    again.failed()
    assert connections.open(secrets, host, _ctx()).client is not first.client and secrets.reads == 4
    connections.close()


class _RotatedSecrets(_Secrets):
    """Secrets whose version changes only when rotated (or that go missing)."""

    def __init__(self):
        super().__init__()
        self.version, self.gone = "7", False

    def get(self, api_version, kind, name, namespace=None):
        self.reads += 1
        if self.gone:
            return None
        secret = _secret(name, self.password)
        secret["metadata"]["resourceVersion"] = self.version
        return secret


def test_a_connection_kept_across_runs_is_reused_only_while_its_secret_is_the_same_version(fake_bmcs):
    """A standby run serving many batches (begin_run at each): the Secret is read again once per run; the login and
    service root are kept while it is the same version; a rotated or deleted Secret never reuses the old one."""
    connections = Connections(Options(settings=machine.Settings()))
    secrets = _RotatedSecrets()
    host = _bmh("h0", 1)
    first = connections.open(secrets, host, _ctx())
    connections.begin_run()
    ctx = _ctx()
    assert connections.open(secrets, host, ctx).client is first.client and secrets.reads == 2
    assert ctx.credentials_version == "7"
    assert connections.open(secrets, host, _ctx()).client is first.client and secrets.reads == 2, "once per run"
    secrets.version, secrets.password = "8", "rotated"
    connections.begin_run()
    ctx = _ctx()
    rotated = connections.open(secrets, host, ctx)
    assert rotated.client is not first.client and ctx.credentials_version == "8"
    assert rotated.client.password == "rotated"
    secrets.gone = True
    connections.begin_run()
    ctx = _ctx()
    assert connections.open(secrets, host, ctx) is None and "not found" in ctx.credentials_problem
    secrets.gone = False
    assert connections.open(secrets, host, _ctx()).client is not rotated.client, "the deleted Secret's is dropped"
    connections.close()


def test_a_missing_secret_is_read_again_at_the_next_step(fake_bmcs):
    class Missing:
        reads = 0

        def get(self, *args, **kwargs):
            Missing.reads += 1

    connections = Connections(Options(settings=machine.Settings()))
    ctx = _ctx()
    assert connections.open(Missing(), _bmh("h0", 1), ctx) is None
    assert "not found" in ctx.credentials_problem
    assert connections.open(Missing(), _bmh("h0", 1), _ctx()) is None and Missing.reads == 2


def test_host_kube_counts_by_verb_and_kind():
    kube = FakeKube()
    view = HostKube(kube)
    view.create({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "rack"}})
    view.get("v1", "Secret", "s", "rack")
    view.get("v1", "Secret", "s", "rack")
    assert view.counts() == {"create Event": 1, "get Secret": 2}
    assert kube.calls == {"create": 1, "get": 2}


# -- the module's edges -------------------------------------------------------------------


def test_pycdlib_is_needed_only_with_a_deploy_iso(monkeypatch):
    monkeypatch.setattr(provisioner, "SUSHY_IMPORT_ERROR", None)
    monkeypatch.setattr(provisioner, "PYCDLIB_IMPORT_ERROR", "Traceback: No module named 'pycdlib'")
    assert provisioner.libraries({"deploy_iso_url": None}) == {"sushy": None, "pycdlib": None}
    needed = provisioner.libraries({"deploy_iso_url": "http://127.0.0.1:1/writer.iso"})
    assert needed["pycdlib"].startswith("Traceback")


def test_slot_and_worker_counts_below_one_are_refused():
    assert provisioner.validate({"max_concurrent": 1, "workers": 1}) is None
    assert provisioner.validate({"max_concurrent": 0, "workers": 1}) == "max_concurrent must be at least 1"
    assert provisioner.validate({"max_concurrent": 2, "workers": 0}) == "workers must be at least 1"


def test_api_calls_name_every_verb():
    assert provisioner.api_calls(None) == dict.fromkeys(provisioner.API_VERBS, 0)
    kube = FakeKube()
    kube.calls.update(list=2, get=3)
    assert provisioner.api_calls(kube) == {"list": 2, "get": 3, "create": 0, "replace": 0, "patch": 0, "delete": 0}


# -- --diff ---------------------------------------------------------------------------------


class _Module:
    """What provision() uses of an AnsibleModule."""

    def __init__(self, check_mode=False, diff=False, **params):
        self.check_mode = check_mode
        self._diff = diff
        self.params = {
            "hosts": None,
            "namespaces": None,
            "deploy_iso_url": None,
            "media_dir": None,
            "media_url": None,
            "max_concurrent": 20,
            "power_off_timeout": 60,
            "callback_timeout": 1800,
            "callback_events": False,
            "power_poll_interval": 60,
            "backoff_base": 10,
            "backoff_cap": 600,
            "redfish_timeout": 10,
            "redfish_retries": 1,
            "wait": 0,
            "workers": 4,
            **params,
        }


def _copy_of(kube: FakeKube) -> FakeKube:
    twin = FakeKube()
    twin.objects = copy.deepcopy(kube.objects)
    twin._version = kube._version
    return twin


def test_diff_shows_each_written_hosts_change_at_no_extra_request(fake_bmcs):
    kube = FakeKube()
    _rack(kube, _bmh("new", 1), _bmh("paused", 2, annotations={machine.PAUSED_ANNOTATION: ""}))
    plain = provisioner.provision(_Module(), _copy_of(kube))
    assert "diff" not in plain
    result = provisioner.provision(_Module(diff=True), kube)
    assert result["api_calls"] == plain["api_calls"]
    (entry,) = result["diff"]  # the paused host is not written
    assert entry["before_header"] == entry["after_header"] == "BareMetalHost rack/new"
    assert entry["after"]["status"]["provisioning"] == {"state": machine.REGISTERING}
    assert entry["after"]["metadata"]["finalizers"] == [machine.FINALIZER]
    assert "lastUpdated" not in entry["after"]["status"]
    assert "s3cret" not in repr(result) and base64.b64encode(b"s3cret").decode() not in repr(result)


def test_diff_runs_from_before_the_first_step_to_after_the_last_and_includes_hardware_data(fake_bmcs):
    kube = FakeKube()
    _rack(kube, _bmh("new", 1))
    module = _Module(diff=True, wait=5)
    plain_kube = _copy_of(kube)
    result = provisioner.provision(module, kube)
    assert result["steps"] > 1 and result["hosts"][0]["state"] == machine.AVAILABLE
    host, hardware = result["diff"]
    assert host["before"]["status"] == {} and host["after"]["status"]["provisioning"]["state"] == machine.AVAILABLE
    assert host["after"]["status"]["goodCredentials"]["credentials"]["name"] == "new-bmc"
    assert hardware["before_header"] == "HardwareData rack/new" and hardware["before"] == {}
    assert hardware["after"]["spec"]["hardware"]["cpu"] == {"count": 2}
    assert "s3cret" not in repr(result["diff"])
    FakeBmc.systems.clear()
    assert provisioner.provision(_Module(wait=5), plain_kube)["api_calls"] == result["api_calls"]
    # Settled: nothing written, nothing to show.
    again = provisioner.provision(module, kube)
    assert again["diff"] == [] and not again["changed"]


def test_check_mode_diff_shows_what_would_change_and_writes_nothing(fake_bmcs):
    kube = FakeKube()
    _rack(kube, _bmh("h0", 1))
    _settle(kube)
    _patch_host(kube, "h0", annotations={machine.DETACHED_ANNOTATION: ""})
    kube.calls.clear()
    result = provisioner.provision(_Module(check_mode=True, diff=True), kube)
    assert kube.writes() == 0
    (entry,) = result["diff"]
    assert (entry["before"]["status"], entry["after"]["status"]) == (
        {"operationalStatus": "OK"},
        {"operationalStatus": "detached"},
    )
    assert "metadata" not in entry["before"]  # annotations and finalizers unchanged


def test_diff_shows_a_replaced_hardware_data_by_its_spec(fake_bmcs):
    kube = FakeKube()
    _rack(kube, _bmh("h0", 1))
    kube.add(
        {
            "apiVersion": API_VERSION,
            "kind": "HardwareData",
            "metadata": {"name": "h0", "namespace": "rack"},
            "spec": {"hardware": {"cpu": {"count": 1}}},
        }
    )
    result = provisioner.provision(_Module(diff=True, wait=5), kube)
    hardware = next(e for e in result["diff"] if e["before_header"].startswith("HardwareData"))
    assert hardware["before"] == {"spec": {"hardware": {"cpu": {"count": 1}}}}
    assert hardware["after"]["spec"]["hardware"]["cpu"] == {"count": 2}


@pytest.mark.parametrize("erase", ["metadata", "full"])
def test_the_cleaning_config_drive_tells_the_writer_how_deep_to_erase(tmp_path, erase):
    """Issue 22: the publish action's erase mode (the provisioner's setting or the host's annotation, decided by the
    machine) reaches the writer's instructions; bmh_redfish's cleaning_erase option reaches the machine's settings."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import media

    from metalclaim_dev.configdrive_reader import read_config_drive

    options = Options(settings=machine.Settings(media_url="http://127.0.0.1:2"), media_dir=str(tmp_path))
    host = {"metadata": {"name": "bm-01", "namespace": "infrahost"}, "spec": {}}
    provisioner._publish(None, host, "clean", TOKEN, options, erase=erase)
    with open(media.media_path(str(tmp_path), TOKEN, machine.CONFIG_DRIVE_FILE), "rb") as handle:
        deploy = json.loads(read_config_drive(handle.read())["metalclaim/deploy.json"])
    assert deploy["mode"] == "clean" and deploy["erase"] == erase
    params = {
        "power_off_timeout": 60,
        "callback_timeout": 1800,
        "callback_events": False,
        "power_poll_interval": 60,
        "backoff_base": 10,
        "backoff_cap": 600,
        "max_concurrent": 20,
        "redfish_timeout": 10,
        "redfish_retries": 1,
        "workers": 8,
    }
    assert provisioner.options_from({**params, "cleaning_erase": erase}).settings.cleaning_erase == erase


def test_a_host_records_references_to_its_tokens_and_the_machine_gets_the_tokens(fake_bmcs, tmp_path):
    """Issue 40: whoever reads the BareMetalHost (the claim side may) learns no token that opens its config drive or
    answers its writer's callback; the BMC is given the token itself, opened with the media directory's key."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import media
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import media_protocol

    media_dir = str(tmp_path / "media")
    settings = machine.Settings(media_url="http://127.0.0.1:2", deploy_iso_url="http://127.0.0.1:2/writer.iso")
    options = Options(settings=settings, media_dir=media_dir)
    kube = FakeKube()
    _rack(kube, _bmh("disk", 1))
    image = {"url": "http://127.0.0.1:2/disk.qcow2", "format": "qcow2", "checksum": "0" * 64}
    for _step in range(12):
        host = kube.objects[("BareMetalHost", "rack", "disk")]
        if machine.state_of(host) == machine.AVAILABLE and not host["spec"].get("image"):
            host["spec"].update(image=image, online=True)
        provision_hosts(kube, None, None, options, T0, False, None, None)
        if machine.operation(kube.objects[("BareMetalHost", "rack", "disk")]).get("powered"):
            break
    recorded = machine.operation(kube.objects[("BareMetalHost", "rack", "disk")])
    assert recorded["kind"] == "deploy" and media_protocol.REFERENCE_RE.fullmatch(recorded["token"])
    token = media_protocol.token_for(media.token_key(media_dir), recorded["token"])
    (inserted,) = [m["image"] for m in fake_bmcs[next(iter(fake_bmcs))]["media"].values() if token in m["image"]]
    assert inserted == media_protocol.media_url(settings.media_url, token, machine.CONFIG_DRIVE_FILE)
    assert os.listdir(os.path.join(media_dir, "media")) == [token]  # published under the token, not the reference
    assert token not in json.dumps(kube.objects[("BareMetalHost", "rack", "disk")])
