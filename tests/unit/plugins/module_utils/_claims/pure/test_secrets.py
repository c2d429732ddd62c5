"""Pure plan of the secrets step: which tenant Secret becomes which copy, and which are refused."""

from __future__ import annotations

import base64

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import secrets


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


def bound_host(spec=None) -> dict:
    return {"metadata": {"namespace": "infra", "name": "bm-01", "uid": "h"}, "spec": spec or {}}


def copy_named(name: str, labels: dict | None = None, data: dict | None = None) -> dict:
    return {"metadata": {"namespace": "infra", "name": name, "labels": labels or {}}, "data": data or {}}


def test_plan_copies_creates_then_is_idempotent():
    source = secret({"userData": "#cloud-config"})
    first = secrets.plan_copies(claim(userData={"name": "s"}), bound_host(), {"userData": source}, {})
    (created,) = first.create
    assert created["metadata"]["name"] == "bm-01-userdata"
    assert created["metadata"]["labels"] == {secrets.COPY_OF_LABEL: "u"}
    assert first.host_spec == {"userData": {"name": "bm-01-userdata", "namespace": "infra"}}
    again = secrets.plan_copies(
        claim(userData={"name": "s"}), bound_host(first.host_spec), {"userData": source}, {"userData": created}
    )
    assert (again.create, again.replace, again.delete, again.failures) == ([], [], [], [])
    assert again.host_spec == first.host_spec


def test_a_secret_we_did_not_make_is_never_overwritten_nor_deleted():
    hand_made = copy_named("bm-01-userdata", data={"userData": "aW5mcmE="})
    source = secret({"userData": "#cloud-config"})
    plan = secrets.plan_copies(
        claim(userData={"name": "s"}), bound_host(), {"userData": source}, {"userData": hand_made}
    )
    assert (plan.create, plan.replace, plan.delete) == ([], [], [])
    ((reason, message),) = plan.failures
    assert reason == secrets.COPY_NAME_TAKEN
    assert message.startswith("spec.userData: the Secret bm-01-userdata beside BareMetalHost bm-01 was not made by")
    assert "userData" not in plan.host_spec
    # Dropping the reference does not delete it either.
    plan = secrets.plan_copies(claim(), bound_host(), {}, {"userData": hand_made})
    assert plan.delete == []


def test_a_dropped_reference_deletes_our_copy_and_the_hosts_ref():
    ours = copy_named("bm-01-userdata", labels={secrets.COPY_OF_LABEL: "u"})
    host = bound_host({"userData": {"name": "bm-01-userdata", "namespace": "infra"}})
    plan = secrets.plan_copies(claim(), host, {}, {"userData": ours})
    assert plan.delete == ["bm-01-userdata"]
    assert plan.host_spec == {}
