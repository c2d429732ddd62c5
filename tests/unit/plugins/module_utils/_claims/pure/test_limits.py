"""A claim's reboot requests reach its host only within bounds (issue 22: ~250 KiB of them made every host write
of the batch's run fail)."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import limits
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.sync import REBOOT_KEYS_ANNOTATION

KEY = "reboot.metal3.io/"


def test_requests_within_the_bounds_pass():
    annotations = {f"{KEY}k{i}": '{"mode": "hard"}' for i in range(limits.REBOOT_REQUESTS_MAX)}
    annotations["reboot.metal3.io"] = ""
    annotations.pop(f"{KEY}k0")
    annotations["infra.example/other"] = "x" * 100_000  # not a request: not the claim layer's to copy
    assert limits.reboot_requests_problem(annotations) is None


def test_too_many_or_too_large_requests_are_named_with_both_figures():
    many = {f"{KEY}k{i}": "" for i in range(limits.REBOOT_REQUESTS_MAX + 1)}
    reason, message = limits.reboot_requests_problem(many)
    assert reason == limits.REBOOT_REQUESTS_TOO_LARGE
    assert message.startswith(f"metadata.annotations: {limits.REBOOT_REQUESTS_MAX + 1} reboot.metal3.io requests of")
    large = {f"{KEY}k": "x" * limits.REBOOT_BYTES_MAX}
    reason, message = limits.reboot_requests_problem(large)
    assert f"of {limits.REBOOT_BYTES_MAX + len(KEY) + 1} bytes together" in message


def test_over_the_limits_the_host_keeps_its_requests_but_for_those_the_claim_dropped():
    claim = {f"{KEY}new{i}": "" for i in range(40)}
    claim |= {f"{KEY}held": '{"mode": "soft"}', "reboot.metal3.io": "", "tenant.example/note": "n"}
    host = {f"{KEY}held": "", f"{KEY}dropped": "", REBOOT_KEYS_ANNOTATION: f"{KEY}dropped,{KEY}held", "infra": "i"}
    held = limits.held_requests(claim, host)
    # The host's value of a request it holds (a changed mode waits too); no new request, no one-shot.
    assert held == {"tenant.example/note": "n", f"{KEY}held": ""}
    planned = {**held, "copied.example/label": "v"}  # what a plan made of it, host metadata copied
    assert limits.restored(planned, claim) == {**claim, "copied.example/label": "v"}
