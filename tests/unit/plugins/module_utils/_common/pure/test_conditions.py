"""Condition bookkeeping: apimachinery's transition rules and the Ready summary."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond


def test_last_transition_time_changes_only_when_status_flips():
    conditions = cond.set_condition([], cond.ASSOCIATION, "False", "NoBareMetalHost", "none", 1, "t1")
    conditions = cond.set_condition(conditions, cond.ASSOCIATION, "False", "NoBareMetalHost", "still none", 2, "t2")
    (association,) = conditions
    assert (association["lastTransitionTime"], association["observedGeneration"], association["message"]) == (
        "t1",
        2,
        "still none",
    )
    conditions = cond.set_condition(conditions, cond.ASSOCIATION, "True", "BareMetalHostAssociated", "", 2, "t3")
    assert conditions[0]["lastTransitionTime"] == "t3"


def test_ready_summarizes_like_the_user_guide():
    conditions = []
    for type_, status, reason in [
        (cond.ASSOCIATION, "True", "BareMetalHostAssociated"),
        (cond.PROVISIONED, "False", "available"),
        (cond.SYNCHRONIZATION, "True", "ConfigurationSynced"),
    ]:
        conditions = cond.set_condition(conditions, type_, status, reason, "", 1, "t")
    conditions = cond.with_ready(conditions, 1, "t")
    assert [c["type"] for c in conditions] == ["Ready", "Association", "Provisioned", "Synchronization"]
    ready = conditions[0]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "IssuesReported",
        "* Provisioned: available",
    )

    conditions = cond.set_condition(conditions, cond.PROVISIONED, "True", "provisioned", "", 3, "t4")
    ready = cond.with_ready(conditions, 3, "t4")[0]
    assert (ready["status"], ready["reason"], ready["message"], ready["observedGeneration"]) == (
        "True",
        "InfoReported",
        "",
        3,
    )


def test_ready_lists_every_false_condition_with_its_message():
    conditions = cond.set_condition([], cond.ASSOCIATION, "False", "NoBareMetalHost", "no free host", 1, "t")
    conditions = cond.set_condition(conditions, cond.SYNCHRONIZATION, "False", "UserDataSecretSyncFailure", "", 1, "t")
    ready = cond.with_ready(conditions, 1, "t")[0]
    assert ready["message"] == "* Association: no free host\n* Synchronization: UserDataSecretSyncFailure"


def test_ready_is_unknown_when_something_is_unknown():
    conditions = cond.set_condition([], cond.ASSOCIATION, "Unknown", "Pending", "", 1, "t")
    assert cond.with_ready(conditions, 1, "t")[0]["status"] == "Unknown"


def test_truncated_keeps_what_fits_and_cuts_on_a_character_boundary():
    assert cond.truncated("short", 10) == "short"
    cut = cond.truncated("é" * 100, 51)  # two bytes each: 51 bytes cannot end inside one
    assert cut.endswith(cond.TRUNCATED) and len(cut.encode()) <= 51
    assert cut[: -len(cond.TRUNCATED)] == "é" * ((51 - len(cond.TRUNCATED)) // 2)
    assert cond.truncated("x" * 100, 5) == "xxxxx"  # no room for the marker: cut only


def test_a_message_built_from_a_tenants_input_never_overflows_a_condition():
    """Issue 22: a 40,000-character Secret name quoted in Synchronization (and so in Ready) made the API server
    refuse the whole status. Every message set is cut to the API server's 32768 bytes, each line of Ready to a
    quarter of it, so the other conditions' lines stay whole."""
    long = "spec.userData: Secret t/" + "u" * 40_000 + " not found"
    conditions = cond.set_condition([], cond.SYNCHRONIZATION, "False", "UserDataSecretSyncFailure", long, 1, "t")
    conditions = cond.set_condition(conditions, cond.ASSOCIATION, "False", "NoBareMetalHost", "no free host", 1, "t")
    conditions = cond.with_ready(conditions, 1, "t")
    by_type = {c["type"]: c for c in conditions}
    assert len(by_type["Synchronization"]["message"].encode()) == cond.MESSAGE_LIMIT
    assert by_type["Synchronization"]["message"].endswith(cond.TRUNCATED)
    ready = by_type["Ready"]["message"]
    assert len(ready.encode()) <= cond.MESSAGE_LIMIT
    assert ready.startswith("* Association: no free host\n* Synchronization: spec.userData: Secret t/uuu")
    assert len(ready.splitlines()[1].encode()) <= len("* Synchronization: ") + cond.READY_LINE_LIMIT


def test_valid_reason_is_the_api_servers_rule():
    assert cond.valid_reason("provisioningError") and cond.valid_reason("") and cond.valid_reason("A_b:c,d")
    assert not cond.valid_reason("provisioning error") and not cond.valid_reason("9lives")
    assert not cond.valid_reason("A" * 1025) and not cond.valid_reason("Ends-")
