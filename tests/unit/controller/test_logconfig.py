"""The controller's log (issue 38): every record, whoever logs it, one JSON line; urllib3's retries held down."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import warnings

import pytest

from metalclaim.controller import logconfig
from metalclaim.controller.manager import log


@pytest.fixture
def stream():
    """configure() on a stream of its own; the process's logging as it was afterwards."""
    root, retries = logging.getLogger(), logging.getLogger(logconfig.RETRY_LOGGER)
    bodies = logging.getLogger(logconfig.BODIES_LOGGER)
    saved = (root.handlers[:], root.level, retries.filters[:], bodies.level, sys.excepthook, threading.excepthook)
    out = io.StringIO()
    yield out
    root.handlers[:], root.level, retries.filters[:] = saved[0], saved[1], saved[2]
    bodies.setLevel(saved[3])
    sys.excepthook, threading.excepthook = saved[4], saved[5]
    logging.captureWarnings(False)


def lines(out: io.StringIO) -> list[dict]:
    text = out.getvalue()
    assert text.endswith("\n") or not text
    return [json.loads(line) for line in text.splitlines()]


def test_our_events_pass_as_they_are_and_any_other_record_is_wrapped(stream):
    logconfig.configure("INFO", stream)
    log("started", controllers=["claims"])
    logging.getLogger("kubernetes.config").warning("two\nlines: %s", "and an argument")
    logging.getLogger("metalclaim.controller").info("not JSON")  # ours, but not an event: wrapped too
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("ansible-runner").exception("failed")
    first, second, third, fourth = lines(stream)
    assert stream.getvalue().splitlines()[0] == '{"controllers": ["claims"], "event": "started"}'  # as it was logged
    assert first == {"event": "started", "controllers": ["claims"]}
    assert second == {
        "event": "log",
        "logger": "kubernetes.config",
        "level": "WARNING",
        "message": "two\nlines: and an argument",
    }
    assert third["message"] == "not JSON" and third["logger"] == "metalclaim.controller"
    assert fourth["level"] == "ERROR" and "ValueError: boom" in fourth["exception"]


def test_urllib3_retries_are_debug_lines_and_its_other_warnings_stay(stream):
    pool = logging.getLogger(logconfig.RETRY_LOGGER)
    logconfig.configure("INFO", stream)
    retry = "Retrying (%r) after connection broken by '%r': %s"
    pool.warning(retry, "Retry(total=2, connect=None, read=None, redirect=None, status=None)", "Refused", "/api")
    pool.warning("Connection pool is full, discarding connection: %s", "127.0.0.1")
    assert [line["message"] for line in lines(stream)] == ["Connection pool is full, discarding connection: 127.0.0.1"]
    logconfig.configure("DEBUG", stream)  # again: one handler, one filter
    ours = [h for h in logging.getLogger().handlers if isinstance(h.formatter, logconfig.JsonFormatter)]
    assert len(pool.filters) == 1 and len(ours) == 1
    pool.warning(retry, "Retry(total=2)", "Refused", "/api")
    assert lines(stream)[-1]["level"] == "DEBUG" and lines(stream)[-1]["message"].startswith("Retrying (")


def test_response_bodies_are_never_logged_and_warnings_and_crashes_are_lines(stream):
    threading.excepthook = threading.__excepthook__  # pytest's, during a test, is left alone: the process's is not
    logconfig.configure("DEBUG", stream)
    logging.getLogger(logconfig.BODIES_LOGGER).debug("response body: %s", '{"data": {"password": "x"}}')
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
    thread = threading.Thread(target=lambda: 1 / 0, name="doomed")
    thread.start()
    thread.join()
    warned, crashed = lines(stream)
    assert warned["logger"] == "py.warnings" and "DeprecationWarning: old API" in warned["message"]
    assert crashed["event"] == "uncaught_exception" and crashed["thread"] == "doomed"
    assert crashed["error"] == "ZeroDivisionError" and "1 / 0" in crashed["exception"]
