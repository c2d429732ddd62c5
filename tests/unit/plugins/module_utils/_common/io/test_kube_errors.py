"""Kube turns an API server that does not answer into a KubeError naming the action and object."""

from __future__ import annotations

import pytest
import urllib3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube, KubeError


class Unreachable:
    """A dynamic-client resource whose every request fails as urllib3 does when nothing listens."""

    def _fail(self, *args, **kwargs):
        raise urllib3.exceptions.MaxRetryError(None, "/apis", reason="connection refused")

    get = replace = delete = create = patch = _fail

    @property
    def status(self):
        return self


@pytest.fixture
def kube(monkeypatch):
    client = Kube.__new__(Kube)  # no discovery: the resource below stands in for the server
    monkeypatch.setattr(client, "_resource", lambda api_version, kind: Unreachable(), raising=False)
    monkeypatch.setattr(client, "_timeout", 1, raising=False)
    monkeypatch.setattr(client, "_count", lambda *counted: None, raising=False)
    return client


HOST = {
    "apiVersion": "metal3.io/v1alpha1",
    "kind": "BareMetalHost",
    "metadata": {"name": "bm-01", "namespace": "infra"},
}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda k: k.list("metal3.io/v1alpha1", "HostClaim"), "cannot list HostClaim: MaxRetryError"),
        (lambda k: k.get("v1", "Secret", "s", "ns"), "cannot get Secret s in namespace ns: MaxRetryError"),
        (lambda k: k.replace(dict(HOST)), "cannot replace BareMetalHost bm-01 in namespace infra: MaxRetryError"),
        (
            lambda k: k.patch_status({**HOST, "metadata": {**HOST["metadata"], "resourceVersion": "1"}}, {}),
            "cannot update the status of BareMetalHost bm-01 in namespace infra: MaxRetryError",
        ),
        (lambda k: k.delete("v1", "Secret", "s", "ns"), "cannot delete Secret s in namespace ns: MaxRetryError"),
        (lambda k: k.create(dict(HOST)), "cannot create BareMetalHost bm-01 in namespace infra: MaxRetryError"),
    ],
)
def test_no_answer_is_a_kube_error_naming_action_and_object(kube, call, message):
    with pytest.raises(KubeError, match=message):
        call(kube)
