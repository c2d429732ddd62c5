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
