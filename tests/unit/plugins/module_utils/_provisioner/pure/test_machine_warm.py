"""Fast track (warm hosts) in the provisioner's state machine: pure, step by step."""

from __future__ import annotations

import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import machine as m
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import warm

T0 = "2026-11-23T10:00:00Z"
T1 = "2026-11-23T10:00:05Z"
T_LATE = "2026-11-23T10:00:30Z"
TOKEN, WAIT, JOB = "A" * 43, "W" * 43, "J" * 43
SETTINGS = m.Settings(deploy_iso_url="http://127.0.0.1:1/writer.iso", media_url="http://127.0.0.1:2")
GOOD = {"goodCredentials": {"credentialsVersion": "7"}}
DISK = {"url": "http://127.0.0.1:3/img.qcow2", "format": "qcow2", "checksum": "http://127.0.0.1:3/img.md5"}
LIVE = {"url": "http://127.0.0.1:3/live.iso", "format": "live-iso"}
DEPLOY_CD = {"inserted": True, "image": SETTINGS.deploy_iso_url}
WARM_ON = {m.POWER: "On", m.BOOT: {"target": "Cd"}, m.MEDIA: {m.CD: DEPLOY_CD, m.CONFIG_DEVICE: {}}}
CONSUMER = {"kind": "HostClaim", "namespace": "cluster-ns", "name": "c", "uid": "u-1"}


def host(state, annotations=None, online=False, image=None, **spec):
    body = {
        "metadata": {"name": "bm-01", "namespace": "infrahost", "annotations": annotations or {}, "generation": 1},
        "spec": {"online": online, "bmc": {"address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1"}, **spec},
        "status": {"provisioning": {"state": state}, "operationalStatus": "OK", **GOOD},
    }
    if image:
        body["spec"]["image"] = image
    return body


def ctx(now=T0, room=True, **kwargs):
    return m.Context(
        now=now,
        settings=SETTINGS,
        credentials_version="7",
        new_token=JOB,
        wait_token=WAIT,
        warm_offered=True,
        warm_room=room,
        **kwargs,
    )


def warm_host(**kwargs) -> dict:
    op = {"kind": m.WARM, "token": WAIT, "since": T0}
    return host(m.AVAILABLE, {m.OPERATION_ANNOTATION: json.dumps(op), metal3.WARM_ANNOTATION: T0}, **kwargs)


def test_a_cleaning_in_a_warm_namespace_gives_its_writer_a_wait_token_and_stays_on_when_done():
    idle = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}
    started = m.decide(host(m.DEPROVISIONING), idle, m.Context(**{**ctx().__dict__, "new_token": TOKEN}))
    assert ("publish", "clean", TOKEN, "metadata", WAIT) in started.actions
    op = json.loads(started.annotations[m.OPERATION_ANNOTATION])
    assert (op["token"], op["wait"]) == (TOKEN, WAIT)
    cleaning = host(m.DEPROVISIONING, {m.OPERATION_ANNOTATION: json.dumps(op)})
    config = {"inserted": True, "image": "http://127.0.0.1:2/media/x/config-drive.iso"}
    on = {**WARM_ON, m.MEDIA: {m.CD: DEPLOY_CD, m.CONFIG_DEVICE: config}}
    finished = m.decide(cleaning, {**on, m.CALLBACK: {"status": "success", "message": "cleaned"}}, ctx(now=T1))
    # Kept on: no power action, the CD (the running system's root) stays; the finished job's drive and token go.
    assert ("eject", m.CONFIG_DEVICE) in finished.actions and ("withdraw", TOKEN) in finished.actions
    assert not [a for a in finished.actions if a[0] == "power" or a == ("eject", m.CD) or a == ("withdraw", WAIT)]
    cleaned_op = json.loads(finished.annotations[m.OPERATION_ANNOTATION])
    assert cleaned_op["cleaned"] is True and cleaned_op["wait"] == WAIT
    done = m.decide(host(m.DEPROVISIONING, {m.OPERATION_ANNOTATION: json.dumps(cleaned_op)}), WARM_ON, ctx(now=T1))
    assert done.state == m.AVAILABLE and done.status["poweredOn"] is True
    assert json.loads(done.annotations[m.OPERATION_ANNOTATION]) == {"kind": m.WARM, "token": WAIT, "since": T1}
    assert done.annotations[metal3.WARM_ANNOTATION] == T1
    assert m.conditions.find(done.status["conditions"], m.CLEANED_CONDITION)["reason"] == "MetadataCleaned"


def test_a_full_pool_or_a_dead_writer_ends_the_cleaning_powered_off_as_before():
    op = {"kind": "clean", "token": TOKEN, "wait": WAIT, "started": T0, "off": T0, "powered": True}
    cleaning = host(m.DEPROVISIONING, {m.OPERATION_ANNOTATION: json.dumps(op)})
    success = {m.CALLBACK: {"status": "success", "message": "cleaned"}}
    full = m.decide(cleaning, {**WARM_ON, **success}, ctx(now=T1, room=False))
    assert ("power", "ForceOff") in full.actions and ("withdraw", WAIT) in full.actions
    assert "wait" not in json.loads(full.annotations[m.OPERATION_ANNOTATION])
    cleaned = {"kind": "clean", "cleaned": True, "wait": WAIT}
    off = {**WARM_ON, m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}
    done = m.decide(host(m.DEPROVISIONING, {m.OPERATION_ANNOTATION: json.dumps(cleaned)}), off, ctx(now=T1))
    assert done.state == m.AVAILABLE and ("withdraw", WAIT) in done.actions
    assert metal3.WARM_ANNOTATION not in done.annotations


def test_a_warm_host_stays_on_and_is_only_polled():
    step = m.decide(warm_host(), WARM_ON, ctx())
    assert step.actions == [] and step.state == m.AVAILABLE
    assert step.poll_after == SETTINGS.power_poll_interval and step.requeue_after is None


def test_a_warm_host_found_off_or_beyond_the_pool_cools_down():
    lost = m.decide(warm_host(), {**WARM_ON, m.POWER: "Off"}, ctx())
    assert lost.event[:2] == ("Warning", "WarmHostLost")
    assert ("withdraw", WAIT) in lost.actions and ("eject", m.CD) in lost.actions and ("clear_boot",) in lost.actions
    assert lost.annotations == {m.OPERATION_ANNOTATION: None, metal3.WARM_ANNOTATION: None}
    shrunk = m.decide(warm_host(), WARM_ON, ctx(room=False))
    assert shrunk.event[1] == "WarmHostCooled" and ("power", "ForceOff") in shrunk.actions


def test_a_warm_host_wanted_for_a_live_iso_or_without_an_image_cools_first():
    for wanted in (warm_host(online=True, image=LIVE), warm_host(online=True, consumerRef=CONSUMER)):
        step = m.decide(wanted, WARM_ON, ctx())
        assert step.state == m.AVAILABLE and ("power", "ForceOff") in step.actions, step
        assert metal3.IN_USE_ANNOTATION not in step.annotations


def test_a_disk_image_on_a_warm_host_is_handed_to_its_writer_under_a_fresh_token():
    bound = warm_host(online=True, image=DISK, consumerRef=CONSUMER)
    handed = m.decide(bound, WARM_ON, ctx())
    # The job goes with the transition: no media, no boot override, no power action.
    assert handed.state == m.PROVISIONING
    assert handed.actions == [("publish", "deploy", JOB), ("handoff", WAIT, JOB)]
    op = json.loads(handed.annotations[m.OPERATION_ANNOTATION])
    assert (op["kind"], op["token"], op["warm"]) == ("deploy", JOB, WAIT) and JOB != WAIT
    assert handed.annotations[metal3.WARM_ANNOTATION] is None
    assert handed.requeue_after == 1

    in_flight = host(m.PROVISIONING, {m.OPERATION_ANNOTATION: json.dumps(op)}, online=True, image=DISK)
    assert m.WARM_ACK in m.observations(in_flight, ctx()) and m.CALLBACK in m.observations(in_flight, ctx())
    # Taken (the acknowledgement is there) or not yet: nothing to do, nothing written, look again in a second.
    for ack in (None, {"status": "success"}):
        waiting = m.decide(in_flight, {**WARM_ON, m.WARM_ACK: ack, m.CALLBACK: None}, ctx(now=T1))
        assert waiting.actions == [] and waiting.annotations == {} and waiting.requeue_after == 1
    # Taken, the pickup deadline long past: the writer is at work, no fallback.
    working = m.decide(in_flight, {**WARM_ON, m.WARM_ACK: {"status": "success"}, m.CALLBACK: None}, ctx(now=T_LATE))
    assert working.event is None and working.actions == []

    done = m.decide(in_flight, {**WARM_ON, m.CALLBACK: {"status": "success", "message": "written"}}, ctx(now=T1))
    assert done.state == m.PROVISIONED
    assert ("withdraw", JOB) in done.actions and ("withdraw", WAIT) in done.actions
    assert ("eject", m.CD) in done.actions and ("clear_boot",) in done.actions
    assert done.actions[-1] == ("power", "ForceRestart")  # into the written disk


def test_a_warm_writer_that_does_not_take_its_job_falls_back_to_the_deploy_iso():
    op = {"kind": "deploy", "url": DISK["url"], "started": T0, "token": JOB, "warm": WAIT}
    handed = host(m.PROVISIONING, {m.OPERATION_ANNOTATION: json.dumps(op)}, online=True, image=DISK)
    waiting = m.decide(handed, {**WARM_ON, m.WARM_ACK: None, m.CALLBACK: None}, ctx(now=T1))
    assert waiting.actions == [] and waiting.requeue_after == 1
    late = m.decide(handed, {**WARM_ON, m.WARM_ACK: None, m.CALLBACK: None}, ctx(now=T_LATE))
    assert late.event[:2] == ("Warning", "WarmFallback") and "within 20s" in late.event[2]
    # Both tokens withdrawn, then the usual path from its start: powered off before any new token exists.
    assert late.actions == [("withdraw", JOB), ("withdraw", WAIT), ("power", "ForceOff")]
    fallback = json.loads(late.annotations[m.OPERATION_ANNOTATION])
    assert "token" not in fallback and "warm" not in fallback and fallback["kind"] == "deploy"


def test_a_warm_host_killed_mid_job_falls_back_without_losing_the_deploy():
    op = {"kind": "deploy", "url": DISK["url"], "started": T0, "token": JOB, "warm": WAIT}
    running = host(m.PROVISIONING, {m.OPERATION_ANNOTATION: json.dumps(op)}, online=True, image=DISK)
    off = {**WARM_ON, m.POWER: "Off", m.CALLBACK: None, m.WARM_ACK: {"status": "success"}}
    step = m.decide(running, off, m.Context(**{**ctx(now=T1).__dict__, "new_token": TOKEN}))
    assert step.event[1] == "WarmFallback" and "powered off" in step.event[2]
    assert step.state == m.PROVISIONING and step.status.get("operationalStatus") != "error"
    # Off already: a fresh token, the deploy ISO (still in), the config drive, a one-time boot from CD, power on.
    assert step.actions[:3] == [("withdraw", JOB), ("withdraw", WAIT), ("publish", "deploy", TOKEN)]
    assert ("power", "On") in step.actions and ("boot_once", "Cd", "UEFI") not in step.actions  # target Cd already
    assert json.loads(step.annotations[m.OPERATION_ANNOTATION])["token"] == TOKEN


def test_tokens_of_an_operation_are_all_withdrawn_at_deletion():
    op = {"kind": "deploy", "token": JOB, "warm": WAIT}
    h = host(m.DELETING, {m.OPERATION_ANNOTATION: json.dumps(op)})
    h["metadata"].update(deletionTimestamp=T0, finalizers=[m.FINALIZER])
    step = m.decide(h, {}, ctx())
    assert ("withdraw", JOB) in step.actions and ("withdraw", WAIT) in step.actions


def test_the_pool_size_is_a_count_or_a_share_and_a_bad_value_keeps_none_warm():
    assert warm.pool_size(None, 10) == (0, "")
    assert warm.pool_size("3", 10) == (3, "")
    assert warm.pool_size("25%", 10) == (2, "")
    size, problem = warm.pool_size("lots", 10)
    assert size == 0 and warm.POOL_ANNOTATION in problem and "'lots'" in problem
    assert warm.pool_size("150%", 10)[0] == 0
    pool = warm.Pool({"infra": 1}, {"infra": 0})
    assert pool.offered("infra") and pool.room("infra") and not pool.offered("other")
    pool.count("infra", True)
    assert not pool.room("infra")


def test_a_warm_handoff_woken_by_callbacks_is_looked_at_when_its_pickup_or_callback_timeout_falls_due():
    """The acknowledgement and the callback wake the caller (callback_events): the step waits for them, but no longer
    than the pickup deadline (to fall back in time) and, once taken, the safety net's interval."""
    settings = m.Settings(**{**SETTINGS.__dict__, "callback_events": True})
    woken = m.Context(**{**ctx(now=T1).__dict__, "settings": settings})
    op = {"kind": "deploy", "url": DISK["url"], "started": T0, "token": JOB, "warm": WAIT}
    handed = host(m.PROVISIONING, {m.OPERATION_ANNOTATION: json.dumps(op)}, online=True, image=DISK)
    waiting = m.decide(handed, {**WARM_ON, m.WARM_ACK: None, m.CALLBACK: None}, woken)
    # T1 is 5 s into the 20 s pickup window: looked at again once it has passed (and the second timestamps round to).
    assert waiting.actions == [] and waiting.requeue_after == SETTINGS.warm_pickup_timeout - 5 + 1
    taken = m.decide(handed, {**WARM_ON, m.WARM_ACK: {"status": "success"}, m.CALLBACK: None}, woken)
    assert taken.actions == [] and taken.requeue_after == m.defaults.CALLBACK_EVENTS_POLL
