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


def test_the_slot_sweep_has_three_distinct_counts_whatever_the_cpus(run):
    assert run.slot_counts(2) == [1, 2, 4]
    assert run.slot_counts(1) == [1, 2, 4]
    assert run.slot_counts(None) == [1, 2, 4]
    assert run.slot_counts(8) == [1, 2, 8]


def test_a_slot_count_is_suggested_only_when_the_figures_are_clear(run):
    # (last create -> all Associated, probes' p99) per slot count; the default here is 1.
    clear = {1: (10.0, 2.0), 2: (6.0, 1.5), 4: (7.0, 1.4)}
    assert run.suggest_slots(clear, default=1)[0] == 2
    assert run.suggest_slots({1: (10.0, 2.0), 2: (9.0, 1.0), 4: (9.5, 1.0)}, default=1)[0] is None  # 10 %: not clear
    mixed = run.suggest_slots({1: (10.0, 2.0), 2: (6.0, 3.0), 4: (7.0, 3.0)}, default=1)
    assert mixed[0] is None and mixed[1].startswith("mixed")
    assert run.suggest_slots({1: (5.0, 2.0), 2: (6.0, 1.0), 4: (7.0, 1.0)}, default=1)[0] == 1
    assert run.suggest_slots({1: (5.0, 2.0), 2: (6.0, 1.0)}, default=4)[0] is None  # the default was not measured


def test_an_incomplete_slot_count_means_no_suggestion(run):
    suggested, why = run.suggest_slots({1: (10.0, 2.0), 2: (1.0, None), 4: (None, 1.0)}, default=1)
    assert suggested is None and "2,4 incomplete" in why


def test_the_per_claim_cost_grows_over_the_smallest_complete_size(run):
    costs = run.per_claim_costs({100: 2.0, 1000: 30.0, 5000: 200.0})
    assert [costs[n]["ms_per_claim"] for n in (100, 1000, 5000)] == [20.0, 30.0, 40.0]
    assert [costs[n]["growth"] for n in (100, 1000, 5000)] == [1.0, 1.5, 2.0]
    assert {c["growth_over"] for c in costs.values()} == {100}
    partial = run.per_claim_costs({100: None, 1000: 30.0, 5000: None})
    assert partial[100]["ms_per_claim"] is None and partial[5000]["growth"] is None
    assert (partial[1000]["growth"], partial[1000]["growth_over"]) == (1.0, 1000)
    assert run.per_claim_costs({100: None})[100] == {
        "seconds": None,
        "ms_per_claim": None,
        "growth": None,
        "growth_over": None,
    }


def test_scale_sizes_are_positive_whole_numbers_in_order(run):
    import argparse

    assert run.sizes("5000,100,1000,100") == (100, 1000, 5000)
    for text in ("", "0,100", "1e3", "-5"):
        with pytest.raises(argparse.ArgumentTypeError):
            run.sizes(text)


def test_storm_scale_is_named_but_never_run_by_default(run):
    assert "storm-scale" in run.SCENARIOS and "slots" in run.DEFAULT_SCENARIOS
    assert "storm-scale" not in run.parser().parse_args([]).scenarios.split(",")
    assert run.parser().parse_args(["--scale-sizes", "20,50"]).scale_sizes == (20, 50)


def _storm_figures(run, complete: bool, tail: float, probes: list[float], created: int) -> dict:
    return {
        "claims": 40,
        "associated": 40 if complete else 39,
        "complete": complete,
        "last_create_to_all_associated": tail if complete else None,
        "claims_per_second": 10.0 if complete else None,
        "slots_used": [0],
        "runs": 3,
        "runs_failed": 0,
        "batch_sizes": [20, 19, 1],
        "controller_rss_mib": 80.0,
        "runner_rss_mib": 60.0,
        "claims_on_two_hosts": 0,
        "claims_disagreeing_with_their_host": 0,
        "probes": {**run.distribution(probes), "created": created, "samples": probes, "errors": []},
    }


def test_the_slot_rows_say_incomplete_and_failed_and_suggest_nothing_then(run, bench):
    out = {
        "by_slots": {
            1: _storm_figures(run, True, 4.0, [1.0, 2.0], 2),
            2: _storm_figures(run, False, 3.0, [1.0], 2),
            4: {"status": "failed", "error": "RuntimeError: no controller\nmore"},
        }
    }
    bench._slots_rows(out, 40, 1)
    rows = {r["figure"]: r for r in bench.rows}
    assert rows["runner-slots 4: FAILED"]["value"] == "RuntimeError: no controller"
    assert rows["runner-slots 1: last create -> all Associated"]["value"] == 4.0
    tail = rows["runner-slots 2: last create -> all Associated"]
    assert tail["value"] == "incomplete" and "39/40 claims, INCOMPLETE" in tail["note"]
    assert "1/2 samples, INCOMPLETE" in rows["runner-slots 2: probe create->Associated p50"]["note"]
    assert "INCOMPLETE" in rows["runner-slots 2: runs (reconcile.yml)"]["note"]
    assert rows["default the figures suggest"]["value"] == "none"
    assert out["suggestion"]["slots"] is None and "2,4 incomplete" in out["suggestion"]["why"]
