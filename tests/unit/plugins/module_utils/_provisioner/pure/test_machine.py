"""The Redfish provisioner's BareMetalHost state machine: pure, step by step."""

from __future__ import annotations

import datetime
import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import machine as m

T0 = "2026-11-23T10:00:00Z"
T1 = "2026-11-23T10:00:30Z"
T2 = "2026-11-23T10:02:00Z"
TOKEN = "A" * 43
SETTINGS = m.Settings(
    deploy_iso_url="http://127.0.0.1:1/writer.iso", media_url="http://127.0.0.1:2", power_off_timeout=60
)


def host(state="", online=False, image=None, annotations=None, status=None, **spec):
    body = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": "bm-01", "namespace": "infrahost", "annotations": annotations or {}, "generation": 1},
        "spec": {
            "online": online,
            "bmc": {"address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1", "credentialsName": "bm-01-bmc"},
            **spec,
        },
        "status": {"provisioning": {"state": state}, "operationalStatus": "OK", **(status or {})},
    }
    if image:
        body["spec"]["image"] = image
    return body


def ctx(now=T0, settings=SETTINGS, **kwargs):
    kwargs.setdefault("credentials_version", "7")
    return m.Context(now=now, settings=settings, new_token=TOKEN, **kwargs)


LIVE = {"url": "http://127.0.0.1:3/live.iso", "format": "live-iso"}
DISK = {"url": "http://127.0.0.1:3/img.qcow2", "format": "qcow2", "checksum": "http://127.0.0.1:3/img.md5"}
GOOD = {"goodCredentials": {"credentialsVersion": "7"}}


def live_iso_after(step):
    """The host provisioning LIVE with the operation `step` recorded."""
    operation = step.annotations[m.OPERATION_ANNOTATION]
    return host(m.PROVISIONING, online=True, image=LIVE, status=GOOD, annotations={m.OPERATION_ANNOTATION: operation})


def test_a_new_host_starts_registering_and_gets_the_finalizer():
    step = m.decide(host(), {}, ctx())
    assert step.state == m.REGISTERING
    assert step.finalizer == "add"
    assert step.status["operationHistory"]["register"] == {"start": T0}


def test_registering_probes_then_inspects_and_records_the_secret_version_not_its_content():
    h = host(m.REGISTERING)
    assert m.observations(h, ctx()) == (m.PROBE,)
    step = m.decide(h, {m.PROBE: True}, ctx())
    assert step.state == m.INSPECTING
    assert step.status["goodCredentials"]["credentialsVersion"] == "7"
    assert step.status["goodCredentials"]["credentials"] == {"name": "bm-01-bmc", "namespace": "infrahost"}


def test_a_missing_secret_is_a_registration_error_that_backs_off_exponentially():
    h = host(m.REGISTERING)
    c = ctx(credentials_problem="BMC Secret bm-01-bmc not found in namespace infrahost", credentials_version=None)
    assert m.observations(h, c) == ()
    step = m.decide(h, {}, c)
    assert step.status["errorType"] == m.REGISTRATION_ERROR
    assert step.status["errorCount"] == 1
    assert step.status["operationalStatus"] == "error"
    assert step.requeue_after == 10
    assert step.event[0] == "Warning"
    errored = host(m.REGISTERING, status={**step.status, "lastUpdated": T0})
    assert m.waiting_for_backoff(errored, ctx(now=T0)) == 10
    assert m.waiting_for_backoff(errored, ctx(now=T1)) == 0
    again = m.decide(errored, {}, c)
    assert again.status["errorCount"] == 2 and again.requeue_after == 20
    assert again.event is None  # the same error again: no new Event


def test_backoff_doubles_up_to_the_cap():
    settings = m.Settings(backoff_base=5, backoff_cap=60)
    assert [m.backoff(n, settings) for n in range(6)] == [0, 5, 10, 20, 40, 60]


def test_a_successful_probe_clears_the_error():
    h = host(m.REGISTERING, status={"operationalStatus": "error", "errorType": "registration error", "errorCount": 3})
    step = m.decide(h, {m.PROBE: True}, ctx())
    assert step.status["operationalStatus"] == "OK"
    assert (step.status["errorType"], step.status["errorCount"]) == ("", 0)


def test_externally_provisioned_and_inspection_disabled_skip_inspection():
    assert m.decide(host(m.REGISTERING, externallyProvisioned=True), {m.PROBE: True}, ctx()).state == (
        m.EXTERNALLY_PROVISIONED
    )
    disabled = host(m.REGISTERING, annotations={m.INSPECT_ANNOTATION: "disabled"})
    assert m.decide(disabled, {m.PROBE: True}, ctx()).state == m.AVAILABLE


def test_inspection_writes_hardware_and_checks_the_boot_mac():
    hardware = {"nics": [{"name": "eth0", "mac": "52:54:00:00:00:01", "ip": "192.0.2.10"}]}
    h = host(m.INSPECTING, status=GOOD, bootMACAddress="52:54:00:00:00:01")
    assert m.observations(h, ctx()) == (m.INVENTORY,)
    step = m.decide(h, {m.INVENTORY: hardware}, ctx())
    assert step.state == m.AVAILABLE and step.hardware == hardware and step.status["hardware"] == hardware
    wrong = m.decide(host(m.INSPECTING, bootMACAddress="52:54:00:ff:ff:ff"), {m.INVENTORY: hardware}, ctx())
    assert wrong.status["errorType"] == m.INSPECTION_ERROR
    assert "52:54:00:ff:ff:ff" in wrong.status["errorMessage"]


def test_rotated_credentials_are_probed_again_in_any_state():
    h = host(m.PROVISIONED, online=True, image=LIVE, status={"goodCredentials": {"credentialsVersion": "6"}})
    assert m.PROBE in m.observations(h, ctx())
    step = m.decide(h, {m.PROBE: True, m.POWER: "On"}, ctx())
    assert step.status["goodCredentials"]["credentialsVersion"] == "7"


@pytest.mark.parametrize(
    ("online", "power", "action"),
    [(True, "Off", ("power", "On")), (False, "On", ("power", "GracefulShutdown")), (True, "On", None)],
)
def test_power_follows_online(online, power, action):
    step = m.decide(host(m.AVAILABLE, online=online, status=GOOD), {m.POWER: power}, ctx())
    assert step.actions == ([action] if action else [])
    assert step.status["poweredOn"] is (power == "On")


def test_a_soft_power_off_turns_hard_after_the_timeout():
    first = m.decide(host(m.PROVISIONED, image=LIVE, status=GOOD), {m.POWER: "On"}, ctx(now=T0))
    pending = first.annotations[m.POWER_OFF_ANNOTATION]
    h = host(m.PROVISIONED, image=LIVE, status=GOOD, annotations={m.POWER_OFF_ANNOTATION: pending})
    assert m.decide(h, {m.POWER: "On"}, ctx(now=T1)).actions == []  # still waiting for the soft one
    hard = m.decide(h, {m.POWER: "On"}, ctx(now=T2))
    assert hard.actions == [("power", "ForceOff")]
    off = m.decide(h, {m.POWER: "Off"}, ctx(now=T2))
    assert off.annotations == {m.POWER_OFF_ANNOTATION: None}


def test_a_reboot_powers_off_then_drops_the_annotation_so_online_powers_it_on():
    annotations = {m.REBOOT_ANNOTATION: ""}
    h = host(m.PROVISIONED, online=True, image=LIVE, status=GOOD, annotations=annotations)
    assert m.decide(h, {m.POWER: "On"}, ctx()).actions == [("power", "GracefulShutdown")]
    off = m.decide(h, {m.POWER: "Off"}, ctx())
    assert off.annotations[m.REBOOT_ANNOTATION] is None and off.actions == []
    back = m.decide(host(m.PROVISIONED, online=True, image=LIVE, status=GOOD), {m.POWER: "Off"}, ctx())
    assert back.actions == [("power", "On")]


def test_a_hard_reboot_and_a_keyed_reboot_that_holds_the_host_off():
    hard = host(
        m.PROVISIONED, online=True, image=LIVE, status=GOOD, annotations={m.REBOOT_ANNOTATION: '{"mode":"hard"}'}
    )
    assert m.decide(hard, {m.POWER: "On"}, ctx()).actions == [("power", "ForceOff")]
    held = host(m.PROVISIONED, online=True, image=LIVE, status=GOOD, annotations={m.REBOOT_ANNOTATION + "/fw": ""})
    step = m.decide(held, {m.POWER: "Off"}, ctx())
    assert step.actions == [] and m.REBOOT_ANNOTATION + "/fw" not in step.annotations  # held off until removed


def test_provisioning_starts_with_an_image_and_online_and_waits_for_a_slot():
    assert m.decide(host(m.AVAILABLE, image=LIVE, status=GOOD), {m.POWER: "Off"}, ctx()).state == m.AVAILABLE
    step = m.decide(host(m.AVAILABLE, online=True, image=LIVE, status=GOOD), {m.POWER: "Off"}, ctx())
    assert step.state == m.PROVISIONING and step.status["lastAttemptedImage"] == LIVE
    delayed = m.decide(host(m.AVAILABLE, online=True, image=LIVE, status=GOOD), {m.POWER: "Off"}, ctx(slot_free=False))
    assert delayed.state == m.AVAILABLE and delayed.status["operationalStatus"] == "delayed"


def test_a_live_iso_is_inserted_booted_once_and_powered_then_confirmed():
    h = host(m.PROVISIONING, online=True, image=LIVE, status=GOOD)
    assert set(m.observations(h, ctx())) == {m.POWER, m.BOOT, m.MEDIA, m.firmware.FIRMWARE}
    observed = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {"inserted": False}}}
    step = m.decide(h, observed, ctx())
    assert step.actions == [("insert", m.CD, LIVE["url"]), ("boot_once", "Cd", "UEFI"), ("power", "On")]
    assert step.state == m.PROVISIONING
    in_flight = live_iso_after(step)
    # The emulator reports a "Once" override as "Continuous": only the target counts.
    seen = {
        m.POWER: "On",
        m.BOOT: {"target": "Cd", "enabled": "Continuous"},
        m.MEDIA: {m.CD: {"inserted": True, "image": LIVE["url"]}},
    }
    done = m.decide(in_flight, seen, ctx(now=T1))
    assert done.state == m.PROVISIONED and done.actions == []
    assert done.status["provisioning"]["image"] == LIVE
    assert done.annotations == {m.OPERATION_ANNOTATION: None}
    # Powered but the media is not confirmed yet: no second power action, no transition.
    half = m.decide(in_flight, {**seen, m.MEDIA: {m.CD: {"inserted": False}}}, ctx(now=T1))
    assert half.state == m.PROVISIONING and half.actions == [("insert", m.CD, LIVE["url"])]


def test_starting_provisioning_or_waiting_for_a_slot_reads_nothing_from_the_bmc():
    starting = host(m.AVAILABLE, online=True, image=LIVE, status=GOOD)
    assert m.observations(starting, ctx()) == ()
    assert m.decide(starting, {}, ctx()).state == m.PROVISIONING
    assert m.decide(starting, {}, ctx(slot_free=False)).status["operationalStatus"] == "delayed"
    # Anything else an available host may do depends on its power: read it.
    assert m.observations(host(m.AVAILABLE, image=LIVE, status=GOOD), ctx()) == (m.POWER,)
    bad = {"url": "file:///etc/passwd", "format": "live-iso"}
    assert m.observations(host(m.AVAILABLE, online=True, image=bad, status=GOOD), ctx()) == (m.POWER,)
    warm = host(
        m.AVAILABLE, online=True, image=DISK, status=GOOD, annotations={m.OPERATION_ANNOTATION: '{"kind":"warm"}'}
    )
    assert m.POWER in m.observations(warm, ctx())


def test_a_booting_live_iso_polls_power_alone_until_it_is_on():
    start = host(m.PROVISIONING, online=True, image=LIVE, status=GOOD)
    assert m.media_devices(start) == (m.CD,)  # the config drive is a disk image's
    assert m.media_devices(host(m.PROVISIONING, online=True, image=DISK, status=GOOD)) == (m.CD, m.CONFIG_DEVICE)
    assert not m.waits_for_power_on(start)  # not powered yet: everything is read
    assert not m.deferred(start, m.MEDIA, {m.POWER: "Off"})
    observed = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {"inserted": False}}}
    powered = m.decide(start, observed, ctx())
    booting = live_iso_after(powered)
    assert m.waits_for_power_on(booting)
    assert [n for n in m.observations(booting, ctx()) if not m.deferred(booting, n, {m.POWER: "Off"})] == [
        m.POWER,
        m.firmware.FIRMWARE,
    ]
    assert not m.deferred(booting, m.MEDIA, {m.POWER: "On"}) and not m.deferred(booting, m.BOOT, {m.POWER: "On"})
    assert powered.requeue_after == 2
    wait = m.decide(booting, {m.POWER: "Off"}, ctx(now="2026-11-23T10:00:12Z"))
    assert wait.state == m.PROVISIONING and wait.actions == [] and wait.requeue_after == 4  # a third of the time
    assert m.OPERATION_ANNOTATION not in wait.annotations  # the operation stays as it was
    # Another image: the operation is not this one's, nothing is deferred.
    other = {**LIVE, "url": "http://127.0.0.1:3/other.iso"}
    changed = host(
        m.PROVISIONING, online=True, image=other, status=GOOD, annotations=booting["metadata"]["annotations"]
    )
    assert not m.waits_for_power_on(changed)


def test_a_booting_host_is_read_again_after_a_third_of_the_time_since_it_was_powered():
    powered = {"kind": m.LIVE_ISO, "powered": T0}
    assert m.boot_poll(powered, ctx(now="2026-11-23T10:00:03Z")) == 2  # every 2 s through most BMCs' delays
    assert m.boot_poll(powered, ctx(now="2026-11-23T10:00:15Z")) == 5
    assert m.boot_poll(powered, ctx(now=T2)) == 10  # a slow BMC: every 10 s at most
    assert m.boot_poll({"kind": m.LIVE_ISO, "powered": True}, ctx()) == 2  # recorded before the time was kept
    # A two-minute power-on self-test: the reads until it is seen On (the guide's "about 18 instead of 60").
    elapsed, reads = 2.0, 1
    while elapsed < 120:
        stamp = (m.parse_time(T0) + datetime.timedelta(seconds=int(elapsed))).strftime("%Y-%m-%dT%H:%M:%SZ")
        elapsed += m.boot_poll(powered, ctx(now=stamp))
        reads += 1
    assert 16 <= reads <= 19, reads


def test_a_running_host_is_reset_into_the_new_media():
    h = host(m.PROVISIONING, online=True, image=LIVE, status=GOOD)
    observed = {m.POWER: "On", m.BOOT: {"target": "Cd"}, m.MEDIA: {m.CD: {"inserted": True, "image": LIVE["url"]}}}
    assert m.decide(h, observed, ctx()).actions == [("power", "ForceRestart")]


def test_disk_images_need_a_deploy_iso_and_a_checksum():
    no_writer = ctx(settings=m.Settings())
    step = m.decide(host(m.AVAILABLE, online=True, image=DISK, status=GOOD), {m.POWER: "Off"}, no_writer)
    assert step.status["errorType"] == m.PROVISIONING_ERROR and "deploy ISO" in step.status["errorMessage"]
    no_sum = {k: v for k, v in DISK.items() if k != "checksum"}
    step = m.decide(host(m.AVAILABLE, online=True, image=no_sum, status=GOOD), {m.POWER: "Off"}, ctx())
    assert "checksum" in step.status["errorMessage"]


def test_a_disk_image_publishes_a_config_drive_boots_the_writer_and_waits_for_its_callback():
    h = host(m.PROVISIONING, online=True, image=DISK, status=GOOD)
    observed = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}
    step = m.decide(h, observed, ctx())
    config_url = m.config_drive_url(SETTINGS, TOKEN)
    assert step.actions == [
        ("publish", "deploy", TOKEN),
        ("insert", m.CD, SETTINGS.deploy_iso_url),
        ("insert", m.CONFIG_DEVICE, config_url),
        ("boot_once", "Cd", "UEFI"),
        ("power", "On"),
    ]
    op = json.loads(step.annotations[m.OPERATION_ANNOTATION])
    assert op["token"] == TOKEN and op["kind"] == "deploy" and op["powered"] == T0  # when: boot_poll
    waiting = host(
        m.PROVISIONING, online=True, image=DISK, status=GOOD, annotations={m.OPERATION_ANNOTATION: json.dumps(op)}
    )
    assert m.CALLBACK in m.observations(waiting, ctx())
    media = {
        m.CD: {"inserted": True, "image": SETTINGS.deploy_iso_url},
        m.CONFIG_DEVICE: {"inserted": True, "image": config_url},
    }
    booted = {m.POWER: "On", m.BOOT: {"target": "Cd"}, m.MEDIA: media}
    assert m.decide(waiting, {**booted, m.CALLBACK: None}, ctx(now=T1)).actions == []
    done = m.decide(waiting, {**booted, m.CALLBACK: {"status": "success"}}, ctx(now=T1))
    assert done.state == m.PROVISIONED
    assert done.actions == [
        ("eject", m.CD),
        ("eject", m.CONFIG_DEVICE),
        ("clear_boot",),
        ("withdraw", TOKEN),
        ("power", "ForceRestart"),
    ]
    failed = m.decide(
        waiting, {**booted, m.CALLBACK: {"status": "failure", "message": "checksum mismatch"}}, ctx(now=T1)
    )
    assert failed.state == m.PROVISIONING and failed.status["errorType"] == m.PROVISIONING_ERROR
    assert "checksum mismatch" in failed.status["errorMessage"]
    assert ("withdraw", TOKEN) in failed.actions and failed.annotations[m.OPERATION_ANNOTATION] is None
    late = m.decide(waiting, {**booted, m.CALLBACK: None}, ctx(now="2026-11-23T11:00:00Z"))
    assert "no callback" in late.status["errorMessage"]
    # Powered off, and said so at once (a host in error is not observed again before its backoff ends).
    for gave_up in (failed, late):
        assert ("power", "ForceOff") in gave_up.actions and gave_up.status["poweredOn"] is False


def test_removing_the_image_deprovisions_and_without_a_writer_says_disks_were_not_wiped():
    step = m.decide(host(m.PROVISIONED, online=True, status=GOOD), {m.POWER: "On"}, ctx())
    assert step.state == m.DEPROVISIONING
    h = host(m.DEPROVISIONING, status=GOOD)
    busy = {m.POWER: "On", m.BOOT: {"target": "Cd"}, m.MEDIA: {m.CD: {"inserted": True, "image": LIVE["url"]}}}
    no_writer = ctx(settings=m.Settings())
    assert m.decide(h, busy, no_writer).actions == [("eject", m.CD), ("clear_boot",), ("power", "ForceOff")]
    idle = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {"inserted": False}}}
    done = m.decide(h, idle, no_writer)
    assert done.state == m.AVAILABLE
    cleaned = done.status["conditions"][0]
    assert (cleaned["type"], cleaned["status"], cleaned["reason"]) == ("Cleaned", "False", "CleaningUnsupported")
    assert "NOT wiped" in cleaned["message"]


def test_deprovisioning_with_a_writer_cleans_metadata_first():
    h = host(m.DEPROVISIONING, status=GOOD)
    idle = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}
    step = m.decide(h, idle, ctx())
    assert step.actions[0] == ("publish", "clean", TOKEN, "metadata")
    op = json.loads(step.annotations[m.OPERATION_ANNOTATION])
    assert op["kind"] == "clean"
    cleaning = host(m.DEPROVISIONING, status=GOOD, annotations={m.OPERATION_ANNOTATION: json.dumps(op)})
    report = "metadata cleaned on /dev/vda; metadata cleaned on /dev/vdb"
    finished = m.decide(
        cleaning, {**idle, m.POWER: "On", m.CALLBACK: {"status": "success", "message": report}}, ctx(now=T1)
    )
    assert json.loads(finished.annotations[m.OPERATION_ANNOTATION])["cleaned"] is True
    cleaned = host(
        m.DEPROVISIONING,
        status=GOOD,
        annotations={m.OPERATION_ANNOTATION: finished.annotations[m.OPERATION_ANNOTATION]},
    )
    done = m.decide(cleaned, idle, ctx(now=T1))
    assert done.state == m.AVAILABLE
    assert done.status["conditions"][0]["reason"] == "MetadataCleaned"
    assert done.status["conditions"][0]["message"].endswith(report)  # per disk, as the writer reported
    disabled = host(m.DEPROVISIONING, status=GOOD, automatedCleaningMode="disabled")
    assert m.decide(disabled, idle, ctx()).status["conditions"][0]["reason"] == "CleaningDisabled"


def _clean_to_the_end(h: dict, settings: m.Settings, report: str) -> tuple:
    """A deprovisioning host cleaned by the writer: (the publish action, the host once available)."""
    idle = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}
    step = m.decide(h, idle, ctx(settings=settings))
    publish = next(action for action in step.actions if action[0] == "publish")
    annotations = {**h["metadata"]["annotations"], m.OPERATION_ANNOTATION: step.annotations[m.OPERATION_ANNOTATION]}
    cleaning = host(m.DEPROVISIONING, status=GOOD, annotations=annotations)
    callback = {m.CALLBACK: {"status": "success", "message": report}}
    finished = m.decide(cleaning, {**idle, m.POWER: "On", **callback}, ctx(now=T1, settings=settings))
    annotations[m.OPERATION_ANNOTATION] = finished.annotations[m.OPERATION_ANNOTATION]
    done = m.decide(host(m.DEPROVISIONING, status=GOOD, annotations=annotations), idle, ctx(now=T1, settings=settings))
    assert done.state == m.AVAILABLE
    return publish, done


def test_full_erase_is_asked_of_the_writer_and_reported_per_disk():
    """Issue 22: the infra team's full-erase mode (Ironic's erase_devices) reaches the writer's instructions, and the
    Cleaned condition says every byte was zeroed, per disk as the writer reported."""
    report = "every byte zeroed on /dev/vda (3072 MiB); every byte zeroed on /dev/vdb (1024 MiB)"
    full = m.Settings(**{**SETTINGS.__dict__, "cleaning_erase": "full"})
    publish, done = _clean_to_the_end(host(m.DEPROVISIONING, status=GOOD), full, report)
    assert publish == ("publish", "clean", TOKEN, "full")
    cleaned = m.conditions.find(done.status["conditions"], m.CLEANED_CONDITION)
    assert (cleaned["status"], cleaned["reason"]) == ("True", "FullyErased")
    assert cleaned["message"] == f"every byte of every disk overwritten with zeros: {report}"


def test_the_host_annotation_asks_for_full_erase_and_never_weakens_the_provisioners_setting():
    annotated = {m.ERASE_ANNOTATION: "full"}
    publish, done = _clean_to_the_end(host(m.DEPROVISIONING, status=GOOD, annotations=annotated), SETTINGS, "r")
    assert publish[3] == "full"
    assert m.conditions.find(done.status["conditions"], m.CLEANED_CONDITION)["reason"] == "FullyErased"
    full = m.Settings(**{**SETTINGS.__dict__, "cleaning_erase": "full"})
    weaker = {m.ERASE_ANNOTATION: "metadata"}
    publish, _done = _clean_to_the_end(host(m.DEPROVISIONING, status=GOOD, annotations=weaker), full, "r")
    assert publish[3] == "full"  # the stronger mode wins
    publish, done = _clean_to_the_end(host(m.DEPROVISIONING, status=GOOD), SETTINGS, "r")
    assert publish[3] == "metadata"
    assert m.conditions.find(done.status["conditions"], m.CLEANED_CONDITION)["reason"] == "MetadataCleaned"


def test_an_erase_annotation_with_another_value_stops_cleaning_rather_than_clean_less():
    h = host(m.DEPROVISIONING, status=GOOD, annotations={m.ERASE_ANNOTATION: "Full "})
    step = m.decide(h, {m.POWER: "On", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}, ctx())
    assert step.state == m.DEPROVISIONING and step.status["errorType"] == m.PROVISIONING_ERROR
    assert "metalclaim.io/cleaning-erase" in step.status["errorMessage"]
    assert step.actions == [("power", "ForceOff")]  # powered off, nothing published, never available


def test_a_mode_changed_before_the_writer_reported_starts_a_new_job():
    # Cleaning started in metadata mode; the infra team asks for full erase before the writer called back.
    op = {"kind": "clean", "started": T0, "erase": "metadata", "token": "B" * 43, "off": T0}
    h = host(m.DEPROVISIONING, status=GOOD, annotations={m.OPERATION_ANNOTATION: json.dumps(op)})
    h["metadata"]["annotations"][m.ERASE_ANNOTATION] = "full"
    step = m.decide(h, {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}, ctx())
    assert step.actions[:2] == [("withdraw", "B" * 43), ("publish", "clean", TOKEN, "full")]
    assert json.loads(step.annotations[m.OPERATION_ANNOTATION])["erase"] == "full"


def test_deletion_powers_off_then_lets_go():
    h = host(m.PROVISIONED, image=LIVE, status=GOOD)
    h["metadata"].update(deletionTimestamp=T0, finalizers=[m.FINALIZER])
    assert m.decide(h, {}, ctx()).state == m.POWERING_OFF_BEFORE_DELETE
    h["status"]["provisioning"]["state"] = m.POWERING_OFF_BEFORE_DELETE
    assert m.observations(h, ctx()) == (m.POWER,)
    assert m.decide(h, {m.POWER: "On"}, ctx()).actions == [("power", "ForceOff")]
    gone = m.decide(h, {m.POWER: "Off"}, ctx())
    assert (gone.state, gone.finalizer) == (m.DELETING, "remove")


def test_paused_detached_and_other_provisioners_hosts_are_left_alone():
    paused = host(m.PROVISIONED, online=True, annotations={m.PAUSED_ANNOTATION: ""}, status=GOOD)
    assert m.observations(paused, ctx()) == ()
    assert m.decide(paused, {}, ctx()).skipped == "paused"
    detached = host(m.PROVISIONED, annotations={m.DETACHED_ANNOTATION: ""}, status=GOOD)
    assert m.decide(detached, {}, ctx()).status == {"operationalStatus": "detached"}
    assert not m.is_ours(host(annotations={m.PROVISIONER_ANNOTATION: "metal3"}), {})
    assert not m.is_ours(host(), {m.PROVISIONER_ANNOTATION: "metal3"})
    assert m.is_ours(host(annotations={m.PROVISIONER_ANNOTATION: "metalclaim"}), {m.PROVISIONER_ANNOTATION: "metal3"})
    assert not m.is_ours(
        host(annotations={m.PROVISIONER_ANNOTATION: "metal3"}), {m.PROVISIONER_ANNOTATION: "metalclaim"}
    )


def test_only_hosts_that_opt_in_are_ours():
    ours = {m.PROVISIONER_ANNOTATION: m.OURS}
    assert m.is_ours(host(), ours)  # the namespace opts in
    assert m.is_ours(host(annotations=ours), {})  # the host does
    assert not m.is_ours(host(), {})  # neither: Metal3's BMO may be driving it
    assert not m.is_ours(host(), {"metalclaim.io/role": "infrastructure"})
    held = host(m.PROVISIONED)
    held["metadata"]["finalizers"] = [m.FINALIZER]
    assert m.is_ours(held, {})  # unmarked, but ours since before: finished, not abandoned
    assert not m.is_ours(held, {m.PROVISIONER_ANNOTATION: "metal3"})


def _variants():
    """Hosts in every state, paused/detached/plain, deleted or not, with and without a BMC address."""
    states = [m.NONE, m.UNMANAGED, m.REGISTERING, m.INSPECTING, m.AVAILABLE, m.PROVISIONING, m.PROVISIONED]
    states += [m.DEPROVISIONING, m.EXTERNALLY_PROVISIONED, m.POWERING_OFF_BEFORE_DELETE, m.DELETING]
    for state in states:
        for marks in ({}, {m.PAUSED_ANNOTATION: ""}, {m.DETACHED_ANNOTATION: ""}):
            for deleted in (False, True):
                for address in (True, False):
                    h = host(state, online=True, image=LIVE, annotations=dict(marks), status=GOOD)
                    if deleted:
                        h["metadata"].update(deletionTimestamp=T0, finalizers=[m.FINALIZER])
                    if not address:
                        del h["spec"]["bmc"]["address"]
                    yield h


def test_the_bmc_secret_is_needed_exactly_when_the_step_may_use_it():
    unread = ctx(credentials_version=None)  # what the edge passes when it did not read the Secret
    needed = 0
    for h in _variants():
        if m.needs_credentials(h):
            needed += 1
            continue
        # Without the Secret the step reads nothing from the BMC and decides as if it had it.
        assert m.observations(h, unread) == (), h
        for observed in ({}, {m.POWER: "Off"}):
            with_secret, without = m.decide(h, observed, ctx()), m.decide(h, observed, unread)
            assert with_secret == without, h
            assert not any(a[0] in ("power", "insert", "eject", "boot_once", "clear_boot") for a in without.actions)
    assert needed  # registered, attached hosts do need it
    plain = host(m.AVAILABLE, status=GOOD)
    assert m.needs_credentials(plain)
    assert not m.needs_credentials(host(m.AVAILABLE, annotations={m.PAUSED_ANNOTATION: ""}, status=GOOD))
    assert not m.needs_credentials(host(m.AVAILABLE, annotations={m.DETACHED_ANNOTATION: ""}, status=GOOD))
    assert not m.needs_credentials(host())  # not registering yet


def test_a_host_whose_bmc_address_was_removed_is_deleted_without_a_power_off():
    h = host(m.POWERING_OFF_BEFORE_DELETE, status=GOOD)
    h["metadata"].update(deletionTimestamp=T0, finalizers=[m.FINALIZER])
    del h["spec"]["bmc"]["address"]
    assert m.observations(h, ctx()) == ()
    step = m.decide(h, {}, ctx())
    assert (step.state, step.finalizer, step.actions) == (m.DELETING, "remove", [])


def test_the_machines_states_and_annotations_are_metal3s():
    named = (
        m.NONE,
        m.UNMANAGED,
        m.REGISTERING,
        m.INSPECTING,
        m.AVAILABLE,
        m.PROVISIONING,
        m.PROVISIONED,
        m.DEPROVISIONING,
        m.EXTERNALLY_PROVISIONED,
        m.POWERING_OFF_BEFORE_DELETE,
        m.DELETING,
    )
    assert set(named) <= set(metal3.STATES)
    assert set(metal3.PROVISIONED_STATES) == {m.PROVISIONED, m.EXTERNALLY_PROVISIONED}
    assert m.AVAILABLE in metal3.FREE_STATES
    assert (m.PAUSED_ANNOTATION, m.DETACHED_ANNOTATION, m.REBOOT_ANNOTATION) == (
        metal3.PAUSED_ANNOTATION,
        metal3.DETACHED_ANNOTATION,
        metal3.REBOOT_ANNOTATION,
    )


def test_the_cleaned_condition_keeps_its_transition_time_while_its_status_holds():
    earlier = {"type": m.CLEANED_CONDITION, "status": "False", "reason": "CleaningUnsupported", "message": "x"}
    other = {"type": "Other", "status": "True", "reason": "R", "message": "", "lastTransitionTime": T0}
    idle = {m.POWER: "Off", m.BOOT: {"enabled": "Disabled"}, m.MEDIA: {}}
    h = host(m.DEPROVISIONING, status={"conditions": [other, {**earlier, "lastTransitionTime": T0}]})
    held = m.decide(h, idle, ctx(now=T2, settings=m.Settings()))
    cleaned = next(c for c in held.status["conditions"] if c["type"] == m.CLEANED_CONDITION)
    assert (cleaned["status"], cleaned["lastTransitionTime"], cleaned["observedGeneration"]) == ("False", T0, 1)
    assert other in held.status["conditions"] and len(held.status["conditions"]) == 2
    # One without a transition time gets the step's.
    untimed = host(m.DEPROVISIONING, status={"conditions": [earlier]})
    assert (
        m.decide(untimed, idle, ctx(now=T2, settings=m.Settings())).status["conditions"][0]["lastTransitionTime"] == T2
    )
    # Cleaned after all: the status flips, and so does the time.
    wiped = json.dumps({"kind": "clean", "cleaned": True})
    h["metadata"]["annotations"] = {m.OPERATION_ANNOTATION: wiped}
    flipped = m.decide(h, idle, ctx(now=T2))
    cleaned = next(c for c in flipped.status["conditions"] if c["type"] == m.CLEANED_CONDITION)
    assert (cleaned["status"], cleaned["lastTransitionTime"]) == ("True", T2)


# -- a host between two consumers (issue 22): never handed over warm or dirty -----------------------------------

CONSUMER = {"apiVersion": "metal3.io/v1alpha1", "kind": "HostClaim", "namespace": "tenant-a", "name": "a", "uid": "u-a"}


def test_an_imageless_host_is_marked_in_use_before_it_is_powered_on_for_a_consumer():
    # Durable before the power-on: if the mark could be lost after the host ran a tenant's OS, nothing would
    # make the host go through deprovisioning before its next consumer.
    h = host(m.AVAILABLE, online=True, status=GOOD, consumerRef=CONSUMER)
    step = m.decide(h, {m.POWER: "Off"}, ctx())
    assert step.actions == []
    assert json.loads(step.annotations[m.IN_USE_ANNOTATION]) == {"consumer": "u-a", "since": T0}
    marked = host(
        m.AVAILABLE,
        online=True,
        status=GOOD,
        consumerRef=CONSUMER,
        annotations={m.IN_USE_ANNOTATION: step.annotations[m.IN_USE_ANNOTATION]},
    )
    assert m.decide(marked, {m.POWER: "Off"}, ctx()).actions == [("power", "On")]
    # Found on already (the infra team powered it before binding): marked as well.
    assert (
        m.IN_USE_ANNOTATION
        in m.decide(host(m.AVAILABLE, status=GOOD, consumerRef=CONSUMER), {m.POWER: "On"}, ctx()).annotations
    )


def test_a_host_powered_on_under_a_consumer_is_deprovisioned_when_it_is_let_go_not_just_powered_off():
    mark = json.dumps({"consumer": "u-a", "since": T0})
    released = host(
        m.AVAILABLE, online=False, status=GOOD, consumerRef=CONSUMER, annotations={m.IN_USE_ANNOTATION: mark}
    )
    step = m.decide(released, {m.POWER: "On"}, ctx())
    assert step.state == m.DEPROVISIONING
    # The consumer changed behind our back (consumerRef cleared or rewritten by hand): deprovisioned as well.
    other = host(m.AVAILABLE, online=True, status=GOOD, annotations={m.IN_USE_ANNOTATION: mark})
    assert m.decide(other, {m.POWER: "On"}, ctx()).state == m.DEPROVISIONING
    # Its reboot annotation holds power off but is no release.
    rebooting = host(
        m.AVAILABLE,
        online=True,
        status=GOOD,
        consumerRef=CONSUMER,
        annotations={m.IN_USE_ANNOTATION: mark, metal3.REBOOT_ANNOTATION: ""},
    )
    assert m.decide(rebooting, {m.POWER: "On"}, ctx()).state == m.AVAILABLE


def test_deprovisioning_ends_with_the_in_use_mark_removed():
    mark = json.dumps({"consumer": "u-a", "since": T0})
    h = host(m.DEPROVISIONING, status=GOOD, annotations={m.IN_USE_ANNOTATION: mark})
    idle = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {"inserted": False}}}
    done = m.decide(h, idle, ctx(settings=m.Settings()))
    assert done.state == m.AVAILABLE
    assert done.annotations[m.IN_USE_ANNOTATION] is None


@pytest.mark.parametrize("state, kind", [(m.DEPROVISIONING, "clean"), (m.AVAILABLE, "deploy")])
def test_no_media_and_no_token_go_in_before_a_read_says_the_host_is_off(state, kind):
    # The outgoing OS, still running, would see a config drive hot-plugged with the callback URL and the token,
    # and could post success itself: the host would be marked cleaned (or deployed) without being written.
    h = host(state, online=True, image=DISK if kind == "deploy" else None, status=GOOD)
    if state == m.AVAILABLE:
        started = m.decide(h, {m.POWER: "On"}, ctx())
        assert started.state == m.PROVISIONING
        h = host(m.PROVISIONING, online=True, image=DISK, status=GOOD)
    running = {m.POWER: "On", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}
    step = m.decide(h, running, ctx())
    assert step.actions == [("power", "ForceOff")]
    op = json.loads(step.annotations[m.OPERATION_ANNOTATION])
    assert op["kind"] == kind and "token" not in op
    waiting = host(
        h["status"]["provisioning"]["state"],
        online=True,
        image=h["spec"].get("image"),
        status=GOOD,
        annotations={m.OPERATION_ANNOTATION: json.dumps(op)},
    )
    assert m.decide(waiting, {**running, m.POWER: "PoweringOff"}, ctx()).actions == []
    off = m.decide(waiting, {**running, m.POWER: "Off"}, ctx(now=T1))
    assert off.actions[0] == (("publish", kind, TOKEN, "metadata") if kind == "clean" else ("publish", kind, TOKEN))
    assert ("power", "On") in off.actions and ("power", "ForceRestart") not in off.actions
    assert json.loads(off.annotations[m.OPERATION_ANNOTATION])["off"] == T1


def test_power_is_read_again_at_a_bounded_interval_once_it_agrees():
    settled = m.decide(host(m.AVAILABLE, status=GOOD), {m.POWER: "Off"}, ctx())
    assert settled.requeue_after is None
    assert settled.poll_after == SETTINGS.power_poll_interval
    provisioned = m.decide(host(m.PROVISIONED, online=True, image=LIVE, status=GOOD), {m.POWER: "On"}, ctx())
    assert provisioned.poll_after == SETTINGS.power_poll_interval
    # Off behind our back: read, said, and powered on again.
    drifted = m.decide(host(m.PROVISIONED, online=True, image=LIVE, status=GOOD), {m.POWER: "Off"}, ctx())
    assert drifted.status["poweredOn"] is False and drifted.actions == [("power", "On")]


@pytest.mark.parametrize("url", ["file:///etc/shadow", "nfs://10.0.0.9/images/x.iso", "ftp://h/x.iso", "x.iso"])
def test_an_image_url_other_than_http_is_refused_before_any_bmc_fetches_it(url):
    for image in ({"url": url, "format": "live-iso"}, {**DISK, "url": url}):
        step = m.decide(host(m.AVAILABLE, online=True, image=image, status=GOOD), {m.POWER: "Off"}, ctx())
        assert step.status["errorType"] == m.PROVISIONING_ERROR
        assert step.status["errorMessage"] == "spec.image.url must be an http:// or https:// URL"
        assert not step.actions


def test_an_image_urls_credentials_and_signature_stay_out_of_events_and_last_attempted_image():
    secret_url = "https://user:s3cret@images.example.com/ubuntu.iso?X-Amz-Signature=abcdef"
    step = m.decide(
        host(m.AVAILABLE, online=True, image={"url": secret_url, "format": "live-iso"}, status=GOOD), {}, ctx()
    )
    assert step.state == m.PROVISIONING
    shown = json.dumps([step.event, step.status])
    assert "s3cret" not in shown and "abcdef" not in shown and "user:" not in shown
    assert step.status["lastAttemptedImage"]["url"] == "https://***@images.example.com/ubuntu.iso?***"
    assert m.shown_url("http://images.example.com/a.iso") == "http://images.example.com/a.iso"


def _writer_at_work(started=T0) -> dict:
    op = {"kind": "deploy", "url": DISK["url"], "started": started, "token": TOKEN, "powered": True}
    return host(
        m.PROVISIONING, online=True, image=DISK, status=GOOD, annotations={m.OPERATION_ANNOTATION: json.dumps(op)}
    )


def _booted() -> dict:
    media = {
        m.CD: {"inserted": True, "image": SETTINGS.deploy_iso_url},
        m.CONFIG_DEVICE: {"inserted": True, "image": m.config_drive_url(SETTINGS, TOKEN)},
    }
    return {m.POWER: "On", m.BOOT: {"target": "Cd"}, m.MEDIA: media, m.CALLBACK: None}


def test_a_writer_at_work_is_polled_unless_its_callback_wakes_the_caller():
    """By hand (no watcher) the callback is found by polling; woken by it (callback_events), the poll is a safety net,
    and a timeout falling due before it is looked at then."""
    polled = m.decide(_writer_at_work(), _booted(), ctx(now=T1))
    assert polled.actions == [] and polled.requeue_after == m.defaults.CALLBACK_POLL
    woken = m.Settings(**{**SETTINGS.__dict__, "callback_events": True})
    safety = m.decide(_writer_at_work(), _booted(), ctx(now=T1, settings=woken))
    assert safety.actions == [] and safety.requeue_after == m.defaults.CALLBACK_EVENTS_POLL
    assert m.defaults.CALLBACK_EVENTS_POLL > m.defaults.CALLBACK_POLL
    # The step that boots the writer (found off: published, media in, powered on) waits the same.
    off = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}
    started = m.decide(host(m.PROVISIONING, online=True, image=DISK, status=GOOD), off, ctx(settings=woken))
    assert started.actions[0] == ("publish", "deploy", TOKEN) and started.actions[-1] == ("power", "On")
    assert started.requeue_after == m.defaults.CALLBACK_EVENTS_POLL
    # 30 s left of a 60 s callback timeout (T1 is 30 s after T0): looked at when it falls due, not a minute later.
    short = m.Settings(**{**woken.__dict__, "callback_timeout": 60})
    assert m.decide(_writer_at_work(), _booted(), ctx(now=T1, settings=short)).requeue_after == 31
    # Never sooner than the poll by hand would be, however close the deadline.
    closer = m.Settings(**{**woken.__dict__, "callback_timeout": 31})
    assert (
        m.decide(_writer_at_work(), _booted(), ctx(now=T1, settings=closer)).requeue_after == m.defaults.CALLBACK_POLL
    )


def test_only_a_deprovisioning_that_wiped_the_disks_takes_the_uncleaned_mark_off():
    """Issue 40: the claim side marks a host released with its disks kept (node reuse); nothing but the wipe may end
    that mark, or the next tenant gets the last one's disks."""
    mark = json.dumps({"namespace": "t", "namespaceUID": "ns-uid", "claim": "c", "since": T0})
    idle = {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}
    op = {"kind": "clean", "cleaned": True, "off": T0}
    wiped = host(
        m.DEPROVISIONING,
        status=GOOD,
        annotations={m.OPERATION_ANNOTATION: json.dumps(op), metal3.UNCLEANED_ANNOTATION: mark},
    )
    done = m.decide(wiped, idle, ctx(now=T1))
    assert done.state == m.AVAILABLE and done.annotations[metal3.UNCLEANED_ANNOTATION] is None
    kept = host(
        m.DEPROVISIONING,
        status=GOOD,
        automatedCleaningMode="disabled",
        annotations={metal3.UNCLEANED_ANNOTATION: mark},
    )
    done = m.decide(kept, {m.POWER: "Off", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {"inserted": False}}}, ctx())
    assert done.state == m.AVAILABLE and metal3.UNCLEANED_ANNOTATION not in done.annotations
