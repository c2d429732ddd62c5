"""docs/architecture.md's contract table says what controller/groups.py does: one row per group, the same names."""

from __future__ import annotations

import re
from pathlib import Path

from metalclaim.controller.groups import GROUPS

ARCHITECTURE = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"


def test_the_architecture_page_shows_the_table_of_playbook_groups_as_it_is():
    page = ARCHITECTURE.read_text()
    rows = {}
    for line in page.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in GROUPS:
            rows[cells[0]] = cells[1:]
    yes = {True: "yes", False: "no"}
    assert rows == {
        kind: [g.playbook, g.objects_var, g.module, yes[g.in_process], yes[g.standby]] for kind, g in GROUPS.items()
    }
    assert re.search(r"`done` \| nothing left to do", page)
