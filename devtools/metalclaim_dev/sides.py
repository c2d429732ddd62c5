"""Helpers for tests that run both controller sides as processes and watch an emulated BMC over time."""

from __future__ import annotations

import contextlib
import threading
import time

from metalclaim_dev.controllerproc import ControllerProcess


class BmcTimeline:
    """The emulated BMC's power state and config-drive slot, read every 0.1 s: what really happened, in order.
    Takes over the client it is given (closed at exit)."""

    def __init__(self, bmc):
        self.bmc = bmc
        self.samples: list[tuple[float, str, bool]] = []  # (monotonic time, PowerState, config drive inserted)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a read racing an insertion: the next one counts
                self.samples.append(
                    (time.monotonic(), self.bmc.power_state(), bool(self.bmc.media("config")["inserted"]))
                )
            self._stop.wait(0.1)

    def __enter__(self) -> BmcTimeline:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self.bmc.close()

    def since(self, moment: float) -> list[tuple[float, str, bool]]:
        return [s for s in list(self.samples) if s[0] >= moment]


class Sides:
    """The controller's claim side and provisioner (with `provisioner_options`) as their own processes and
    identities, serving the site's namespace."""

    def __init__(self, devenv, site, tmp_path, *provisioner_options: str):
        serve = ("--infra-namespaces", site.namespace, "--controllers")
        self.claims = ControllerProcess(devenv, tmp_path / "claims", *serve, "claims")
        options = (*serve, "provisioner", *provisioner_options)
        where = tmp_path / "provisioner"
        self.provisioner = ControllerProcess(devenv, where, *options, kubeconfig_identity="provisioner")

    def output(self) -> str:
        return f"claims:\n{self.claims.output()}\nprovisioner:\n{self.provisioner.output()}"

    def stop(self) -> None:
        self.claims.stop()
        self.provisioner.stop()
