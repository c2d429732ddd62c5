"""Diff entries for --diff: only what changed, and never a Secret's value."""

from __future__ import annotations

import base64
import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.diff import (
    LAST_APPLIED,
    changed_fields,
    entry,
    redacted_secret,
)

HOST = {
    "apiVersion": "metal3.io/v1alpha1",
    "kind": "BareMetalHost",
    "metadata": {"name": "h1", "namespace": "rack", "annotations": {"a": "1", "keep": "x"}, "resourceVersion": "7"},
    "spec": {
        "online": False,
        "bmc": {"address": "redfish://x", "credentialsName": "h1-bmc"},
        "userData": {"name": "u"},
    },
}


def _changed(**spec) -> dict:
    after = json.loads(json.dumps(HOST))
    after["spec"].update(spec)
    return after


def test_only_changed_fields_are_kept():
    assert changed_fields(HOST, _changed(online=True)) == ({"spec": {"online": False}}, {"spec": {"online": True}})


def test_nothing_changed_is_empty_on_both_sides():
    assert changed_fields(HOST, json.loads(json.dumps(HOST))) == ({}, {})
    assert changed_fields(None, None) == ({}, {})


def test_nested_dicts_keep_only_their_changed_keys():
    after = _changed(bmc={"address": "redfish://y", "credentialsName": "h1-bmc"})
    after["metadata"]["annotations"]["a"] = "2"
    assert changed_fields(HOST, after) == (
        {"metadata": {"annotations": {"a": "1"}}, "spec": {"bmc": {"address": "redfish://x"}}},
        {"metadata": {"annotations": {"a": "2"}}, "spec": {"bmc": {"address": "redfish://y"}}},
    )


def test_added_and_removed_keys_appear_on_their_side_only():
    after = _changed(image={"url": "http://i"})
    del after["spec"]["userData"]
    assert changed_fields(HOST, after) == (
        {"spec": {"userData": {"name": "u"}}},
        {"spec": {"image": {"url": "http://i"}}},
    )


def test_lists_and_type_changes_are_compared_whole():
    before = {"metadata": {"finalizers": ["a"]}, "x": {"y": 1}}
    after = {"metadata": {"finalizers": ["a", "b"]}, "x": "flat"}
    assert changed_fields(before, after) == (before, after)


def test_changed_fields_copies_what_it_returns():
    old, _new = changed_fields(HOST, _changed(bmc={"address": "z"}))
    old["spec"]["bmc"]["address"] = "mutated"
    assert HOST["spec"]["bmc"]["address"] == "redfish://x"


SECRET_VALUE = "#cloud-config\npassword: hunter2-very-secret\n"


def _secret() -> dict:
    encoded = base64.b64encode(SECRET_VALUE.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "h1-userdata",
            "namespace": "rack",
            "labels": {"metalclaim.io/copy-of-claim": "uid"},
            "annotations": {LAST_APPLIED: json.dumps({"data": {"userData": encoded}})},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {"f:userData": {}}}}],
        },
        "data": {"userData": encoded, "odd": "not base64!"},
        "stringData": {"metaData": "instance-id: hunter2-very-secret"},
    }


def test_redaction_shows_keys_and_sizes_never_values():
    shown = redacted_secret(_secret())
    assert shown["data"] == {"userData": f"<redacted, {len(SECRET_VALUE)} bytes>", "odd": "<redacted, 11 bytes>"}
    assert shown["stringData"] == {"metaData": "<redacted, 32 bytes>"}
    assert shown["metadata"]["labels"] == {"metalclaim.io/copy-of-claim": "uid"}
    assert shown["metadata"]["annotations"][LAST_APPLIED] == "<redacted>"
    assert "managedFields" not in shown["metadata"]
    text = json.dumps(shown)
    assert "hunter2" not in text
    assert base64.b64encode(SECRET_VALUE.encode()).decode() not in text
    assert _secret()["data"]["userData"] in json.dumps(_secret())  # the input is left alone


def test_redaction_of_partial_and_odd_secrets():
    assert redacted_secret(None) == {}
    assert redacted_secret({"data": {"userData": "aGk="}}) == {"data": {"userData": "<redacted, 2 bytes>"}}
    assert redacted_secret({"data": "c2VjcmV0", "stringData": {"k": 5}}) == {
        "data": "<redacted>",
        "stringData": {"k": "<redacted>"},
    }


def test_a_changed_secret_redacted_after_the_comparison():
    before, after = _secret(), _secret()
    after["data"]["userData"] = base64.b64encode(b"password: other-secret!!!!!!!!").decode()
    old, new = changed_fields(before, after)
    old, new = redacted_secret(old), redacted_secret(new)
    assert old == {"data": {"userData": f"<redacted, {len(SECRET_VALUE)} bytes>"}}
    assert new == {"data": {"userData": "<redacted, 30 bytes>"}}
    assert "secret" not in json.dumps([old, new]).replace("<redacted", "")


def test_entry_is_ansibles_diff_shape():
    assert entry("BareMetalHost", "rack", "h1", {"spec": {"online": False}}, None) == {
        "before_header": "BareMetalHost rack/h1",
        "after_header": "BareMetalHost rack/h1",
        "before": {"spec": {"online": False}},
        "after": {},
    }
    assert entry("Namespace", None, "rack", None, {})["before_header"] == "Namespace rack"
