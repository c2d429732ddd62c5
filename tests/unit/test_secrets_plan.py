"""Pure plan of the secrets step: which tenant Secret becomes which copy, and which are refused."""

from __future__ import annotations

import base64

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _claim_secrets as secrets


def claim(**refs) -> dict:
    return {"metadata": {"namespace": "tenant", "name": "c", "uid": "u"}, "spec": refs}


def secret(data: dict, secret_type: str | None = "Opaque") -> dict:
    encoded = {k: base64.b64encode(v.encode() if isinstance(v, str) else v).decode() for k, v in data.items()}
    body = {"metadata": {"namespace": "tenant", "name": "s"}, "data": encoded}
    if secret_type is not None:
        body["type"] = secret_type
    return body


def plan(role: str, source: dict | None):
    return secrets.plan_role(claim(**{role: {"name": "s"}}), role, source)


def test_the_role_key_wins_over_value_and_only_it_is_copied():
    data, reason, _message = plan("userData", secret({"userData": "#cloud-config", "value": "x", "other": "y"}))
    assert (data, reason) == ({"userData": base64.b64encode(b"#cloud-config").decode()}, "")
    data, _reason, _message = plan("metaData", secret({"value": "a: b"}, secret_type=None))
    assert data == {"metaData": base64.b64encode(b"a: b").decode()}


def test_no_reference_no_copy_and_cross_namespace_refused_before_reading():
    assert secrets.plan_role(claim(), "userData", None) == (None, "", "")
    other = claim(userData={"name": "bmc", "namespace": "infra"})
    assert secrets.wanted_source(other, "userData") is None
    assert secrets.plan_role(other, "userData", None)[1] == secrets.CROSS_NAMESPACE


@pytest.mark.parametrize(
    ("secret_type", "accepted"),
    [
        ("Opaque", True),
        (None, True),
        ("", True),
        ("kubernetes.io/service-account-token", False),
        ("kubernetes.io/dockerconfigjson", False),
        ("kubernetes.io/tls", False),
        ("kubernetes.io/basic-auth", False),
        ("bootstrap.kubernetes.io/token", False),
    ],
)
def test_only_opaque_secrets_are_copied(secret_type, accepted):
    data, reason, message = plan("userData", secret({"userData": "#cloud-config"}, secret_type))
    if accepted:
        assert (reason, message) == ("", "")
    else:
        assert (data, reason) == (None, "UserDataSecretSyncFailure")
        assert message == (
            f"spec.userData: Secret tenant/s is of type {secret_type}; only Opaque Secrets are copied beside a host"
        )


@pytest.mark.parametrize(("role", "limit"), [("userData", 512 * 1024), ("metaData", 65536), ("networkData", 65536)])
def test_size_limits_per_role(role, limit):
    assert plan(role, secret({role: b"x" * limit}))[1] == ""
    data, reason, message = plan(role, secret({role: b"x" * (limit + 1)}))
    assert (data, reason) == (None, secrets.sync_failure(role))
    assert message == (
        f"spec.{role}: Secret tenant/s: key {role} holds {limit + 1} bytes, more than the {limit} allowed for {role}"
    )


def test_unusable_keys_are_refused_naming_the_field():
    assert plan("networkData", secret({"other": "x"}))[2] == (
        "spec.networkData: Secret tenant/s has no networkData or value key"
    )
    assert plan("userData", secret({"userData": ""}))[2] == "spec.userData: Secret tenant/s: key userData is empty"
    broken = {"metadata": {"namespace": "tenant", "name": "s"}, "type": "Opaque", "data": {"value": "!!not base64"}}
    assert plan("metaData", broken)[2] == "spec.metaData: Secret tenant/s: key value is not valid base64"
    assert plan("metaData", None)[2] == "spec.metaData: Secret tenant/s not found"


def test_refusal_messages_never_carry_the_secrets_content():
    token = "eyJhbGciOiJSUzI1NiJ9.SECRET-TOKEN"
    for source in (
        secret({"token": token, "value": token}, "kubernetes.io/service-account-token"),
        secret({"userData": token * 40000}),
        secret({"notes": token}),
    ):
        _data, reason, message = plan("userData", source)
        assert reason and "SECRET-TOKEN" not in message
