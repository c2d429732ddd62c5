"""A run of hostclaim_remote against hardware clusters that do not answer (issue 22), the local cluster faked: each
claim bounded by its deadline, a silent cluster asked once a run, the claim told so and backed off."""

from __future__ import annotations

import base64
import copy
import time

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.io import client
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.io import mirror as io
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure import mirror as m

try:
    from urllib3.exceptions import ReadTimeoutError
except ImportError:  # pragma: no cover
    pytest.skip("urllib3", allow_module_level=True)

NAMESPACE = "cluster-ns"


def _kubeconfig(server: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: hw, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: hw, context: {cluster: hw, user: u, namespace: hw-ns}}]\n"
        "current-context: hw\n"
    )


class LocalKube:
    """The workload cluster: claims and Secrets in memory, writes recorded."""

    def __init__(self, claims, secrets):
        self.claims = {c["metadata"]["name"]: c for c in claims}
        self.secrets = secrets
        self.events: list[dict] = []
        self.calls: dict = {}

    def list(self, api_version, kind, namespace=None, label_selector=None):
        return [copy.deepcopy(c) for c in self.claims.values()]

    def get(self, api_version, kind, name, namespace=None):
        if kind == "Secret":
            return copy.deepcopy(self.secrets.get(name))
        return None

    def replace(self, obj):
        self.claims[obj["metadata"]["name"]] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def patch_status(self, obj, status):
        stored = self.claims[obj["metadata"]["name"]]
        stored["status"] = {**(stored.get("status") or {}), **status}
        return copy.deepcopy(stored)

    def create(self, obj):
        self.events.append(obj)
        return obj


def _claim(name: str, secret: str) -> dict:
    return {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaim",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "generation": 1},
        "spec": {"kind": "remote", "remote": {"kubeconfigSecretRef": {"name": secret}}},
    }


def _secret(server: str) -> dict:
    return {"type": "Opaque", "data": {"kubeconfig": base64.b64encode(_kubeconfig(server).encode()).decode()}}


def _silent(config, deadline):
    """A client factory as RemoteKube.connect behaves against a server that accepts and never answers."""
    try:
        raise ReadTimeoutError(None, "https://10.1.2.3:6443", "Read timed out.")
    except ReadTimeoutError as error:
        raise KubeError("no answer from the API server (ReadTimeoutError)") from error


def test_a_silent_cluster_is_asked_once_a_run_and_the_claims_say_it_did_not_answer(monkeypatch):
    made = []

    def factory(config, deadline):
        made.append(config["clusters"][0]["cluster"]["server"])
        return _silent(config, deadline)

    claims = [_claim("a", "silent"), _claim("b", "silent")]
    local = LocalKube(claims, {"silent": _secret("https://10.1.2.3:6443")})
    run = io.RemoteRun(local, [], False, [], "2030-01-01T00:00:00Z", client_factory=factory)
    result = io.mirror_claims(run)
    assert made == ["https://10.1.2.3:6443"]  # the second claim naming it is not held up again
    for entry in result["claims"]:
        assert entry["state"] == "unreachable" and entry["requeue_after"] == m.POLL_UNREACHABLE, entry
    for claim in local.claims.values():
        reachable = m.cond.find(claim["status"]["conditions"], m.REMOTE_CLUSTER)
        assert reachable["status"] == "False" and reachable["reason"] == m.UNREACHABLE
        assert reachable["message"] == "the hardware cluster did not answer (ReadTimeoutError)"
    assert "10.1.2.3" not in repr([result, local.claims, local.events])
    warnings = [e for e in local.events if e["reason"] == m.UNREACHABLE]
    assert len(warnings) == 2 and all(e["type"] == "Warning" for e in warnings)

    # The next run, later: the claims back off (the delay grows with the time they have not answered).
    turned = m.cond.find(local.claims["a"]["status"]["conditions"], m.REMOTE_CLUSTER)["lastTransitionTime"]
    transition = m._epoch(turned)
    again = io.RemoteRun(local, [], False, [], "2030-01-01T00:00:30Z", client_factory=_silent)
    monkeypatch.setattr(io.time, "time", lambda: transition + 60)
    delays = [entry["requeue_after"] for entry in io.mirror_claims(again)["claims"]]
    assert delays == [30.0, 30.0]


class _Slow:
    """A hardware cluster that answers each request after `seconds` (within the read timeout), for ever."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.calls = {"get": 0}

    def get(self, *args):
        self.calls["get"] += 1
        time.sleep(self.seconds)
        return None

    def create(self, obj):
        time.sleep(self.seconds)
        return obj


def test_a_claim_gets_no_more_than_its_deadline_then_the_next_one_its_own():
    slow = _Slow(0.2)
    claims = [_claim("slow", "slow"), _claim("fine", "fine")]
    local = LocalKube(claims, {"slow": _secret("https://slow.example:6443"), "fine": _secret("https://f:6443")})

    class Fine:
        calls: dict = {}

        def get(self, *args):
            return None

        def create(self, obj):
            return {**obj, "metadata": {**obj["metadata"], "uid": "r"}}

    def factory(config, deadline):
        return slow if "slow" in config["clusters"][0]["cluster"]["server"] else Fine()

    run = io.RemoteRun(local, [], False, [], "2030-01-01T00:00:00Z", client_factory=factory, deadline=0.5)
    started = time.monotonic()
    result = {e["name"]: e for e in io.mirror_claims(run)["claims"]}
    assert time.monotonic() - started < 2.0
    assert result["slow"]["state"] == "unreachable", result
    message = m.cond.find(local.claims["slow"]["status"]["conditions"], m.REMOTE_CLUSTER)["message"]
    assert message == "the hardware cluster did not answer within the 0.5 s a claim may take there per run"
    assert result["fine"]["state"] == "mirrored", result


def test_the_hard_deadline_ends_a_request_the_socket_timeouts_do_not(monkeypatch):
    """A request that never returns (a trickled answer): SIGALRM ends it, this test running in the main thread."""
    monkeypatch.setattr(client, "HARD_DEADLINE_GRACE", 0.1)
    stuck = _Slow(30)
    local = LocalKube([_claim("stuck", "stuck")], {"stuck": _secret("https://stuck:6443")})
    run = io.RemoteRun(local, [], False, [], "2030-01-01T00:00:00Z", client_factory=lambda c, d: stuck, deadline=0.3)
    started = time.monotonic()
    (entry,) = io.mirror_claims(run)["claims"]
    assert time.monotonic() - started < 2.0
    assert entry["state"] == "unreachable"
    message = m.cond.find(local.claims["stuck"]["status"]["conditions"], m.REMOTE_CLUSTER)["message"]
    assert "within the 0.3 s" in message


def test_a_run_has_a_budget_and_the_claims_it_did_not_reach_wait_for_the_next_untouched():
    """Issue 22: claims naming many clusters that never answer, each its own server, held the remote runner slot for
    one claim deadline each. A run now stops beginning claims once its budget is spent."""
    names = [f"c{i}" for i in range(6)]
    claims = [_claim(name, name) for name in names]
    local = LocalKube(claims, {name: _secret(f"https://{name}.example:6443") for name in names})
    run = io.RemoteRun(
        local, [], False, [], "2030-01-01T00:00:00Z", client_factory=lambda c, d: _Slow(0.2), deadline=0.3, budget=0.5
    )
    started = time.monotonic()
    result = io.mirror_claims(run)
    assert time.monotonic() - started < 1.5  # before: six claims' deadlines
    states = {e["name"]: e["state"] for e in result["claims"]}
    reached = [n for n in names if states[n] != "deferred"]
    assert 1 <= len(reached) <= 3 and all(states[n] == "unreachable" for n in reached), states
    deferred = [n for n in names if states[n] == "deferred"]
    assert deferred and all("status" not in local.claims[n] for n in deferred)  # nothing written for them
    outcomes = {o["name"]: o for o in result["outcomes"]}
    assert all((outcomes[n]["result"], outcomes[n]["after"]) == ("done", m.POLL_DEFERRED) for n in deferred)


class _Answering:
    """A hardware cluster that answers: objects in memory, writes recorded."""

    def __init__(self):
        self.objects: dict = {}
        self.writes: list = []
        self.calls: dict = {}

    def get(self, api_version, kind, name, namespace=None):
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    def create(self, obj):
        self.writes.append(("create", obj["kind"], obj["metadata"]["name"]))
        stored = {**copy.deepcopy(obj), "metadata": {**obj["metadata"], "uid": f"r-{obj['metadata']['name']}"}}
        self.objects[(obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])] = stored
        return copy.deepcopy(stored)


def test_diff_mode_records_both_clusters_writes_and_no_secret_value_and_check_mode_writes_nothing():
    user_data = b"#cloud-config\npassword: s3cret-in-a-copy\n"
    secret_value = base64.b64encode(user_data).decode()
    claim = _claim("a", "kc")
    claim["spec"]["userData"] = {"name": "ud"}
    secrets = {"kc": _secret("https://hw.example:6443"), "ud": {"type": "Opaque", "data": {"userData": secret_value}}}

    def run(check_mode: bool, local: LocalKube, remote: _Answering) -> dict:
        kernel = io.RemoteRun(
            local, [], check_mode, [], "2030-01-01T00:00:00Z", client_factory=lambda c, d: remote, diff=True
        )
        return io.mirror_claims(kernel)

    local, remote = LocalKube([claim], secrets), _Answering()
    checked = run(True, local, remote)
    assert local.claims["a"] == claim and remote.writes == [] and local.events == []  # check mode: nothing written
    headers = [e["before_header"] for e in checked["diff"]]
    assert headers[:3] == [
        f"HostClaim {NAMESPACE}/a",  # the finalizer
        "Secret (hardware cluster) hw-ns/a-userdata",
        "HostClaim (hardware cluster) hw-ns/a",
    ]
    assert headers[3:] and set(headers[3:]) == {f"HostClaim {NAMESPACE}/a"}  # metadata copied back, the status
    copied = checked["diff"][1]
    assert copied["before"] == {} and copied["after"]["data"] == {"userData": f"<redacted, {len(user_data)} bytes>"}
    assert secret_value not in repr(checked) and "s3cret" not in repr(checked)

    done = run(False, local, remote)
    assert [e["before_header"] for e in done["diff"]] == headers
    assert [w[:2] for w in remote.writes] == [("create", "Secret"), ("create", "HostClaim")]
    assert secret_value not in repr(done["diff"])
