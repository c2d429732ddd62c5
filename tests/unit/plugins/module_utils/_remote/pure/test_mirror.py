"""The remote claim mirror's plans: what crosses to the hardware cluster and what comes back."""

from __future__ import annotations

import datetime
import itertools
import json

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure import mirror as m

NOW = "2030-01-01T00:00:00Z"


def local(**spec) -> dict:
    return {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaim",
        "metadata": {"name": "web", "namespace": "cluster-ns", "uid": "u-1", "generation": 3, "annotations": {}},
        "spec": {"kind": "remote", "remote": {"kubeconfigSecretRef": {"name": "kc"}}, **spec},
    }


def test_the_spec_crosses_without_local_references():
    claim = local(
        poweredOn=True,
        image={"url": "http://i/x.iso", "format": "live-iso"},
        hostSelector={"matchLabels": {"a": "b"}},
        userData={"name": "ud"},
        consumerRef={"kind": "Metal3Machine", "name": "m"},
    )
    remote, _annotations = m.remote_claim_plan(claim, None, "hw-ns")
    assert remote["metadata"] == {
        "name": "web",
        "namespace": "hw-ns",
        "labels": {m.MANAGED_BY: m.MANAGER},
        "annotations": {m.MIRROR_OF: "u-1"},
    }
    assert remote["spec"] == {
        "online": True,
        "image": {"url": "http://i/x.iso", "format": "live-iso"},
        "hostSelector": {"matchLabels": {"a": "b"}},
        "kind": "baremetal",
        "userData": {"name": "web-userdata"},
    }


def test_an_unchanged_remote_claim_is_not_written_and_foreign_fields_stay():
    claim = local(online=False)
    remote, _ = m.remote_claim_plan(claim, None, "hw-ns")
    remote["spec"]["extra"] = "theirs"
    remote["metadata"]["finalizers"] = ["metal3.io/hostclaim"]
    assert m.remote_claim_plan(claim, remote, "hw-ns")[0] is None
    claim["spec"]["online"] = True
    updated, _ = m.remote_claim_plan(claim, remote, "hw-ns")
    assert updated["spec"]["online"] is True and updated["spec"]["extra"] == "theirs"


def test_reboot_requests_keyed_mirrored_one_shot_moved():
    claim = local()
    claim["metadata"]["annotations"] = {"reboot.metal3.io/ops": "", "reboot.metal3.io": "", "team": "x"}
    remote, annotations = m.remote_claim_plan(claim, None, "hw-ns")
    assert {"reboot.metal3.io/ops", "reboot.metal3.io"} <= set(remote["metadata"]["annotations"])
    assert "team" not in remote["metadata"]["annotations"]
    assert annotations == {"reboot.metal3.io/ops": "", "team": "x"}
    claim["metadata"]["annotations"] = annotations
    del claim["metadata"]["annotations"]["reboot.metal3.io/ops"]
    again, _ = m.remote_claim_plan(claim, remote, "hw-ns")
    assert "reboot.metal3.io/ops" not in again["metadata"]["annotations"]


def test_ownership_is_the_local_uid():
    claim = local()
    remote, _ = m.remote_claim_plan(claim, None, "hw-ns")
    assert m.is_ours(remote, claim)
    remote["metadata"]["annotations"][m.MIRROR_OF] = "another"
    assert not m.is_ours(remote, claim)
    assert not m.is_ours(None, claim)


def test_status_comes_back_without_hardware_data_and_ready_is_ours():
    claim = local()
    claim["status"] = {"hardwareData": {"name": "stale", "namespace": "x"}}
    remote = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "InfoReported", "lastTransitionTime": NOW},
                {
                    "type": "Association",
                    "status": "True",
                    "reason": "BareMetalHostAssociated",
                    "lastTransitionTime": NOW,
                },
            ],
            "poweredOn": True,
            "hostUID": "h-1",
            "hardwareData": {"name": "bm-0", "namespace": "infra"},
        }
    }
    status = m.local_status(claim, remote, ("True", m.REACHABLE, ""), ("True", m.SYNCED, ""), NOW)
    types = {c["type"]: c for c in status["conditions"]}
    assert set(types) == {"Ready", "Association", "RemoteCluster", "Mirrored"}
    assert types["Ready"]["status"] == "True" and types["Association"]["observedGeneration"] == 3
    assert status["poweredOn"] is True and status["hostUID"] == "h-1" and "hardwareData" not in status
    # Unreachable: what was copied stays, RemoteCluster says so, Ready follows.
    claim["status"] = status
    lost = m.local_status(claim, None, ("False", m.UNREACHABLE, "no answer"), ("Unknown", m.UNREACHABLE, ""), NOW)
    lost_types = {c["type"]: c for c in lost["conditions"]}
    assert lost_types["Association"]["status"] == "True" and lost["hostUID"] == "h-1"
    assert lost_types["Ready"]["status"] == "False"
    # Same inputs, same status: nothing to write.
    assert (
        m.status_changes(claim, m.local_status(claim, remote, ("True", m.REACHABLE, ""), ("True", m.SYNCED, ""), NOW))
        is None
    )


def test_only_the_keys_the_hardware_cluster_copied_come_back():
    claim = local()
    claim["metadata"]["labels"] = {"mine": "1"}
    remote = {
        "metadata": {
            "labels": {"rack": "r1", "internal": "x", "mine": "theirs"},
            "annotations": {"metalclaim.io/copied-metadata": json.dumps({"labels": ["rack", "mine"]})},
        }
    }
    labels, annotations = m.metadata_from_remote(claim, remote)
    assert labels == {"mine": "1", "rack": "r1"}
    assert json.loads(annotations["metalclaim.io/copied-metadata"]) == {"labels": ["rack"]}
    claim["metadata"]["labels"], claim["metadata"]["annotations"] = labels, annotations
    labels, annotations = m.metadata_from_remote(claim, {"metadata": {"labels": {}, "annotations": {}}})
    assert labels == {"mine": "1"} and "metalclaim.io/copied-metadata" not in annotations


def test_refusals_by_the_hardware_cluster_are_named():
    assert m.refusal_reason('hostclaims "x" is forbidden: exceeded quota: hc, requested: ...') == m.QUOTA_EXCEEDED
    assert m.refusal_reason('hostclaims is forbidden: User "u" cannot create resource') == m.FORBIDDEN
    assert m.refusal_reason("spec.image.url: Invalid value") == m.REFUSED


def test_data_copies_are_ours_and_only_opaque():
    claim = local(userData={"name": "ud"}, metaData={"name": "md", "namespace": "infrahost"})
    assert m.cross_namespace(claim, "metaData") and not m.cross_namespace(claim, "userData")
    assert "does not exist" in m.data_refusal(claim, "userData", None)
    assert "only Opaque" in m.data_refusal(claim, "userData", {"type": "kubernetes.io/service-account-token"})
    wanted = m.data_copy(claim, "userData", {"data": {"v": "QQ=="}}, "hw-ns")
    assert wanted["metadata"]["name"] == "web-userdata" and wanted["data"] == {"v": "QQ=="}
    assert m.copy_needs_write(wanted, None)
    assert not m.copy_needs_write(wanted, json.loads(json.dumps(wanted)))


def _remote_with(*conditions: tuple[str, str, str]) -> dict:
    return {"status": {"conditions": [{"type": t, "status": s, "lastTransitionTime": at} for t, s, at in conditions]}}


def test_a_remote_claim_is_polled_fast_while_it_changes_and_slower_while_it_waits():
    now = datetime.datetime(2026, 11, 24, 12, 0, 0, tzinfo=datetime.UTC).timestamp()
    assert m.poll_after(None, now) == m.POLL_CHANGING  # nothing there yet
    ready = _remote_with(("Ready", "True", "2026-11-24T11:59:59Z"))
    assert m.poll_after(ready, now) == m.POLL_STEADY
    just_bound = _remote_with(
        ("Association", "True", "2026-11-24T11:59:59Z"), ("Ready", "False", "2026-11-24T11:00:00Z")
    )
    assert m.poll_after(just_bound, now) == m.POLL_CHANGING
    waiting_40s = _remote_with(("Association", "False", "2026-11-24T11:59:20Z"))
    assert m.poll_after(waiting_40s, now) == 40 * m.POLL_QUIET_FRACTION
    waiting_an_hour = _remote_with(("Association", "False", "2026-11-24T11:00:00Z"))
    assert m.poll_after(waiting_an_hour, now) == m.POLL_STEADY
    # A time it cannot read counts as long ago: never a busy loop.
    assert m.poll_after(_remote_with(("Association", "False", "yesterday")), now) == m.POLL_STEADY


def _stamp(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_hardware_cluster_that_does_not_answer_is_asked_again_later_and_later():
    """Issue 22: each run the silent cluster costs (here 5 s, the connect timeout); the claim comes back after an
    increasing delay, kept on the claim (RemoteCluster's transition), not every 5 s for ever."""
    start = datetime.datetime(2026, 11, 24, 12, 0, 0, tzinfo=datetime.UTC).timestamp()
    claim, now, delays = local(), start, []
    unanswered = ("False", m.UNREACHABLE, m.unanswered_message("ReadTimeoutError", False, 20))
    for _run in range(12):
        delays.append(m.unreachable_after(claim, now))
        status = m.local_status(claim, None, unanswered, ("Unknown", m.UNREACHABLE, "x"), _stamp(now))
        claim = {**claim, "status": status}
        now += 5 + delays[-1]  # the run's cost, then the delay
    assert delays[:3] == [m.POLL_UNREACHABLE, m.POLL_UNREACHABLE, 10.0]  # a short outage is seen again soon
    assert all(later >= earlier for earlier, later in itertools.pairwise(delays)), delays
    assert delays[7] > 20 * delays[0] and max(delays) == m.POLL_UNREACHABLE_MAX, delays
    # Twelve runs in more than twenty minutes, where a fixed 5 s delay made 120.
    assert now - start > 1200
    # Answering again starts over: the next outage is retried soon again.
    answered = m.local_status(claim, None, ("True", m.REACHABLE, "ns"), ("True", m.SYNCED, "x"), _stamp(now))
    assert m.unreachable_after({**claim, "status": answered}, now + 3600) == m.POLL_UNREACHABLE
    # A transition time it cannot read counts as long ago: the longest delay, never a busy loop.
    claim["status"]["conditions"][0]["lastTransitionTime"] = "yesterday"
    assert m.unreachable_after(claim, now) == m.POLL_UNREACHABLE_MAX


def test_a_silent_cluster_is_named_by_the_error_type_only_and_the_deadline_said():
    assert m.unanswered_message("ConnectTimeoutError", False, 20) == (
        "the hardware cluster did not answer (ConnectTimeoutError)"
    )
    assert m.unanswered_message("ReadTimeoutError", True, 20.0) == (
        "the hardware cluster did not answer within the 20 s a claim may take there per run"
    )


def test_claims_whose_cluster_answered_go_before_those_whose_did_not():
    def claim(name: str, created: str, reachable: str | None) -> dict:
        found = local()
        found["metadata"].update(name=name, creationTimestamp=created)
        if reachable:
            found["status"] = {"conditions": [{"type": m.REMOTE_CLUSTER, "status": reachable}]}
        return found

    claims = [
        claim("silent", "2026-01-01T00:00:00Z", "False"),
        claim("new", "2026-01-03T00:00:00Z", None),
        claim("old", "2026-01-02T00:00:00Z", "True"),
    ]
    assert [c["metadata"]["name"] for c in sorted(claims, key=m.mirror_order)] == ["old", "new", "silent"]
