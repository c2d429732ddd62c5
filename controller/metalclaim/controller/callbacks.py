"""The image writers' callbacks as events: the provisioner side's source of keys beside its reflectors.

The media server records a writer's callback (and a warm writer's acknowledgement of its job) as the file
``<media dir>/callbacks/<token>.json`` (plugins/module_utils/_provisioner/io/media.py has the layout); this thread
finds each new one and hands its token to ``on_callback`` (the handlers: mapper.callback_arrived, through the host
store's index of the tokens each host's operation holds), which queues that host's key. So the host whose writer
finished is stepped at once, and the provisioner's own poll of a writer at work is only a safety net
(bmh_redfish's callback_events).

A scan, not inotify: os.scandir of one directory that holds a file per host in flight (a few hundred entries at
most) costs tens of microseconds, and the media directory is shared between two containers (an emptyDir), where a
scan sees whatever the other side wrote; inotify would need ctypes or a new dependency and a re-watch whenever the
directory is made or replaced. A callback waits SCAN_INTERVAL (0.25 s) at most, against the writer's
minutes.

A token is a credential: logs carry its first 6 characters only. A token no host holds yet (its operation not yet
recorded in the store) is looked up again at each scan while its file is there, and counted unknown once; one that
woke its host is not handed over again while its file stays (the step that reads it withdraws it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

from ansible_collections.metalclaim.hostclaim.plugins.module_utils.controller_contract import CALLBACK_SUBDIR

from . import mapper

SCAN_INTERVAL = 0.25


def list_callbacks(directory: str) -> set[str]:
    """The tokens whose callback file is in `directory` now; none while it does not exist (nothing published yet)."""
    try:
        with os.scandir(directory) as entries:
            return {token for token in map(mapper.callback_token, (entry.name for entry in entries)) if token}
    except FileNotFoundError:
        return set()


class CallbackWatch(threading.Thread):
    def __init__(
        self,
        media_dir: str,
        on_callback: Callable[[str], bool],
        stop: threading.Event,
        log,
        interval: float = SCAN_INTERVAL,
        on_unknown: Callable[[], object] | None = None,
        scan: Callable[[str], Iterable[str]] = list_callbacks,
    ):
        """on_callback(token) -> whether a host holds it (its key queued if this controller serves it); on_unknown():
        a token no host held when it was first seen."""
        super().__init__(name="callbacks", daemon=True)
        self.directory = os.path.join(media_dir, CALLBACK_SUBDIR)
        self._on_callback = on_callback
        self._on_unknown = on_unknown
        self.stop = stop
        self._log = log
        self.interval = interval
        self._scan = scan
        self._woken: set[str] = set()  # tokens handed over whose file is still there
        self._unknown: set[str] = set()  # tokens seen with no host holding them, counted once
        self._failing = ""  # the scan's last error, logged once until it changes

    def scan_once(self) -> list[str]:
        """One scan: hand over every token new since the last (or still unknown); returns those that woke a host."""
        try:
            present = set(self._scan(self.directory))
        except OSError as error:
            if str(error) != self._failing:
                self._failing = str(error)
                # Its message names the directory, never a token.
                self._log("callback_scan_failed", directory=self.directory, error=str(error))
            return []
        self._failing = ""
        self._woken &= present
        self._unknown &= present
        woken = []
        for token in sorted(present - self._woken):
            if self._on_callback(token):
                self._woken.add(token)
                self._unknown.discard(token)
                woken.append(token)
            elif token not in self._unknown:
                self._unknown.add(token)
                if self._on_unknown is not None:
                    self._on_unknown()
        return woken

    def run(self) -> None:
        self._log("callback_watch_started", directory=self.directory, interval=self.interval)
        while not self.stop.wait(self.interval):
            self.scan_once()
