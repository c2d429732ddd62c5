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


def bound_host(spec=None, records=None) -> dict:
    host = {"metadata": {"namespace": "infra", "name": "bm-01", "uid": "h"}, "spec": spec or {}}
    if records is not None:
        host["metadata"]["annotations"] = secrets.annotations_with_records({"infra.example/rack": "r1"}, records)
    return host


USER_DATA_REF = {"userData": {"name": "bm-01-userdata", "namespace": "infra"}}


def settled(source: dict) -> tuple[dict, dict]:
    """The host as a first run leaves it (refs and record of the copy it created, uid "copy-uid"), and the plan."""
    first = secrets.plan_copies(claim(userData={"name": "s"}), bound_host(), {"userData": source})
    records = {role: {**record, "uid": "copy-uid"} for role, record in first.records.items()}
    return bound_host(first.host_spec, records), first


def test_nothing_recorded_creates_the_copy_and_records_its_digest():
    source = secret({"userData": "#cloud-config"})
    plan = secrets.plan_copies(claim(userData={"name": "s"}), bound_host(), {"userData": source})
    (write,) = plan.writes
    assert (write.role, write.recorded) == ("userData", None)
    assert write.secret["metadata"]["name"] == "bm-01-userdata"
    assert write.secret["metadata"]["labels"] == {secrets.COPY_OF_LABEL: "u"}
    assert write.secret["metadata"]["ownerReferences"][0]["uid"] == "h"
    assert plan.records == {"userData": {"uid": "", "digest": secrets.copy_digest(write.secret)}}
    assert plan.host_spec == USER_DATA_REF
    assert (plan.delete, plan.failures, plan.copies) == ([], [], ["infra/bm-01-userdata"])


def test_the_same_digest_recorded_writes_nothing():
    source = secret({"userData": "#cloud-config"})
    host, first = settled(source)
    again = secrets.plan_copies(claim(userData={"name": "s"}), host, {"userData": source})
    assert (again.writes, again.delete, again.failures) == ([], [], [])
    assert again.host_spec == first.host_spec
    assert again.records == secrets.recorded_copies(host)  # the host's annotation stays as it is
    assert (
        secrets.annotations_with_records(host["metadata"]["annotations"], again.records)
        == host["metadata"]["annotations"]
    )


def test_another_digest_replaces_the_copy_keeping_the_recorded_uid():
    host, _first = settled(secret({"userData": "#cloud-config"}))
    changed = secret({"userData": "#cloud-config\nhostname: two"})
    plan = secrets.plan_copies(claim(userData={"name": "s"}), host, {"userData": changed})
    (write,) = plan.writes
    assert write.recorded == secrets.recorded_copies(host)["userData"]
    assert plan.records["userData"] == {"uid": "copy-uid", "digest": secrets.copy_digest(write.secret)}
    assert plan.records["userData"]["digest"] != write.recorded["digest"]
    # Another claim on the same host (label changes), same data: a new digest too.
    other_claim = claim(userData={"name": "s"})
    other_claim["metadata"]["uid"] = "u2"
    source = secret({"userData": "#cloud-config"})
    assert len(secrets.plan_copies(other_claim, host, {"userData": source}).writes) == 1


def test_a_dropped_reference_deletes_the_recorded_copy_by_uid_and_its_ref_and_record():
    host, _first = settled(secret({"userData": "#cloud-config"}))
    plan = secrets.plan_copies(claim(), host, {})
    assert plan.delete == [("bm-01-userdata", "copy-uid")]
    assert (plan.writes, plan.host_spec, plan.records) == ([], {}, {})
    assert secrets.annotations_with_records(host["metadata"]["annotations"], plan.records) == {
        "infra.example/rack": "r1"
    }


def test_nothing_recorded_nothing_deleted_whatever_holds_the_name():
    # A Secret of a copy's name that metalclaim did not make is never recorded: never deleted.
    plan = secrets.plan_copies(claim(), bound_host(USER_DATA_REF), {})
    assert (plan.delete, plan.writes) == ([], [])
    # A record without a uid (never written: check mode, or edited by hand) proves nothing either.
    unproven = bound_host(USER_DATA_REF, {"userData": {"uid": "", "digest": "d"}})
    assert secrets.plan_copies(claim(), unproven, {}).delete == []


def test_a_bad_tenant_edit_keeps_the_copy_its_record_and_the_hosts_ref():
    host, _first = settled(secret({"userData": "#cloud-config"}))
    plan = secrets.plan_copies(claim(userData={"name": "s"}), host, {"userData": None})
    assert plan.failures == [("UserDataSecretSyncFailure", "spec.userData: Secret tenant/s not found")]
    assert (plan.writes, plan.delete) == ([], [])
    assert plan.host_spec == USER_DATA_REF
    assert plan.records == secrets.recorded_copies(host)


@pytest.mark.parametrize("annotation", ["not json", "[1, 2]", '{"userData": "x"}', '{"other": {"uid": "a"}}'])
def test_an_unreadable_record_counts_as_none(annotation):
    host = bound_host(USER_DATA_REF)
    host["metadata"]["annotations"] = {secrets.COPIES_ANNOTATION: annotation}
    assert secrets.recorded_copies(host) == {}
    plan = secrets.plan_copies(claim(userData={"name": "s"}), host, {"userData": secret({"userData": "x"})})
    assert [w.recorded for w in plan.writes] == [None]  # created, or taken over by a PUT if it is there


def test_the_digest_covers_data_type_and_labels_only():
    source = secret({"userData": "#cloud-config"})
    (write,) = secrets.plan_copies(claim(userData={"name": "s"}), bound_host(), {"userData": source}).writes
    digest = secrets.copy_digest(write.secret)
    assert len(digest) == 16
    moved = {**write.secret, "metadata": {**write.secret["metadata"], "resourceVersion": "9", "uid": "x"}}
    assert secrets.copy_digest(moved) == digest
    for changed in (
        {**write.secret, "data": {"userData": "eA=="}},
        {**write.secret, "type": "kubernetes.io/tls"},
        {**write.secret, "metadata": {**write.secret["metadata"], "labels": {secrets.COPY_OF_LABEL: "v"}}},
    ):
        assert secrets.copy_digest(changed) != digest


def test_name_taken_keeps_the_message_tenants_know():
    assert secrets.name_taken("userData", "bm-01") == (
        secrets.COPY_NAME_TAKEN,
        "spec.userData: the Secret bm-01-userdata beside BareMetalHost bm-01 was not made by metalclaim and is "
        "left alone; ask the infrastructure team to remove or rename it",
    )
    message = (
        "secrets \"bm-01-userdata\" is forbidden: ValidatingAdmissionPolicy 'metalclaim-secret-copy-on-create' "
        "with binding 'metalclaim-secret-copy-on-create' denied request: ..."
    )
    assert secrets.refused_as_no_copy(message)
    assert not secrets.refused_as_no_copy('secrets "x" is forbidden: User "u" cannot update resource "secrets"')
