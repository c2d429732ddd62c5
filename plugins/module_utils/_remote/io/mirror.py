# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_remote: mirror local HostClaims of kind remote into a hardware cluster. I/O edge.

Per claim: our finalizer first (nothing exists remotely without it), the kubeconfig Secret
checked (_remote/pure/kubeconfig.py) and used as the only identity in the hardware cluster,
the data Secrets copied beside the remote claim, the remote claim written, then the remote
status and copied metadata brought back, each local object written once and only when it
changes. On deletion the remote claim is deleted, and the local finalizer removed only once
the remote claim is gone (its own finalizer holds it while the hardware cluster releases
the host). A kubeconfig's contents never leave this file: messages name fields, transport
failures their exception type only (their text holds the server's address).

A hardware cluster is the tenant's choice and may never answer: each claim has CLAIM_DEADLINE
seconds in it per run (every request bounded, _remote/io/client.py), a cluster that did not
answer is not asked again in the same run, and the claim comes back later the longer it has
not answered (_remote/pure/mirror.py unreachable_after); claims whose cluster answered last
time go first. A run has RUN_BUDGET seconds in all: many claims naming clusters that never
answer (each its own server) cannot hold the remote runner slot for minutes; the claims it
did not reach are `deferred`, untouched, and come back in the next run.

A RemoteRun is the run kernel (_common/io/run.py) for the local cluster: the claims listed once, Events whose
refusal is a warning, and with `--diff` each write in either cluster recorded (a Secret copy's keys, never its
values; the hardware cluster's objects headed REMOTE).
"""

from __future__ import annotations

import collections
import copy
import json
import time

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    TRANSPORT_ERRORS,
    AlreadyExistsError,
    ConflictError,
    KubeConfigError,
    KubeError,
    RefusedError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import Run
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION, DATA_ROLES
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.io.client import (
    CLAIM_DEADLINE,
    RUN_BUDGET,
    Clients,
    Deadline,
    DeadlineExceeded,
    RemoteKube,
    hard_deadline,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure import kubeconfig as kc
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure import mirror as m
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure.outcomes import remote_outcomes

try:
    import yaml
except ImportError:  # pragma: no cover - ansible-core brings PyYAML
    yaml = None

# Hardware clusters that did not answer this run, remembered (at most this many) so that the other claims naming
# the same one are not held up by it again.
UNANSWERED_KEPT = 64
# How a diff entry names an object of the hardware cluster, apart from the local one of the same name.
REMOTE = "(hardware cluster)"


class _Unreachable(Exception):
    pass


class _Stop(Exception):
    """This claim cannot go further this run: (Mirrored reason, message), status already decided."""

    def __init__(self, reason: str, message: str, reachable=None):
        super().__init__(message)
        self.reason = reason
        self.reachable = reachable


class RemoteRun(Run):
    def __init__(
        self,
        kube,
        wanted,
        check_mode: bool,
        allowed_namespaces,
        timestamp: str,
        client_factory=None,
        deadline: float = CLAIM_DEADLINE,
        budget: float = RUN_BUDGET,
        diff: bool = False,
    ):
        super().__init__(kube, timestamp, check_mode, diff=diff)
        self.wanted = wanted
        self.allowed = kc.compile_allowed(allowed_namespaces)
        # (checked kubeconfig, Deadline) -> a client whose every request the Deadline bounds.
        self.client_factory = client_factory or RemoteKube.connect
        self.deadline = Deadline(deadline)  # started again for each claim
        self.budget = budget  # the run's seconds in all (a claim begun before it ends is finished)
        # The request counts of every remote client built (kept when the client itself is dropped).
        self.remote_calls: list = []
        self._clients = Clients()
        self._unanswered: collections.OrderedDict = collections.OrderedDict()  # client key -> why, this run
        self._key = None  # the client key of the claim being mirrored
        self.local_writes = 0
        self.status_fields: list = []  # status fields written this run (what changed), for the result

    def claims(self) -> list[dict]:
        claims = [c for c in self.kube.list(API_VERSION, "HostClaim") if m.is_remote(c)]
        if self.wanted:
            keys = {(w["namespace"], w["name"]) for w in self.wanted}
            claims = [c for c in claims if (c["metadata"]["namespace"], c["metadata"]["name"]) in keys]
        return sorted(claims, key=m.mirror_order)

    def start_claim(self) -> None:
        self.deadline.start()
        self._key = None

    def remote_client(self, target: kc.Target):
        key = (target.server, repr(sorted(target.config["users"][0]["user"].items())))
        self._key = key
        if key in self._unanswered:  # asked once a run: the next claims naming it are not held up again
            raise _Unreachable(self._unanswered[key])
        client = self._clients.get(key)
        if client is None:
            try:
                client = self.call(self.client_factory, target.config, self.deadline)
            except KubeConfigError as error:
                raise _Stop(kc.KUBECONFIG_REFUSED, str(error)) from None
            except _Stop as stop:
                raise _Stop(m.REMOTE_ERROR, f"the hardware cluster refused the connection: {stop}") from None
            self._clients.put(key, client)
            calls = getattr(client, "calls", None)  # a Counter the client keeps counting in (empty: falsy)
            self.remote_calls.append({} if calls is None else calls)
        return client

    def call(self, function, *args, **kwargs):
        """A request to the hardware cluster (or a client's discovery) within the claim's deadline. No answer ->
        _Unreachable, its address left out of the message; any other refusal or error -> _Stop."""
        if self.deadline.passed():
            raise self._unreachable(DeadlineExceeded())
        try:
            with hard_deadline(self.deadline.remaining()):
                return function(*args, **kwargs)
        except (RefusedError, ConflictError, AlreadyExistsError):
            raise
        except DeadlineExceeded as error:  # the hard deadline, outside the client's own error handling
            raise self._unreachable(error) from None
        except KubeError as error:
            cause = error.__cause__
            if isinstance(cause, TRANSPORT_ERRORS):
                raise self._unreachable(cause) from None
            if getattr(cause, "status", None) in (401, 403):  # a read the identity may not make
                raise _Stop(m.FORBIDDEN, f"{error}: {_server_message(cause)}".rstrip(": ")) from None
            raise _Stop(m.REMOTE_ERROR, str(error)) from None  # the request and the status, no address

    def _unreachable(self, cause: Exception) -> _Unreachable:
        """The claim's hardware cluster did not answer: remembered for this run, its client dropped (a request cut
        short may have left a connection mid-answer)."""
        message = m.unanswered_message(type(cause).__name__, self.deadline.passed(), self.deadline.seconds)
        if self._key is not None:
            self._clients.drop(self._key)
            self._unanswered[self._key] = message
            while len(self._unanswered) > UNANSWERED_KEPT:
                self._unanswered.popitem(last=False)
        return _Unreachable(message)

    def local_write(self, function, *args):
        self.local_writes += 1
        return function(*args)


def _server_message(api_error) -> str:
    try:
        return str(json.loads(api_error.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        return ""


def mirror_claims(run: RemoteRun) -> dict:
    results = []
    budget = Deadline(run.budget)
    budget.start()
    for claim in run.claims():
        if budget.passed():  # never begun: nothing of it was written, the next run starts it
            namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
            results.append(_deferred(namespace, name, run.budget))
            continue
        run.start_claim()
        try:
            results.append(_mirror(run, claim))
        except ConflictError as error:  # the local claim changed under us: the next run starts again
            results.append(_failed(claim, "conflict", error))
        except KubeError as error:  # the local API server (a write refused, no answer): this claim, not the others
            results.append(_failed(claim, "error", error))
    return run.finish(
        {
            "changed": any(r["changed"] for r in results),
            "claims": results,
            "outcomes": remote_outcomes(results),
            "local_writes": run.local_writes,
            "status_fields_written": sorted(set(run.status_fields)),
            "remote_api_calls": _summed(run.remote_calls),
        }
    )


def _deferred(namespace: str, name: str, budget: float) -> dict:
    message = f"not reached within the run's {budget:g} s: looked at again in the next run"
    return {
        "namespace": namespace,
        "name": name,
        "state": "deferred",
        "changed": False,
        "message": message,
        "requeue_after": m.POLL_DEFERRED,
    }


def _failed(claim: dict, state: str, error: Exception) -> dict:
    namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
    return {"namespace": namespace, "name": name, "state": state, "message": str(error), "changed": False}


def _summed(counts) -> dict:
    total: dict = {}
    for calls in counts:
        for verb, count in calls.items():
            total[verb] = total.get(verb, 0) + count
    return dict(sorted(total.items()))


def _mirror(run: RemoteRun, claim: dict) -> dict:
    meta = claim["metadata"]
    result = {"namespace": meta["namespace"], "name": meta["name"], "changed": False}
    deleting = bool(meta.get("deletionTimestamp"))
    if deleting and m.FINALIZER not in (meta.get("finalizers") or []):
        result.update(state="gone")
        return result
    if not deleting and m.FINALIZER not in (meta.get("finalizers") or []):
        claim = _write_local(run, claim, lambda c: c["metadata"].setdefault("finalizers", []).append(m.FINALIZER))
        result["changed"] = True
    stored = claim
    remote = None
    reachable = ("Unknown", m.NOT_CONTACTED, "the kubeconfig was not used")
    try:
        target = _target(run, claim)
        client = run.remote_client(target)
        reachable = ("True", m.REACHABLE, f"hardware cluster namespace {target.namespace!r}")
        if deleting:
            return _delete(run, claim, client, target, result)
        remote, changed, claim = _apply(run, stored, client, target)
        result["changed"] = result["changed"] or changed
        mirrored = ("True", m.SYNCED, f"HostClaim {claim['metadata']['name']} in namespace {target.namespace!r}")
        state = "mirrored"
    except kc.Refused as refusal:
        if deleting:
            return _leave_behind(run, claim, result, refusal.reason, str(refusal))
        mirrored, state = ("False", refusal.reason, str(refusal)), "refused"
    except _Stop as stop:
        mirrored, state = ("False", stop.reason, str(stop)), "refused"
        remote = getattr(stop, "remote", None)
    except RefusedError as error:  # a delete or read the hardware cluster refused
        stop = _refused(error)
        mirrored, state = ("False", stop.reason, str(stop)), "refused"
    except _Unreachable as error:
        reachable = ("False", m.UNREACHABLE, str(error))
        mirrored, state = ("Unknown", m.UNREACHABLE, "the hardware cluster did not answer"), "unreachable"
        remote = None
    result["changed"] = _write_back(run, claim, remote, reachable, mirrored, stored) or result["changed"]
    result.update(state=state, reason=mirrored[1], requeue_after=_poll(state, remote, stored))
    if mirrored[0] != "True":
        result["message"] = mirrored[2]
    return result


def _poll(state: str, remote: dict | None, stored: dict) -> float | None:
    if state == "unreachable":  # backs off: the longer it has not answered, the later it is asked again
        return m.unreachable_after(stored, time.time())
    if state == "refused":
        return None  # a local change (claim, Secret) brings it back
    return m.poll_after(remote, time.time())


def _target(run: RemoteRun, claim: dict) -> kc.Target:
    name, key = kc.check_ref(claim)  # refuses another namespace before anything is read
    secret = run.kube.get("v1", "Secret", name, claim["metadata"]["namespace"])
    text = kc.kubeconfig_text(secret, name, key)
    if yaml is None:  # pragma: no cover
        raise kc.Refused(kc.KUBECONFIG_REFUSED, "PyYAML is needed to read a kubeconfig")
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        # The parser's message quotes the text: say only that it is not a kubeconfig.
        raise kc.Refused(kc.KUBECONFIG_REFUSED, "the kubeconfig is neither JSON nor YAML") from None
    pinned = m.remote_settings(claim).get("namespace") or ""
    return kc.target(kc.check_parsed(parsed), run.allowed, pinned)


def _write_local(run: RemoteRun, claim: dict, change) -> dict:
    updated = copy.deepcopy(claim)
    change(updated)
    written = updated if run.check_mode else run.local_write(run.kube.replace, updated)
    run.record("HostClaim", claim, updated)
    return written


def _refused(error: RefusedError) -> _Stop:
    reason = m.refusal_reason(error.server_message)
    return _Stop(reason, f"the hardware cluster refused: {error.server_message or error}")


def _apply(run: RemoteRun, claim: dict, client, target: kc.Target) -> tuple[dict | None, bool, dict]:
    """Data copies, then the remote claim; (the remote claim as it is now, whether anything was written, the local
    claim with the annotations it must have now: a one-shot reboot request moved across)."""
    namespace = target.namespace
    name = claim["metadata"]["name"]
    changed = False
    existing = run.call(client.get, API_VERSION, "HostClaim", name, namespace)
    if existing is not None and not m.is_ours(existing, claim):
        stop = _Stop(m.NAME_TAKEN, f"a HostClaim {name!r} not made for this claim exists in namespace {namespace!r}")
        raise stop
    try:
        for role in DATA_ROLES:
            changed = _copy_data(run, claim, client, namespace, role) or changed
        wanted, local_annotations = m.remote_claim_plan(claim, existing, namespace)
        if wanted is not None:
            changed = True
            before = existing
            if not run.check_mode:
                write = client.create if existing is None else client.replace
                existing = run.call(write, wanted)
            else:
                existing = wanted
            run.record(f"HostClaim {REMOTE}", before, wanted)
    except RefusedError as error:
        stop = _refused(error)
        stop.remote = existing
        raise stop from None
    if local_annotations != (claim["metadata"].get("annotations") or {}):
        claim = copy.deepcopy(claim)  # _write_back writes it with the copied metadata
        claim["metadata"]["annotations"] = local_annotations
    return existing, changed, claim


def _copy_data(run: RemoteRun, claim: dict, client, namespace: str, role: str) -> bool:
    copy_name = m.copy_name(claim["metadata"]["name"], role)
    ref = (claim.get("spec") or {}).get(role) or {}
    existing = run.call(client.get, "v1", "Secret", copy_name, namespace)
    if existing is not None and not m.is_ours(existing, claim):
        raise _Stop(m.NAME_TAKEN, f"a Secret {copy_name!r} not made for this claim exists in namespace {namespace!r}")
    if not ref.get("name"):
        if existing is None:
            return False
        if not run.check_mode:
            run.call(client.delete, "v1", "Secret", copy_name, namespace, uid=existing["metadata"].get("uid", ""))
        run.record(f"Secret {REMOTE}", existing, None, secret=True)
        return True
    refusal = m.cross_namespace(claim, role)
    if refusal:  # refused before anything is read
        raise _Stop(m.DATA_SECRET, refusal)
    source = run.kube.get("v1", "Secret", ref["name"], claim["metadata"]["namespace"])
    refusal = m.data_refusal(claim, role, source)
    if refusal:
        raise _Stop(m.DATA_SECRET, refusal)
    wanted = m.data_copy(claim, role, source, namespace)
    if not m.copy_needs_write(wanted, existing):
        return False
    updated = wanted
    if existing is not None:
        updated = copy.deepcopy(existing)
        updated["data"] = wanted["data"]
        updated["metadata"].setdefault("labels", {}).update(wanted["metadata"]["labels"])
        updated["metadata"].setdefault("annotations", {}).update(wanted["metadata"]["annotations"])
    if not run.check_mode:
        run.call(client.create if existing is None else client.replace, updated)
    run.record(f"Secret {REMOTE}", existing, updated, secret=True)
    return True


def _delete(run: RemoteRun, claim: dict, client, target: kc.Target, result: dict) -> dict:
    namespace, name = target.namespace, claim["metadata"]["name"]
    remote = run.call(client.get, API_VERSION, "HostClaim", name, namespace)
    reachable = ("True", m.REACHABLE, f"hardware cluster namespace {namespace!r}")
    if remote is not None and m.is_ours(remote, claim):
        if not remote["metadata"].get("deletionTimestamp"):
            result["changed"] = True
            if not run.check_mode:
                run.call(client.delete, API_VERSION, "HostClaim", name, namespace, uid=remote["metadata"]["uid"])
            run.record(f"HostClaim {REMOTE}", remote, None)
            if not run.check_mode:
                remote = run.call(client.get, API_VERSION, "HostClaim", name, namespace)
        if remote is not None:
            mirrored = ("False", m.DELETING, f"waiting for HostClaim {name} in the hardware cluster to be released")
            result["changed"] = _write_back(run, claim, remote, reachable, mirrored) or result["changed"]
            result.update(state="deleting", reason=m.DELETING, requeue_after=m.POLL_CHANGING)
            return result
    for role in DATA_ROLES:
        copy_name = m.copy_name(name, role)
        existing = run.call(client.get, "v1", "Secret", copy_name, namespace)
        if existing is not None and m.is_ours(existing, claim):
            result["changed"] = True
            if not run.check_mode:
                run.call(client.delete, "v1", "Secret", copy_name, namespace, uid=existing["metadata"]["uid"])
            run.record(f"Secret {REMOTE}", existing, None, secret=True)
    _drop_finalizer(run, claim)
    run.event(claim, "Normal", "RemoteReleased", f"HostClaim {name} deleted in the hardware cluster")
    result.update(state="released", changed=True)
    return result


def _leave_behind(run: RemoteRun, claim: dict, result: dict, reason: str, message: str) -> dict:
    """Deleting without a usable kubeconfig (say its Secret went first, with the namespace): nothing can reach the
    remote claim; the local claim goes, and an Event says what may be left in the hardware cluster."""
    _drop_finalizer(run, claim)
    run.event(
        claim,
        "Warning",
        "RemoteClaimLeftBehind",
        f"{reason}: {message}; HostClaim {claim['metadata']['name']} may remain in the hardware cluster",
    )
    result.update(state="released", changed=True, reason=reason)
    return result


def _drop_finalizer(run: RemoteRun, claim: dict) -> None:
    def drop(c):
        c["metadata"]["finalizers"] = [f for f in c["metadata"].get("finalizers") or [] if f != m.FINALIZER]

    _write_local(run, claim, drop)


def _write_back(run: RemoteRun, claim: dict, remote, reachable, mirrored, stored: dict | None = None) -> bool:
    """Metadata (copied keys, a moved reboot request) then status, each written only if it changed.

    `claim` holds the annotations wanted; `stored` is the claim as last read or written (default: `claim`)."""
    changed = False
    stored = stored or claim
    labels = claim["metadata"].get("labels") or {}
    annotations = claim["metadata"].get("annotations") or {}
    if reachable[0] == "True":  # unreachable: keep what was copied before
        labels, annotations = m.metadata_from_remote(claim, remote)
    previous = stored
    stored_meta = stored["metadata"]
    if (stored_meta.get("labels") or {}) != labels or (stored_meta.get("annotations") or {}) != annotations:

        def relabel(c):
            c["metadata"]["labels"] = labels
            c["metadata"]["annotations"] = annotations

        stored = _write_local(run, stored, relabel)
        changed = True
    wanted = m.local_status(stored, remote, reachable, mirrored, run.timestamp)
    patch = m.status_changes(stored, wanted)
    if patch:
        run.status_fields.extend(sorted(patch))
        changes = dict(patch)
        patch["lastUpdated"] = run.timestamp
        changed = True
        if not run.check_mode:
            run.local_write(run.kube.patch_status, stored, patch)
        run.record_status("HostClaim", stored, changes)
        _events(run, stored, previous, reachable, mirrored)
    return changed


def _events(run: RemoteRun, claim: dict, previous: dict, reachable, mirrored) -> None:
    """One Event per change of outcome (reachability, mirroring), not one per run."""
    before = (previous.get("status") or {}).get("conditions")
    was_reachable = (cond.find(before, m.REMOTE_CLUSTER) or {}).get("status")
    if reachable[0] != was_reachable and reachable[0] in ("True", "False"):
        event_type = "Normal" if reachable[0] == "True" else "Warning"
        run.event(claim, event_type, reachable[1], reachable[2])
    was = (cond.find(before, m.MIRRORED) or {}).get("reason")
    if mirrored[1] != was and mirrored[0] == "False":
        run.event(claim, "Warning", mirrored[1], mirrored[2])
