"""make bench's table tells the truth: targets beside figures, missing samples and failed sides said."""

from __future__ import annotations

import importlib.util

import pytest

from metalclaim_dev.support import REPO_ROOT


@pytest.fixture(scope="module")
def run():
    spec = importlib.util.spec_from_file_location("bench_run", REPO_ROOT / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench(run):
    bench = object.__new__(run.Bench)  # the reporting half only: no devenv, no controller
    bench.rows, bench.floor, bench.results = [], 0.5, {}
    return bench


def test_a_target_in_multiples_of_f_is_judged_in_f(bench):
    bench.row("idle", "cold create->Associated p50", 0.6)  # 1.2 F against <= 1.1 F
    bench.row("idle", "cold create->Associated p99", 0.9)  # 1.8 F against <= 2 F
    assert [(r["target"], r["met"]) for r in bench.rows] == [("<= 1.1 F", False), ("<= 2 F", True)]


def test_a_rate_target_is_a_lower_bound_and_text_is_never_judged(bench):
    bench.row("storm", "claims bound per second", 120.0, unit="/s")
    bench.row("storm", "claims bound per second", "incomplete", unit="/s")
    assert [(r["met"], r["unit"]) for r in bench.rows] == [(True, "/s"), (None, "")]


def test_a_missing_sample_marks_every_row_of_its_distribution(run, bench):
    bench.rows_for("resync", "create->Associated during resync", run.distribution([0.1, 0.2, 0.3]), 5)
    assert len(bench.rows) == 4
    assert all("3/5 samples, INCOMPLETE" in r["note"] for r in bench.rows)
    bench.rows.clear()
    bench.rows_for("resync", "create->Associated during resync", run.distribution([]), 5)
    assert [(r["value"], r["note"]) for r in bench.rows] == [("incomplete", "0/5 samples, INCOMPLETE")]


def test_the_table_shows_target_and_verdict_beside_the_figure(run, bench):
    bench.row("churn", "key-runs beyond changes and retries", 12, unit="")
    line = run.table(bench.rows).splitlines()[-1]
    assert "<= 0 missed" in line and " 12 " in line


def test_a_ratio_needs_both_sides_complete(run):
    storm = {"complete": True, "claims_per_second": 100.0, "latency": {"p50": 1.0}}
    baseline = {"complete": True}
    scaled = {"claims_per_second": 2.0, "latency_p50": 20.0}
    assert run.ours_over_baseline(storm, baseline, scaled) == {"throughput": 50.0, "latency_p50": 0.05}
    assert run.ours_over_baseline({**storm, "complete": False}, baseline, scaled) is None
    assert run.ours_over_baseline(storm, {"complete": False}, scaled) is None
