# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The BareMetalHost state machine of the Redfish provisioner. Pure: no I/O.

One call of `decide` advances one host by one step. The edge (``_provisioner/io/provisioner.py``)
first asks `observations` what to read from the BMC, reads it, then applies the
returned `Step`: BMC actions in order, then the host's annotations/finalizer, then its
status. Every step is computed from the host as it is now plus what the BMC says, so a
step may be re-run at any point (after a crash, a conflict or a timeout) and converges.

States and status fields are Metal3's, so ``kubectl get bmh`` reads as users expect.
Bookkeeping the status schema has no field for (an operation in flight, a pending soft
power-off) lives in ``provisioner.metalclaim.io/*`` annotations on the host.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import urllib.parse
from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    DETACHED_ANNOTATION,
    IN_USE_ANNOTATION,
    PAUSED_ANNOTATION,
    REBOOT_ANNOTATION,
    UNCLEANED_ANNOTATION,
    WARM_ANNOTATION,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import defaults, firmware, reach
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.media_protocol import (
    TOKEN_FIELDS,
    media_url,
)

# Metal3 provisioning states, by name (each one of metal3.STATES).
NONE = ""
UNMANAGED = "unmanaged"
REGISTERING = "registering"
INSPECTING = "inspecting"
AVAILABLE = "available"
PROVISIONING = "provisioning"
PROVISIONED = "provisioned"
DEPROVISIONING = "deprovisioning"
EXTERNALLY_PROVISIONED = "externally provisioned"
POWERING_OFF_BEFORE_DELETE = "powering off before delete"
DELETING = "deleting"
# States that hold one of the provisioning-concurrency slots (Metal3's limit counts these).
BUSY_STATES = (PROVISIONING, DEPROVISIONING)

# Metal3 error types.
REGISTRATION_ERROR = "registration error"
PROVISIONED_REGISTRATION_ERROR = "provisioned registration error"
INSPECTION_ERROR = "inspection error"
PROVISIONING_ERROR = "provisioning error"
POWER_ERROR = "power management error"

INSPECT_ANNOTATION = "inspect.metal3.io"
# Who provisions this host: "metalclaim" is us; anything else (say "metal3") leaves it to that provisioner.
# Read on the host (annotation), then on its Namespace (label). Opt-in: a host marked neither way is not ours
# (beside Metal3's baremetal-operator, unmarked hosts are its), unless it carries our FINALIZER already.
PROVISIONER_ANNOTATION = "metalclaim.io/provisioner"
OURS = "metalclaim"
FINALIZER = "metalclaim.io/provisioner"
OPERATION_ANNOTATION = "provisioner.metalclaim.io/operation"
POWER_OFF_ANNOTATION = "provisioner.metalclaim.io/power-off"

CLEANED_CONDITION = "Cleaned"
# How deep cleaning goes, as Ironic's two cleaning steps: "metadata" (erase_devices_metadata: partition tables and
# signatures) or "full" (erase_devices: every byte of every fixed disk overwritten with zeros). The provisioner's
# setting (Settings.cleaning_erase) applies to every host; this infrastructure-owned annotation asks for "full" on one
# host. The stronger of the two wins, so neither can weaken the other.
ERASE_ANNOTATION = "metalclaim.io/cleaning-erase"
ERASE_MODES = ("metadata", "full")
DISK_FORMATS = ("qcow2", "raw")
LIVE_ISO = "live-iso"
# The operation of a warm host: available, powered on in the deploy system its last cleaning booted, its writer
# polling the media server under the operation's token for a job (see _stay_warm).
WARM = "warm"

# Observations the edge can make (one Redfish read each, roughly).
PROBE = "probe"
POWER = "power"
BOOT = "boot"
MEDIA = "media"
INVENTORY = "inventory"
CALLBACK = "callback"
WARM_ACK = "warm_ack"  # the warm writer's acknowledgement that it took the job handed to it

# Virtual media devices: the CD carries the live ISO or the deploy ISO, the second
# device the per-host config drive.
CD = "cd"
CONFIG_DEVICE = "config"


@dataclass(frozen=True)
class Settings:
    """What the infrastructure team configures for the provisioner."""

    deploy_iso_url: str | None = None  # the image writer's live ISO; without it, no disk images or cleaning
    media_url: str = ""  # base URL of the media server that serves config drives and takes callbacks
    power_off_timeout: float = defaults.POWER_OFF_TIMEOUT  # a soft power-off gets this long before a hard one
    callback_timeout: float = defaults.CALLBACK_TIMEOUT  # the image writer must call back within this
    backoff_base: float = defaults.BACKOFF_BASE
    backoff_cap: float = defaults.BACKOFF_CAP
    # A host whose power agrees with its spec is read again this often: power changed behind our back (at the BMC,
    # by the OS) shows in status.poweredOn, and so on its claim, within this bound.
    power_poll_interval: float = defaults.POWER_POLL_INTERVAL
    # How deep automated cleaning goes on every host: "metadata" or "full" (ERASE_ANNOTATION asks per host).
    cleaning_erase: str = defaults.CLEANING_ERASE
    warm_pickup_timeout: float = defaults.WARM_PICKUP_TIMEOUT  # a warm writer must take a job within this
    # The caller is woken when a writer calls back (the controller watches the media directory's callbacks): a host
    # whose writer is at work is looked at again only as a safety net (defaults.CALLBACK_EVENTS_POLL), not polled.
    callback_events: bool = False


@dataclass
class Context:
    """The facts about one host the edge gathered before the step."""

    now: str
    settings: Settings = field(default_factory=Settings)
    credentials_version: str | None = None  # the BMC Secret's resourceVersion, None when unreadable
    credentials_problem: str = ""  # why the BMC Secret cannot be used (missing, no username...)
    address_problem: str = ""  # why spec.bmc.address cannot be used
    slot_free: bool = True  # a provisioning-concurrency slot is free for this host
    new_token: str = ""  # a fresh unguessable token, used if this step publishes media
    wait_token: str = ""  # another one: a cleaning's writer that may stay warm polls under it for its next job
    warm_offered: bool = False  # the host's namespace keeps cleaned hosts warm (warm.pool_size > 0)
    warm_room: bool = False  # ...and is under that size: this host may stay or become warm


@dataclass
class Step:
    """What to do for one host: actions on the BMC/media, then metadata, then status."""

    state: str
    actions: list = field(default_factory=list)  # ("power", action) ("insert", device, url) ...
    status: dict = field(default_factory=dict)  # status fields to set; None removes one
    annotations: dict = field(default_factory=dict)  # annotation changes; None removes one
    finalizer: str = ""  # "add", "remove" or ""
    hardware: dict | None = None  # write HardwareData with this
    firmware_status: dict | None = None  # write the HostFirmwareSettings' status with this (firmware.py)
    event: tuple | None = None  # (type, reason, message) recorded on the host
    requeue_after: float | None = None  # when to look again, in seconds
    poll_after: float | None = None  # settled: read the BMC again after this long anyway (power drifts)
    skipped: str = ""  # why nothing was done (paused, not ours, backing off)


CONFIG_DRIVE_FILE = "config-drive.iso"


def config_drive_url(settings: Settings, token: str) -> str:
    return media_url(settings.media_url, token, CONFIG_DRIVE_FILE)


# -- reading a host --------------------------------------------------------------------


def state_of(host: dict) -> str:
    return ((host.get("status") or {}).get("provisioning") or {}).get("state") or NONE


def annotations_of(host: dict) -> dict:
    return (host.get("metadata") or {}).get("annotations") or {}


def _json_annotation(host: dict, name: str) -> dict:
    raw = annotations_of(host).get(name)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def operation(host: dict) -> dict:
    """The operation in flight: {kind: live-iso|deploy|clean|warm, token, started, powered, ...}."""
    return _json_annotation(host, OPERATION_ANNOTATION)


def tokens_of(op: dict) -> list:
    """Every media token an operation holds: its job's, a warm writer's it was handed to ("warm"), and the one a
    cleaning's writer would wait under ("wait")."""
    return [op[name] for name in TOKEN_FIELDS if op.get(name)]


def _withdraw_all(op: dict, step: Step) -> None:
    step.actions += [("withdraw", token) for token in tokens_of(op)]


def is_ours(host: dict, namespace_labels: dict) -> bool:
    """Whether this provisioner drives the host (Metal3's BMO may own it instead).

    Only hosts that opt in: annotated `metalclaim.io/provisioner: metalclaim`, or not annotated and in a Namespace
    labelled so. Another value on either says whose the host is. A host marked neither way is ours only if it holds
    our finalizer (we took it before, so we finish what we started); otherwise it is left untouched.
    """
    annotation = annotations_of(host).get(PROVISIONER_ANNOTATION)
    if annotation is not None:
        return annotation == OURS
    label = namespace_labels.get(PROVISIONER_ANNOTATION)
    if label is not None:
        return label == OURS
    return FINALIZER in (host.get("metadata", {}).get("finalizers") or [])


def parse_time(timestamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(timestamp, conditions.TIMESTAMP_FORMAT).replace(tzinfo=datetime.timezone.utc)


def seconds_between(earlier: str, later: str) -> float:
    try:
        return (parse_time(later) - parse_time(earlier)).total_seconds()
    except (TypeError, ValueError):
        return float("inf")  # an unreadable timestamp counts as long ago


def backoff(error_count: int, settings: Settings) -> float:
    """Exponential backoff after consecutive errors: base, 2*base, 4*base ... up to the cap."""
    if error_count <= 0:
        return 0.0
    return min(settings.backoff_base * 2 ** min(error_count - 1, 30), settings.backoff_cap)


def waiting_for_backoff(host: dict, ctx: Context) -> float:
    """Seconds left before a host in error may be retried (0 when it may be now)."""
    status = host.get("status") or {}
    if status.get("operationalStatus") != "error":
        return 0.0
    wait = backoff(int(status.get("errorCount") or 0), ctx.settings)
    elapsed = seconds_between(status.get("lastUpdated") or "", ctx.now)
    return max(0.0, wait - elapsed)


def wants_power_on(host: dict) -> bool:
    """spec.online, unless a reboot annotation holds the host off."""
    return bool((host.get("spec") or {}).get("online")) and not _reboot_holds(host)


def _reboot_holds(host: dict) -> bool:
    return any(name == REBOOT_ANNOTATION or name.startswith(REBOOT_ANNOTATION + "/") for name in annotations_of(host))


def reboot_mode(host: dict) -> str:
    """'hard' when any reboot annotation asks {"mode": "hard"}, else 'soft' (Metal3's default)."""
    for name, value in annotations_of(host).items():
        if name == REBOOT_ANNOTATION or name.startswith(REBOOT_ANNOTATION + "/"):
            try:
                if (json.loads(value) or {}).get("mode") == "hard":
                    return "hard"
            except (ValueError, AttributeError):
                continue
    return "soft"


def image_of(host: dict) -> dict | None:
    image = (host.get("spec") or {}).get("image")
    return image if image and image.get("url") else None


def cleaning_wanted(host: dict) -> bool:
    return (host.get("spec") or {}).get("automatedCleaningMode", "metadata") != "disabled"


def erase_mode(host: dict, settings: Settings) -> str:
    """ "full" when the provisioner's setting or the host's annotation says so, else "metadata"; raises ValueError on a
    value that is neither (a typo must not quietly become the weaker mode)."""
    asked = annotations_of(host).get(ERASE_ANNOTATION)
    if asked is not None and asked not in ERASE_MODES:
        raise ValueError(f"annotation {ERASE_ANNOTATION}: {asked!r} is not one of {', '.join(ERASE_MODES)}")
    return "full" if "full" in (settings.cleaning_erase, asked) else "metadata"


# -- what to read ----------------------------------------------------------------------


def observations(host: dict, ctx: Context) -> tuple:
    """What the edge must read from the BMC (and the media directory) before `decide`."""
    state = state_of(host)
    if _hands_off(host) or _registration_blocked(ctx) or state in (NONE, UNMANAGED, DELETING):
        return ()
    if not ((host.get("spec") or {}).get("bmc") or {}).get("address"):
        return ()  # no BMC to read (decide makes such a host unmanaged)
    if (host.get("metadata") or {}).get("deletionTimestamp"):
        return (POWER,) if state == POWERING_OFF_BEFORE_DELETE else ()
    needs = []
    if state == REGISTERING or _credentials_changed(host, ctx):
        needs.append(PROBE)
    if state == REGISTERING:
        return tuple(needs)
    if state == INSPECTING:
        return (*needs, INVENTORY)
    if _starts_provisioning(host, ctx):
        return tuple(needs)  # the step is the transition (or a wait for a slot): nothing the BMC says changes it
    needs.append(POWER)
    op = operation(host)
    if state in (PROVISIONING, DEPROVISIONING):
        needs += [BOOT, MEDIA]
        if op.get("token"):
            needs.append(CALLBACK)
        if op.get("warm"):
            needs.append(WARM_ACK)
        needs.append(firmware.FIRMWARE)
    elif op.get("kind") == WARM:
        needs += [BOOT, MEDIA]  # what a warm host gives up when it cools: the deploy ISO and its boot override
    return tuple(needs)


def _starts_provisioning(host: dict, ctx: Context) -> bool:
    """An available host asked for a good image and online, not warm: its step starts provisioning (or waits for a
    slot), whatever its power. (A warm host's step reads power: found off, it cools instead.)"""
    spec, image = host.get("spec") or {}, image_of(host)
    return (
        state_of(host) == AVAILABLE
        and operation(host).get("kind") != WARM
        and not spec.get("externallyProvisioned")
        and bool(image and spec.get("online"))
        and not _image_problem(image, ctx)
    )


def waits_for_power_on(host: dict) -> bool:
    """A live ISO booting: inserted, set to boot once and powered on in an earlier step. Until power reads On, nothing
    else the BMC says changes the step (it never powers twice): the edge reads power alone, and media and boot only
    once it is On (the reads `decide` then confirms the live ISO with)."""
    op, image = operation(host), image_of(host)
    return (
        state_of(host) == PROVISIONING
        and op.get("kind") == LIVE_ISO
        and bool(op.get("powered"))
        and bool(image)
        and op.get("url") == image.get("url")
    )


def deferred(host: dict, need: str, observed: dict) -> bool:
    """Whether the edge skips `need`, given what it has read so far in observations' order (power comes first)."""
    return need in (BOOT, MEDIA) and waits_for_power_on(host) and observed.get(POWER) != "On"


def media_devices(host: dict) -> tuple:
    """The virtual media devices a step reads: a live ISO's provisioning looks at the CD alone."""
    if state_of(host) == PROVISIONING and (image_of(host) or {}).get("format") == LIVE_ISO:
        return (CD,)
    return (CD, CONFIG_DEVICE)


def needs_credentials(host: dict) -> bool:
    """Whether this step may talk to the BMC or judge its credentials: only then is the BMC Secret read.

    Paused and detached hosts, hosts without a BMC address, hosts not yet registering and
    deletions that need no power-off take their step without it (see `decide`).
    """
    state = state_of(host)
    if _hands_off(host) or state in (NONE, UNMANAGED, DELETING):
        return False
    if not ((host.get("spec") or {}).get("bmc") or {}).get("address"):
        return False
    if (host.get("metadata") or {}).get("deletionTimestamp"):
        return state == POWERING_OFF_BEFORE_DELETE
    return True


def _hands_off(host: dict) -> bool:
    annotations = annotations_of(host)
    return PAUSED_ANNOTATION in annotations or DETACHED_ANNOTATION in annotations


def _registration_blocked(ctx: Context) -> bool:
    return bool(ctx.address_problem or ctx.credentials_problem)


def _credentials_changed(host: dict, ctx: Context) -> bool:
    good = (host.get("status") or {}).get("goodCredentials") or {}
    return good.get("credentialsVersion") != ctx.credentials_version


# -- the step --------------------------------------------------------------------------


def decide(host: dict, observed: dict, ctx: Context) -> Step:
    """The next step for `host`, given what was read from its BMC (`observed`, keyed by observation)."""
    state = state_of(host)
    annotations = annotations_of(host)
    meta = host.get("metadata") or {}
    if PAUSED_ANNOTATION in annotations:
        return Step(state, skipped="paused")
    if meta.get("deletionTimestamp"):
        return _deleting(host, observed, ctx)
    if DETACHED_ANNOTATION in annotations:
        step = Step(state, skipped="detached")
        if (host.get("status") or {}).get("operationalStatus") != "detached":
            step.status["operationalStatus"] = "detached"
        return step
    if not ((host.get("spec") or {}).get("bmc") or {}).get("address"):
        return _ok(Step(UNMANAGED), host) if state != UNMANAGED else Step(UNMANAGED, skipped="no BMC address")
    if state in (NONE, UNMANAGED):
        step = Step(
            REGISTERING, finalizer="add", event=("Normal", "Registering", "registering the BMC"), requeue_after=0
        )
        step.status["operationHistory"] = _history(host, "register", start=ctx.now)
        return _ok(step, host)
    if _registration_blocked(ctx):
        return failed(host, ctx.address_problem or ctx.credentials_problem, ctx, error_type=_registration_error(host))
    if PROBE in observed:
        registered = _record_credentials(host, observed, ctx)
        if state != REGISTERING:
            handler = _HANDLERS.get(state)
            step = handler(host, observed, ctx) if handler else Step(state)
            return _with_credentials(step, registered)
        return _registered(host, registered, ctx)
    handler = _HANDLERS.get(state)
    if handler is None:
        return Step(state, skipped=f"state {state!r} is not handled by this provisioner")
    return handler(host, observed, ctx)


def failed(host: dict, message: str, ctx: Context, error_type: str | None = None) -> Step:
    """The step after an error: Metal3's error fields, counted, so the next try backs off."""
    status = host.get("status") or {}
    state = state_of(host)
    count = int(status.get("errorCount") or 0) + 1
    step = Step(state)
    step.status.update(
        operationalStatus="error",
        errorType=error_type or _error_type_for(state),
        errorMessage=message,
        errorCount=count,
    )
    step.requeue_after = backoff(count, ctx.settings)
    if (status.get("errorType"), status.get("errorMessage")) != (step.status["errorType"], message):
        step.event = ("Warning", "Error", message)
    return step


def _error_type_for(state: str) -> str:
    return {
        REGISTERING: REGISTRATION_ERROR,
        INSPECTING: INSPECTION_ERROR,
        PROVISIONING: PROVISIONING_ERROR,
        DEPROVISIONING: PROVISIONING_ERROR,
    }.get(state, POWER_ERROR)


def _registration_error(host: dict) -> str:
    return PROVISIONED_REGISTRATION_ERROR if state_of(host) == PROVISIONED else REGISTRATION_ERROR


def _ok(step: Step, host: dict) -> Step:
    """Clear a previous error: this step went through."""
    status = host.get("status") or {}
    if status.get("operationalStatus") != "OK" and "operationalStatus" not in step.status:
        step.status["operationalStatus"] = "OK"
    if status.get("errorType") or status.get("errorMessage") or status.get("errorCount"):
        step.status.update(errorType="", errorMessage="", errorCount=0)
    return step


def _history(host: dict, operation_name: str, start: str | None = None, end: str | None = None) -> dict:
    history = dict((host.get("status") or {}).get("operationHistory") or {})
    entry = dict(history.get(operation_name) or {})
    if start is not None:
        entry = {"start": start}
    if end is not None:
        entry["end"] = end
    history[operation_name] = entry
    return history


def _transition(host: dict, step: Step, new_state: str, reason: str, message: str) -> Step:
    step.state = new_state
    step.event = ("Normal", reason, message)
    step.requeue_after = 0  # the new state has work of its own
    return step


# registering ------------------------------------------------------------------------------


def _record_credentials(host: dict, observed: dict, ctx: Context) -> dict | None:
    """goodCredentials after a successful probe, or None when the probe failed."""
    if observed.get(PROBE) is not True:
        return None
    spec_bmc = (host.get("spec") or {}).get("bmc") or {}
    return {
        "credentials": {"name": spec_bmc.get("credentialsName"), "namespace": host["metadata"]["namespace"]},
        "credentialsVersion": ctx.credentials_version,
    }


def _with_credentials(step: Step, registered: dict | None) -> Step:
    if registered is not None:
        step.status["goodCredentials"] = registered
    return step


def _registered(host: dict, registered: dict | None, ctx: Context) -> Step:
    if registered is None:
        return failed(host, "the BMC did not answer the probe", ctx, error_type=REGISTRATION_ERROR)
    spec = host.get("spec") or {}
    step = Step(REGISTERING)
    step.status["goodCredentials"] = registered
    step.status["operationHistory"] = _history(host, "register", end=ctx.now)
    if spec.get("externallyProvisioned"):
        _transition(host, step, EXTERNALLY_PROVISIONED, "Registered", "BMC registered; externally provisioned")
    elif annotations_of(host).get(INSPECT_ANNOTATION) == "disabled" or spec.get("inspectionMode") == "disabled":
        _transition(host, step, AVAILABLE, "Registered", "BMC registered; inspection disabled")
    else:
        _transition(host, step, INSPECTING, "Registered", "BMC registered; inspecting")
        step.status["operationHistory"] = _history(
            {"status": {"operationHistory": step.status["operationHistory"]}}, "inspect", start=ctx.now
        )
    return _ok(step, host)


# inspecting -------------------------------------------------------------------------------


def _inspecting(host: dict, observed: dict, ctx: Context) -> Step:
    hardware = observed.get(INVENTORY) or {}
    boot_mac = ((host.get("spec") or {}).get("bootMACAddress") or "").lower()
    macs = {(nic.get("mac") or "").lower() for nic in hardware.get("nics") or []}
    if boot_mac and macs and boot_mac not in macs:
        return failed(
            host,
            f"spec.bootMACAddress {boot_mac} is not among the NICs the BMC reports ({', '.join(sorted(macs))})",
            ctx,
            error_type=INSPECTION_ERROR,
        )
    step = Step(INSPECTING, hardware=hardware)
    step.status["hardware"] = hardware
    step.status["operationHistory"] = _history(host, "inspect", end=ctx.now)
    _transition(host, step, AVAILABLE, "InspectionComplete", _inspection_summary(hardware))
    return _ok(step, host)


def _inspection_summary(hardware: dict) -> str:
    nics = len(hardware.get("nics") or [])
    cpu = (hardware.get("cpu") or {}).get("count")
    ram = hardware.get("ramMebibytes")
    parts = [f"{nics} NIC(s)"]
    if cpu:
        parts.append(f"{cpu} CPU(s)")
    if ram:
        parts.append(f"{ram} MiB RAM")
    return "hardware inspected: " + ", ".join(parts)


# power (available, provisioned, externally provisioned) -----------------------------------


def _follow_power(host: dict, observed: dict, ctx: Context, step: Step) -> Step:
    """Make power follow spec.online and the reboot annotations, soft then hard.

    A pending soft power-off is remembered in an annotation: after power_off_timeout
    without the host going off, a hard one follows. The bare reboot annotation is
    removed once the host is off (the off half of the reboot is done); online then
    powers it back on at the next step.
    """
    power = observed.get(POWER)
    step.status["poweredOn"] = power == "On"
    pending = _json_annotation(host, POWER_OFF_ANNOTATION)
    if power not in ("On", "Off"):  # PoweringOn/PoweringOff: the BMC is on it
        step.requeue_after = 2
        return step
    if not wants_power_on(host):
        if power == "On":
            if not pending:
                hard = reboot_mode(host) == "hard"
                step.actions.append(("power", "ForceOff" if hard else "GracefulShutdown"))
                step.annotations[POWER_OFF_ANNOTATION] = json.dumps(
                    {"since": ctx.now, "mode": "hard" if hard else "soft"}
                )
            elif pending.get("mode") == "soft" and seconds_between(pending.get("since"), ctx.now) >= (
                ctx.settings.power_off_timeout
            ):
                step.actions.append(("power", "ForceOff"))
                step.annotations[POWER_OFF_ANNOTATION] = json.dumps({"since": ctx.now, "mode": "hard"})
            step.requeue_after = 2
            return step
        if pending:
            step.annotations[POWER_OFF_ANNOTATION] = None
        if REBOOT_ANNOTATION in annotations_of(host):
            step.annotations[REBOOT_ANNOTATION] = None  # off half done; online powers it back on
            step.requeue_after = 1
        return _polled(step, ctx)
    if pending:
        step.annotations[POWER_OFF_ANNOTATION] = None
    if power == "Off":
        step.actions.append(("power", "On"))
        step.requeue_after = 2
    return _polled(step, ctx)


def _polled(step: Step, ctx: Context) -> Step:
    """Power agrees with the spec: nothing to do now, but read again at a bounded interval."""
    if step.requeue_after is None and not step.actions:
        step.poll_after = ctx.settings.power_poll_interval
    return step


def _available(host: dict, observed: dict, ctx: Context) -> Step:
    spec = host.get("spec") or {}
    step = Step(AVAILABLE)
    if operation(host).get("kind") == WARM:
        stays = _stay_warm(host, observed, ctx, step)
        if stays is not None:
            return stays
    if spec.get("externallyProvisioned"):
        return _ok(
            _transition(host, step, EXTERNALLY_PROVISIONED, "ExternallyProvisioned", "marked externally provisioned"),
            host,
        )
    image = image_of(host)
    # As in the user guide: provisioning starts once the host has an image and is asked online.
    if image and spec.get("online"):
        problem = _image_problem(image, ctx)
        if problem:
            return failed(host, problem, ctx, error_type=PROVISIONING_ERROR)
        if not ctx.slot_free:
            step.status["operationalStatus"] = "delayed"
            step.requeue_after = 10
            return step
        step.status["operationHistory"] = _history(host, "provision", start=ctx.now)
        step.status["lastAttemptedImage"] = {**image, "url": shown_url(image["url"])}
        step = _transition(host, step, PROVISIONING, "ProvisioningStarted", f"provisioning {shown_url(image['url'])}")
        if operation(host).get("kind") == WARM:  # its writer waits: the job goes with the transition, a step sooner
            _hand_to_warm_writer(operation(host), image, ctx, step)
        return _ok(step, host)
    in_use = _json_annotation(host, IN_USE_ANNOTATION)
    consumer_uid = _consumer_uid(host)
    if in_use and (not spec.get("online") or in_use.get("consumer") != consumer_uid):
        # It ran whatever its consumer booted: powered off and cleaned before anybody else may have it.
        return _ok(_start_deprovisioning(host, step, ctx, "powered on under its last consumer"), host)
    if consumer_uid is not None and not in_use and (wants_power_on(host) or observed.get(POWER) == "On"):
        # Recorded before the power-on, in a write of its own: once the host may run a consumer's OS, nothing can
        # lose the fact that it must go through deprovisioning before the next consumer.
        step.status["poweredOn"] = observed.get(POWER) == "On"
        step.annotations[IN_USE_ANNOTATION] = json.dumps({"consumer": consumer_uid, "since": ctx.now}, sort_keys=True)
        step.requeue_after = 0
        return _ok(step, host)
    return _ok(_follow_power(host, observed, ctx, step), host)


def _stay_warm(host: dict, observed: dict, ctx: Context, step: Step) -> Step | None:
    """A warm host: stay warm, cool down (power off, media out), or None to start the disk image deploy it waits for.

    Its writer is the one the last cleaning booted after a power-off, from our medium: nothing of a consumer ever ran
    since, so being on does not stop it from being free (the claim side reads WARM_ANNOTATION). It cools when it was
    found off (killed, powered off at the BMC), when the pool has no room for it, or when it is wanted for anything
    but a disk image (a live ISO, an image-less consumer, externally provisioned)."""
    op, spec, image = operation(host), host.get("spec") or {}, image_of(host)
    step.status["poweredOn"] = observed.get(POWER) == "On"
    if observed.get(POWER) != "On":
        message = "the warm deploy agent's host was found powered off: its next deploy boots the deploy ISO"
        return _cool(host, op, observed, step, ("Warning", "WarmHostLost", message))
    disk_image = bool(image and (image.get("format") or "raw") in DISK_FORMATS and not _image_problem(image, ctx))
    if disk_image and spec.get("online"):
        return None
    if spec.get("externallyProvisioned") or image or (_consumer_uid(host) is not None and spec.get("online")):
        return _cool(host, op, observed, step, ("Normal", "WarmHostCooled", "wanted for other than a disk image"))
    if not ctx.warm_room:
        return _cool(host, op, observed, step, ("Normal", "WarmHostCooled", "the namespace's warm pool is full"))
    return _ok(_polled(step, ctx), host)


def _cool(host: dict, op: dict, observed: dict, step: Step, event: tuple) -> Step:
    """Leave the warm state: the writer's token withdrawn, media and boot override cleared, powered off."""
    _withdraw_all(op, step)
    _eject_all(observed, step)
    if observed.get(POWER) == "On":
        step.actions.append(("power", "ForceOff"))
    step.annotations.update({OPERATION_ANNOTATION: None, WARM_ANNOTATION: None})
    step.event = event
    step.requeue_after = 2
    return _ok(step, host)


def shown_url(url: str) -> str:
    """An image URL as Events and statuses may show it: without its userinfo (user:password@) and with its query
    (a signed URL's signature) elided. The spec keeps the real one."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if parts.username is not None or parts.password is not None:
        netloc = "***@" + netloc
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


def _consumer_uid(host: dict) -> str | None:
    """The consumer's uid ("" when its consumerRef records none), or None for a host nobody consumes."""
    ref = (host.get("spec") or {}).get("consumerRef")
    return (ref.get("uid") or "") if ref else None


def _image_problem(image: dict, ctx: Context) -> str:
    image_format = image.get("format") or ""
    # The BMC (a live ISO) or the writer (a disk image) fetches it from the management network: nothing but HTTP(S),
    # never file://, nfs:// or another scheme a BMC might also understand.
    if urllib.parse.urlsplit(str(image.get("url") or "")).scheme not in ("http", "https"):
        return "spec.image.url must be an http:// or https:// URL"
    if image_format == LIVE_ISO:
        return ""
    if image_format and image_format not in DISK_FORMATS:
        return f"spec.image.format {image_format!r} is not supported (use live-iso, qcow2 or raw)"
    if not ctx.settings.deploy_iso_url:
        return "disk images need a deploy ISO (the image writer): none is configured for this provisioner"
    if not image.get("checksum"):
        return "spec.image.checksum is required for disk images"
    return media_problem(ctx)


def media_problem(ctx: Context) -> str:
    """Why no BMC can fetch this provisioner's deploy media (reach.py), or ""."""
    return reach.media_problem(ctx.settings.media_url, ctx.settings.deploy_iso_url)


def _unreachable_media(host: dict, problem: str, observed: dict, ctx: Context, step: Step) -> Step:
    """A job (deploy or cleaning) about to publish media no BMC can fetch: a provisioning error at once, not after the
    callback timeout. What the step did so far stays (leftover tokens withdrawn); the operation goes, so the next try
    (after the backoff) starts afresh; the host is powered off, as the job's own first step would have."""
    failure = failed(host, problem, ctx, error_type=PROVISIONING_ERROR)
    failure.actions = [*step.actions, *([("power", "ForceOff")] if observed.get(POWER) == "On" else [])]
    failure.annotations = dict(step.annotations)
    if OPERATION_ANNOTATION in annotations_of(host):
        failure.annotations[OPERATION_ANNOTATION] = None
    failure.firmware_status = step.firmware_status
    if observed.get(POWER) in ("On", "Off"):
        failure.status["poweredOn"] = False
    return failure


def _provisioned(host: dict, observed: dict, ctx: Context) -> Step:
    step = Step(PROVISIONED)
    if not image_of(host):
        return _ok(_start_deprovisioning(host, step, ctx, "image removed"), host)
    return _ok(_follow_power(host, observed, ctx, step), host)


def _externally_provisioned(host: dict, observed: dict, ctx: Context) -> Step:
    step = Step(EXTERNALLY_PROVISIONED)
    if not (host.get("spec") or {}).get("externallyProvisioned"):
        return _ok(_start_deprovisioning(host, step, ctx, "no longer externally provisioned"), host)
    return _ok(_follow_power(host, observed, ctx, step), host)


def _start_deprovisioning(host: dict, step: Step, ctx: Context, why: str) -> Step:
    if not ctx.slot_free:
        step.status["operationalStatus"] = "delayed"
        step.requeue_after = 10
        return step
    step.status["operationHistory"] = _history(host, "deprovision", start=ctx.now)
    return _transition(host, step, DEPROVISIONING, "DeprovisioningStarted", f"deprovisioning: {why}")


# provisioning ------------------------------------------------------------------------------


def _provisioning(host: dict, observed: dict, ctx: Context) -> Step:
    image = image_of(host)
    step = Step(PROVISIONING)
    step.status["poweredOn"] = observed.get(POWER) == "On"
    if not image:
        step.annotations.update({OPERATION_ANNOTATION: None, WARM_ANNOTATION: None})
        _withdraw_all(operation(host), step)
        # The host already holds a concurrency slot: deprovisioning it needs no other.
        return _ok(_start_deprovisioning(host, step, dataclasses.replace(ctx, slot_free=True), "image removed"), host)
    held = _firmware(host, firmware.provisioning(host, observed.get(firmware.FIRMWARE), ctx.now), ctx, step)
    if held is not None:
        return held
    if image.get("format") == LIVE_ISO:
        return _provision_live_iso(host, image, observed, ctx, step)
    return _provision_disk(host, image, observed, ctx, step)


def _firmware(host: dict, plan: firmware.Plan, ctx: Context, step: Step) -> Step | None:
    """The firmware's part of a (de)provisioning step, first of its actions; a Step when it ends the step."""
    if plan.problem:
        failure = failed(host, plan.problem, ctx, error_type=PROVISIONING_ERROR)
        failure.firmware_status = plan.status
        return failure
    step.actions += plan.actions
    step.annotations.update(plan.annotations)
    step.firmware_status = plan.status
    if plan.hold:  # the infrastructure's defaults are recorded in a write of their own, before any change
        step.requeue_after = 0
        return _ok(step, host)
    return None


def _boot_mode(host: dict) -> str:
    return "Legacy" if (host.get("spec") or {}).get("bootMode") == "legacy" else "UEFI"


def _media_holds(observed: dict, device: str, url: str) -> bool:
    media = (observed.get(MEDIA) or {}).get(device) or {}
    return bool(media.get("inserted")) and media.get("image") == url


def _insert(observed: dict, device: str, url: str, step: Step) -> None:
    if _media_holds(observed, device, url):
        return
    if ((observed.get(MEDIA) or {}).get(device) or {}).get("inserted"):
        step.actions.append(("eject", device))
    step.actions.append(("insert", device, url))


def _boot_once_from_cd(host: dict, observed: dict, step: Step) -> None:
    # The emulator reports "Once" back as "Continuous": the target is what matters.
    if (observed.get(BOOT) or {}).get("target") != "Cd":
        step.actions.append(("boot_once", "Cd", _boot_mode(host)))


def _power_into_media(observed: dict, op: dict, step: Step, now: str) -> dict:
    """Power on (or reset a running host) once per operation, so it boots the new media; `powered` says when."""
    if op.get("powered"):
        return op
    step.actions.append(("power", "ForceRestart" if observed.get(POWER) == "On" else "On"))
    return {**op, "powered": now}


def boot_poll(op: dict, ctx: Context) -> float:
    """When to read the power of a host powered into its live ISO again: a third of the time since it was powered,
    within defaults.BOOT_POLL_MIN..MAX (an operation recorded before the time was kept says `True`: the minimum)."""
    powered = op.get("powered")
    if not isinstance(powered, str):
        return defaults.BOOT_POLL_MIN
    share = seconds_between(powered, ctx.now) * defaults.BOOT_POLL_FRACTION
    return max(defaults.BOOT_POLL_MIN, min(defaults.BOOT_POLL_MAX, share))


def _provision_live_iso(host: dict, image: dict, observed: dict, ctx: Context, step: Step) -> Step:
    op = operation(host)
    if op.get("kind") != LIVE_ISO or op.get("url") != image["url"]:
        _withdraw_all(op, step)  # a warm writer's, or a deploy's the image changed under
        if WARM_ANNOTATION in annotations_of(host):
            step.annotations[WARM_ANNOTATION] = None
        op = {"kind": LIVE_ISO, "url": image["url"], "started": ctx.now}
    if op.get("powered") and observed.get(POWER) != "On":
        step.requeue_after = boot_poll(op, ctx)  # booting (waits_for_power_on): it is never powered twice
        return _ok(step, host)
    ready = (
        op.get("powered")
        and _media_holds(observed, CD, image["url"])
        and (observed.get(BOOT) or {}).get("target") == "Cd"
        and observed.get(POWER) == "On"
    )
    if ready:
        step.annotations[OPERATION_ANNOTATION] = None
        return _ok(_provisioned_with(host, image, step, ctx), host)
    _insert(observed, CD, image["url"], step)
    return _boot_into_media(host, op, observed, ctx, step, requeue_after=defaults.BOOT_POLL_MIN)


def _provisioned_with(host: dict, image: dict, step: Step, ctx: Context) -> Step:
    step.status["provisioning"] = {
        **((host.get("status") or {}).get("provisioning") or {}),
        "state": PROVISIONED,
        "image": image,
        "bootMode": "legacy" if _boot_mode(host) == "Legacy" else "UEFI",
    }
    step.status["operationHistory"] = _history(host, "provision", end=ctx.now)
    return _transition(host, step, PROVISIONED, "Provisioned", f"provisioned {shown_url(image['url'])}")


def _provision_disk(host: dict, image: dict, observed: dict, ctx: Context, step: Step) -> Step:
    op = operation(host)
    if op.get("kind") != "deploy" or op.get("url") != image["url"]:  # a warm writer's is handed its job in _available
        _withdraw_all(op, step)
        op = {"kind": "deploy", "url": image["url"], "started": ctx.now}
    if op.get("warm"):
        warm_step = _warm_deploy(host, op, image, observed, ctx, step)
        if warm_step is not None:
            return warm_step
        op = {"kind": "deploy", "url": image["url"], "started": ctx.now, "fallback": True}
    if not op.get("token") and (problem := media_problem(ctx)):  # a deploy started before the settings were judged
        return _unreachable_media(host, problem, observed, ctx, step)
    op, observed = _writer_job(op, observed, ctx, step)
    if not op.get("token"):
        return _waiting_for_off(host, op, step)
    callback = observed.get(CALLBACK)
    if callback is not None:
        return _writer_finished(host, op, callback, observed, ctx, step, on_success=_deployed(image))
    if seconds_between(op["started"], ctx.now) > ctx.settings.callback_timeout:
        return _writer_failed(
            host, op, f"no callback from the image writer within {ctx.settings.callback_timeout:g}s", ctx
        )
    return _boot_writer(host, op, observed, ctx, step)


def _hand_to_warm_writer(op: dict, image: dict, ctx: Context, step: Step) -> None:
    """The deploy as a job for the waiting writer: its config drive under a fresh token, handed over under the
    writer's own (the host was bound after it started waiting: no tenant data reached it before)."""
    job = {"kind": "deploy", "url": image["url"], "started": ctx.now, "token": ctx.new_token, "warm": op["token"]}
    step.actions += [("publish", "deploy", job["token"]), ("handoff", job["warm"], job["token"])]
    step.annotations.update({OPERATION_ANNOTATION: json.dumps(job, sort_keys=True), WARM_ANNOTATION: None})
    step.requeue_after = 1


def _warm_deploy(host: dict, op: dict, image: dict, observed: dict, ctx: Context, step: Step) -> Step | None:
    """A deploy handed to a warm writer: wait for it to take the job, then for its callback; None to fall back.

    A host found off, or a writer that has not taken the job within warm_pickup_timeout, has stopped answering: the
    job's tokens are withdrawn and the deploy starts again the usual way (power off, a fresh token, the deploy ISO)."""
    callback = observed.get(CALLBACK)
    if callback is not None:
        return _writer_finished(host, op, callback, observed, ctx, step, on_success=_deployed(image))
    why = ""
    taken = observed.get(WARM_ACK) is not None  # a file the media server keeps: read each step, never recorded
    if observed.get(POWER) != "On":
        why = "its host was found powered off"
    elif not taken:
        if seconds_between(op["started"], ctx.now) > ctx.settings.warm_pickup_timeout:
            why = f"did not take the job within {ctx.settings.warm_pickup_timeout:g}s"
    elif seconds_between(op["started"], ctx.now) > ctx.settings.callback_timeout:
        return _writer_failed(
            host, op, f"no callback from the image writer within {ctx.settings.callback_timeout:g}s", ctx
        )
    if why:
        _withdraw_all(op, step)
        step.event = ("Warning", "WarmFallback", f"the warm deploy agent {why}: booting the deploy ISO instead")
        return None
    if op != operation(host):
        step.annotations[OPERATION_ANNOTATION] = json.dumps(op, sort_keys=True)
    # The writer is already running: its acknowledgement and callback come in seconds, not minutes.
    due = ctx.settings.callback_timeout if taken else ctx.settings.warm_pickup_timeout
    step.requeue_after = writer_poll(ctx, 1, due - seconds_between(op["started"], ctx.now))
    return _ok(step, host)


def _writer_job(op: dict, observed: dict, ctx: Context, step: Step) -> tuple[dict, dict]:
    """The job's token, made and published only once a read says the host is Off.

    Whatever ran on the host before (the outgoing tenant's OS) must never see the config drive, which carries the
    callback URL and the token, hot-plugged: a token minted after that power-off can only reach the writer booted
    after it, so only that writer can call back. Until then the host is powered off and the job has no token.
    """
    if op.get("token"):
        return op, observed
    if observed.get(POWER) != "Off":
        if observed.get(POWER) == "On":
            step.actions.append(("power", "ForceOff"))
        return op, observed
    op = {**op, "token": ctx.new_token, "off": ctx.now}
    if op["kind"] == "clean":  # the writer's instructions say how deep, and where to wait for a job if kept warm
        if ctx.warm_offered and ctx.wait_token:
            op["wait"] = ctx.wait_token
        wait = (op["wait"],) if op.get("wait") else ()
        step.actions.append(("publish", op["kind"], op["token"], op.get("erase", "metadata"), *wait))
    else:
        step.actions.append(("publish", op["kind"], op["token"]))
    return op, {**observed, CALLBACK: None}


def _waiting_for_off(host: dict, op: dict, step: Step) -> Step:
    if op != operation(host):
        step.annotations[OPERATION_ANNOTATION] = json.dumps(op, sort_keys=True)
    step.requeue_after = 2
    return _ok(step, host)


def _boot_writer(host: dict, op: dict, observed: dict, ctx: Context, step: Step) -> Step:
    """Boot the image writer: deploy ISO as CD, the operation's config drive beside it, once, powered."""
    _insert(observed, CD, ctx.settings.deploy_iso_url, step)
    _insert(observed, CONFIG_DEVICE, config_drive_url(ctx.settings, op["token"]), step)
    due = ctx.settings.callback_timeout - seconds_between(op["started"], ctx.now)
    return _boot_into_media(host, op, observed, ctx, step, requeue_after=writer_poll(ctx, defaults.CALLBACK_POLL, due))


def writer_poll(ctx: Context, poll: float, due_in: float) -> float:
    """When to look again at a host whose image writer is at work (`poll`: how soon when only a poll can tell it called
    back). When the writer's callback (or acknowledgement) wakes the caller itself (Settings.callback_events), only the
    safety net's interval, or when the timeout judged next falls due (`due_in` seconds from now, plus the second the
    timestamps round to); never sooner than `poll`."""
    if not ctx.settings.callback_events:
        return poll
    return max(poll, min(defaults.CALLBACK_EVENTS_POLL, due_in + 1))


def _boot_into_media(host: dict, op: dict, observed: dict, ctx: Context, step: Step, requeue_after: float) -> Step:
    """With the media inserted: a one-time boot from CD, power on (or reset), the operation recorded."""
    _boot_once_from_cd(host, observed, step)
    op = _power_into_media(observed, op, step, ctx.now)
    if op != operation(host):
        step.annotations[OPERATION_ANNOTATION] = json.dumps(op, sort_keys=True)
    step.requeue_after = requeue_after
    return _ok(step, host)


def _deployed(image: dict):
    def finish(host: dict, step: Step, ctx: Context) -> Step:
        return _provisioned_with(host, image, step, ctx)

    return finish


def _writer_finished(
    host: dict, op: dict, callback: dict, observed: dict, ctx: Context, step: Step, on_success, warm: bool = False
) -> Step:
    """The image writer called back: tidy the media away, then move on or record its failure.

    `warm`: the writer goes on running, polling under the operation's wait token. The CD stays in (the running deploy
    system reads its root filesystem from it); the config drive, which carried the finished job, goes."""
    if callback.get("status") != "success":
        message = str(callback.get("message") or "no message")[:512]
        return _writer_failed(host, op, f"the image writer failed: {message}", ctx)
    if warm:
        if ((observed.get(MEDIA) or {}).get(CONFIG_DEVICE) or {}).get("inserted"):
            step.actions.append(("eject", CONFIG_DEVICE))
        step.actions.append(("withdraw", op["token"]))
        return _ok(on_success(host, step, ctx), host)
    _eject_all(observed, step)
    _withdraw_all(op, step)
    step.annotations[OPERATION_ANNOTATION] = None
    if op["kind"] == "deploy":
        # Boot the written disk: reset into it when online, else leave it off.
        step.actions.append(("power", "ForceRestart" if wants_power_on(host) else "ForceOff"))
    return _ok(on_success(host, step, ctx), host)


def _writer_failed(host: dict, op: dict, message: str, ctx: Context) -> Step:
    """Give up this attempt: media away, power off; the next try (after backoff) starts afresh."""
    step = failed(host, message, ctx, error_type=PROVISIONING_ERROR)
    step.actions += [("eject", CD), ("eject", CONFIG_DEVICE)]
    _withdraw_all(op, step)
    step.actions.append(("power", "ForceOff"))
    # Said now: a host in error is not observed again before its backoff ends (a failed power-off is an error too).
    step.status["poweredOn"] = False
    step.annotations[OPERATION_ANNOTATION] = None
    return step


def boot_override_set(observed: dict) -> bool:
    """Whether a boot override other than the disk is still in place (clearing may leave target Hdd)."""
    boot = observed.get(BOOT) or {}
    return boot.get("enabled") != "Disabled" and boot.get("target") not in (None, "None", "Hdd")


def _eject_all(observed: dict, step: Step) -> None:
    for device, media in (observed.get(MEDIA) or {}).items():
        if (media or {}).get("inserted"):
            step.actions.append(("eject", device))
    if boot_override_set(observed):
        step.actions.append(("clear_boot",))


# deprovisioning ----------------------------------------------------------------------------


def _deprovisioning(host: dict, observed: dict, ctx: Context) -> Step:
    step = Step(DEPROVISIONING)
    step.status["poweredOn"] = observed.get(POWER) == "On"
    op = operation(host)
    if op.get("kind") in ("deploy", LIVE_ISO, WARM):  # what provisioning left behind
        _withdraw_all(op, step)
        step.annotations.update({OPERATION_ANNOTATION: None, WARM_ANNOTATION: None})
        op = {}
    held = _firmware(host, firmware.deprovisioning(host, observed.get(firmware.FIRMWARE), ctx.now), ctx, step)
    if held is not None:
        return held
    if cleaning_wanted(host) and ctx.settings.deploy_iso_url and not op.get("cleaned"):
        return _clean(host, op, observed, ctx, step)
    if op.get("wait"):
        if observed.get(POWER) == "On" and ctx.warm_room:
            return _deprovisioned_warm(host, op, observed, ctx, step)
        _withdraw_all({"wait": op["wait"]}, step)  # found off, or no room any more: cooled like any other
    _eject_all(observed, step)
    if observed.get(POWER) != "Off":
        if observed.get(POWER) == "On":
            step.actions.append(("power", "ForceOff"))
        step.requeue_after = 2
        return _ok(step, host)
    if any(action[0] != "withdraw" for action in step.actions):  # media or boot override to clear: confirm next
        step.requeue_after = 1
        return _ok(step, host)
    for name in (OPERATION_ANNOTATION, IN_USE_ANNOTATION):
        if name in annotations_of(host):
            step.annotations[name] = None
    return _ok(_deprovisioned(host, op, ctx, step), host)


def _deprovisioned(host: dict, op: dict, ctx: Context, step: Step, note: str = "") -> Step:
    """Deprovisioning ends: available, with the Cleaned condition and the history's end. Its disks wiped, a host
    the claim side marked uncleaned (node reuse kept them) loses the mark: only this takes it off."""
    if op.get("cleaned") and UNCLEANED_ANNOTATION in annotations_of(host):
        step.annotations[UNCLEANED_ANNOTATION] = None
    step.status["provisioning"] = {"state": AVAILABLE}
    step.status["operationHistory"] = _history(host, "deprovision", end=ctx.now)
    step.status["conditions"] = _cleaned_condition(host, op, ctx)
    message = conditions.find(step.status["conditions"], CLEANED_CONDITION)["message"]
    return _transition(host, step, AVAILABLE, "Deprovisioned", f"deprovisioned; {message}{note}")


def _deprovisioned_warm(host: dict, op: dict, observed: dict, ctx: Context, step: Step) -> Step:
    """Deprovisioning ends with the host on, its cleaning's writer waiting under the wait token: available, warm."""
    if ((observed.get(MEDIA) or {}).get(CONFIG_DEVICE) or {}).get("inserted"):
        step.actions.append(("eject", CONFIG_DEVICE))
        step.requeue_after = 1
        return _ok(step, host)
    step.annotations[OPERATION_ANNOTATION] = json.dumps({"kind": WARM, "token": op["wait"], "since": ctx.now})
    step.annotations[WARM_ANNOTATION] = ctx.now
    if IN_USE_ANNOTATION in annotations_of(host):
        step.annotations[IN_USE_ANNOTATION] = None
    step = _deprovisioned(host, op, ctx, step, note="; warm: its writer waits")
    step.requeue_after = None
    return _ok(_polled(step, ctx), host)


def _cleaned_condition(host: dict, op: dict, ctx: Context) -> list:
    if op.get("cleaned") and op.get("erase") == "full":
        status, reason = "True", "FullyErased"
        message = "every byte of every disk overwritten with zeros" + (f": {op['report']}" if op.get("report") else "")
    elif op.get("cleaned"):
        status, reason = "True", "MetadataCleaned"
        message = "partition tables and signatures wiped" + (f": {op['report']}" if op.get("report") else "")
    elif not cleaning_wanted(host):
        status, reason, message = "False", "CleaningDisabled", "automatedCleaningMode is disabled: disks not wiped"
    else:
        status, reason, message = (
            "False",
            "CleaningUnsupported",
            "automated cleaning is not supported here (no deploy ISO configured): disks NOT wiped",
        )
    return conditions.set_condition(
        (host.get("status") or {}).get("conditions"),
        CLEANED_CONDITION,
        status,
        reason,
        message,
        (host.get("metadata") or {}).get("generation", 0),
        ctx.now,
    )


def _clean(host: dict, op: dict, observed: dict, ctx: Context, step: Step) -> Step:
    try:
        erase = erase_mode(host, ctx.settings)
    except ValueError as error:  # never cleaned less than asked: the host waits, powered off, for a fix
        failure = failed(host, f"cleaning: {error}", ctx, error_type=PROVISIONING_ERROR)
        if observed.get(POWER) == "On":
            failure.actions.append(("power", "ForceOff"))
        failure.status["poweredOn"] = False
        return failure
    if op.get("kind") != "clean" or op.get("erase", "metadata") != erase:
        if op.get("token"):  # the mode changed under a job: that job's media go, a new one is published
            step.actions.append(("withdraw", op["token"]))
        op = {"kind": "clean", "started": ctx.now, "erase": erase}
    if not op.get("token") and (problem := media_problem(ctx)):  # never cleaned less than asked: waits for a fix
        return _unreachable_media(host, f"cleaning: {problem}", observed, ctx, step)
    op, observed = _writer_job(op, observed, ctx, step)
    if not op.get("token"):
        return _waiting_for_off(host, op, step)
    callback = observed.get(CALLBACK)
    if callback is not None:
        # Kept warm only when the pool has room and the host is still on (its writer alive to wait).
        warm = bool(op.get("wait")) and ctx.warm_room and observed.get(POWER) == "On"

        def cleaned(host_: dict, step_: Step, ctx_: Context) -> Step:
            # The writer's report, one part per disk: from the writer booted after the power-off (its token).
            report = str(callback.get("message") or "")[:512]
            cleaned_op = {"kind": "clean", "cleaned": True, "report": report, "erase": op.get("erase", "metadata")}
            if warm:
                cleaned_op["wait"] = op["wait"]
            step_.annotations[OPERATION_ANNOTATION] = json.dumps(cleaned_op, sort_keys=True)
            step_.requeue_after = 1
            return step_

        step = _writer_finished(host, op, callback, observed, ctx, step, on_success=cleaned, warm=warm)
        if not warm:
            step.actions.append(("power", "ForceOff"))
        return step
    if seconds_between(op["started"], ctx.now) > ctx.settings.callback_timeout:
        return _writer_failed(
            host, op, f"cleaning: no callback from the image writer within {ctx.settings.callback_timeout:g}s", ctx
        )
    return _boot_writer(host, op, observed, ctx, step)


# deletion ----------------------------------------------------------------------------------


def _deleting(host: dict, observed: dict, ctx: Context) -> Step:
    state = state_of(host)
    finalizers = (host.get("metadata") or {}).get("finalizers") or []
    if FINALIZER not in finalizers:
        return Step(state, skipped="being deleted; not ours to hold")
    op = operation(host)
    detached = DETACHED_ANNOTATION in annotations_of(host)
    if state not in (POWERING_OFF_BEFORE_DELETE, DELETING):
        step = Step(POWERING_OFF_BEFORE_DELETE if not detached and state not in (NONE, UNMANAGED) else DELETING)
        return _transition(host, step, step.state, "Deleting", "host deleted: powering off before removing it")
    has_bmc = bool(((host.get("spec") or {}).get("bmc") or {}).get("address"))
    if state == POWERING_OFF_BEFORE_DELETE and has_bmc and not detached and not _registration_blocked(ctx):
        power = observed.get(POWER)
        if power != "Off":
            step = Step(state, requeue_after=2)
            if power == "On":
                step.actions.append(("power", "ForceOff"))
            return step
    step = Step(DELETING, finalizer="remove")
    _withdraw_all(op, step)
    return step


_HANDLERS = {
    INSPECTING: _inspecting,
    AVAILABLE: _available,
    PROVISIONING: _provisioning,
    PROVISIONED: _provisioned,
    EXTERNALLY_PROVISIONED: _externally_provisioned,
    DEPROVISIONING: _deprovisioning,
}
