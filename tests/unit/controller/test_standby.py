"""Standby slots: batches served one after another, fallback, recycling, with runners whose "runs" are threads speaking
the socket protocol."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from metalclaim.controller.__main__ import main as controller_main
from metalclaim.controller.runs import RunReport
from metalclaim.controller.standby import Standby

STANDBY_VAR = "claims_standby"


class FakeRunner:
    """A run is a thread acting as a standby task: connect, greet, answer each batch until recycled (or the socket
    closes); with `dies_at` it ends without answering that message (a crash), its run failed."""

    def __init__(
        self, pid: int, *, fails_at_start: bool = False, greeting_token: str | None = None, dies_at: int | None = None
    ):
        self.pid = pid
        self.dies_at = dies_at
        self.died = False
        self.job_timeout = 1800
        self.fails_at_start = fails_at_start
        self.greeting_token = greeting_token
        self.received: list[dict] = []
        self.submitted: list[dict] = []
        self.cancelled = False
        self._done = threading.Event()
        self._thread = None

    @property
    def busy(self) -> bool:
        return self._thread is not None

    def submit(self, playbook: str, extravars: dict) -> None:
        assert not self.busy
        self.submitted.append(extravars)
        self._done.clear()
        self._thread = threading.Thread(target=self._run, args=(extravars.get(STANDBY_VAR),), daemon=True)
        self._thread.start()

    def _run(self, standby: dict | None) -> None:
        if standby is None or self.fails_at_start:
            self._done.set()
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(standby["socket"])
                token = standby["token"] if self.greeting_token is None else self.greeting_token
                conn.sendall(json.dumps({"ready": token, "pid": self.pid + 1000}).encode() + b"\n")
                lines = conn.makefile()
                while line := lines.readline():
                    message = json.loads(line)
                    self.received.append(message)
                    if "objects" not in message:
                        break
                    if len(self.received) == self.dies_at:
                        self.died = True
                        break
                    conn.sendall(json.dumps({"result": {"stepped": message["objects"]}}).encode() + b"\n")
        except OSError:  # the slot closed before this run got there or was answered (the real task fails so)
            pass
        self._done.set()

    def wait(self, cancel=None, timeout=None):
        if not self._done.wait(timeout):
            return None
        self._thread.join()
        self._thread = None
        if self.died:
            return RunReport("failed", 2, 0.0, failures=[{"task": "t", "msg": "crashed"}])
        return RunReport("failed" if self.fails_at_start else "successful", 0, 0.0)

    def run(self, playbook, extravars, cancel=None):
        self.submit(playbook, extravars)
        return self.wait()

    def cancel(self) -> None:
        self.cancelled = True


def until(check, timeout: float = 5.0):
    """check()'s first truthy value (the fake runs are threads)."""
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logs():
    return []


def slot(tmp_path, logs, runners, **options) -> Standby:
    return Standby(
        runners,
        tmp_path / "slot.sock",
        "reconcile.yml",
        standby_var=STANDBY_VAR,
        log=lambda event, **fields: logs.append((event, fields)),
        **options,
    )


def test_a_standby_whose_start_fails_leaves_the_batch_cold_and_backs_off(tmp_path, logs):
    clock = Clock()
    a, b = FakeRunner(1, fails_at_start=True), FakeRunner(2, fails_at_start=True)
    standby = slot(tmp_path, logs, [a, b], clock=clock)
    assert standby.serve([{"namespace": "t", "name": "c1"}]) is None
    assert [e for e, _f in logs] == ["standby_failed"]
    cold = standby.free_runner()
    assert cold.run("reconcile.yml", {"claims_list": []}).status == "failed"
    started = len(a.submitted) + len(b.submitted)
    standby.maintain()  # within the backoff: no new standby
    assert len(a.submitted) + len(b.submitted) == started
    clock.now += 1.5
    standby.maintain()
    assert len(a.submitted) + len(b.submitted) == started + 1
    standby.close()


def test_an_idle_standby_is_recycled_at_its_max_age(tmp_path, logs):
    clock = Clock()
    a, b = FakeRunner(1), FakeRunner(2)
    standby = slot(tmp_path, logs, [a, b], clock=clock, max_age=60)
    standby.launch()
    assert a.busy
    while not any(e == "standby_ready" for e, _f in logs):
        standby.maintain()
    clock.now += 61
    standby.maintain()
    assert until(lambda: a.received) == [{"recycle": "max-age"}]
    assert len(a.submitted) + len(b.submitted) == 2, "a fresh standby replaced it"
    standby.close()


def test_a_collection_change_recycles_the_standby(tmp_path, logs):
    clock = Clock()
    version = ["1"]
    a, b = FakeRunner(1), FakeRunner(2)
    standby = slot(tmp_path, logs, [a, b], clock=clock, fingerprint=lambda: version[0], fingerprint_period=5)
    while not any(e == "standby_ready" for e, _f in logs):
        standby.maintain()
    version[0] = "2"
    clock.now += 6
    standby.maintain()
    assert until(lambda: a.received) == [{"recycle": "collection-changed"}]
    standby.close()


def test_a_greeting_with_another_token_is_not_taken_for_the_standby(tmp_path, logs):
    a, b = FakeRunner(1, greeting_token="stale"), FakeRunner(2)
    standby = slot(tmp_path, logs, [a, b], ready_timeout=0.5)
    assert standby.serve([{"namespace": "t", "name": "c1"}]) is None
    assert a.received == [], "the stale connection was closed without a batch"
    standby.close()


def test_max_age_must_stay_below_the_job_timeout(tmp_path, logs):
    with pytest.raises(ValueError, match="job timeout"):
        slot(tmp_path, logs, [FakeRunner(1), FakeRunner(2)], max_age=900)


def test_a_recycled_runner_serves_again_without_an_idle_pass(tmp_path, logs):
    """Under steady load maintain() never runs: serve() itself starts the next standby on the runner a recycle
    freed, once its run's end is seen."""
    clock = Clock()
    a, b = FakeRunner(1), FakeRunner(2)
    standby = slot(tmp_path, logs, [a, b], clock=clock, max_age=60)
    hosts = [{"namespace": "t", "name": "c1"}]
    assert standby.serve(hosts) == {"stepped": hosts}
    clock.now += 61
    assert standby.serve(hosts) == {"stepped": hosts}  # a recycled before the batch; b's run served it
    assert until(lambda: {"recycle": "max-age"} in a.received)
    clock.now += 61
    assert standby.serve(hosts) == {"stepped": hosts}, "served again: on the runner the first recycle freed"
    assert len(a.submitted) + len(b.submitted) == 3
    standby.close()


@pytest.mark.parametrize(
    "argv",
    [["--standby-max-age", "1000"], ["--standby-max-age", "0"], ["--mode", "per-event", "--standby", "true"]],
)
def test_standby_flags_out_of_range_are_refused_before_anything_starts(argv, capsys):
    with pytest.raises(SystemExit):
        controller_main(argv)
    assert "--standby" in capsys.readouterr().err


def test_a_standby_answers_batch_after_batch_in_one_run(tmp_path, logs):
    a, b = FakeRunner(1), FakeRunner(2)
    standby = slot(tmp_path, logs, [a, b])
    first, second = [{"namespace": "i", "name": "h1"}], [{"namespace": "i", "name": "h2"}]
    assert standby.serve(first) == {"stepped": first}
    assert standby.serve(second) == {"stepped": second}
    assert a.received == [{"objects": first}, {"objects": second}]
    assert len(a.submitted) == 1 and not b.submitted, "one run served both; the other runner stays free for cold runs"
    assert standby.free_runner() is b
    standby.close()
    assert a.wait(timeout=5) is not None
    assert a.received[-1] == {"recycle": "the controller is stopping"}


def test_a_standby_past_its_max_age_is_recycled_before_the_next_batch(tmp_path, logs):
    clock = Clock()
    a, b = FakeRunner(1), FakeRunner(2)
    standby = slot(tmp_path, logs, [a, b], clock=clock, max_age=60)
    hosts = [{"namespace": "i", "name": "h1"}]
    assert standby.serve(hosts) == {"stepped": hosts}
    clock.now += 61  # no batch goes to a run this old: it could outlive the runner's job timeout
    assert standby.serve(hosts) == {"stepped": hosts}
    assert until(lambda: {"recycle": "max-age"} in a.received), a.received
    assert len(a.submitted) + len(b.submitted) == 2, "a second run served the batch"
    assert [e for e, _f in logs] == ["standby_ready", "standby_recycled", "standby_ready"]
    standby.close()


def test_a_standby_that_ends_without_answering_leaves_the_batch_cold_and_the_next_serves(tmp_path, logs):
    a, b = FakeRunner(1, dies_at=2), FakeRunner(2)
    standby = slot(tmp_path, logs, [a, b])
    hosts = [{"namespace": "i", "name": "h1"}]
    assert standby.serve(hosts) == {"stepped": hosts}
    assert standby.serve(hosts) is None, "no answer: the batch runs cold (its steps are idempotent)"
    assert [e for e, _f in logs] == ["standby_ready", "standby_failed"]
    assert "without answering" in logs[-1][1]["error"]
    assert not a.busy, "the ended run was waited for: its runner takes the cold run"
    assert standby.free_runner() in (a, b)
    assert standby.serve(hosts) == {"stepped": hosts}, "the next standby serves"
    standby.close()
