"""How many ansible-runner children this controller may keep busy: its cgroup's CPU limit.

Never os.cpu_count(): in a Pod that is the node's cores, not the container's share, and N
children on a 2-CPU limit would only be throttled. No limit (a laptop, a test) means one slot.
"""

from __future__ import annotations

import math
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_limit_from(cpu_max: str | None, cfs_quota: str | None = None, cfs_period: str | None = None) -> float | None:
    """CPUs allowed by cgroup v2 `cpu.max` ("max 100000" or "200000 100000"), else v1's CFS quota/period. Pure."""
    if cpu_max is not None:
        quota, _space, period = cpu_max.strip().partition(" ")
        if quota == "max" or not period:
            return None
        return int(quota) / int(period)
    if cfs_quota is not None and cfs_period is not None and int(cfs_quota) > 0:
        return int(cfs_quota) / int(cfs_period)
    return None


def slots_for(limit: float | None) -> int:
    """One runner per whole CPU of the limit, at least one. Pure."""
    return 1 if limit is None else max(1, math.floor(limit))


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """This process's CPU limit, or None when there is none (or no cgroup file to tell)."""
    return cpu_limit_from(
        _read(root / "cpu.max"), _read(root / "cpu" / "cpu.cfs_quota_us"), _read(root / "cpu" / "cpu.cfs_period_us")
    )
