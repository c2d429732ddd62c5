"""The controller's log: one JSON object per line on stderr, whoever logs.

The controller's own events are JSON already (manager.log: {"event": ..., and its fields}) and pass as they are. A
record of any other logger (urllib3, the kubernetes client, ansible-runner, Python's `warnings` through
logging.captureWarnings) becomes {"event": "log", "logger", "level", "message"}, with "exception" when it carries one,
so that every line parses and a log pipeline needs one parser.

Two loggers are held down. urllib3's "Retrying (Retry(total=2, ...)) after connection broken by ..." warning comes
once per retry of every request (three per request the kubernetes client makes to an API server that is down: 84
lines in 8 seconds): it goes to DEBUG, since the request's own failure is logged once, structured, by whoever made it
(`discovery_failed`, `list_failed`, `lease_api_error`, ...). The kubernetes client's DEBUG lines dump whole response
bodies (`kubectl apply`'s copy of a Secret's data included): they are never logged, whatever --log-level says.
"""

from __future__ import annotations

import json
import logging
import sys
import threading

OWN = "metalclaim"  # the loggers whose messages are our JSON events
CRASH_LOGGER = "metalclaim.controller.crash"  # an exception nothing caught, in any thread
RETRY_LOGGER = "urllib3.connectionpool"
RETRY_PREFIX = "Retrying ("
BODIES_LOGGER = "kubernetes.client.rest"


def _json_object(text: str) -> dict | None:
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class JsonFormatter(logging.Formatter):
    """A record as one JSON line: our events as they are, any other message wrapped."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        own = _json_object(message) if record.name.split(".")[0] == OWN else None
        extra = {}
        if record.exc_info:
            extra["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            extra["stack"] = self.formatStack(record.stack_info)
        if own is not None:
            return json.dumps({**own, **extra}, sort_keys=True, default=str) if extra else message
        fields = {"event": "log", "logger": record.name, "level": record.levelname, "message": message, **extra}
        return json.dumps(fields, sort_keys=True, default=str)


class RetriesAtDebug(logging.Filter):
    """urllib3's warning for each retry, logged at DEBUG instead (kept only when DEBUG is on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and str(record.msg).startswith(RETRY_PREFIX):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


class _Stderr(logging.StreamHandler):
    """A handler on whatever sys.stderr is when a record comes (as logging's last resort), not on the one it was when
    configured (a test's captured stream, closed since)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def _uncaught(exc_type, exc_value, exc_traceback, thread: str) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        return
    event = {"event": "uncaught_exception", "thread": thread, "error": exc_type.__name__}
    logging.getLogger(CRASH_LOGGER).error(json.dumps(event), exc_info=(exc_type, exc_value, exc_traceback))


def _thread_hook(args) -> None:
    if args.exc_type is not SystemExit:
        _uncaught(args.exc_type, args.exc_value, args.exc_traceback, args.thread.name if args.thread else "")


def configure(level: str = "INFO", stream=None) -> logging.Handler:
    """The process's logging: every logger through one JSON handler on `stream` (stderr), at `level`; Python's
    warnings too, and exceptions nothing caught (unless a hook of someone else's takes them already). Idempotent: a
    second call replaces the handler it made."""
    handler = _Stderr() if stream is None else logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h.formatter, JsonFormatter)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = lambda *exc: _uncaught(*exc, thread=threading.current_thread().name)
    if threading.excepthook is threading.__excepthook__:
        threading.excepthook = _thread_hook
    retries = logging.getLogger(RETRY_LOGGER)
    if not any(isinstance(f, RetriesAtDebug) for f in retries.filters):
        retries.addFilter(RetriesAtDebug())
    logging.getLogger(BODIES_LOGGER).setLevel(max(logging.INFO, root.level))
    return handler
