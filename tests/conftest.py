"""The order pytest-xdist hands files to its workers (`--dist loadfile --no-loadscope-reorder`, see the Makefile).

A file marked `minutes(N)` takes about N minutes in CI (from `--durations`): those go first, longest first, then
the other integration files, then the unit tests (seconds each: they fill the end), so that the workers end
together. Left to itself, xdist orders files by their number of tests, which put the long
controller and VM files (one to three tests each) last and left one worker running them alone.
"""

from __future__ import annotations

from pathlib import Path

UNIT = Path(__file__).parent / "unit"


def minutes_of(item) -> float:
    marker = item.get_closest_marker("minutes")
    return float(marker.args[0]) if marker else 0.0


def pytest_collection_modifyitems(config, items) -> None:
    # Stable: each file's tests keep their order, files with the same weight keep theirs.
    items.sort(key=lambda item: (-minutes_of(item), item.path.is_relative_to(UNIT)))
