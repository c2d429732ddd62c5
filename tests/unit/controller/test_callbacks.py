"""The image writers' callbacks as events: a file in the media directory's callbacks/ wakes the host whose operation
holds its token, through the controller's own handlers, host store and work queue (the scan is called here; the
thread only repeats it). tests/integration/test_reuse.py and test_warm_hosts.py run it in the controller process."""

from __future__ import annotations

import json
import os
import threading

import pytest

from metalclaim.controller import callbacks
from metalclaim.controller.groups import GROUPS
from metalclaim.controller.manager import Controller, Settings

T1, T2, WARM, UNKNOWN = "a" * 43, "b" * 43, "w" * 43, "u" * 43
OPERATION = "provisioner.metalclaim.io/operation"


def host(name: str, rv: str = "1", **operation) -> dict:
    annotations = {OPERATION: json.dumps(operation)} if operation else {}
    return {"metadata": {"namespace": "infra", "name": name, "resourceVersion": rv, "annotations": annotations}}


class Log:
    def __init__(self):
        self.lines = []

    def __call__(self, event: str, **fields) -> None:
        self.lines.append(json.dumps({"event": event, **fields}))


@pytest.fixture
def setup(tmp_path):
    controller = Controller(
        Settings(controllers=("provisioner",), media_dir=str(tmp_path)), api_client=None, registry=None
    )
    log = Log()
    controller.handlers._log = log
    watch = callbacks.CallbackWatch(
        str(tmp_path),
        controller.handlers.on_callback,
        controller.stop,
        log,
        on_unknown=controller.metrics.callbacks.labels("unknown").inc,
    )
    os.makedirs(watch.directory)
    return controller, watch, log


def call_back(watch, token: str) -> None:
    with open(os.path.join(watch.directory, f"{token}.json"), "w") as handle:
        handle.write('{"status": "success", "message": "", "received_at": 1}')


def queued(controller) -> list:
    batch = controller.queue.get_batch(timeout=0, quiet=0, max_wait=0)
    controller.queue.done(batch)
    return sorted(batch)


def counted(controller, result: str) -> float:
    return controller.metrics.registry.get_sample_value("metalclaim_callbacks_total", {"result": result}) or 0


def test_a_callback_wakes_exactly_the_host_whose_operation_holds_its_token_and_an_unknown_one_nothing(setup):
    controller, watch, log = setup
    hosts = controller.stores["BareMetalHost"]
    hosts.apply("ADDED", host("h1", kind="deploy", token=T1))
    hosts.apply("ADDED", host("h2", kind="deploy", token=T2, warm=WARM))
    hosts.apply("ADDED", host("h3"))
    assert watch.scan_once() == [] and len(controller.queue) == 0

    call_back(watch, UNKNOWN)
    open(os.path.join(watch.directory, ".0123456789abcdef.tmp"), "w").close()  # the media server's, mid-write
    assert watch.scan_once() == [] and len(controller.queue) == 0
    assert counted(controller, "unknown") == 1

    call_back(watch, T2)
    assert watch.scan_once() == [T2]
    assert queued(controller) == [("host", "infra", "h2")]
    assert counted(controller, "woken") == 1
    # Its file stays until the host's step withdraws it: not handed over again; the unknown one is not counted again.
    assert watch.scan_once() == [] and len(controller.queue) == 0
    assert counted(controller, "unknown") == 1

    call_back(watch, WARM)  # h2's warm writer acknowledging its job: h2 again
    assert watch.scan_once() == [WARM] and queued(controller) == [("host", "infra", "h2")]
    # A token is a credential: its first 6 characters only, in every line logged.
    for line in log.lines:
        assert T2 not in line and WARM not in line and UNKNOWN not in line
    assert any(T2[:6] + "..." in line for line in log.lines)


def test_a_callback_before_its_operation_reached_the_store_wakes_the_host_once_it_does(setup):
    controller, watch, _log = setup
    hosts = controller.stores["BareMetalHost"]
    hosts.apply("ADDED", host("h1"))
    call_back(watch, T1)
    assert watch.scan_once() == [] and len(controller.queue) == 0
    hosts.apply("MODIFIED", host("h1", rv="2", kind="deploy", token=T1))  # the step's write, seen late
    assert watch.scan_once() == [T1] and queued(controller) == [("host", "infra", "h1")]
    os.unlink(os.path.join(watch.directory, f"{T1}.json"))  # withdrawn by the step that read it
    assert watch.scan_once() == []


def test_a_callback_for_another_shards_host_queues_nothing_here(tmp_path):
    settings = Settings(controllers=("provisioner",), media_dir=str(tmp_path), shard=(0, 2))
    controller = Controller(settings, api_client=None)
    watch = callbacks.CallbackWatch(str(tmp_path), controller.handlers.on_callback, controller.stop, Log())
    os.makedirs(watch.directory)
    others = [f"infra-{i}" for i in range(8) if not controller.settings.scope.owns_namespace(f"infra-{i}")]
    other = host("h1", kind="deploy", token=T1)
    other["metadata"]["namespace"] = others[0]
    controller.stores["BareMetalHost"].apply("ADDED", other)
    call_back(watch, T1)
    watch.scan_once()
    assert len(controller.queue) == 0


def test_no_media_directory_yet_is_no_callback_and_the_thread_ends_with_the_controller(tmp_path):
    stop = threading.Event()
    watch = callbacks.CallbackWatch(str(tmp_path / "none"), lambda token: True, stop, Log(), interval=0.01)
    assert watch.scan_once() == []
    watch.start()
    stop.set()
    watch.join(5)
    assert not watch.is_alive()


def test_the_provision_role_is_told_callbacks_are_events_only_when_the_controller_watches_them(tmp_path):
    hosts = [("host", "infra", "h1")]
    assert "provisioner_callback_events" not in GROUPS["host"].extravars(hosts, Settings())
    extravars = GROUPS["host"].extravars(hosts, Settings(media_dir=str(tmp_path)))
    assert extravars["provisioner_callback_events"] is True
