# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes edge of the modules: one authenticated client, list/get as plain dicts."""

from __future__ import annotations

import collections
import os
import threading
import traceback

try:
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient

    KUBERNETES_IMPORT_ERROR = None
except ImportError:  # reported by the module through missing_required_lib
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    ApiException = Exception

METAL3 = "metal3.io/v1alpha1"

# Kept in step with plugins/doc_fragments/k8s_auth.py.
AUTH_ARG_SPEC = {
    "kubeconfig": {"type": "path", "aliases": ["kubeconfig_path"]},
    "context": {"type": "str"},
    "validate_certs": {"type": "bool", "default": True},
    "request_timeout": {"type": "float", "default": 30},
}


class KubeError(Exception):
    """An API failure with a message fit for a module's failure output."""


class ConflictError(KubeError):
    """The object changed since it was read (resourceVersion precondition failed) or was deleted."""


class AlreadyExistsError(KubeError):
    """create() of an object whose name is taken."""


def _api_client(params: dict):
    kubeconfig = params.get("kubeconfig") or os.environ.get("K8S_AUTH_KUBECONFIG") or os.environ.get("KUBECONFIG")
    configuration = kube_client.Configuration()
    if kubeconfig:
        kube_config.load_kube_config(
            config_file=kubeconfig, context=params.get("context"), client_configuration=configuration
        )
    else:
        kube_config.load_incluster_config(client_configuration=configuration)
    configuration.verify_ssl = params.get("validate_certs", True)
    return kube_client.ApiClient(configuration)


class Kube:
    def __init__(self, params: dict):
        try:
            self._dynamic = DynamicClient(_api_client(params))
        except Exception as error:  # config errors come in many types; all mean "cannot connect"
            raise KubeError(f"cannot build a Kubernetes client: {error}") from error
        self._timeout = params.get("request_timeout", 30)
        self._resources: dict = {}
        # Threads share a Kube (bmh_redfish steps hosts in parallel); discovery, which may
        # rewrite its cache file, runs once per kind under this lock. Requests need no lock.
        self._resources_lock = threading.Lock()
        # Requests sent, by verb (list, get, create, replace, patch, delete): what a run cost.
        self.calls: collections.Counter = collections.Counter()

    def _count(self, verb: str) -> None:
        with self._resources_lock:  # bmh_redfish's workers share this client
            self.calls[verb] += 1

    def writes(self) -> int:
        """Requests sent that change something."""
        return sum(n for verb, n in self.calls.items() if verb not in ("list", "get"))

    def _resource(self, api_version: str, kind: str):
        key = (api_version, kind)
        with self._resources_lock:
            if key not in self._resources:
                self._resources[key] = self._dynamic.resources.get(api_version=api_version, kind=kind)
            return self._resources[key]

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        """Every object of a kind (in a namespace or cluster-wide, matching label_selector if given) in one request."""
        self._count("list")
        try:
            result = self._resource(api_version, kind).get(
                namespace=namespace, label_selector=label_selector, _request_timeout=self._timeout
            )
        except ApiException as error:
            raise KubeError(_describe(error, f"list {kind}", namespace)) from error
        return [item.to_dict() for item in result.items]

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """One object, or None when it does not exist."""
        self._count("get")
        try:
            result = self._resource(api_version, kind).get(
                name=name, namespace=namespace, _request_timeout=self._timeout
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise KubeError(_describe(error, f"get {kind} {name}", namespace)) from error
        return result.to_dict()

    def replace(self, obj: dict) -> dict:
        """Write the whole object; its metadata.resourceVersion makes this a compare-and-swap."""
        self._count("replace")
        api_version, kind = obj["apiVersion"], obj["kind"]
        meta = obj["metadata"]
        try:
            result = self._resource(api_version, kind).replace(
                body=obj, name=meta["name"], namespace=meta.get("namespace"), _request_timeout=self._timeout
            )
        except ApiException as error:
            if error.status in (404, 409):
                raise ConflictError(
                    _describe(error, f"replace {kind} {meta['name']}", meta.get("namespace"))
                ) from error
            raise KubeError(_describe(error, f"replace {kind} {meta['name']}", meta.get("namespace"))) from error
        return result.to_dict()

    def patch_status(self, obj: dict, status: dict) -> dict:
        """Merge-patch the status subresource, guarded by the object's resourceVersion."""
        self._count("patch")
        api_version, kind = obj["apiVersion"], obj["kind"]
        meta = obj["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        try:
            result = self._resource(api_version, kind).status.patch(
                body=body,
                name=meta["name"],
                namespace=meta.get("namespace"),
                content_type="application/merge-patch+json",
                _request_timeout=self._timeout,
            )
        except ApiException as error:
            action = f"update the status of {kind} {meta['name']}"
            if error.status in (404, 409):
                raise ConflictError(_describe(error, action, meta.get("namespace"))) from error
            raise KubeError(_describe(error, action, meta.get("namespace"))) from error
        return result.to_dict()

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete one object; one already gone is fine."""
        self._count("delete")
        try:
            self._resource(api_version, kind).delete(name=name, namespace=namespace, _request_timeout=self._timeout)
        except ApiException as error:
            if error.status != 404:
                raise KubeError(_describe(error, f"delete {kind} {name}", namespace)) from error

    def create(self, obj: dict) -> dict:
        self._count("create")
        try:
            result = self._resource(obj["apiVersion"], obj["kind"]).create(
                body=obj, namespace=obj["metadata"].get("namespace"), _request_timeout=self._timeout
            )
        except ApiException as error:
            name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
            message = _describe(error, f"create {obj['kind']} {name}", obj["metadata"].get("namespace"))
            if error.status == 409:
                raise AlreadyExistsError(message) from error
            raise KubeError(message) from error
        return result.to_dict()


def _describe(error, action: str, namespace: str | None) -> str:
    where = f" in namespace {namespace}" if namespace else ""
    return f"cannot {action}{where}: {error.status} {error.reason}"
