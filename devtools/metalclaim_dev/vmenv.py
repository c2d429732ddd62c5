"""What the VM test files share: a devenv of real VMs per module, its phase timings, the deploy ISO and the tenant
image on its image server, the media server's stop and restart (faults), and reading serial logs and disk files."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from kubernetes import config as kube_config
from kubernetes.dynamic import DynamicClient

from metalclaim_dev.configdrive_reader import read_config_drive, volume_id
from metalclaim_dev.devenv import vms
from metalclaim_dev.devenv.env import Devenv, role_binding
from metalclaim_dev.devenv.images import build_deploy_iso, build_disk_image, file_sha256
from metalclaim_dev.devenv.processes import DevenvError, stop_process_group
from metalclaim_dev.site import Site

DISK_MARKER = "metalclaim-tenant-disk-marker-5d1e"
MIB = 1024 * 1024
# Serial console lines of the deploy system, in the order they come (files/metalclaim-build-deploy-iso's init
# and files/metalclaim-image-writer).
DEPLOY_MILESTONES = (
    ("firmware boots the deploy ISO", 'starting Boot0001 "UEFI QEMU DVD-ROM'),
    ("GRUB starts the kernel", "Booting `metalclaim deploy'"),
    ("deploy ISO booted (init running)", "metalclaim-deploy: "),
    ("root filesystem mounted", "metalclaim-deploy: root filesystem from"),
    ("DHCP lease", "(router "),  # the udhcpc hook's "<interface> has <address> (router <gateway>)"
    ("image writer started (init)", "metalclaim-deploy: starting the image writer"),
    ("image writer started", "metalclaim-image-writer: start"),
    ("image written", "metalclaim-image-writer: config-drive"),
    ("callback sent", "metalclaim-image-writer: callback: success reported"),
)
CLEANED_MILESTONE = ("cleaned", "metalclaim-image-writer: done: metadata cleaned")
# libvirt's line in the VM's QEMU log as it starts QEMU: the power on, which the serial console does not show.
POWER_ON_MILESTONE = ("power on", "starting up")
# TCG: the deploy ISO boots in ~30 s, the write takes a few seconds; room for a busy machine and VMs at once.
CALLBACK_TIMEOUT = 240
# A request line of the emulator's access log (werkzeug's): "GET /redfish/v1/Systems/<uuid> HTTP/1.1".
REDFISH_REQUEST = re.compile(r'"[A-Z]+ (/redfish/\S*) HTTP/')
SHARED = "shared"


class Phases:
    """Seconds per phase, shown as they happen (even when the tests pass) and kept in <devenv>/vm-phases.json."""

    def __init__(self, path: Path, capture):
        self.path = path
        self.capture = capture  # pytest's capture manager
        self.seconds: dict[str, float] = {}

    def record(self, name: str, started: float, at: float | None = None) -> None:
        self.seconds[name] = round((at or time.monotonic()) - started, 1)
        with self.capture.global_and_fixture_disabled():
            print(f"\n[vm-phase] {name}: {self.seconds[name]}s", file=sys.stderr, flush=True)
        self.path.write_text(json.dumps(self.seconds, indent=2) + "\n")

    def requests(self, name: str, counts: dict[str, int]) -> None:
        """A phase's Redfish requests per VM, shown and kept in <devenv>/vm-redfish.json beside the timings."""
        shown = ", ".join(f"{owner} {count}" for owner, count in counts.items())
        with self.capture.global_and_fixture_disabled():
            print(f"\n[vm-redfish] {name}: {shown}", file=sys.stderr, flush=True)
        path = self.path.with_name("vm-redfish.json")
        recorded = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**recorded, name: counts}, indent=2) + "\n")


def redfish_requests(log_text: str, systems: list[dict]) -> dict[str, int]:
    """Requests in the emulator's access log text per VM (the paths naming its system, its virtual media), and
    SHARED: the service root and sessions, which every host's client opens and whose path does not say whose."""
    owner_of = {system["uuid"]: system["name"] for system in systems}
    counts = dict.fromkeys([*owner_of.values(), SHARED], 0)
    for path in REDFISH_REQUEST.findall(log_text):
        owner = next((name for uuid, name in owner_of.items() if uuid in path), SHARED)
        counts[owner] += 1
    return counts


class RedfishRequests:
    """The Redfish cost of each phase: requests to the emulator since the previous take(), per VM."""

    def __init__(self, env):
        self.log = Path(env.state["redfish"]["log"])
        self.systems = env.state["redfish"]["systems"]
        self.offset = self.log.stat().st_size if self.log.exists() else 0

    def take(self) -> dict[str, int]:
        with self.log.open("rb") as handle:
            handle.seek(self.offset)
            text = handle.read().decode("utf-8", errors="replace")
            self.offset = handle.tell()
        return redfish_requests(text, self.systems)


def vm_environment(tmp_path_factory, pytestconfig, name: str, count: int = 1, register: bool = False):
    """A module fixture's body: `count` VMs behind their own control plane (registered as infra's bm-NN in infrahost
    when `register`), failing, never skipping, where VMs cannot start; env.state["phases"] records the timings."""
    started = time.monotonic()
    try:
        env = Devenv.up(tmp_path_factory.mktemp(name) / "env", 0, register=register, vm_count=count)
    except DevenvError as error:
        pytest.fail(f"the VM environment cannot start on this machine: {error}")
    try:
        capture = pytestconfig.pluginmanager.getplugin("capturemanager")
        env.state["phases"] = Phases(env.directory / "vm-phases.json", capture)
        env.state["phases"].record(f"environment up (control plane, libvirtd, emulator, {count} VM)", started)
        yield env
    finally:
        env.state.pop("phases", None)
        env.down()


def vm_site(env: Devenv, tmp_path_factory, name: str):
    """A module fixture's body: a Site (an infrastructure namespace with a policy admitting every tenant) on the VM
    fleet, the infra team's role there; the claim layer and bmh_redfish driven by the test (Site's methods)."""
    clients = {
        identity: DynamicClient(kube_config.new_client_from_config(config_file=env.kubeconfig(identity)))
        for identity in env.state["kubeconfigs"]
    }
    site = Site(env, clients, tmp_path_factory.mktemp(name))
    env.apply("admin", [role_binding("infra", site.namespace, "metalclaim-infra", "infra")])
    yield site
    site.cleanup()


# -- the images on the devenv's image server --------------------------------------------------------------


def publish_images(env: Devenv) -> dict:
    """The deploy ISO (the collection's script, cached) and the tenant disk image on the image server: their URLs,
    the image spec a claim or host carries, and the image as a raw file (to compare the VM's disk with)."""
    started = time.monotonic()
    deploy_iso = Path(build_deploy_iso()["iso"])  # cold: ~160 s, once per machine (cached)
    images_dir, images_url = Path(env.state["vms"]["images_dir"]), env.state["vms"]["images_url"]
    link_or_copy(deploy_iso, images_dir / "deploy.iso")
    image = build_disk_image(DISK_MARKER)
    link_or_copy(image, images_dir / "tenant.qcow2")
    env.state["phases"].record("deploy ISO and tenant image ready", started)
    return {
        "deploy_iso_url": f"{images_url}/deploy.iso",
        "image": {
            "url": f"{images_url}/tenant.qcow2",
            "format": "qcow2",
            "checksum": file_sha256(image),
            "checksumType": "sha256",
        },
        "raw": qcow2_to_raw(image, env.directory / "tenant.raw"),
    }


def link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem
        shutil.copyfile(source, target)


def qcow2_to_raw(image: Path, target: Path) -> Path:
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(image), str(target)], check=True)
    return target


# -- the media server, for faults ------------------------------------------------------------------------


def stop_media_server(env: Devenv) -> None:
    stop_process_group(env.state["pids"]["vm-mediaserver"])


def start_media_server(env: Devenv) -> None:
    """Start it again the way the fleet did (vms.start_media_server), on its port; `down` stops the new one."""
    port = urlsplit(env.state["vms"]["media_url"]).port
    pid = vms.start_media_server(Path(env.state["vms"]["root"]), env.state["pids"]["vm-libvirtd"], port)
    env.state["pids"]["vm-mediaserver"] = pid
    phases = env.state.pop("phases", None)  # not JSON: the state file keeps only the devenv's own
    try:
        env.save()
    finally:
        if phases is not None:
            env.state["phases"] = phases


# -- serial logs and disk files ------------------------------------------------------------------------------


class SerialWatch:
    """When each milestone first shows on the serial console after `start` (a thread polls the log)."""

    def __init__(self, log: Path, milestones: tuple[tuple[str, str], ...]):
        self.log, self.milestones = log, milestones
        self.offset = log.stat().st_size if log.exists() else 0
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set() and len(self.seen) < len(self.milestones):
            self._scan()
            self._stop.wait(0.25)

    def _scan(self) -> None:
        text = self.text()
        for name, needle in self.milestones:
            if name not in self.seen and needle in text:
                self.seen[name] = time.monotonic()

    def text(self) -> str:
        if not self.log.exists():
            return ""
        with self.log.open("rb") as handle:
            handle.seek(self.offset)
            return handle.read().decode(errors="replace")

    def stop(self) -> dict[str, float]:
        """The milestones seen, with a last look: a caller that just saw one in text() finds it here too."""
        self._stop.set()
        self._thread.join()
        self._scan()
        return self.seen


def power_on_watch(env: Devenv, system: dict) -> SerialWatch:
    """When libvirt next starts the VM (a power on through Redfish), from its QEMU log."""
    log = Path(env.state["vms"]["root"]) / "log" / "qemu" / f"{system['name']}.log"
    return SerialWatch(log, (POWER_ON_MILESTONE,))


def record_boot(phases: Phases, prefix: str, power_on: SerialWatch, seen: dict[str, float]) -> None:
    """The deploy system's boot phase by phase from the power on (the Redfish steps before it left out):
    "<prefix>: power on -> <milestone>" for each serial milestone seen."""
    powered_on = power_on.stop().get(POWER_ON_MILESTONE[0])
    if powered_on is None:
        return
    for name, at in sorted(seen.items(), key=lambda item: item[1]):
        phases.record(f"{prefix}: power on -> {name}", powered_on, at)


def partition_table(path: Path) -> dict | None:
    result = subprocess.run(["sfdisk", "--json", str(path)], capture_output=True, text=True)
    return json.loads(result.stdout)["partitiontable"] if result.returncode == 0 else None


def signatures(path: Path) -> str:
    """wipefs' list of partition-table and filesystem signatures on the disk file (empty: none)."""
    return subprocess.run(["wipefs", "--no-act", str(path)], capture_output=True, text=True, check=True).stdout


def read_at(path: Path, offset: int, length: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(offset)
        return handle.read(length)


def check_disk_holds_the_image_and_config_drive(written: Path, raw_image: Path, user_data: str) -> None:
    """The VM's disk file: the image's partitions (its ESP byte for byte), then a cidata config drive whose
    user-data is the tenant's Secret."""
    table = partition_table(written)
    assert table is not None and table["label"] == "gpt", table
    (esp, config), image_table = table["partitions"], partition_table(raw_image)
    (image_esp,) = image_table["partitions"]
    assert (esp["start"], esp["size"], esp["type"]) == (image_esp["start"], image_esp["size"], image_esp["type"])
    # The image's ESP (the GRUB EFI binary that printed the marker) byte for byte.
    esp_bytes = esp["start"] * 512, esp["size"] * 512
    assert read_at(written, *esp_bytes) == read_at(raw_image, *esp_bytes)
    # The last partition: the tenant's cidata config drive, its user-data the Secret's.
    assert config["start"] + config["size"] <= os.path.getsize(written) // 512 - 33  # before the backup GPT
    iso = read_at(written, config["start"] * 512, config["size"] * 512)
    assert volume_id(iso) == "cidata"
    files = read_config_drive(iso)
    assert files["user-data"] == user_data.encode()
    assert b"instance-id" in files["meta-data"]
