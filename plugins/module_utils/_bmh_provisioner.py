# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""bmh_redfish: advance a batch of BareMetalHosts one step each. The I/O edge of _bmh_machine.

Per host: read its BMC Secret (in the host's own namespace only), ask the state machine
what to observe, read that over Redfish, let the machine decide, carry out its actions
(BMC, then published media), then write the host's annotations/finalizer and status.
Nothing read from the BMC Secret leaves this function: results, statuses and Events
carry messages from _redfish, which are credential-free by construction.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import re
import time

from ansible.module_utils.basic import missing_required_lib
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _bmh_machine as machine
from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _media as media
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_status import event
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._conditions import now
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._configdrive import build_config_drive
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._kube import (
    AUTH_ARG_SPEC,
    KUBERNETES_IMPORT_ERROR,
    METAL3,
    ConflictError,
    Kube,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._redfish import (
    SUSHY_IMPORT_ERROR,
    BmcAddressError,
    RedfishClient,
    RedfishError,
    parse_bmc_address,
)

DATA_ROLES = ("userData", "metaData", "networkData")
_HEX_LENGTHS = {32: "md5", 64: "sha256", 128: "sha512"}
_MEDIA_TOKEN = re.compile(r"/media/([A-Za-z0-9_-]{43})/")


@dataclasses.dataclass(frozen=True)
class Options:
    settings: machine.Settings
    media_dir: str = ""
    max_concurrent: int = 20  # hosts provisioning or deprovisioning at once (Metal3's default)
    redfish_timeout: float = 10.0
    redfish_retries: int = 1


def provision_hosts(
    kube, wanted: list[dict] | None, namespaces: list[str] | None, options: Options, timestamp: str, check_mode: bool
) -> dict:
    """Advance each selected host by one step; one list call per kind for the batch."""
    hosts = kube.list(METAL3, "BareMetalHost")
    namespace_labels = {
        ns["metadata"]["name"]: ns["metadata"].get("labels") or {} for ns in kube.list("v1", "Namespace")
    }
    ours = [h for h in hosts if machine.is_ours(h, namespace_labels.get(h["metadata"]["namespace"], {}))]
    busy = sum(1 for h in ours if machine.state_of(h) in machine.BUSY_STATES)
    keys = {(w["namespace"], w["name"]) for w in wanted or []}
    selected = [
        h
        for h in ours
        if (not keys or _key(h) in keys) and (not namespaces or h["metadata"]["namespace"] in namespaces)
    ]
    results = []
    for host in sorted(selected, key=_key):
        result = _advance(kube, host, options, timestamp, check_mode, slot_free=busy < options.max_concurrent)
        busy += _busy(result["state"]) - _busy(result["previous"])
        results.append(result)
    requeues = [r["requeue_after"] for r in results if r.get("requeue_after") is not None]
    return {
        "changed": any(r["changed"] for r in results),
        "hosts": results,
        "requeue_after": min(requeues) if requeues else None,
        "redfish_requests": sum(r["redfish_requests"] for r in results),
        "states": _count_states(results),
    }


def _key(host: dict) -> tuple[str, str]:
    return host["metadata"]["namespace"], host["metadata"]["name"]


def _busy(state: str) -> int:
    return 1 if state in machine.BUSY_STATES else 0


def _count_states(results: list[dict]) -> dict:
    counts: dict = {}
    for result in results:
        counts[result["state"]] = counts.get(result["state"], 0) + 1
    return counts


class _Bmc:
    """A Redfish client made on first use, so hosts that need no BMC call cost no connection."""

    def __init__(self, host: dict, credentials: dict, options: Options):
        self._host = host
        self._credentials = credentials
        self._options = options
        self._client = None

    @property
    def client(self) -> RedfishClient:
        if self._client is None:
            bmc = self._host["spec"]["bmc"]
            self._client = RedfishClient(
                parse_bmc_address(bmc["address"]),
                self._credentials["username"],
                self._credentials["password"],
                verify_tls=not bmc.get("disableCertificateVerification", False),
                timeout=self._options.redfish_timeout,
                retries=self._options.redfish_retries,
            )
        return self._client

    @property
    def requests(self) -> int:
        return self._client.requests if self._client is not None else 0

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _advance(kube, host: dict, options: Options, timestamp: str, check_mode: bool, slot_free: bool) -> dict:
    namespace, name = _key(host)
    previous = machine.state_of(host)
    result = {"namespace": namespace, "name": name, "previous": previous, "state": previous, "changed": False}
    ctx = machine.Context(now=timestamp, settings=options.settings, slot_free=slot_free, new_token=media.new_token())
    result["redfish_requests"] = 0
    wait = machine.waiting_for_backoff(host, ctx)
    if wait > 0 and not host["metadata"].get("deletionTimestamp"):
        result.update(skipped="backing off after an error", requeue_after=wait)
        return result
    credentials = _credentials(kube, host, ctx)
    bmc = _Bmc(host, credentials, options)
    try:
        step = _observe_and_decide(host, bmc, ctx, options)
        if not check_mode:
            step = _carry_out(kube, host, step, bmc, ctx, options)
    finally:
        bmc.close()
    result["redfish_requests"] = bmc.requests
    try:
        result["changed"] = _write(kube, host, step, timestamp, check_mode)
    except ConflictError as error:
        result.update(state=previous, conflict=str(error), requeue_after=1)
        return result
    result["state"] = step.state
    result["actions"] = [_describe_action(a) for a in step.actions]
    if step.requeue_after is not None:
        result["requeue_after"] = step.requeue_after
    if step.skipped:
        result["skipped"] = step.skipped
    if step.status.get("operationalStatus") == "error":
        result["error"] = step.status["errorMessage"]
    return result


def _credentials(kube, host: dict, ctx: machine.Context) -> dict:
    """The BMC username/password, read only from the host's own namespace; problems go to ctx."""
    spec_bmc = (host.get("spec") or {}).get("bmc") or {}
    if not spec_bmc.get("address"):
        return {}
    try:
        parse_bmc_address(spec_bmc["address"])
    except BmcAddressError as error:
        ctx.address_problem = f"spec.bmc.address: {error}"
        return {}
    secret_name = spec_bmc.get("credentialsName")
    if not secret_name:
        ctx.credentials_problem = "spec.bmc.credentialsName is not set"
        return {}
    secret = kube.get("v1", "Secret", secret_name, host["metadata"]["namespace"])
    if secret is None:
        ctx.credentials_problem = f"BMC Secret {secret_name} not found in namespace {host['metadata']['namespace']}"
        return {}
    data = secret.get("data") or {}
    missing = [key for key in ("username", "password") if not data.get(key)]
    if missing:
        ctx.credentials_problem = f"BMC Secret {secret_name} has no {' or '.join(missing)}"
        return {}
    ctx.credentials_version = secret["metadata"]["resourceVersion"]
    return {key: base64.b64decode(data[key]).decode("utf-8", "replace").strip() for key in ("username", "password")}


def _observe_and_decide(host: dict, bmc: _Bmc, ctx: machine.Context, options: Options) -> machine.Step:
    try:
        observed = _observe(host, bmc, ctx, options)
    except RedfishError as error:
        return _redfish_failure(host, error, ctx)
    return machine.decide(host, observed, ctx)


def _observe(host: dict, bmc: _Bmc, ctx: machine.Context, options: Options) -> dict:
    observed: dict = {}
    for need in machine.observations(host, ctx):
        if need == machine.PROBE:
            bmc.client.probe()
            observed[need] = True
        elif need == machine.POWER:
            observed[need] = bmc.client.power_state()
        elif need == machine.BOOT:
            observed[need] = bmc.client.boot_override()
        elif need == machine.MEDIA:
            observed[need] = {device: bmc.client.media(device) for device in (machine.CD, machine.CONFIG_DEVICE)}
        elif need == machine.INVENTORY:
            observed[need] = bmc.client.inventory()
        elif need == machine.CALLBACK:
            observed[need] = _callback(options, machine.operation(host).get("token", ""))
    return observed


def _callback(options: Options, token: str) -> dict | None:
    if not options.media_dir or not token:
        return None
    try:
        return media.callback_result(options.media_dir, token)
    except ValueError:  # a token that is not ours (hand-edited annotation): nothing will ever arrive
        return None


def _redfish_failure(host: dict, error: RedfishError, ctx: machine.Context) -> machine.Step:
    error_type = None
    if error.kind == "credentials":
        error_type = machine.PROVISIONED_REGISTRATION_ERROR if machine.state_of(host) == machine.PROVISIONED else None
        error_type = error_type or machine.REGISTRATION_ERROR
    return machine.failed(host, without_tokens(str(error)), ctx, error_type=error_type)


def without_tokens(message: str) -> str:
    """BMCs echo the config-drive URL in their errors: keep its token (a callback credential) out of statuses."""
    return _MEDIA_TOKEN.sub(lambda found: f"/media/{media.redact(found.group(1))}/", message)


def _carry_out(kube, host: dict, step: machine.Step, bmc: _Bmc, ctx: machine.Context, options: Options):
    """Run the step's actions in order; on a failure, undo this step's publishing and record the error."""
    published = []
    try:
        for action in step.actions:
            verb = action[0]
            if verb == "power":
                bmc.client.set_power(action[1])
            elif verb == "insert":
                bmc.client.insert_media(action[2], device=action[1])
            elif verb == "eject":
                bmc.client.eject_media(device=action[1])
            elif verb == "boot_once":
                bmc.client.set_boot_once(target=action[1], mode=action[2])
            elif verb == "clear_boot":
                bmc.client.clear_boot_override()
            elif verb == "publish":
                _publish(kube, host, action[1], action[2], options)
                published.append(action[2])
            elif verb == "withdraw" and options.media_dir and action[1]:
                media.withdraw(options.media_dir, action[1])
    except (RedfishError, ValueError) as error:
        for token in published:
            media.withdraw(options.media_dir, token)
        failure = (
            _redfish_failure(host, error, ctx)
            if isinstance(error, RedfishError)
            else machine.failed(host, without_tokens(str(error)), ctx, error_type=machine.PROVISIONING_ERROR)
        )
        failure.actions = step.actions
        return failure
    return step


def _publish(kube, host: dict, mode: str, token: str, options: Options) -> None:
    """Build the host's config drive (tenant data + the writer's instructions) and make it downloadable."""
    if not options.media_dir or not options.settings.media_url:
        raise ValueError("disk images and cleaning need media_dir and media_url (the media server)")
    deploy = {"mode": mode, "callback": {"url": media.callback_url(options.settings.media_url, token), "token": token}}
    data = {}
    if mode == "deploy":
        image = host["spec"]["image"]
        deploy["image"] = {
            "url": image["url"],
            "format": image.get("format") or "raw",
            "checksum": image["checksum"],
            "checksumType": image.get("checksumType") or checksum_type(image["checksum"]),
        }
        data = _tenant_data(kube, host)
    iso = build_config_drive(
        user_data=data.get("userData"),
        meta_data=data.get("metaData"),
        network_data=data.get("networkData"),
        deploy=deploy,
    )
    media.publish(options.media_dir, machine.CONFIG_DRIVE_FILE, iso, token=token)


def checksum_type(checksum: str) -> str:
    """Metal3's checksumType 'auto': by the digest's length, or by a checksum file's name."""
    if re.fullmatch(r"[0-9a-fA-F]+", checksum) and len(checksum) in _HEX_LENGTHS:
        return _HEX_LENGTHS[len(checksum)]
    for name in ("sha512", "sha256", "md5"):
        if name in checksum.rsplit("/", 1)[-1].lower():
            return name
    raise ValueError(f"spec.image.checksumType is needed: cannot tell the type of checksum {checksum!r}")


def _tenant_data(kube, host: dict) -> dict:
    """role -> bytes of the data Secrets the host's spec names: the claim layer's copies, in the host's namespace."""
    namespace = host["metadata"]["namespace"]
    data = {}
    for role in DATA_ROLES:
        ref = (host.get("spec") or {}).get(role) or {}
        if not ref.get("name"):
            continue
        if ref.get("namespace", namespace) != namespace:
            raise ValueError(f"spec.{role}: a Secret outside namespace {namespace} is never read")
        secret = kube.get("v1", "Secret", ref["name"], namespace)
        if secret is None:
            raise ValueError(f"spec.{role}: Secret {namespace}/{ref['name']} not found")
        values = secret.get("data") or {}
        value = values.get(role, values.get("value"))
        if value is None:
            raise ValueError(f"spec.{role}: Secret {namespace}/{ref['name']} has no {role} or value key")
        data[role] = base64.b64decode(value)
    return data


def _write(kube, host: dict, step: machine.Step, timestamp: str, check_mode: bool) -> bool:
    """Annotations and finalizer (guarded by resourceVersion), then status, then HardwareData; each only if changed."""
    changed = bool(step.actions)
    updated = copy.deepcopy(host)
    meta = updated["metadata"]
    annotations = dict(meta.get("annotations") or {})
    for name, value in step.annotations.items():
        if value is None:
            annotations.pop(name, None)
        else:
            annotations[name] = value
    meta["annotations"] = annotations
    finalizers = list(meta.get("finalizers") or [])
    if step.finalizer == "add" and machine.FINALIZER not in finalizers:
        finalizers.append(machine.FINALIZER)
    if step.finalizer == "remove" and machine.FINALIZER in finalizers:
        finalizers.remove(machine.FINALIZER)
    meta["finalizers"] = finalizers
    if (annotations, finalizers) != (
        host["metadata"].get("annotations") or {},
        host["metadata"].get("finalizers") or [],
    ):
        changed = True
        if not check_mode:
            host = kube.replace(updated)
    if step.finalizer == "remove":
        return changed  # the host is gone (or going): no status to write
    patch = _status_patch(host, step)
    if patch:
        changed = True
        if not check_mode:
            patch["lastUpdated"] = timestamp
            host = kube.patch_status(host, patch)
    if step.hardware is not None and not check_mode:
        _write_hardware_data(kube, host, step.hardware)
    if step.event and not check_mode:
        event(kube, host, *step.event, timestamp, check_mode)
    return changed


def _status_patch(host: dict, step: machine.Step) -> dict:
    current = host.get("status") or {}
    patch = {}
    for field, value in step.status.items():
        if field == "provisioning":
            continue
        if current.get(field) != value and not (value is None and field not in current):
            patch[field] = value
    provisioning = dict(step.status.get("provisioning") or {})
    provisioning["state"] = step.state
    current_provisioning = current.get("provisioning") or {}
    changes = {k: v for k, v in provisioning.items() if current_provisioning.get(k) != v}
    if step.state == machine.AVAILABLE and current_provisioning.get("image"):
        changes["image"] = None  # back in the pool: it runs no image
    if changes:
        patch["provisioning"] = changes
    return patch


def _write_hardware_data(kube, host: dict, hardware: dict) -> None:
    namespace, name = _key(host)
    desired = {
        "apiVersion": METAL3,
        "kind": "HardwareData",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [
                {"apiVersion": METAL3, "kind": "BareMetalHost", "name": name, "uid": host["metadata"]["uid"]}
            ],
        },
        "spec": {"hardware": hardware},
    }
    existing = kube.get(METAL3, "HardwareData", name, namespace)
    if existing is None:
        kube.create(desired)
    elif existing.get("spec") != desired["spec"]:
        updated = copy.deepcopy(existing)
        updated["spec"] = desired["spec"]
        kube.replace(updated)


def _describe_action(action: tuple) -> str:
    """An action as results may show it: never a media token or config-drive URL."""
    verb = action[0]
    if verb in ("power", "boot_once"):
        return " ".join(str(a) for a in action)
    if verb in ("insert", "eject"):
        return f"{verb} {action[1]}"
    return verb


ARG_SPEC = {
    "hosts": {
        "type": "list",
        "elements": "dict",
        "options": {"namespace": {"type": "str", "required": True}, "name": {"type": "str", "required": True}},
    },
    "namespaces": {"type": "list", "elements": "str"},
    "deploy_iso_url": {"type": "str"},
    "media_dir": {"type": "path"},
    "media_url": {"type": "str"},
    "max_concurrent": {"type": "int", "default": 20},
    "power_off_timeout": {"type": "float", "default": 60},
    "callback_timeout": {"type": "float", "default": 1800},
    "backoff_base": {"type": "float", "default": 10},
    "backoff_cap": {"type": "float", "default": 600},
    "redfish_timeout": {"type": "float", "default": 10},
    "redfish_retries": {"type": "int", "default": 1},
    "wait": {"type": "float", "default": 0},
    **AUTH_ARG_SPEC,
}


def options_from(params: dict) -> Options:
    settings = machine.Settings(
        deploy_iso_url=params.get("deploy_iso_url"),
        media_url=params.get("media_url") or "",
        power_off_timeout=params["power_off_timeout"],
        callback_timeout=params["callback_timeout"],
        backoff_base=params["backoff_base"],
        backoff_cap=params["backoff_cap"],
    )
    return Options(
        settings=settings,
        media_dir=params.get("media_dir") or "",
        max_concurrent=params["max_concurrent"],
        redfish_timeout=params["redfish_timeout"],
        redfish_retries=params["redfish_retries"],
    )


def run_module(module) -> None:
    """The bmh_redfish module: steps until settled (or one step), then exit with the last run's result."""
    if KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    if SUSHY_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("sushy"), exception=SUSHY_IMPORT_ERROR)
    params = module.params
    if params["max_concurrent"] < 1:
        module.fail_json(msg="max_concurrent must be at least 1")
    options = options_from(params)
    deadline = time.monotonic() + max(0.0, params["wait"])
    changed = False
    steps = requests = 0
    try:
        kube = Kube(params)
        while True:
            result = provision_hosts(kube, params["hosts"], params["namespaces"], options, now(), module.check_mode)
            changed = changed or result["changed"]
            requests += result["redfish_requests"]
            steps += 1
            pause = result["requeue_after"]
            if module.check_mode or pause is None or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
    except KubeError as error:
        module.fail_json(msg=str(error))
    # Across all steps of this run; the per-host entries are the last step's.
    result.update(changed=changed, steps=steps, redfish_requests=requests)
    module.exit_json(**result)
