from __future__ import annotations

import pytest

from metalclaim.controller.cgroup import cpu_limit, cpu_limit_from, slots_for


@pytest.mark.parametrize(
    "cpu_max, v1, expected",
    [
        ("max 100000\n", (None, None), None),
        ("200000 100000\n", (None, None), 2.0),
        ("50000 100000", (None, None), 0.5),
        (None, ("-1", "100000"), None),
        (None, ("300000", "100000"), 3.0),
        (None, (None, None), None),
    ],
)
def test_the_limit_from_cgroup_v2_then_v1(cpu_max, v1, expected):
    assert cpu_limit_from(cpu_max, *v1) == expected


@pytest.mark.parametrize("limit, slots", [(None, 1), (0.5, 1), (1.0, 1), (2.0, 2), (3.9, 3)])
def test_one_slot_per_whole_cpu_at_least_one(limit, slots):
    assert slots_for(limit) == slots


def test_a_v2_cgroup_directory_is_read(tmp_path):
    (tmp_path / "cpu.max").write_text("400000 100000\n")
    assert cpu_limit(tmp_path) == 4.0
    assert cpu_limit(tmp_path / "missing") is None
