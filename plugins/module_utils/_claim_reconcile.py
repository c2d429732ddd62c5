# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_reconcile: release, bind, secrets and sync in one process, each kind listed once.

Every step task of a playbook costs a process and an Ansible round trip (~0.75 s). Run
here in one process, the steps share a Snapshot: the first list of a kind is read from
the server, later steps get it from memory, kept current with everything this process
writes (the objects the API server returns). Only a binder that lost a race reads again
(Snapshot.relist), to see what the other binder did.
"""

from __future__ import annotations

import copy

from ansible_collections.metalclaim.hostclaim.plugins.module_utils import _binding as binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_bind import bind_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_release import release_claims
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_secrets import sync_secrets
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claim_sync import sync_claims


class Snapshot:
    """A Kube whose list() reads each (kind, namespace, selector) once and follows this process's own writes."""

    def __init__(self, kube):
        self._kube = kube
        self._lists: dict = {}  # (api_version, kind, namespace, label_selector) -> {(namespace, name): object}
        self.reads = 0  # list calls that went to the server

    def list(self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None):
        key = (api_version, kind, namespace, label_selector)
        if key not in self._lists:
            self.reads += 1
            objects = self._kube.list(api_version, kind, namespace, label_selector=label_selector)
            self._lists[key] = {binding.key(obj): obj for obj in objects}
        return [copy.deepcopy(obj) for obj in self._lists[key].values()]

    def relist(self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None):
        self._lists.pop((api_version, kind, namespace, label_selector), None)
        return self.list(api_version, kind, namespace, label_selector)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None):
        return self._kube.get(api_version, kind, name, namespace)

    def replace(self, obj: dict) -> dict:
        return self._remember(self._kube.replace(obj))

    def patch_status(self, obj: dict, status: dict) -> dict:
        return self._remember(self._kube.patch_status(obj, status))

    def create(self, obj: dict) -> dict:
        return self._remember(self._kube.create(obj))

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        self._kube.delete(api_version, kind, name, namespace)
        for (list_api, list_kind, list_ns, _selector), objects in self._lists.items():
            if (list_api, list_kind) == (api_version, kind) and list_ns in (None, namespace):
                objects.pop((namespace or "", name), None)

    def _remember(self, written: dict) -> dict:
        api_version, kind = written.get("apiVersion"), written.get("kind")
        namespace = (written.get("metadata") or {}).get("namespace")
        for list_key in list(self._lists):
            list_api, list_kind, list_ns, selector = list_key
            if (list_api, list_kind) != (api_version, kind) or list_ns not in (None, namespace):
                continue
            if selector:
                del self._lists[list_key]  # whether it still matches is the server's call: read again if asked
            else:
                self._lists[list_key][binding.key(written)] = written
        return copy.deepcopy(written)


def reconcile_claims(kube, wanted: list[dict] | None, timestamp: str, check_mode: bool) -> dict:
    snapshot = Snapshot(kube)
    steps = {
        "release": release_claims(snapshot, wanted, timestamp, check_mode),
        "bind": bind_claims(snapshot, wanted, timestamp, check_mode),
        "secrets": sync_secrets(snapshot, wanted, timestamp, check_mode),
        "sync": sync_claims(snapshot, wanted, timestamp, check_mode),
    }
    result = dict(steps)
    result["changed"] = any(step["changed"] for step in steps.values())
    result["summary"] = {
        "bound": steps["bind"]["bound"],
        "waiting_for_host": steps["bind"]["unbound"],
        "releases_pending": steps["release"]["pending"],
        "not_synchronized": sum(1 for c in steps["secrets"]["claims"] if not c.get("synchronized", True)),
        "conflicts": sum(
            1 for step in steps.values() for c in step["claims"] if "conflict" in (c.get("action"), c.get("state"))
        ),
        "list_calls": snapshot.reads,
    }
    warnings = steps["sync"].get("warnings")
    if warnings:
        result["warnings"] = warnings
    return result
