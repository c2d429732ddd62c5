"""A run's artifacts stay bounded when its module results carry long messages, and the controller still reads them.

Real runs (the controller's Runner, ansible-runner, ansible-playbook), no cluster: the module is a stand-in whose
result has the shape of hostclaim_reconcile's, every claim of the batch failing with a 4 KiB message (the module's
cap on an error message).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metalclaim.controller import outcomes
from metalclaim.controller.mapper import CLAIM
from metalclaim.controller.runs import (
    EVENT_FILE_LIMIT,
    MESSAGE_LIMIT,
    RUN_DIR_LIMIT,
    Runner,
    trim_event,
)

CLAIMS = 1000
MESSAGE = 4096
MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={"claims": {"type": "int"}, "size": {"type": "int"}, "fail": {"type": "bool"}})
claims, size = module.params["claims"], module.params["size"]
message = lambda i: ("%d: 422 Unprocessable Entity: " % i + "x" * size)[:size]
result = {
    "changed": True,
    "bound": {"claims": [{"namespace": "ns-%d" % i, "name": "c", "state": "error", "message": message(i)}
                         for i in range(claims)]},
    "errors": [{"namespace": "ns-%d" % i, "name": "c", "step": "sync", "message": message(i)} for i in range(claims)],
    "outcomes": [{"namespace": "ns-%d" % i, "name": "c", "result": "error", "after": None,
                  "reason": "error in sync: " + message(i)[:280]} for i in range(claims)],
    "summary": {"bound": claims},
}
if module.params["fail"]:
    module.fail_json(msg="the run failed: " + "; ".join(e["message"] for e in result["errors"]), **result)
module.exit_json(**result)
"""
PLAYBOOK = """- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Reconcile the claims
      stand_in_reconcile: {claims: "{{ claims }}", size: "{{ size }}", fail: "{{ fail }}"}
      register: result
    - name: Summarize
      ansible.builtin.debug: {msg: "{{ result.summary.bound }} bound"}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One run that succeeds and one whose task fails, each with CLAIMS failed claims: (report, run dir)."""
    tmp = tmp_path_factory.mktemp("artifacts")
    (tmp / "project" / "library").mkdir(parents=True)
    (tmp / "project" / "library" / "stand_in_reconcile.py").write_text(MODULE)
    (tmp / "project" / "play.yml").write_text(PLAYBOOK)
    found = {}
    for fail in (False, True):
        runner = Runner(tmp / f"runner-{fail}", {}, keep_artifacts=2)
        try:
            report = runner.run(str(tmp / "project" / "play.yml"), {"claims": CLAIMS, "size": MESSAGE, "fail": fail})
        finally:
            runner.close()
        (run_dir,) = (tmp / f"runner-{fail}" / "artifacts").iterdir()
        found[fail] = (report, run_dir)
    return found


def weight(run_dir: Path) -> dict[str, int]:
    return {str(p.relative_to(run_dir)): p.stat().st_size for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "failed"])
def test_a_run_with_long_messages_stays_under_its_bound_and_the_controller_reads_every_outcome(runs, fail):
    report, run_dir = runs[fail]
    assert report.status == ("failed" if fail else "successful")

    # The controller's reading: every claim's error, whole. Before: {} (ansible-runner dropped a result of more than
    # 700,000 characters from its event), so every claim of the batch was settled as done, none retried.
    result = report.results["stand_in_reconcile"]
    assert len(result["errors"]) == CLAIMS and all(len(e["message"]) == MESSAGE for e in result["errors"])
    keys = [(CLAIM, f"ns-{i}", "c") for i in range(CLAIMS)]
    found = outcomes.read(CLAIM, keys, result)
    assert {outcome.result for outcome in found.values()} == {outcomes.RETRY}
    assert found[(CLAIM, "ns-7", "c")].reason.startswith("error in sync: 7: 422 Unprocessable Entity")
    if fail:  # the failed task's message, as the controller logs it: cut
        assert len(report.failures) == 1 and len(report.failures[0]["msg"]) <= MESSAGE_LIMIT

    # The run dir. Before: 33,148,995 bytes for the failed run (the result twice: its event and stdout).
    sizes = weight(run_dir)
    beyond_command = sum(sizes.values()) - sizes["command"]
    assert beyond_command <= RUN_DIR_LIMIT, sorted(sizes.items(), key=lambda item: -item[1])[:5]
    assert sum(sizes.values()) < 1024 * 1024
    events = [name for name in sizes if name.startswith("job_events/")]
    assert events and all(sizes[name] <= EVENT_FILE_LIMIT for name in events), sizes
    # What is written still says which task each event was (the install test reads task_path), and the run's recap.
    recorded = [json.loads((run_dir / name).read_text()) for name in events]
    assert any(e["event_data"].get("task_path", "").endswith("play.yml:5") for e in recorded)
    assert "PLAY RECAP" in (run_dir / "stdout").read_text()


def test_an_event_is_cut_to_its_limit_and_a_small_one_is_left_alone():
    small = {"event": "runner_on_ok", "uuid": "u", "stdout": "ok", "event_data": {"task": "t", "res": {"a": 1}}}
    assert trim_event(dict(small)) is None
    copy = json.loads(json.dumps(small))
    trim_event(copy)
    assert copy == small
    res = {"changed": True, "msg": "é" * 100_000, "errors": ["x" * 100] * 10_000}
    event = {
        "event": "runner_on_failed",
        "uuid": "u",
        "stdout": "ü" * 100_000,
        "event_data": {"task": "t", "task_path": "/p.yml:3", "res": res, "other": "€" * 100_000},
    }
    trim_event(event)
    assert len(json.dumps(event)) <= EVENT_FILE_LIMIT
    assert event["event_data"]["task_path"] == "/p.yml:3"
    assert len(res["errors"]) == 10_000  # the result itself (the report's) is never changed
