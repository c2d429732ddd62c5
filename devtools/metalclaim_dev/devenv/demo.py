"""The guides' scenario on a local fleet, driven by the controller; people only use kubectl.

    python -m metalclaim_dev.devenv.demo --dir .devenv --hosts 4

Brings the devenv up (control plane + Redfish emulator + registered BareMetalHosts), starts the
controller as two processes of its own - the claim side as the `controller` identity, the Redfish
provisioner as the `provisioner` identity - then plays the guides with kubectl alone, as the infra team
and a tenant would: the fleet is registered and inspected, the infra team applies the infra guide's
HostDeployPolicy, the tenant the tenant guide's Secret and HostClaim (config/samples/, as the guides show
them) and watches it become Associated, sets
`online` and a live ISO and watches it become Provisioned, deletes it and the infra team watches the host
released. Each wait is a `kubectl get --watch`; the time of each step is printed at the end. The
controllers log to <dir>/demo/ and are stopped (SIGTERM) at the end or on Ctrl-C; the devenv keeps running.

No deploy ISO is configured: the emulated servers boot nothing, so no image writer would ever call back.
A live ISO needs none; a released host's `Cleaned` condition says `CleaningUnsupported` instead of waiting.

    python -m metalclaim_dev.devenv.demo --dir .devenv --vms 1        (make demo-vm; root, libvirtd and QEMU)

The same on real VMs (metalclaim_dev.devenv.vms): the provisioner side gets the deploy ISO (built once from
Debian packages, cached) and the devenv's media server; the tenant sets a disk image built here (its checksum,
the sample's userData) instead of a live ISO; once Provisioned, the VM's serial console is shown as it boots
the image from its disk; the claim's deletion cleans the disk (metadata) before the host is available again.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import io
import json
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pycdlib

from . import REPO_ROOT, images
from .env import INFRA_NAMESPACE, TENANT_NAMESPACES, Devenv
from .processes import DevenvError, free_port

SAMPLES = REPO_ROOT / "config" / "samples"  # the guides' YAML, as they show it (tests/unit/test_docs.py)
TENANT = "tenant-a"
CLAIM = "my-hostclaim"
# side of the controller -> the devenv identity it runs as (each side's least-privilege ClusterRole)
SIDES = {"claims": "controller", "provisioner": "provisioner"}
WAIT = 300  # seconds: a step that takes longer is stuck (each takes seconds on the emulator; a VM deploy ~1 min)
VM_DISK_MARKER = "metalclaim demo: this VM booted the tenant's disk image"
SERIAL_LINES = 25  # the end of the provisioned VM's serial console shown


def apply_sample(env: Devenv, identity: str, name: str) -> None:
    """`kubectl apply -f config/samples/<name>` as the guide that shows the sample says, as `identity`."""
    path = SAMPLES / name
    shown = path.relative_to(REPO_ROOT) if Path.cwd() == REPO_ROOT else path
    print(f"[{identity}] $ kubectl apply -f {shown}", flush=True)
    result = env.kubectl(identity, "apply", "-f", str(path), check=False)
    print((result.stdout or result.stderr).rstrip(), flush=True)
    if result.returncode != 0:
        raise DevenvError(f"kubectl apply -f {shown} as {identity} failed: {result.stderr.strip()}")


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def kubectl(env: Devenv, identity: str, *args: str, stdin: str | None = None) -> str:
    """Run kubectl as `identity`, echoing the command and its output as a person would see them."""
    print(f"[{identity}] $ kubectl {' '.join(args)}" + (" <<EOF" if stdin else ""), flush=True)
    result = env.kubectl(identity, *args, stdin=stdin, check=False)
    print((result.stdout or result.stderr).rstrip(), flush=True)
    return result.stdout


# -- the controller, as two processes ---------------------------------------------------------


@dataclass
class Controller:
    side: str
    identity: str
    process: subprocess.Popen
    log: Path
    health: str
    metrics: str

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise DevenvError(f"the {self.side} controller exited ({self.process.returncode}):\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"{self.health}/readyz", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def start_controllers(
    env: Devenv, directory: Path, controllers: list[Controller], provisioner_options: tuple[str, ...] = ()
) -> None:
    """Start each side into `controllers` (the caller stops them, also when this fails half-way); wait until ready."""
    missing = [identity for identity in SIDES.values() if identity not in env.state["kubeconfigs"]]
    if missing:
        raise DevenvError(
            f"this environment has no {', '.join(missing)} identity (started by an older version): "
            "`make devenv-down`, then `make demo` again"
        )
    directory.mkdir(parents=True, exist_ok=True)
    for side, identity in SIDES.items():
        health, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        log = directory / f"{side}.log"
        argv = [
            sys.executable, "-m", "metalclaim.controller",
            "--controllers", side,
            "--kubeconfig", env.kubeconfig(identity),
            "--infra-namespaces", INFRA_NAMESPACE,
            "--private-data-dir", str(directory / side),
            "--health-probe-bind-address", health,
            "--metrics-bind-address", metrics,
            "--metrics-secure=false",  # plain HTTP on loopback: the URL printed below, read with curl and no token
            *(provisioner_options if side == "provisioner" else ()),
        ]  # fmt: skip
        print(f"[{identity}] $ metalclaim-controller {' '.join(argv[3:])}")
        with log.open("w") as out:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        controllers.append(Controller(side, identity, process, log, f"http://{health}", f"http://{metrics}"))
    deadline = time.monotonic() + 60
    while not all(c.ready() for c in controllers):
        if time.monotonic() > deadline:
            raise DevenvError(
                "the controllers were not ready within 60 s:\n" + "\n".join(c.tail() for c in controllers)
            )
        time.sleep(0.2)
    for controller in controllers:
        print(
            f"  {controller.side}: ready, {controller.health}/readyz {controller.metrics}/metrics, log {controller.log}"
        )


def stop_controllers(controllers: list[Controller]) -> None:
    for controller in controllers:
        if controller.process.poll() is None:
            controller.process.send_signal(signal.SIGTERM)
    for controller in controllers:
        try:
            controller.process.wait(30)
        except subprocess.TimeoutExpired:
            controller.process.kill()
            controller.process.wait(10)


# -- watching as a person would: kubectl get --watch -------------------------------------------


class Watch:
    """`kubectl get ... --watch` as one identity: the objects it shows, kept up to date from its events.

    A plain `kubectl get` first, and again after a quiet spell: a watch shows nothing for objects already
    gone when it starts, and its first events (the current objects) arrive one by one."""

    QUIET = 5  # seconds without an event after which the objects are listed again
    BURST = 0.2  # seconds between the events of one burst

    def __init__(self, env: Devenv, identity: str, *args: str):
        self.command = f"[{identity}] $ kubectl get {' '.join(args)} --watch"
        self.argv = [env.state["binaries"]["kubectl"], f"--kubeconfig={env.kubeconfig(identity)}", "get", *args]
        self.events: queue.Queue = queue.Queue()

    def _list(self) -> dict[str, dict]:
        result = subprocess.run([*self.argv, "-o", "json"], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise DevenvError(f"{self.command}: {result.stderr.strip()}")
        return {item["metadata"]["name"]: item for item in json.loads(result.stdout)["items"]}

    def _read(self, process: subprocess.Popen) -> None:
        # One event per line (kubectl prints compact JSON when watching); an indented one spans lines.
        text = ""
        for line in process.stdout:
            text += line
            try:
                event = json.loads(text)
            except json.JSONDecodeError:
                continue
            self.events.put(event)
            text = ""
        self.events.put(None)

    def until(self, done: Callable[[dict], bool], describe: Callable[[dict], str], started: float) -> dict:
        """Objects by name once done(objects); prints describe(objects) each time it changes."""
        print(self.command, flush=True)
        objects, shown = self._list(), None
        process = subprocess.Popen(
            [*self.argv, "--watch", "--output-watch-events", "-o", "json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, args=(process,), daemon=True).start()
        try:
            while True:
                line = describe(objects)
                if line != shown:
                    print(f"  {time.monotonic() - started:6.1f} s  {line}", flush=True)
                    shown = line
                if done(objects):
                    return objects
                remaining = started + WAIT - time.monotonic()
                if remaining <= 0:
                    raise DevenvError(f"{self.command}: not done within {WAIT} s; last seen: {shown}")
                try:
                    events = [self.events.get(timeout=min(remaining, self.QUIET))]
                except queue.Empty:
                    objects = self._list()
                    continue
                with contextlib.suppress(queue.Empty):  # a burst (one run's writes) shows as one change
                    while True:
                        events.append(self.events.get(timeout=self.BURST))
                for event in events:
                    if event is None:
                        raise DevenvError(f"{self.command} ended: {process.stderr.read().strip()}")
                    name = event["object"]["metadata"]["name"]
                    if event["type"] == "DELETED":
                        objects.pop(name, None)
                    else:
                        objects[name] = event["object"]
        finally:
            process.terminate()
            process.wait(10)


def host_state(host: dict) -> str:
    return ((host.get("status") or {}).get("provisioning") or {}).get("state") or "-"


def describe_hosts(hosts: dict) -> str:
    def one(name: str, host: dict) -> str:
        consumer = ((host.get("spec") or {}).get("consumerRef") or {}).get("name")
        return f"{name} {host_state(host)}" + (f" (consumer {consumer})" if consumer else "")

    return ", ".join(one(name, host) for name, host in sorted(hosts.items())) or "no hosts"


def conditions(claim: dict) -> dict:
    return {c["type"]: c for c in (claim.get("status") or {}).get("conditions") or []}


def describe_claim(claims: dict) -> str:
    claim = claims.get(CLAIM)
    if claim is None:
        return "gone"
    shown = [f"{t}={c['status']} ({c['reason']})" for t, c in conditions(claim).items() if t != "Ready"]
    status = claim.get("status") or {}
    host = (status.get("hardwareData") or {}).get("name")
    deleting = "deleting, " if claim["metadata"].get("deletionTimestamp") else ""
    on_host = f"  host {host}, poweredOn {status.get('poweredOn')}" if host else ""
    return deleting + "  ".join(shown or ["no status yet"]) + on_host


def condition_true(claims: dict, type_: str) -> bool:
    return (conditions(claims.get(CLAIM) or {}).get(type_) or {}).get("status") == "True"


def print_conditions(claim: dict) -> None:
    status = claim.get("status", {})
    print(
        f"hardwareData: {status.get('hardwareData')}   hostUID: {status.get('hostUID')}"
        f"   poweredOn: {status.get('poweredOn')}"
    )
    print(f"  {'TYPE':<16} {'STATUS':<8} {'REASON':<24} MESSAGE")
    for entry in status.get("conditions", []):
        print(f"  {entry['type']:<16} {entry['status']:<8} {entry['reason']:<24} {entry['message']}")


class LiveIso:
    """A small live ISO served on loopback for the emulated BMC's virtual media."""

    def __enter__(self) -> str:
        self._dir = tempfile.TemporaryDirectory()
        iso = pycdlib.PyCdlib()
        iso.new(vol_ident="METALCLAIM_DEMO")
        text = b"metalclaim demo live system\n"
        iso.add_fp(io.BytesIO(text), len(text), "/README.;1")
        iso.write(str(Path(self._dir.name) / "demo-live.iso"))
        iso.close()
        handler = functools.partial(_QuietFiles, directory=self._dir.name)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/demo-live.iso"

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._dir.cleanup()


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the demo's output stays readable
        pass


# -- the scenario --------------------------------------------------------------------------------


def vm_media(env: Devenv) -> tuple[dict, tuple[str, ...]]:
    """The tenant's disk image and the provisioner's deploy ISO on the VM fleet's image server: the claim's image
    and the provisioner side's options (the deploy ISO, the media server)."""
    vms_state = env.state["vms"]
    images_dir, images_url = Path(vms_state["images_dir"]), vms_state["images_url"]
    deploy_iso = Path(images.build_deploy_iso()["iso"])  # cold: a few minutes, once per machine (cached)
    disk_image = images.build_disk_image(VM_DISK_MARKER)
    for source, name in ((deploy_iso, "deploy.iso"), (disk_image, "demo-disk.qcow2")):
        if not (images_dir / name).exists():
            (images_dir / name).symlink_to(source)  # the image server follows links
    image = {
        "url": f"{images_url}/demo-disk.qcow2",
        "format": "qcow2",
        "checksum": images.file_sha256(disk_image),
        "checksumType": "sha256",
    }
    options = ("--deploy-iso-url", f"{images_url}/deploy.iso", "--media-dir", vms_state["media_dir"])
    return image, (*options, "--media-url", vms_state["media_url"])


def show_serial_console(env: Devenv, host: str, offset: int) -> None:
    """The provisioned VM's serial console since the deploy began, once the image's marker shows (or WAIT)."""
    index = int(host.rsplit("-", 1)[1])
    log = Path(env.state["vms"]["systems"][index]["serial_log"])
    deadline = time.monotonic() + WAIT
    text = ""
    while VM_DISK_MARKER not in text and time.monotonic() < deadline:
        time.sleep(1)
        with log.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    lines = [line.rstrip() for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).splitlines() if line.strip()]
    print(f"[infra] $ tail -n {SERIAL_LINES} {log}")
    print("\n".join(lines[-SERIAL_LINES:]), flush=True)
    if VM_DISK_MARKER not in text:
        raise DevenvError(f"the VM did not print the disk image's marker within {WAIT} s (serial log {log})")


def serial_sizes(env: Devenv) -> list[int]:
    return [
        Path(s["serial_log"]).stat().st_size if Path(s["serial_log"]).exists() else 0
        for s in env.state["vms"]["systems"]
    ]


def play(env: Devenv, image: dict, timings: dict[str, float]) -> None:
    tenant_ns = TENANT_NAMESPACES[TENANT]
    claims = ("hostclaims", "-n", tenant_ns, f"--field-selector=metadata.name={CLAIM}")
    hosts = ("baremetalhosts", "-n", INFRA_NAMESPACE)

    def timed(what: str, started: float) -> None:
        timings[what] = time.monotonic() - started

    if json.loads(env.kubectl(TENANT, "get", *claims, "-o", "json").stdout)["items"]:
        step(f"A previous run's {CLAIM} is still there: the tenant deletes it first")
        started = time.monotonic()
        kubectl(env, TENANT, "delete", "hostclaim", CLAIM, "-n", tenant_ns, "--wait=false")
        Watch(env, TENANT, *claims).until(lambda found: CLAIM not in found, describe_claim, started)

    step("The provisioner registers and inspects the fleet (the infra team watches)")
    started = time.monotonic()
    fleet_size = env.vm_count or env.state["fleet_size"]
    Watch(env, "infra", *hosts).until(
        lambda found: len(found) >= fleet_size and all(host_state(h) == "available" for h in found.values()),
        describe_hosts,
        started,
    )
    timed(f"fleet registered and inspected ({fleet_size} hosts)", started)
    kubectl(env, "infra", "get", "hardwaredata", "-n", INFRA_NAMESPACE)

    step("The infra team applies the infra guide's HostDeployPolicy")
    apply_sample(env, "infra", "hostdeploypolicy.yaml")

    step(f"The tenant ({TENANT}) applies the tenant guide's userData Secret and HostClaim in {tenant_ns}")
    apply_sample(env, TENANT, "userdata_secret.yaml")
    started = time.monotonic()
    apply_sample(env, TENANT, "hostclaim.yaml")
    found = Watch(env, TENANT, *claims).until(lambda f: condition_true(f, "Association"), describe_claim, started)
    timed("claim applied -> Associated", started)
    print_conditions(found[CLAIM])
    host = found[CLAIM]["status"]["hardwareData"]["name"]

    step("What the tenant cannot see")
    kubectl(env, TENANT, "get", "baremetalhosts", "-n", INFRA_NAMESPACE)
    kubectl(env, TENANT, "get", "secret", f"{host}-bmc-secret", "-n", INFRA_NAMESPACE)
    step("What the infra team sees: the host's consumer and the copied userData Secret beside it")
    kubectl(env, "infra", "get", *hosts)
    kubectl(
        env, "infra", "get", "secret", f"{host}-userdata", "-n", INFRA_NAMESPACE,
        "-o", "custom-columns=NAME:.metadata.name,TYPE:.type",
    )  # fmt: skip

    on_vms = "vms" in env.state
    if on_vms:
        step("The tenant deploys a disk image: online: true, the image built here and its checksum (the tenant")
        print("   guide's step 2; the deploy ISO writes the image and the userData config drive)")
        offsets = serial_sizes(env)
    else:
        step("The tenant boots a live ISO: online: true and an image (the tenant guide's step 2; an ISO served here)")
    patch = json.dumps({"spec": {"online": True, "image": image}})
    started = time.monotonic()
    kubectl(env, TENANT, "patch", "hostclaim", CLAIM, "-n", tenant_ns, "--type=merge", "-p", patch)
    found = Watch(env, TENANT, *claims).until(
        lambda f: condition_true(f, "Provisioned") and (f[CLAIM].get("status") or {}).get("poweredOn") is True,
        describe_claim,
        started,
    )
    timed(f"online + {'disk image' if on_vms else 'live ISO'} -> Provisioned, powered on", started)
    print_conditions(found[CLAIM])
    kubectl(env, "infra", "get", "baremetalhost", host, "-n", INFRA_NAMESPACE)
    if on_vms:
        step(f"The VM behind {host} boots its disk: its serial console (the infra team's view)")
        show_serial_console(env, host, offsets[int(host.rsplit("-", 1)[1])])
        timed("online + disk image -> the image's marker on the serial console", started)

    step("The tenant deletes its claim; the infra team watches the host released")
    started = time.monotonic()
    kubectl(env, TENANT, "delete", "hostclaim", CLAIM, "-n", tenant_ns, "--wait=false")
    Watch(env, TENANT, *claims).until(lambda f: CLAIM not in f, describe_claim, started)

    def released(found: dict) -> bool:
        spec = found[host].get("spec") or {}
        return "consumerRef" not in spec and host_state(found[host]) == "available"

    Watch(env, "infra", *hosts, f"--field-selector=metadata.name={host}").until(
        lambda f: host in f and released(f), describe_hosts, started
    )
    timed("claim deleted -> host released, available", started)
    kubectl(
        env, "infra", "get", "baremetalhost", host, "-n", INFRA_NAMESPACE,
        "-o", "custom-columns=NAME:.metadata.name,STATE:.status.provisioning.state,CONSUMER:.spec.consumerRef.name,"
        "CLEANED:.status.conditions[?(@.type=='Cleaned')].reason",
    )  # fmt: skip


def print_timings(timings: dict[str, float]) -> None:
    width = max(len(what) for what in timings)
    print(f"\n{'step':<{width}}  seconds")
    for what, seconds in timings.items():
        print(f"{what:<{width}}  {seconds:7.1f}")


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")  # SIGTERM unwinds like Ctrl-C: the controllers are stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metalclaim_dev.devenv.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dir", type=Path, default=Path(".devenv"))
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--vms", type=int, default=0, help="real VMs instead of emulated servers (root)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    controllers: list[Controller] = []
    timings: dict[str, float] = {}
    try:
        fleet = f"{args.vms} VMs (libvirt, QEMU)" if args.vms else f"{args.hosts} emulated Redfish servers"
        step(f"Local environment with {fleet}")
        started = time.monotonic()
        env = Devenv.up(args.dir, 0 if args.vms else args.hosts, vm_count=args.vms)
        timings["environment up (control plane, Redfish fleet, hosts registered)"] = time.monotonic() - started
        kubectl(env, "infra", "get", "baremetalhosts", "-n", INFRA_NAMESPACE, "--show-labels")
        image, provisioner_options = {}, ()
        if args.vms:
            step("The deploy ISO (files/metalclaim-build-deploy-iso, cached) and a tenant disk image built here")
            started = time.monotonic()
            image, provisioner_options = vm_media(env)
            timings["deploy ISO and disk image ready"] = time.monotonic() - started

        step("The controller: the claim side as `controller`, the Redfish provisioner as `provisioner`")
        started = time.monotonic()
        start_controllers(env, env.directory / "demo", controllers, provisioner_options)
        timings["controllers started and synced"] = time.monotonic() - started

        if args.vms:
            play(env, image, timings)
        else:
            with LiveIso() as iso_url:
                play(env, {"url": iso_url, "format": "live-iso"}, timings)
        print_timings(timings)
        print(
            f"\nThe environment keeps running: kubeconfigs are in {env.directory / 'kubeconfig'}, the controllers'"
            f" logs in {env.directory / 'demo'}.\nStop it with: make devenv-down"
        )
    except DevenvError as error:
        print(f"demo: {error}", file=sys.stderr)
        for controller in controllers:
            print(
                f"\n-- {controller.side} controller, last lines of {controller.log} --\n{controller.tail()}",
                file=sys.stderr,
            )
        return 1
    except KeyboardInterrupt:
        print("\ndemo: interrupted; stopping the controllers", file=sys.stderr)
        return 130
    finally:
        stop_controllers(controllers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
