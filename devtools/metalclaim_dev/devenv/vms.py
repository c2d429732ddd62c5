"""A fleet of real VMs behind a Redfish BMC: libvirtd + QEMU (TCG) + sushy-tools' libvirt driver.

Containment: libvirtd (and so every QEMU), the Redfish emulator, the media server and the image server run in a
network and mount namespace of their own (unshare): the network namespace has only loopback, carrying 127.0.0.1
and 10.0.2.2, QEMU user-mode networking's address for "the host". A guest therefore reaches exactly the services
of that namespace (10.0.2.2:<port> -> the namespace's 127.0.0.1:<port>) and nothing else; the BMC fetches virtual
media from the same 10.0.2.2 URLs the guest uses, so one URL serves both. The only way in from the machine is the
Redfish forwarder (127.0.0.1:<port> -> the namespace's 127.0.0.1:<port>, metalclaim_dev.devenv.netforward).
The mount namespace puts libvirt's /etc, /var/lib, /run, /var/cache and /var/log under the devenv directory:
no system-wide libvirt state, no systemd.

Why TCG and not KVM: /dev/kvm exists on the machines this runs on but is nested and 50-100 times slower than
TCG there, and libvirt still advertises kvm: domains say type='qemu' explicitly (METALCLAIM_VM_KVM=1 opts in).
"""

from __future__ import annotations

import base64
import os
import pprint
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import bcrypt

from .processes import LOOPBACK, DevenvError, alive, free_port, http_ok, spawn, stop_process_group, wait_until

GUEST_GATEWAY = "10.0.2.2"  # QEMU user networking: the guest's address for the host (here: the namespace)
POOL_NAME = "default"  # sushy-tools' libvirt driver uploads inserted ISOs into this pool
DISK_POOL_NAME = "metalclaim-disks"  # the driver reports only disks that are volumes of a pool
VM_PREFIX = "mc-vm"
VM_MEMORY_MIB = 1024  # the emulator reports memory in whole GiB: less would show as none
USERADD_NAME_IN_USE = 9  # useradd(8): "username or group name already in use"
VM_DISK_BYTES = 3 * 1024**3
# A second, small fixed disk: a tenant may write to any disk, so cleaning must reach every one.
VM_DATA_DISK_BYTES = 64 * 1024**2
_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "vms.devenv.metalclaim")
LIBVIRT_DIRS = {"etc": "/etc/libvirt", "lib": "/var/lib/libvirt", "run": "/run/libvirt", "cache": "/var/cache/libvirt"}
LIBVIRT_DIRS["log"] = "/var/log/libvirt"
VMEDIA_DEVICES = {
    "Cd": {"Name": "Virtual CD", "MediaTypes": ["CD", "DVD"]},
    "Floppy": {"Name": "Virtual Removable Media", "MediaTypes": ["Floppy", "USBStick"]},
}


@dataclass(frozen=True)
class VmSystem:
    name: str
    uuid: str
    boot_mac: str
    address: str  # Metal3 BMC address (through the forwarder)
    disk: str  # the disk file (vda: where images are written)
    data_disk: str  # the second disk's file (vdb)
    serial_log: str  # the serial console, appended across boots


@dataclass(frozen=True)
class VmFleet:
    endpoint: str
    username: str
    password: str = field(repr=False)
    systems: tuple[VmSystem, ...]
    pids: dict
    libvirt_uri: str
    media_dir: str
    media_url: str  # as the guests and the BMC see it
    images_dir: str
    images_url: str  # as the guests and the BMC see it
    log_dir: str


def kvm_wanted() -> bool:
    return os.environ.get("METALCLAIM_VM_KVM") == "1" and os.access("/dev/kvm", os.R_OK | os.W_OK)


def check_prerequisites() -> None:
    missing = [
        tool for tool in ("libvirtd", "qemu-system-x86_64", "unshare", "nsenter", "ip") if not shutil.which(tool)
    ]
    if missing:
        raise DevenvError(
            f"cannot start VMs: {missing} missing (apt-get install libvirt-daemon libvirt-daemon-driver-qemu "
            "qemu-system-x86 ovmf iproute2 util-linux)"
        )
    if os.geteuid() != 0:
        raise DevenvError("cannot start VMs: namespaces and libvirtd need root")
    try:
        import libvirt  # noqa: F401  (the emulator's driver imports it)
    except ImportError as error:
        raise DevenvError(f"cannot start VMs: libvirt-python is not installed ({error})") from error
    if not Path("/usr/share/qemu/firmware").is_dir():
        raise DevenvError("cannot start VMs: no UEFI firmware descriptors (apt-get install ovmf)")


def check_can_run() -> None:
    """check_prerequisites, then QEMU itself started under TCG (no machine, quit at once): what CI asks before
    `make e2e`. Raises DevenvError with the reason."""
    check_prerequisites()
    argv = ["qemu-system-x86_64", "-accel", "tcg", "-machine", "none", "-nodefaults", "-display", "none"]
    try:
        result = subprocess.run(
            [*argv, "-monitor", "stdio"], input="quit\n", capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired as error:
        raise DevenvError("cannot start VMs: QEMU (TCG) did not quit within 30 s") from error
    if result.returncode != 0:
        raise DevenvError(f"cannot start VMs: QEMU (TCG) does not start: {result.stderr.strip()[-500:]}")


def ensure_libvirt_accounts() -> None:
    """libvirtd without libvirt-daemon-system refuses to start unless these exist (it runs QEMU as root here).
    Two pytest workers may get here at once: whichever adds an account second finds it there, and that is fine."""
    for group in ("kvm", "libvirt-qemu"):
        if subprocess.run(["getent", "group", group], capture_output=True).returncode != 0:
            # --force: success when the group exists by now.
            subprocess.run(["groupadd", "--system", "--force", group], check=True)
    if subprocess.run(["getent", "passwd", "libvirt-qemu"], capture_output=True).returncode != 0:
        added = subprocess.run(
            [
                "useradd",
                "--system",
                "--gid",
                "libvirt-qemu",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                "libvirt-qemu",
            ],
            capture_output=True,
            text=True,
        )
        # useradd exits 9 when the name is taken: by the other worker, if getent now finds the user.
        taken = added.returncode == USERADD_NAME_IN_USE
        if added.returncode != 0 and not (
            taken and subprocess.run(["getent", "passwd", "libvirt-qemu"], capture_output=True).returncode == 0
        ):
            raise DevenvError(f"cannot add the libvirt-qemu user: {added.stderr.strip()}")


def write_libvirt_config(root: Path) -> None:
    (root / "etc" / "libvirtd.conf").write_text(
        f'unix_sock_dir = "{root / "run"}"\nauth_unix_rw = "none"\nauth_unix_ro = "none"\nlog_outputs = "3:stderr"\n'
    )
    (root / "etc" / "qemu.conf").write_text(
        # root everywhere: no libvirt-qemu user owning files; no cgroups, private /dev or AppArmor (no systemd here);
        # QEMU's own output to a plain file, so no virtlogd is needed.
        'user = "root"\ngroup = "root"\ndynamic_ownership = 0\nremember_owner = 0\nsecurity_driver = "none"\n'
        'cgroup_controllers = []\nnamespaces = []\nstdio_handler = "file"\n'
    )


NAMESPACE_SCRIPT = """
set -e
ip link set lo up
ip addr add {gateway}/32 dev lo
{mounts}
exec libvirtd --pid-file {root}/run/libvirtd.pid
"""


def start_libvirtd(root: Path) -> int:
    # The mount points may be missing (no libvirt-daemon-system); creating empty ones changes nothing else.
    mounts = "\n".join(
        f"mkdir -p {target}; mount --bind {root / name} {target}" for name, target in LIBVIRT_DIRS.items()
    )
    script = NAMESPACE_SCRIPT.format(gateway=GUEST_GATEWAY, mounts=mounts, root=root)
    log_file = root / "libvirtd.log"
    # unshare execs (no --fork): the pid spawned is libvirtd's, and /proc/<pid>/ns/net the namespace's handle.
    pid = spawn(["unshare", "--net", "--mount", "--propagation", "private", "--", "bash", "-c", script], log_file)
    socket = root / "run" / "libvirt-sock"
    wait_until(socket.exists, "libvirtd", 30, pid, log_file)
    return pid


def in_namespace(pid: int, argv: list[str]) -> list[str]:
    return ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv]


def domain_xml(system: VmSystem, kvm: bool) -> str:
    serial = escape(system.serial_log)
    return f"""<domain type='{"kvm" if kvm else "qemu"}'>
  <name>{system.name}</name>
  <uuid>{system.uuid}</uuid>
  <memory unit='MiB'>{VM_MEMORY_MIB}</memory>
  <vcpu>1</vcpu>
  <os firmware='efi'>
    <type arch='x86_64' machine='pc'>hvm</type>
    <firmware><feature enabled='no' name='secure-boot'/></firmware>
    <boot dev='hd'/>
  </os>
  <features><acpi/></features>
  <on_reboot>restart</on_reboot>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='{escape(system.disk)}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='{escape(system.data_disk)}'/>
      <target dev='vdb' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <target dev='hdc' bus='ide'/>
      <readonly/>
    </disk>
    <interface type='user'>
      <mac address='{system.boot_mac}'/>
      <model type='virtio'/>
    </interface>
    <serial type='file'>
      <source path='{serial}' append='on'/>
      <target port='0'/>
    </serial>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <graphics type='vnc' port='-1' listen='127.0.0.1'/>
    <video><model type='vga'/></video>
  </devices>
</domain>
"""


def vm_systems(root: Path, count: int, port: int) -> tuple[VmSystem, ...]:
    systems = []
    for index in range(count):
        name = f"{VM_PREFIX}-{index:02d}"
        system_uuid = str(uuid.uuid5(_UUID_NAMESPACE, name))
        address = f"redfish+http://{LOOPBACK}:{port}/redfish/v1/Systems/{system_uuid}"
        systems.append(
            VmSystem(
                name=name,
                uuid=system_uuid,
                boot_mac=f"52:54:00:6d:63:{index:02x}",
                address=address,
                disk=str(root / "disks" / f"{name}.img"),
                data_disk=str(root / "disks" / f"{name}-data.img"),
                serial_log=str(root / "serial" / f"{name}.log"),
            )
        )
    return tuple(systems)


def define_fleet(uri: str, root: Path, systems: tuple[VmSystem, ...]) -> None:
    import libvirt

    conn = libvirt.open(uri)
    try:
        for pool_name, path in ((POOL_NAME, root / "pool"), (DISK_POOL_NAME, root / "disks")):
            pool = conn.storagePoolDefineXML(
                f"<pool type='dir'><name>{pool_name}</name><target><path>{path}</path></target></pool>"
            )
            pool.create()
        disks = conn.storagePoolLookupByName(DISK_POOL_NAME)
        for system in systems:
            for path, size in ((system.disk, VM_DISK_BYTES), (system.data_disk, VM_DATA_DISK_BYTES)):
                disks.createXML(
                    f"<volume><name>{Path(path).name}</name><capacity>{size}</capacity>"
                    "<allocation>0</allocation><target><format type='raw'/></target></volume>"
                )
            conn.defineXML(domain_xml(system, kvm_wanted()))
    finally:
        conn.close()


def write_emulator_config(root: Path, uri: str, systems, username: str, password: str) -> Path:
    htpasswd = root / "redfish-htpasswd"
    htpasswd.touch(mode=0o600)
    htpasswd.write_text(f"{username}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    config = {
        "SUSHY_EMULATOR_LISTEN_IP": LOOPBACK,
        "SUSHY_EMULATOR_AUTH_FILE": str(htpasswd),
        "SUSHY_EMULATOR_LIBVIRT_URI": uri,
        "SUSHY_EMULATOR_ALLOWED_INSTANCES": [s.uuid for s in systems],
        "SUSHY_EMULATOR_FEATURE_SET": "full",
        "SUSHY_EMULATOR_VMEDIA_DEVICES": VMEDIA_DEVICES,
        "SUSHY_EMULATOR_VMEDIA_VERIFY_SSL": False,
        "SUSHY_EMULATOR_STATE_DIR": str(root / "redfish-state"),
    }
    path = root / "redfish-emulator.conf.py"
    path.write_text(
        "# Generated by metalclaim_dev.devenv.vms\n"
        + "".join(f"{k} = {pprint.pformat(v)}\n" for k, v in config.items())
    )
    return path


def start_vm_fleet(root: Path, count: int, username: str = "admin", progress=print) -> VmFleet:
    """Start libvirtd, define `count` powered-off VMs, serve them over Redfish. Stop with stop_vm_fleet."""
    check_prerequisites()
    ensure_libvirt_accounts()
    for name in (*LIBVIRT_DIRS, "pool", "disks", "serial", "media", "images", "redfish-state"):
        (root / name).mkdir(parents=True, exist_ok=True)
    write_libvirt_config(root)
    pids: dict[str, int] = {}
    password = secrets.token_urlsafe(24)
    try:
        progress("starting libvirtd in a network and mount namespace of its own (loopback only)")
        pids["libvirtd"] = namespace = start_libvirtd(root)
        uri = f"qemu+unix:///system?socket={root / 'run' / 'libvirt-sock'}"
        redfish_port, media_port, images_port = free_port(), free_port(), free_port()
        systems = vm_systems(root, count, redfish_port)
        progress(f"defining {count} VMs ({VM_MEMORY_MIB} MiB, 1 vCPU, {'KVM' if kvm_wanted() else 'TCG'})")
        define_fleet(uri, root, systems)
        config = write_emulator_config(root, uri, systems, username, password)
        env = {k: v for k, v in os.environ.items() if k != "SUSHY_EMULATOR_CONFIG"}
        env["TMPDIR"] = str(root / "redfish-state")  # inserted ISOs are downloaded here first
        emulator = [sys.executable, "-m", "sushy_tools.emulator.main", "--config", str(config)]
        emulator += ["--interface", LOOPBACK, "--port", str(redfish_port)]
        pids["redfish"] = spawn(in_namespace(namespace, emulator), root / "redfish.log", env=env, cwd=root)
        pids["mediaserver"] = start_media_server(root, namespace, media_port)
        images = [sys.executable, "-m", "http.server", "--bind", "0.0.0.0", "--directory", str(root / "images")]
        pids["images"] = spawn(in_namespace(namespace, [*images, str(images_port)]), root / "images.log")
        forward = [sys.executable, "-m", "metalclaim_dev.devenv.netforward", "--netns", f"/proc/{namespace}/ns/net"]
        forward += ["--port", str(redfish_port)]
        pids["redfish-forward"] = spawn(forward, root / "netforward.log")
        endpoint = f"http://{LOOPBACK}:{redfish_port}"
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        wait_until(
            lambda: http_ok(f"{endpoint}/redfish/v1/Systems", headers={"Authorization": f"Basic {token}"}),
            "Redfish emulator (libvirt driver)",
            60,
            pids["redfish"],
            root / "redfish.log",
        )
    except BaseException:
        stop_vm_fleet(root, pids)
        raise
    return VmFleet(
        endpoint=endpoint,
        username=username,
        password=password,
        systems=systems,
        pids=pids,
        libvirt_uri=uri,
        media_dir=str(root / "media"),
        media_url=f"http://{GUEST_GATEWAY}:{media_port}",
        images_dir=str(root / "images"),
        images_url=f"http://{GUEST_GATEWAY}:{images_port}",
        log_dir=str(root),
    )


def start_media_server(root: Path, namespace: int, port: int) -> int:
    """The media server (config drives, callbacks) in the fleet's namespace, on `port`; its pid (a process group).

    Also how a test brings it back after stopping it (a fault): the same port, so the media URL stays valid."""
    mediaserver = [sys.executable, "-m", "metalclaim.mediaserver", "--dir", str(root / "media")]
    mediaserver += ["--listen", "0.0.0.0", "--port", str(port)]
    log_file = root / "mediaserver.log"
    with log_file.open("a") as log:  # appended to across restarts
        log.write(f"--- starting the media server on port {port}\n")
    pid = spawn(in_namespace(namespace, mediaserver), log_file)
    wait_until(lambda: _listening(namespace, port), "media server", 30, pid, log_file)
    return pid


def _listening(namespace: int, port: int) -> bool:
    """Whether something listens on `port` in the namespace (ss, from iproute2, which the fleet needs anyway)."""
    argv = in_namespace(namespace, ["ss", "--listening", "--tcp", "--numeric", "--no-header", f"sport = :{port}"])
    return bool(subprocess.run(argv, capture_output=True, text=True).stdout.strip())


def qemu_pids(root: Path) -> list[int]:
    pids = []
    # Only the domains' files: libvirt's QEMU driver keeps its own (driver.pid, libvirtd's pid) beside them.
    for pid_file in (root / "run" / "qemu").glob(f"{VM_PREFIX}-*.pid"):
        try:
            pids.append(int(pid_file.read_text().strip()))
        except (OSError, ValueError):
            continue
    return pids


def stop_guests(root: Path) -> None:
    """Kill the QEMUs: libvirtd starts each in a session of its own, outside libvirtd's process group."""
    for pid in qemu_pids(root):
        if alive(pid):
            os.kill(pid, 9)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in qemu_pids(root)) and time.monotonic() < deadline:
        time.sleep(0.1)


def stop_vm_fleet(root: Path, pids: dict[str, int]) -> None:
    """Stop the QEMUs, then every process started here."""
    stop_guests(root)
    for _name, pid in reversed(list(pids.items())):
        stop_process_group(pid)
