"""Each host's outcome: looked at again when its next step is due, or when its power is to be read again."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.outcomes import host_outcomes


def test_a_host_is_looked_at_again_when_it_says():
    hosts = [
        {"namespace": "i", "name": "h1", "state": "provisioning", "requeue_after": 2.5},
        {"namespace": "i", "name": "h2", "state": "available", "requeue_after": None, "poll_after": 60},
        {"namespace": "i", "name": "h3", "state": "available"},
    ]
    assert [(o["name"], o["result"], o["after"], o["reason"]) for o in host_outcomes(hosts)] == [
        ("h1", "done", 2.5, "provisioning"),
        ("h2", "done", 60.0, "poll"),
        ("h3", "done", None, ""),
    ]
