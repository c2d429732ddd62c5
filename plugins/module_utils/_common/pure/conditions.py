# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HostClaim conditions, after the Kubernetes API conventions. Pure.

lastTransitionTime changes only when a condition's status flips; `Ready` summarizes
the others as the user guide shows: False/IssuesReported with one `* <Type>: <message
or reason>` line per False condition, Unknown when any is Unknown, else True/InfoReported.

A message is often built from what a tenant wrote (a Secret's name, a selector) or what a server
answered; the API server refuses a whole status whose condition message is over 32768 bytes. So
every message set here is cut to that (truncated(), on a character boundary, saying it was cut),
and each line of Ready to a quarter of it, so one long message leaves the others readable.
"""

from __future__ import annotations

import datetime
import re

ASSOCIATION = "Association"
SYNCHRONIZATION = "Synchronization"
PROVISIONED = "Provisioned"
READY = "Ready"
# The order conditions are written in: Ready first, as in the guide, then by type.
ORDER = (READY, ASSOCIATION, PROVISIONED, SYNCHRONIZATION)
# How timestamps are written (lastTransitionTime, lastUpdated, operationHistory): RFC 3339, UTC, seconds.
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# metav1.Condition's limits (and the HostClaim CRD's): the message in bytes, the reason's length and form.
MESSAGE_LIMIT = 32768
READY_LINE_LIMIT = MESSAGE_LIMIT // 4
REASON_LIMIT = 1024
REASON_PATTERN = re.compile(r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?)?$")
TRUNCATED = " ... (truncated)"


def truncated(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` in at most `limit` bytes of UTF-8: as it is when it fits, else cut on a character boundary and
    ending with TRUNCATED."""
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text
    marker = TRUNCATED.encode()
    if limit <= len(marker):
        return encoded[:limit].decode("utf-8", errors="ignore")
    return encoded[: limit - len(marker)].decode("utf-8", errors="ignore") + TRUNCATED


def valid_reason(reason: str) -> bool:
    """Whether the API server takes `reason` as a condition reason (CamelCase, at most 1024 characters)."""
    return isinstance(reason, str) and len(reason) <= REASON_LIMIT and bool(REASON_PATTERN.match(reason))


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime(TIMESTAMP_FORMAT)


def find(conditions: list[dict] | None, type_: str) -> dict | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def set_condition(
    conditions: list[dict] | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    timestamp: str,
) -> list[dict]:
    """A new list with `type_` set; its lastTransitionTime is kept unless the status flips. The message is
    truncated() to what the API server takes."""
    previous = find(conditions, type_)
    kept = previous and previous.get("status") == status
    transition = (previous.get("lastTransitionTime") if kept else None) or timestamp
    updated = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": truncated(message or ""),
        "observedGeneration": generation,
        "lastTransitionTime": transition,
    }
    others = [c for c in conditions or [] if c.get("type") != type_]
    return _ordered([*others, updated])


def with_ready(conditions: list[dict] | None, generation: int, timestamp: str) -> list[dict]:
    """Recompute Ready from the other conditions."""
    others = [c for c in conditions or [] if c.get("type") != READY]
    false = [c for c in _ordered(others) if c.get("status") == "False"]
    unknown = [c for c in _ordered(others) if c.get("status") not in ("True", "False")]
    if false:
        status, reason, lines = "False", "IssuesReported", false
    elif unknown or not others:
        status, reason, lines = "Unknown", "UnknownReported", unknown
    else:
        status, reason, lines = "True", "InfoReported", []
    message = "\n".join(
        f"* {c['type']}: {truncated(c.get('message') or c.get('reason', ''), READY_LINE_LIMIT)}" for c in lines
    )
    return set_condition(conditions, READY, status, reason, message, generation, timestamp)


def same(left: list[dict] | None, right: list[dict] | None) -> bool:
    """Whether two condition lists say the same thing (ignoring order)."""
    return _ordered(left or []) == _ordered(right or [])


def _ordered(conditions: list[dict]) -> list[dict]:
    def key(condition: dict):
        type_ = condition.get("type", "")
        return (ORDER.index(type_) if type_ in ORDER else len(ORDER), type_)

    return sorted(conditions, key=key)
