"""Each Tenant's outcome: looked at again soon while on a stage, when a hook is due, else done."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure.outcomes import (
    STAGE_SECONDS,
    tenant_outcomes,
)


def test_tenants_waiting_on_a_stage_or_a_hook_come_back_when_due():
    tenants = [
        {"name": "blue", "requeue": True, "reason": "ReleasingClaims"},
        {"name": "green", "state": "Deployed", "requeue": False},
        {"name": "red", "requeue": True, "reason": "HookRefused", "requeue_after": 8.0},
        {"name": "grey", "requeue": True, "requeue_after": -1.0},  # overdue: at once
    ]
    assert {o["name"]: (o["namespace"], o["result"], o["after"], o["reason"]) for o in tenant_outcomes(tenants)} == {
        "blue": ("", "wait", STAGE_SECONDS, "ReleasingClaims"),
        "green": ("", "done", None, "Deployed"),
        "red": ("", "wait", 8.0, "HookRefused"),
        "grey": ("", "wait", 0.0, "requeue"),
    }
