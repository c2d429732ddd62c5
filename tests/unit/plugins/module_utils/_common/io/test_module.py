"""The one module wrapper: libraries named, validation before connecting, failures as fail_json."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io import module as wrapper
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import ConflictError


class _Exit(Exception):
    pass


class _Module:
    def __init__(self, argument_spec, supports_check_mode):
        self.argument_spec = argument_spec
        self.params = {"answer": 42}
        self.check_mode = False

    def fail_json(self, **result):
        raise _Exit("fail", result)

    def exit_json(self, **result):
        raise _Exit("exit", result)


@pytest.fixture
def built(monkeypatch):
    """AnsibleModule replaced; Kube(params) records that a client was built."""
    clients = []
    monkeypatch.setattr(wrapper, "AnsibleModule", _Module)
    monkeypatch.setattr(wrapper, "KUBERNETES_IMPORT_ERROR", None)
    monkeypatch.setattr(wrapper, "Kube", lambda params: clients.append(params) or "kube")
    return clients


def outcome(*args, **kwargs) -> tuple[str, dict]:
    with pytest.raises(_Exit) as raised:
        wrapper.run_module(*args, **kwargs)
    return raised.value.args


def test_a_result_is_returned_with_the_auth_options_in_the_spec(built):
    kind, result = outcome({"answer": {"type": "int"}}, lambda module, kube: {"changed": False, "kube": kube})
    assert (kind, result) == ("exit", {"changed": False, "kube": "kube"})


def test_missing_libraries_are_named_before_anything_else(built, monkeypatch):
    monkeypatch.setattr(wrapper, "KUBERNETES_IMPORT_ERROR", "Traceback: kubernetes")
    kind, result = outcome({}, lambda module, kube: {})
    assert kind == "fail" and "kubernetes" in result["msg"] and result["exception"] == "Traceback: kubernetes"
    monkeypatch.setattr(wrapper, "KUBERNETES_IMPORT_ERROR", None)
    kind, result = outcome({}, lambda module, kube: {}, libraries=lambda params: {"sushy": "Traceback: sushy"})
    assert kind == "fail" and "sushy" in result["msg"]
    assert built == []  # no client was built


def test_validation_fails_before_connecting(built):
    kind, result = outcome({}, lambda module, kube: {}, validate=lambda params: f"answer {params['answer']} is wrong")
    assert (kind, result) == ("fail", {"msg": "answer 42 is wrong"})
    assert built == []


def test_api_errors_and_step_failures_become_fail_json(built):
    def conflict(module, kube):
        raise ConflictError("Failed to replace HostClaim cluster-ns/x: the object has been modified")

    assert outcome({}, conflict) == (
        "fail",
        {"msg": "Failed to replace HostClaim cluster-ns/x: the object has been modified"},
    )

    def refused(module, kube):
        raise wrapper.StepFailure("namespace 'x' does not exist", api_calls={"get": 1})

    assert outcome({}, refused) == ("fail", {"msg": "namespace 'x' does not exist", "api_calls": {"get": 1}})
