"""Pure helpers of the provisioner's edge."""

from __future__ import annotations

import threading
import time

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _bmh_machine as machine
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _bmh_provisioner as provisioner
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._bmh_provisioner import (
    Connections,
    Options,
    Settling,
    _Bmc,
    _in_parallel,
    checksum_type,
    without_tokens,
)

TOKEN = "h128PKc4zqNoP_2WL5CB6OJ-3p569jNRQfcPOl2Sti0"


def test_media_tokens_never_reach_an_error_message():
    message = f"inserting http://127.0.0.1:1/media/{TOKEN}/config-drive.iso into virtual media config: HTTP 500"
    scrubbed = without_tokens(message)
    assert TOKEN not in scrubbed
    assert "/media/h128PK.../config-drive.iso" in scrubbed


@pytest.mark.parametrize(
    ("checksum", "expected"),
    [
        ("0" * 32, "md5"),
        ("a" * 64, "sha256"),
        ("F" * 128, "sha512"),
        ("http://127.0.0.1:8080/images/jammy/img.md5", "md5"),
        ("http://127.0.0.1:8080/SHA256SUMS", "sha256"),
    ],
)
def test_checksum_type_auto_as_metal3(checksum, expected):
    assert checksum_type(checksum) == expected


def test_an_undecidable_checksum_type_names_the_field():
    with pytest.raises(ValueError, match="checksumType"):
        checksum_type("http://127.0.0.1/checksums.txt")


# -- the wait loop's bookkeeping ---------------------------------------------------------


def _result(name, state, requeue_after=None, requests=0, changed=False, previous=None):
    return {
        "namespace": "rack",
        "name": name,
        "previous": previous or state,
        "state": state,
        "requeue_after": requeue_after,
        "redfish_requests": requests,
        "changed": changed,
    }


def test_only_hosts_whose_requeue_has_passed_are_stepped_again():
    settling = Settling()
    settling.record(
        [_result("a", "provisioning", 2, 5, True, "available"), _result("b", "available"), _result("c", "x", 10)],
        None,
        moment=100.0,
    )
    assert settling.next_at() == 102.0
    assert settling.due_now(101.9) == []
    assert settling.due_now(102.0) == [{"namespace": "rack", "name": "a"}]  # b settled, c not yet due
    settling.record([_result("a", "provisioned", None, 3, False, "provisioning")], settling.due_now(102.0), 102.5)
    assert settling.next_at() == 110.0
    assert settling.requeue_after(105.0) == 5.0
    by_name = {host["name"]: host for host in settling.hosts()}
    # The run's figures: the state before the run, requests and changes over all its steps.
    assert by_name["a"] == {**_result("a", "provisioned", None, 8, True, "available")}
    assert [host["name"] for host in settling.hosts()] == ["a", "b", "c"]


def test_a_host_that_vanished_between_steps_is_not_waited_for():
    settling = Settling()
    settling.record([_result("a", "deleting", 1)], None, moment=0.0)
    settling.record([], [{"namespace": "rack", "name": "a"}], moment=1.0)
    assert settling.next_at() is None and settling.requeue_after(1.0) is None


def test_parallel_steps_overlap_and_raise_the_first_error():
    inside, most = [0], [0]
    lock = threading.Lock()

    def slow(_work):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1

    _in_parallel(4, list(range(8)), slow)
    assert most[0] == 4
    _in_parallel(1, list(range(3)), slow)
    with pytest.raises(ZeroDivisionError):
        _in_parallel(4, [1, 0, 2], lambda n: 1 / n)


def _host(address="redfish+http://127.0.0.1:8000/redfish/v1/Systems/1"):
    return {"metadata": {"namespace": "rack", "name": "h0"}, "spec": {"bmc": {"address": address}}}


def test_a_host_keeps_its_connection_until_it_fails_or_its_credentials_change():
    connections = Connections(Options(settings=machine.Settings()))
    credentials = {"username": "admin", "password": "s3cret"}
    first = _Bmc(_host(), credentials, connections).client
    assert _Bmc(_host(), credentials, connections).client is first
    rotated = _Bmc(_host(), {"username": "admin", "password": "rotated"}, connections).client
    assert rotated is not first
    moved = _Bmc(_host("redfish+http://127.0.0.1:8001/redfish/v1/Systems/1"), credentials, connections).client
    assert moved is not first
    broken = _Bmc(_host(), credentials, connections)
    assert broken.client is first and broken.requests == 0
    broken.failed()
    assert _Bmc(_host(), credentials, connections).client is not first
    connections.close()


# -- the module's edges -------------------------------------------------------------------


class _Failed(Exception):
    pass


class _Module:
    check_mode = False

    def __init__(self, **params):
        self.params = {
            "hosts": None,
            "namespaces": None,
            "deploy_iso_url": None,
            "media_dir": None,
            "media_url": None,
            "max_concurrent": 20,
            "power_off_timeout": 60,
            "callback_timeout": 1800,
            "backoff_base": 10,
            "backoff_cap": 600,
            "redfish_timeout": 10,
            "redfish_retries": 1,
            "wait": 0,
            "workers": 8,
            **params,
        }

    def fail_json(self, **result):
        raise _Failed(result)


def test_a_deploy_iso_without_pycdlib_is_a_missing_library_failure(monkeypatch):
    monkeypatch.setattr(provisioner, "KUBERNETES_IMPORT_ERROR", None)
    monkeypatch.setattr(provisioner, "SUSHY_IMPORT_ERROR", None)
    monkeypatch.setattr(provisioner, "PYCDLIB_IMPORT_ERROR", "Traceback: No module named 'pycdlib'")
    with pytest.raises(_Failed) as failed:
        provisioner.run_module(_Module(deploy_iso_url="http://127.0.0.1:1/writer.iso"))
    assert "pycdlib" in failed.value.args[0]["msg"]
    assert failed.value.args[0]["exception"].startswith("Traceback")
