"""Benchmark: what one run leaves in ansible-runner's artifacts when its module result carries long messages.

    .venv/bin/python bench/artifacts.py [--claims 1000] [--message-bytes 4096] [--fail]

Prints figures, never pass/fail. One run of a playbook shaped as reconcile.yml (the module's task, then a
summary task) through the controller's own Runner, the module a stand-in whose result has the shape of
hostclaim_reconcile's for --claims claims, each failing with a --message-bytes message (the module's cap on an
error message is 4 KiB) and holding a condition message as long; --fail makes the task fail as well (its result
then reaches the run's stdout too). Prints the run directory's size, its largest files, and whether the run's
report (what the controller reads its outcomes from) still holds every claim's full message.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "controller"))

from metalclaim.controller.runs import Runner  # noqa: E402

MODULE = """#!/usr/bin/python
import json
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={"claims": {"type": "int"}, "message_bytes": {"type": "int"},
                                          "fail": {"type": "bool", "default": False}})
    claims, size = module.params["claims"], module.params["message_bytes"]
    names = [("bench-%04d" % i, "claim-%04d" % i) for i in range(claims)]
    message = lambda i: ("%d: 422 Unprocessable Entity: " % i + "x" * size)[:size]
    result = {
        "changed": True,
        "release": {"claims": []},
        "bind": {"claims": []},
        "bound": {"claims": [{"namespace": ns, "name": name, "state": "error", "message": message(i)}
                             for i, (ns, name) in enumerate(names)]},
        "errors": [{"namespace": ns, "name": name, "step": "sync", "message": message(i)}
                   for i, (ns, name) in enumerate(names)],
        "summary": {"bound": claims, "waiting_for_host": 0, "releases_pending": 0, "not_synchronized": claims},
    }
    if module.params["fail"]:
        module.fail_json(msg="the run failed: " + "; ".join(e["message"] for e in result["errors"]), **result)
    module.exit_json(**result)


main()
"""

PLAYBOOK = """- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Reconcile the claims
      bench_reconcile:
        claims: "{{ claims }}"
        message_bytes: "{{ message_bytes }}"
        fail: "{{ fail }}"
      register: result
    - name: Summarize
      ansible.builtin.debug:
        msg: "{{ result.summary.bound }} bound"
"""


def project(directory: Path) -> Path:
    (directory / "library").mkdir(parents=True)
    (directory / "library" / "bench_reconcile.py").write_text(MODULE)
    playbook = directory / "bench.yml"
    playbook.write_text(PLAYBOOK)
    return playbook


def run_dirs(private: Path) -> list[Path]:
    artifacts = private / "artifacts"
    return sorted(artifacts.iterdir(), key=lambda p: p.stat().st_mtime) if artifacts.exists() else []


def weigh(directory: Path) -> tuple[int, list[tuple[int, str]]]:
    files = [(p.stat().st_size, str(p.relative_to(directory))) for p in directory.rglob("*") if p.is_file()]
    return sum(size for size, _ in files), sorted(files, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--message-bytes", type=int, default=4096)
    parser.add_argument("--fail", action="store_true", help="the module's task fails as well")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-artifacts-") as tmp:
        tmp = Path(tmp)
        playbook = project(tmp / "project")
        runner = Runner(tmp / "runner", {}, keep_artifacts=2)
        try:
            extravars = {"claims": args.claims, "message_bytes": args.message_bytes, "fail": args.fail}
            report = runner.run(str(playbook), extravars)
        finally:
            runner.close()
        (run_dir,) = run_dirs(tmp / "runner")
        total, files = weigh(run_dir)
        result = next(iter(v for k, v in report.results.items() if k.endswith("bench_reconcile")), {})
        errors = result.get("errors") or []
        intact = len(errors) == args.claims and all(len(e["message"]) == args.message_bytes for e in errors)
        print(f"claims {args.claims}, message {args.message_bytes} B, fail {args.fail}: status {report.status}")
        print(f"run dir {total} B ({total / 1024:.1f} KiB) in {len(files)} files; results intact: {intact}")
        for size, name in files[:6]:
            print(f"  {size:>10} {name}")


if __name__ == "__main__":
    main()
