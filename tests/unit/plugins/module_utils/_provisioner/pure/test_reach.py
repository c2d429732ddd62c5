"""Media no BMC can fetch (issue 38): judged on the settings alone; a deploy or cleaning given them fails at once."""

from __future__ import annotations

import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import machine as m
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import reach

T0 = "2026-11-23T10:00:00Z"
TOKEN = "A" * 43
SHIPPED = "http://metalclaim-media.metalclaim-system.svc:8082"  # config/manager's MEDIA_URL, its namespace expanded
WRITER = "http://127.0.0.1:1/writer.iso"
DISK = {"url": "http://192.0.2.1/img.qcow2", "format": "qcow2", "checksum": "0" * 64}
LIVE = {"url": "http://192.0.2.1/live.iso", "format": "live-iso"}
GOOD = {"goodCredentials": {"credentialsVersion": "7"}}
IDLE = {m.POWER: "On", m.BOOT: {"target": "None"}, m.MEDIA: {m.CD: {}, m.CONFIG_DEVICE: {}}}


@pytest.mark.parametrize(
    ("url", "host"),
    [
        (SHIPPED, "metalclaim-media.metalclaim-system.svc"),
        ("http://media.metalclaim-system.svc.cluster.local:8082", "media.metalclaim-system.svc.cluster.local"),
        ("http://Media.NS.SVC.cluster.local.:8082/", "media.ns.svc.cluster.local"),  # case, the root's dot
        ("http://media.cluster.local", "media.cluster.local"),
        ("http://metalclaim-media:8082", "metalclaim-media"),  # a Service's short name, through a pod's search path
        ("https://user:pw@metalclaim-media/x?sig=1", "metalclaim-media"),
        # What BMCs on a provisioning network can reach: addresses, the site's names, the devenv's loopback.
        ("http://127.0.0.1:8082", ""),
        ("http://192.0.2.10:8082", ""),
        ("http://[fd00::10]:8082", ""),
        ("http://localhost:8082", ""),
        ("http://media.localhost:8082", ""),
        ("http://2130706433:8082", ""),  # 127.0.0.1 as one number
        ("http://media.prov.example.com:8082", ""),
        ("http://media.svc.example.com", ""),  # "svc" in a site's own name is not the cluster's
        ("http://svc:8082", "svc"),
        # Not judged: nothing, or no host at all (what needs the URL says so).
        ("", ""),
        (None, ""),
        ("not a url", ""),
        ("http://[broken", ""),
    ],
)
def test_a_cluster_internal_host_is_told_from_what_bmcs_resolve(url, host):
    assert reach.cluster_host(url) == host


def test_the_problem_says_what_to_set_and_not_the_host_name():
    problem = reach.media_problem(SHIPPED, WRITER)
    assert problem.startswith("the media URL names a cluster-internal host (a name ending in .svc)")
    for setting in ("MEDIA_URL", "--media-url", "provisioner_media_url"):
        assert setting in problem
    assert "metalclaim-media" not in problem.replace("metalclaim-media Service", "")  # the tenant reads it too
    iso = reach.media_problem("http://192.0.2.10:8082", "http://images:8080/writer.iso")
    assert iso.startswith("the deploy ISO URL names a cluster-internal host (a name without a dot)")
    assert "--deploy-iso-url" in iso and "METALCLAIM_DEPLOY_ISO_URL" in iso and "provisioner_deploy_iso_url" in iso
    assert reach.media_problem("http://127.0.0.1:2", WRITER) == reach.media_problem("", None) == ""


def host(state, image=None, annotations=None, **spec):
    body = {
        "metadata": {"name": "bm-01", "namespace": "infrahost", "annotations": annotations or {}, "generation": 1},
        "spec": {"online": True, "bmc": {"address": "redfish+http://192.0.2.99/redfish/v1/Systems/1"}, **spec},
        "status": {"provisioning": {"state": state}, "operationalStatus": "OK", **GOOD},
    }
    if image:
        body["spec"]["image"] = image
    return body


def ctx(media_url=SHIPPED, deploy_iso_url=WRITER):
    settings = m.Settings(deploy_iso_url=deploy_iso_url, media_url=media_url)
    return m.Context(now=T0, settings=settings, credentials_version="7", new_token=TOKEN)


def test_a_disk_image_on_the_shipped_media_url_is_a_provisioning_error_before_anything_starts():
    step = m.decide(host(m.AVAILABLE, image=DISK), IDLE, ctx())
    assert step.state == m.AVAILABLE  # no slot taken, nothing published, no BMC touched
    assert step.actions == [] and m.OPERATION_ANNOTATION not in step.annotations
    assert (step.status["operationalStatus"], step.status["errorType"]) == ("error", m.PROVISIONING_ERROR)
    assert step.status["errorMessage"] == reach.media_problem(SHIPPED, WRITER)
    assert step.event == ("Warning", "Error", step.status["errorMessage"])
    assert step.requeue_after == m.backoff(1, ctx().settings)  # tried again after the backoff, as any error
    # The devenv's (and a site's) address: the deploy starts.
    assert m.decide(host(m.AVAILABLE, image=DISK), IDLE, ctx("http://127.0.0.1:2")).state == m.PROVISIONING


def test_a_live_iso_needs_no_media_server_and_is_not_judged_by_its_url():
    assert m.decide(host(m.AVAILABLE, image=LIVE), IDLE, ctx()).state == m.PROVISIONING


def test_a_deploy_in_flight_that_has_published_nothing_fails_at_once_powered_off():
    # Started before the settings were judged (an upgrade): its job has no token yet.
    op = {"kind": "deploy", "url": DISK["url"], "started": T0}
    h = host(m.PROVISIONING, image=DISK, annotations={m.OPERATION_ANNOTATION: json.dumps(op)})
    step = m.decide(h, IDLE, ctx())
    assert step.state == m.PROVISIONING and step.status["errorType"] == m.PROVISIONING_ERROR
    assert step.actions == [("power", "ForceOff")]  # nothing published or inserted
    assert step.annotations[m.OPERATION_ANNOTATION] is None  # the next try starts afresh
    assert step.status["poweredOn"] is False
    # A job that published already (its writer may have its drive) is left to its callback or its timeout.
    published = {**op, "token": "B" * 43, "off": T0, "powered": T0}
    h = host(m.PROVISIONING, image=DISK, annotations={m.OPERATION_ANNOTATION: json.dumps(published)})
    assert "errorType" not in m.decide(h, IDLE, ctx()).status


def test_cleaning_on_the_shipped_media_url_fails_at_once_and_never_hands_the_host_on():
    step = m.decide(host(m.DEPROVISIONING), IDLE, ctx())
    assert step.state == m.DEPROVISIONING and step.status["errorType"] == m.PROVISIONING_ERROR
    assert step.status["errorMessage"] == "cleaning: " + reach.media_problem(SHIPPED, WRITER)
    assert step.actions == [("power", "ForceOff")]  # the outgoing consumer's OS stops; nothing published
    # What deprovisioning had cleared of a deploy stays cleared (its token withdrawn).
    deploy = {"kind": "deploy", "url": DISK["url"], "started": T0, "token": "B" * 43}
    h = host(m.DEPROVISIONING, annotations={m.OPERATION_ANNOTATION: json.dumps(deploy)})
    step = m.decide(h, {**IDLE, m.POWER: "Off"}, ctx())
    assert step.actions == [("withdraw", "B" * 43)] and step.annotations[m.OPERATION_ANNOTATION] is None
    # Without a deploy ISO nothing is cleaned nor published: not judged, the condition says CleaningUnsupported.
    done = m.decide(host(m.DEPROVISIONING), {**IDLE, m.POWER: "Off"}, ctx(deploy_iso_url=None))
    assert done.state == m.AVAILABLE and "errorType" not in done.status
