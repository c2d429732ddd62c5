"""Tenant hooks, pure: validation, which event is due, claim events, payloads, credentials, redaction, backoff."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import tenant as plan

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
STAMP = "2026-01-01T12:00:00Z"


def hook(name="notify", blocking=False, events=("CREATE", "UPDATE", "DELETE"), **extra) -> dict:
    return {"name": name, "url": "http://127.0.0.1:9/h", "blockingCall": blocking, "eventTypes": list(events), **extra}


def tenant(*hook_list, generation=1, status=None, deleting=False) -> dict:
    meta = {"name": "blue", "generation": generation}
    if deleting:
        meta["deletionTimestamp"] = STAMP
    return {
        "metadata": meta,
        "spec": {"tenantName": "blue", "childNamespaces": ["slurm"], "hooks": list(hook_list)},
        "status": status or {},
    }


def claim(name="c1", host="", provisioned=False, namespace="blue-slurm") -> dict:
    status = {"conditions": [{"type": "Provisioned", "status": "True" if provisioned else "False", "reason": "x"}]}
    if host:
        status["hardwareData"] = {"name": host, "namespace": "infrahost"}
    return {"metadata": {"namespace": namespace, "name": name}, "status": status}


def secret(type_=hooks.CREDENTIALS_TYPE, tenant="blue", **data) -> dict:
    labels = {hooks.TENANT_LABEL: tenant} if tenant else {}
    return {
        "type": type_,
        "metadata": {"name": "c", "namespace": hooks.CREDENTIALS_NAMESPACE, "labels": labels},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def blue_hook(index=0, credentials="c") -> hooks.Hook:
    """Hook number `index` of tenant blue, naming the credentials Secret `credentials`."""
    entry = hook(name=f"h{index}", credentialsSecretRef={"name": credentials})
    return hooks.hooks(tenant(*[hook(name=f"x{i}") for i in range(index)], entry))[index]


# -- validation ----------------------------------------------------------------------------------------------


def test_valid_hooks_pass():
    assert hooks.validate(tenant(hook(), hook("gate", True, ("DELETE", "CLAIM_BOUND")))) == []


def test_bad_hooks_are_refused_naming_the_field():
    bad = tenant(
        hook(url="ftp://127.0.0.1/x"),
        hook(),  # its name again
        hook("Bad_Name"),
        hook("x", events=("CREATE", "EXPLODE")),
        hook("y", events=()),
        hook("z", url="http://"),
    )
    fields = [field for field, _message in hooks.validate(bad)]
    assert fields == [
        "spec.hooks[0].url",
        "spec.hooks[1].name",
        "spec.hooks[2].name",
        "spec.hooks[3].eventTypes",
        "spec.hooks[4].eventTypes",
        "spec.hooks[5].url",
    ]
    # The tenant plan refuses the spec with those, as InvalidField.
    problems = plan.validate(bad)
    assert problems[0].field == "spec.hooks[0].url" and problems[0].reason == plan.INVALID_FIELD
    assert "'ftp://127.0.0.1/x' is not an http(s) URL" in problems[0].message


# -- which tenant event is due -------------------------------------------------------------------------------


def test_create_then_update_then_delete():
    assert hooks.tenant_event_due(tenant(hook())) == hooks.CREATE
    announced = {"hooks": {"announcedGeneration": 1}, "state": "Deployed"}
    assert hooks.tenant_event_due(tenant(hook(), status=announced)) is None
    assert hooks.tenant_event_due(tenant(hook(), generation=2, status=announced)) == hooks.UPDATE
    assert hooks.tenant_event_due(tenant(hook(), deleting=True, status=announced)) == hooks.DELETE
    done = {"hooks": {"announcedGeneration": 1, "deleteAnnounced": True}}
    assert hooks.tenant_event_due(tenant(hook(), deleting=True, status=done)) is None


def test_a_tenant_deployed_before_hooks_state_is_updated_not_created():
    assert hooks.tenant_event_due(tenant(hook(), status={"state": "Deployed"})) == hooks.UPDATE


def test_a_refusal_is_asked_again_after_the_backoff_or_at_once_for_a_new_generation():
    state = hooks.with_refusal({}, hooks.UPDATE, 2, NOW)
    assert state["refusedAttempts"] == 1 and state["refused"]["nextAskAt"] == "2026-01-01T12:00:02Z"
    assert hooks.refused_wait(state, hooks.UPDATE, 2, NOW) == 2.0
    assert hooks.refused_wait(state, hooks.UPDATE, 3, NOW) is None  # the spec edited again
    assert hooks.refused_wait(state, hooks.DELETE, 2, NOW) is None  # now being deleted
    later = datetime(2026, 1, 1, 12, 0, 2, tzinfo=UTC)
    assert hooks.refused_wait(state, hooks.UPDATE, 2, later) is None
    again = hooks.with_refusal(state, hooks.UPDATE, 2, later)
    assert again["refusedAttempts"] == 2 and again["refused"]["nextAskAt"] == "2026-01-01T12:00:06Z"
    assert hooks.allowed(again) == {}


# -- claim events --------------------------------------------------------------------------------------------


def test_claim_events_from_current_state():
    events, record = hooks.claim_events([], [claim("c1"), claim("c2", host="h2")])
    assert [(e, f["name"]) for e, f in events] == [(hooks.CLAIM_BOUND, "c2")]
    assert [r["name"] for r in record] == ["c2"]  # an unbound claim has nothing to tell yet

    events, record = hooks.claim_events(record, [claim("c1"), claim("c2", host="h2", provisioned=True)])
    assert [(e, f["name"], f["hostName"]) for e, f in events] == [(hooks.CLAIM_PROVISIONED, "c2", "h2")]

    assert hooks.claim_events(record, [claim("c1"), claim("c2", host="h2", provisioned=True)])[0] == []

    events, record = hooks.claim_events(record, [claim("c1"), claim("c2")])  # released
    assert [(e, f["name"], f["hostName"]) for e, f in events] == [(hooks.CLAIM_RELEASED, "c2", "h2")]
    assert record == []


def test_a_claim_bound_and_provisioned_between_runs_gets_both_events_and_a_gone_claim_is_released():
    events, record = hooks.claim_events([], [claim("c1", host="h1", provisioned=True)])
    assert [e for e, _f in events] == [hooks.CLAIM_BOUND, hooks.CLAIM_PROVISIONED]
    events, record = hooks.claim_events(record, [])
    assert [(e, f["name"], f["hostName"]) for e, f in events] == [(hooks.CLAIM_RELEASED, "c1", "h1")]


def test_a_claim_moved_to_another_host_is_released_then_bound():
    _events, record = hooks.claim_events([], [claim("c1", host="h1")])
    events, _record = hooks.claim_events(record, [claim("c1", host="h2")])
    assert [(e, f["hostName"]) for e, f in events] == [(hooks.CLAIM_RELEASED, "h1"), (hooks.CLAIM_BOUND, "h2")]


# -- payloads ------------------------------------------------------------------------------------------------


def test_the_payload_is_tapms_shaped_with_no_secret_or_bmc_data():
    t = tenant(hook(credentialsSecretRef={"name": "notify-creds"}))
    body = hooks.payload(hooks.CREATE, t, "Deployed")
    assert body["eventType"] == "CREATE"
    assert body["tenantSpec"]["tenantName"] == "blue" and body["tenantSpec"]["state"] == "Deployed"
    assert body["tenantSpec"]["childNamespaces"] == ["slurm"]
    assert body["tenantSpec"]["hooks"][0]["credentialsSecretRef"] == {"name": "notify-creds"}

    bmc_claim = claim("c1", host="h1")
    bmc_claim["status"]["hardware"] = {"bmc": "redfish://10.0.0.1"}
    facts = hooks.claim_facts(bmc_claim)
    body = hooks.payload(hooks.CLAIM_BOUND, t, "Deployed", facts, bmc_claim["status"]["conditions"])
    assert body["claim"] == {
        "namespace": "blue-slurm",
        "name": "c1",
        "hostName": "h1",
        "conditions": [{"type": "Provisioned", "status": "False", "reason": "x", "message": ""}],
    }
    assert "redfish" not in json.dumps(body) and "bmc" not in json.dumps(body).lower()


# -- credentials and redaction -------------------------------------------------------------------------------


def test_a_hook_knows_its_tenant_and_its_field():
    found = hooks.hooks(tenant(hook(name="a"), hook(name="b", credentialsSecretRef={"name": "c"}, timeoutSeconds=7)))
    assert [(h.name, h.tenant, h.field, h.credentials, h.timeout) for h in found] == [
        ("a", "blue", "spec.hooks[0]", "", 5.0),
        ("b", "blue", "spec.hooks[1]", "c", 7.0),
    ]


def test_a_token_is_a_bearer_and_a_username_password_basic_auth():
    header, values, problem = hooks.authorization(secret(token="s3cr3t"), blue_hook())
    assert (header, problem) == ("Bearer s3cr3t", "") and "s3cr3t" in values
    header, values, problem = hooks.authorization(secret(username="u", password="pw"), blue_hook())
    assert header == "Basic " + base64.b64encode(b"u:pw").decode() and problem == ""


def test_credentials_refused_without_quoting_them():
    cases = [
        (None, "not found"),
        (secret(type_="Opaque", token="s3cr3t"), "is not of type"),
        (secret(token="s3cr3t", username="u", password="pw"), "either token or"),
        (secret(username="u"), "either token or"),
        (secret(token="s3cr3t\r\nX-Evil: 1"), "line break"),
        ({**secret(), "data": {"token": "%%%"}}, "not base64"),
    ]
    for given, expected in cases:
        header, _values, problem = hooks.authorization(given, blue_hook(1))
        assert header == "" and expected in problem and "s3cr3t" not in problem, (given, problem)
        assert problem.startswith("spec.hooks[1].credentialsSecretRef: credentials Secret metalclaim-hooks/c")


def test_credentials_belong_to_the_tenant_their_label_names_checked_before_the_data_is_read():
    """Tenant blue naming another tenant's Secret (or one labelled for nobody) gets nothing out of it: the problem
    names the field, and the data is not even decoded (undecodable data would be another problem)."""
    undecodable = {"token": "%%% not base64"}
    others = {**secret(tenant="red"), "data": undecodable}
    header, values, problem = hooks.authorization(others, blue_hook(2, credentials="red-cmdb"))
    assert (header, values) == ("", [])
    assert problem == (
        "spec.hooks[2].credentialsSecretRef: credentials Secret metalclaim-hooks/red-cmdb is not labelled "
        "tenancy.metalclaim.io/tenant=blue: it is another tenant's (not used)"
    )
    nobodys = {**secret(tenant=None), "data": undecodable}
    header, values, problem = hooks.authorization(nobodys, blue_hook())
    assert (header, values) == ("", [])
    assert problem == (
        "spec.hooks[0].credentialsSecretRef: credentials Secret metalclaim-hooks/c has no label "
        "tenancy.metalclaim.io/tenant (it must name the tenant it belongs to; not used)"
    )
    # A label that only looks like the tenant's is another tenant's; a hook of no tenant gets no credentials.
    assert "another tenant's" in hooks.authorization(secret(tenant="blue ", token="t"), blue_hook())[2]
    orphan = hooks.Hook("h", "http://127.0.0.1:9/h", False, ("CREATE",), "c", 5.0)
    assert hooks.authorization(secret(token="t"), orphan)[0] == ""
    # The type is checked first: a Secret not meant for hooks is never one of a tenant's, whatever its labels.
    assert "is not of type" in hooks.authorization(secret(type_="Opaque", token="t"), blue_hook())[2]


def test_redaction_covers_values_their_base64_and_the_header():
    _header, values, _problem = hooks.authorization(secret(username="admin", password="hunter2"), blue_hook())
    basic = base64.b64encode(b"admin:hunter2").decode()
    text = f"answered 401: bad Basic {basic} for hunter2 ({base64.b64encode(b'hunter2').decode()})"
    redacted = hooks.redact(text, values)
    assert "hunter2" not in redacted and basic not in redacted and "aHVudGVyMg" not in redacted


def test_an_answer_excerpt_is_short_and_printable():
    assert hooks.excerpt(b"no\x00\nway " + b"x" * 1000).startswith("no  way x")
    assert len(hooks.excerpt(b"x" * 1000)) == hooks.ANSWER_EXCERPT + 3


# -- backoff and pending deliveries --------------------------------------------------------------------------


def test_backoff_doubles_and_is_capped():
    assert [hooks.backoff(n) for n in range(6)] == [0.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert hooks.backoff(50) == hooks.BACKOFF_CAP_SECONDS


def test_deliveries_are_queued_to_non_blocking_subscribers_once_per_key():
    t = tenant(hook("notify"), hook("gate", True), hook("claims", events=("CLAIM_BOUND",)))
    pending = hooks.queued([], t, hooks.CREATE, STAMP)
    assert [(e["hook"], e["eventType"], e["attempts"]) for e in pending] == [("notify", "CREATE", 0)]
    assert hooks.queued(pending, t, hooks.CREATE, STAMP) == pending
    facts = hooks.claim_facts(claim("c1", host="h1"))
    with_claim = hooks.queued(pending, t, hooks.CLAIM_BOUND, STAMP, claim=facts)
    assert with_claim[-1]["claim"] == {"namespace": "blue-slurm", "name": "c1", "hostName": "h1"}


def test_claim_events_that_cannot_be_stopped_are_told_to_blocking_hooks_too():
    gate = hook("gate", True, events=("CLAIM_BOUND", "CLAIM_PROVISIONED", "CLAIM_RELEASED"))
    t = tenant(gate, hook("notify", events=("CLAIM_BOUND", "CLAIM_RELEASED")))
    facts = hooks.claim_facts(claim("c1", host="h1"))

    def told(event):
        return [e["hook"] for e in hooks.queued([], t, event, STAMP, claim=facts)]

    # A blocking CLAIM_BOUND hook was asked before the binding: that was its delivery.
    assert told(hooks.CLAIM_BOUND) == ["notify"]
    assert told(hooks.CLAIM_PROVISIONED) == ["gate"]
    assert told(hooks.CLAIM_RELEASED) == ["gate", "notify"]
    assert hooks.asks_before_binding(t) and not hooks.asks_before_binding(
        tenant(hook("notify", events=("CLAIM_BOUND",)))
    )


def with_uid(c: dict, uid: str, deleting: bool = False) -> dict:
    c["metadata"]["uid"] = uid
    if deleting:
        c["metadata"]["deletionTimestamp"] = STAMP
    return c


def test_the_blocking_bound_hooks_are_asked_about_each_unbound_claim_once_allowed_and_after_the_backoff_if_refused():
    new = with_uid(claim("new"), "u-new")
    allowed = with_uid(claim("allowed"), "u-allowed")
    refused_due = with_uid(claim("refused-due"), "u-due")
    refused_later = with_uid(claim("refused-later"), "u-later")
    bound = with_uid(claim("bound", host="h1"), "u-bound")
    going = with_uid(claim("going"), "u-going", deleting=True)
    verdicts = {
        "u-allowed": {"name": "allowed", "allowed": True},
        "u-due": {"name": "refused-due", "allowed": False, "attempts": 1, "nextAskAt": STAMP},
        "u-later": {"name": "refused-later", "allowed": False, "attempts": 1, "nextAskAt": "2026-01-01T12:00:30Z"},
        "u-gone": {"name": "gone", "allowed": True},
    }
    claims = [new, allowed, refused_due, refused_later, bound, going]
    kept = hooks.verdicts_kept(verdicts, claims)
    assert sorted(kept) == ["u-allowed", "u-due", "u-later"]  # the deleted claim's verdict goes
    assert [c["metadata"]["name"] for c in hooks.claims_to_ask(kept, claims, NOW)] == ["new", "refused-due"]
    assert hooks.seconds_until_reask(kept, NOW) == 0.0  # refused-due is due now
    assert hooks.seconds_until_reask({"u-later": verdicts["u-later"]}, NOW) == 30.0
    assert hooks.seconds_until_reask({"u-allowed": verdicts["u-allowed"]}, NOW) is None


def test_a_verdict_records_the_refusal_and_backs_off():
    c = with_uid(claim("c1"), "u1")
    assert hooks.verdict_after(None, c, "", NOW) == {"name": "c1", "allowed": True}
    first = hooks.verdict_after(None, c, "blocking hook 'gate' refused CLAIM_BOUND: HTTP 500", NOW)
    assert first == {
        "name": "c1",
        "allowed": False,
        "message": "blocking hook 'gate' refused CLAIM_BOUND: HTTP 500",
        "attempts": 1,
        "nextAskAt": "2026-01-01T12:00:02Z",
    }
    second = hooks.verdict_after(first, c, "again", NOW)
    assert (second["attempts"], second["nextAskAt"]) == (2, "2026-01-01T12:00:04Z")
    assert hooks.verdict_after(second, c, "", NOW)["allowed"] is True
    # A verdict whose time cannot be read is asked again now rather than never.
    assert hooks.claims_to_ask({"u1": {"allowed": False, "nextAskAt": "soon"}}, [c], NOW) == [c]


def test_a_failed_delivery_is_retried_after_the_backoff_then_given_up():
    entry = {"hook": "notify", "eventType": "CREATE", "attempts": 0, "nextAttemptAt": STAMP, "lastError": ""}
    assert hooks.due([entry], NOW) == [entry]
    retry = hooks.after_failure(entry, "not delivered: refused", NOW)
    assert retry["attempts"] == 1 and retry["nextAttemptAt"] == "2026-01-01T12:00:02Z"
    assert hooks.due([retry], NOW) == [] and hooks.seconds_until_next([retry], NOW) == 2.0
    assert hooks.after_failure({**entry, "attempts": hooks.MAX_ATTEMPTS - 1}, "x", NOW) is None


def test_the_hooks_condition():
    assert hooks.condition_of([], "", []) == ("True", hooks.HOOKS_DELIVERED, "")
    assert hooks.condition_of([], "blocking hook 'gate' refused CREATE: answered 500", [])[:2] == (
        "False",
        hooks.HOOK_REFUSED,
    )
    retrying = [{"hook": "n", "eventType": "CREATE", "attempts": 2, "nextAttemptAt": STAMP, "lastError": "down"}]
    status, reason, message = hooks.condition_of(retrying, "", [])
    assert (status, reason) == ("True", hooks.DELIVERY_RETRYING) and "attempt 2 failed (down)" in message
    assert hooks.condition_of([], "", ["gave up"])[:2] == ("True", hooks.DELIVERY_ABANDONED)
