"""Standby runs (--standby): claim batches go to a reconcile run started ahead, on the real API server.

The run serves one batch after another and answers each on the controller's socket; it ends when
recycled (then its events and artifacts are one run's); a standby that is stale is recycled, one that
died leaves its batch to a cold run.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from metalclaim_dev.claimlayer import TENANT_A
from metalclaim_dev.controllerproc import ControllerProcess, associated, claim_side, fence, runs_of
from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration
REACTION = 20


def events(controller: ControllerProcess, name: str) -> list[dict]:
    found = []
    for line in controller.output(full=True).splitlines():
        if line.startswith("{") and f'"event": "{name}"' in line:
            found.append(json.loads(line))
    return found


def ready(controller: ControllerProcess) -> bool:
    return controller.metric("metalclaim_standby_ready") == 1


@pytest.fixture
def standby(devenv, rack, tmp_path):
    process = ControllerProcess(devenv, tmp_path, *claim_side(rack), "--standby", "true", "--runner-slots", "1")
    yield process
    process.stop()


def test_claim_batches_go_to_the_one_standby_run_serving_them(standby, rack, tmp_path):
    rack.policy()
    rack.host("h1")
    rack.host("h2")
    eventually(lambda: ready(standby), timeout=REACTION, message=f"a standby ready\n{standby.output()}")
    created = time.monotonic()
    rack.claim("c1")
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{standby.output()}")
    print(f"\ncreate -> Association=True through a standby run: {time.monotonic() - created:.2f} s")
    eventually(lambda: runs_of(standby, f"claim/{TENANT_A}/c1") == 1, timeout=10, message="the run logged")
    bound = {rack.read_host(h)["spec"].get("consumerRef", {}).get("name") for h in ("h1", "h2")}
    assert "c1" in bound
    fence(standby, rack)
    assert runs_of(standby, f"claim/{TENANT_A}/c1") == 1, "the run's own writes caused no run"
    # The same run serves the next batch: no second start.
    rack.claim("c2")
    eventually(lambda: associated(rack, "c2"), timeout=REACTION, message=f"c2 associated\n{standby.output()}")
    assert standby.metric("metalclaim_standby_batches_total", path="standby") >= 2
    assert standby.metric("metalclaim_standby_batches_total", path="cold") == 0, standby.output()
    assert len(events(standby, "standby_ready")) == 1 and ready(standby), standby.output()
    # Recycled when the controller stops: its run ends, one ansible-runner run whose task is skipped.
    assert standby.stop() < 10
    assert [e["reason"] for e in events(standby, "standby_recycled")] == ["the controller is stopping"]
    skipped = []
    for path in (tmp_path / "runner").rglob("job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_skipped" and data.get("resolved_action", "").endswith(
            "hostclaim_reconcile"
        ):
            skipped.append(path)
    assert len(skipped) == 1, "one run served every batch"


def test_an_idle_standby_is_recycled_and_the_next_one_serves(devenv, rack, tmp_path):
    controller = ControllerProcess(
        devenv, tmp_path, *claim_side(rack), "--standby", "true", "--runner-slots", "1", "--standby-max-age", "3"
    )
    try:
        rack.policy()
        rack.host("h1")
        eventually(
            lambda: any(e["reason"] == "max-age" for e in events(controller, "standby_recycled")),
            timeout=REACTION,
            message=f"a standby recycled\n{controller.output()}",
        )
        eventually(lambda: ready(controller), timeout=REACTION, message="a fresh standby ready")
        rack.claim("c1")
        eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{controller.output()}")
        assert controller.metric("metalclaim_standby_batches_total", path="standby") >= 1
        assert not events(controller, "run_failed"), controller.output()
    finally:
        controller.stop()


def test_a_dead_standby_leaves_its_batch_to_a_cold_run(standby, rack):
    rack.policy()
    rack.host("h1")
    eventually(lambda: ready(standby), timeout=REACTION, message="a standby ready")
    os.kill(events(standby, "standby_ready")[-1]["worker_pid"], signal.SIGKILL)  # the task waiting on the socket
    rack.claim("c1")
    eventually(lambda: associated(rack, "c1"), timeout=REACTION, message=f"c1 associated\n{standby.output()}")
    assert standby.metric("metalclaim_standby_batches_total", path="cold") == 1, standby.output()
    assert events(standby, "standby_failed"), standby.output()
    eventually(lambda: ready(standby), timeout=REACTION, message=f"a new standby ready\n{standby.output()}")


def test_the_controller_stops_promptly_with_a_standby_waiting(standby):
    eventually(lambda: ready(standby), timeout=REACTION, message="a standby ready")
    assert standby.stop() < 10
    assert standby.process.returncode == 0
