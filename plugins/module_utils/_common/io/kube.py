# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes edge of the modules: one authenticated client, list/get as plain dicts."""

from __future__ import annotations

import collections
import json
import os
import threading
import traceback

try:
    import urllib3
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    KUBERNETES_IMPORT_ERROR = None
    # No answer from the API server (refused, TLS, timeout) or a kind it does not serve.
    TRANSPORT_ERRORS: tuple = (urllib3.exceptions.HTTPError, OSError, ResourceNotFoundError)
except ImportError:  # reported by the module through missing_required_lib
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    ApiException = Exception
    TRANSPORT_ERRORS = ()


# Requests a run may have in flight at once (a claim's writes beside other claims'): the connection pool keeps
# as many connections, so none is opened and thrown away per request.
WRITERS = 8

# The connection options of kubernetes.core (its module_utils/args_common.py AUTH_ARG_SPEC, 6.x),
# with the same types, aliases and no_log, plus our request_timeout. Kept in step with
# plugins/doc_fragments/k8s_auth.py; tests/unit/test_kube_auth.py compares both with kubernetes.core.
AUTH_PROXY_HEADERS_SPEC = {
    "proxy_basic_auth": {"type": "str", "no_log": True},
    "basic_auth": {"type": "str", "no_log": True},
    "user_agent": {"type": "str"},
}
AUTH_ARG_SPEC = {
    "kubeconfig": {"type": "raw", "no_log": True, "aliases": ["kubeconfig_path"]},
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "username": {"type": "str"},
    "password": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"]},
    "client_cert": {"type": "path", "aliases": ["cert_file"]},
    "client_key": {"type": "path", "aliases": ["key_file"]},
    "proxy": {"type": "str"},
    "no_proxy": {"type": "str"},
    "proxy_headers": {"type": "dict", "options": AUTH_PROXY_HEADERS_SPEC},
    "persist_config": {"type": "bool"},
    "impersonate_user": {"type": "str"},
    "impersonate_groups": {"type": "list", "elements": "str"},
    "request_timeout": {"type": "float", "default": 30},
}

# Option -> the kubernetes.client.Configuration attribute it sets (kubernetes.core's AUTH_ARG_MAP,
# turned round). An option not given reads K8S_AUTH_<OPTION>, then K8S_AUTH_<ATTRIBUTE>.
CONFIGURATION_ATTRIBUTES = {
    "kubeconfig": "kubeconfig",
    "context": "context",
    "host": "host",
    "api_key": "api_key",
    "username": "username",
    "password": "password",
    "validate_certs": "verify_ssl",
    "ca_cert": "ssl_ca_cert",
    "client_cert": "cert_file",
    "client_key": "key_file",
    "proxy": "proxy",
    "no_proxy": "no_proxy",
    "proxy_headers": "proxy_headers",
    "persist_config": "persist_config",
}
# Options that only steer loading; the rest are set on the Configuration when given.
_LOADING_ONLY = ("kubeconfig", "context", "persist_config")
IMPERSONATION_HEADERS = {"impersonate_user": "Impersonate-User", "impersonate_groups": "Impersonate-Group"}


class KubeError(Exception):
    """An API failure with a message fit for a module's failure output."""


class ConflictError(KubeError):
    """The object changed since it was read (resourceVersion precondition failed) or was deleted."""


class AlreadyExistsError(KubeError):
    """create() of an object whose name is taken."""


class RefusedError(KubeError):
    """A write refused as forbidden or invalid (403/422): by RBAC, validation or an admission policy.

    `server_message` is the API server's own message (an admission policy's names the policy and says why).
    """

    def __init__(self, message: str, server_message: str = ""):
        super().__init__(message)
        self.server_message = server_message


class KubeConfigError(Exception):
    """No usable client configuration (bad kubeconfig, unknown context, nothing found)."""


def _given(params: dict, option: str):
    """An option's value from the module (or a caller's dict, which may use the attribute name)."""
    value = params.get(option)
    if value is None:
        value = params.get(CONFIGURATION_ATTRIBUTES.get(option, option))
    return value


def _env_bool(value: str) -> bool:
    return value.lower() not in ("0", "false", "no")


def auth_settings(params: dict, environ=None) -> dict:
    """Attribute name -> value for every connection setting given, as kubernetes.core collects them.

    An option given to the module wins; otherwise K8S_AUTH_<OPTION> or K8S_AUTH_<ATTRIBUTE>
    (for example K8S_AUTH_VALIDATE_CERTS or K8S_AUTH_VERIFY_SSL, K8S_AUTH_CA_CERT or
    K8S_AUTH_SSL_CA_CERT); proxy_headers from K8S_AUTH_PROXY_HEADERS_<SUBOPTION>.
    """
    environ = os.environ if environ is None else environ
    auth: dict = {}
    for option, attribute in CONFIGURATION_ATTRIBUTES.items():
        value = _given(params, option)
        if value is not None:
            auth[attribute] = value
        elif option == "proxy_headers":
            headers = {}
            for name, spec in AUTH_PROXY_HEADERS_SPEC.items():
                env_value = environ.get(f"K8S_AUTH_PROXY_HEADERS_{name.upper()}")
                if env_value is not None:
                    headers[name] = _env_bool(env_value) if spec.get("type") == "bool" else env_value
            auth[attribute] = headers  # kubernetes.core sets it, empty or not
        else:
            env_value = environ.get(f"K8S_AUTH_{option.upper()}") or environ.get(f"K8S_AUTH_{attribute.upper()}")
            if env_value is not None:
                auth[attribute] = _env_bool(env_value) if AUTH_ARG_SPEC[option].get("type") == "bool" else env_value
    return auth


def impersonation(params: dict, environ=None) -> dict:
    """Header -> value(s) for impersonate_user/impersonate_groups (or K8S_AUTH_IMPERSONATE_*)."""
    environ = os.environ if environ is None else environ
    headers = {}
    for option, header in IMPERSONATION_HEADERS.items():
        value = params.get(option)
        if value is None:
            value = environ.get(f"K8S_AUTH_{option.upper()}")
            if value is not None and AUTH_ARG_SPEC[option].get("type") == "list":
                value = [item for item in value.split(",") if item != ""]
        if value:
            headers[header] = value
    return headers


def config_source(auth: dict) -> str:
    """Where the connection comes from, in kubernetes.core's order.

    "parameters": host with username/password, api_key or client_cert/client_key is enough, no file is read;
    "kubeconfig": the kubeconfig (file(s) or dict) and/or context given;
    "default": the in-cluster service account, else $KUBECONFIG or ~/.kube/config.
    Anything else given (host, ca_cert, validate_certs, proxy...) then overrides what was loaded.
    """

    def given(*names: str) -> bool:
        return all(auth.get(name) for name in names)

    if given("username", "password", "host") or given("api_key", "host") or given("cert_file", "key_file", "host"):
        return "parameters"
    if given("kubeconfig") or given("context"):
        return "kubeconfig"
    return "default"


def _load_kubeconfig(auth: dict, configuration) -> None:
    kubeconfig, context = auth.get("kubeconfig"), auth.get("context")
    options = {"context": context, "persist_config": auth.get("persist_config"), "client_configuration": configuration}
    if isinstance(kubeconfig, dict) and kubeconfig:
        kube_config.load_kube_config_from_dict(config_dict=kubeconfig, **options)
    else:
        # None: $KUBECONFIG (several files joined with ':'), else ~/.kube/config
        kube_config.load_kube_config(config_file=kubeconfig or None, **options)


def _kubeconfig_error(auth: dict, error: Exception) -> KubeConfigError:
    kubeconfig, context = auth.get("kubeconfig"), auth.get("context")
    where = _kubeconfig_description(kubeconfig)
    if context:
        contexts = _context_names(kubeconfig)
        if contexts is not None and context not in contexts:
            return KubeConfigError(
                f"context {context!r} is not in {where} (its contexts: {', '.join(contexts) or 'none'})"
            )
    return KubeConfigError(f"{where}: {str(error).rstrip('.')}")


def _kubeconfig_description(kubeconfig) -> str:
    if isinstance(kubeconfig, dict) and kubeconfig:
        return "the kubeconfig given as a dict"
    if kubeconfig:
        return f"kubeconfig {kubeconfig}"
    return f"kubeconfig {os.environ.get('KUBECONFIG') or '~/.kube/config'}"


def _context_names(kubeconfig) -> list | None:
    try:
        if isinstance(kubeconfig, dict) and kubeconfig:
            return [c.get("name") for c in kubeconfig.get("contexts") or [] if isinstance(c, dict)]
        contexts, _current = kube_config.list_kube_config_contexts(config_file=kubeconfig or None)
        return [c.get("name") for c in contexts]
    except Exception:  # unreadable file: the loader's own message says why
        return None


def client_configuration(auth: dict):
    """A kubernetes.client.Configuration built as kubernetes.core's get_api_client builds it.

    Unlike kubernetes.core this loads into a fresh Configuration, never the process-wide default,
    so two clients in one process (tests, threads, a controller) cannot leak settings into each other.
    """
    auth = dict(auth)
    if auth.get("host"):
        auth["host"] = auth["host"].rstrip("/")
    configuration = kube_client.Configuration()
    source = config_source(auth)
    if source == "kubeconfig":
        try:
            _load_kubeconfig(auth, configuration)
        except kube_config.ConfigException as error:
            raise _kubeconfig_error(auth, error) from error
    elif source == "default":
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
        except kube_config.ConfigException as in_cluster_error:
            configuration = kube_client.Configuration()
            try:
                _load_kubeconfig(auth, configuration)
            except kube_config.ConfigException as error:
                raise KubeConfigError(
                    f"no Kubernetes connection configured: not in a cluster ({str(in_cluster_error).rstrip('.')}) "
                    f"and {_kubeconfig_error(auth, error)}; give kubeconfig or context, or host with credentials, "
                    "as module options or K8S_AUTH_* environment variables"
                ) from error
    for attribute, value in auth.items():
        if attribute in _LOADING_ONLY or value is None:
            continue
        if attribute == "api_key":
            value = {"authorization": f"Bearer {value}"}
        elif attribute == "proxy_headers":
            value = urllib3.util.make_headers(**value)
        setattr(configuration, attribute, value)
    return configuration


class _RepeatedHeader(str):
    """A header name that is a dict key of its own, so one header can be sent once per value
    (Impersonate-Group, once per group), as kubernetes.core sends it."""

    _low = None

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def lower(self):
        if self._low is None:
            lower = str.lower(self)
            self._low = self if str.__eq__(lower, self) else _RepeatedHeader(lower)
        return self._low


def _api_client(params: dict):
    """kubernetes.core's client construction, same options, K8S_AUTH_* variables and precedence."""
    configuration = client_configuration(auth_settings(params))
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, WRITERS)
    api_client = kube_client.ApiClient(configuration)
    for header, value in impersonation(params).items():
        for item in value if isinstance(value, list) else [value]:
            api_client.set_default_header(_RepeatedHeader(header) if isinstance(value, list) else header, item)
    return api_client


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
        # The same, by (verb, kind, namespace or None): which objects were read or written where.
        self.requests: collections.Counter = collections.Counter()

    @classmethod
    def from_kubeconfig_dict(cls, kubeconfig: dict, request_timeout: float = 30) -> Kube:
        """A client from a kubeconfig dict alone: no K8S_AUTH_* variable, file or in-cluster account is consulted
        (a remote claim's kubeconfig, _remote/pure/kubeconfig.py, is the only authority there)."""
        kube = cls.__new__(cls)
        configuration = kube_client.Configuration()
        try:
            kube_config.load_kube_config_from_dict(config_dict=kubeconfig, client_configuration=configuration)
            configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, WRITERS)
            kube._dynamic = DynamicClient(kube_client.ApiClient(configuration))
        except TRANSPORT_ERRORS as error:
            raise KubeError(f"no answer from the API server ({type(error).__name__})") from error
        except ApiException as error:
            raise KubeError(f"discovery refused: {error.status} {error.reason}") from error
        except kube_config.ConfigException as error:
            raise KubeConfigError(f"the kubeconfig cannot be loaded ({type(error).__name__})") from error
        kube._timeout = request_timeout
        kube._resources = {}
        kube._resources_lock = threading.Lock()
        kube.calls = collections.Counter()
        kube.requests = collections.Counter()
        return kube

    def _count(self, verb: str, kind: str = "", namespace: str | None = None) -> None:
        with self._resources_lock:  # bmh_redfish's workers share this client
            self.calls[verb] += 1
            self.requests[(verb, kind, namespace)] += 1

    def reset_counts(self) -> None:
        """Count afresh: a standby run serving many batches reports each batch's requests, not the run's."""
        with self._resources_lock:
            self.calls.clear()
            self.requests.clear()

    def writes(self) -> int:
        """Requests sent that change something."""
        return sum(n for verb, n in self.calls.items() if verb not in ("list", "get"))

    def _resource(self, api_version: str, kind: str):
        key = (api_version, kind)
        with self._resources_lock:
            if key not in self._resources:
                self._resources[key] = self._dynamic.resources.get(api_version=api_version, kind=kind)
            return self._resources[key]

    def discover(self, kinds) -> None:
        """Resolve each (api_version, kind) now (discovery requests, the connection opened), not at first use:
        what a standby run does before it says it is ready."""
        for api_version, kind in kinds:
            try:
                self._resource(api_version, kind)
            except ResourceNotFoundError as error:
                raise KubeError(f"discover {kind} ({api_version}): the API server does not serve it") from error
            except ApiException as error:
                raise KubeError(_describe(error, f"discover {kind}", None)) from error
            except TRANSPORT_ERRORS as error:
                raise KubeError(_unanswered(error, f"discover {kind}", None)) from error

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        """Every object of a kind (in a namespace or cluster-wide, matching label_selector if given) in one request."""
        self._count("list", kind, namespace)
        try:
            result = _decoded(
                self._resource(api_version, kind).get(
                    namespace=namespace, label_selector=label_selector, serialize=False, _request_timeout=self._timeout
                )
            )
        except ApiException as error:
            raise KubeError(_describe(error, f"list {kind}", namespace)) from error
        except TRANSPORT_ERRORS as error:
            raise KubeError(_unanswered(error, f"list {kind}", namespace)) from error
        return result["items"]

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """One object, or None when it does not exist."""
        self._count("get", kind, namespace)
        try:
            result = _decoded(
                self._resource(api_version, kind).get(
                    name=name, namespace=namespace, serialize=False, _request_timeout=self._timeout
                )
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise KubeError(_describe(error, f"get {kind} {name}", namespace)) from error
        except TRANSPORT_ERRORS as error:
            raise KubeError(_unanswered(error, f"get {kind} {name}", namespace)) from error
        return result

    def replace(self, obj: dict) -> dict:
        """Write the whole object; its metadata.resourceVersion makes this a compare-and-swap."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        meta = obj["metadata"]
        self._count("replace", kind, meta.get("namespace"))
        try:
            result = _decoded(
                self._resource(api_version, kind).replace(
                    body=obj,
                    name=meta["name"],
                    namespace=meta.get("namespace"),
                    serialize=False,
                    _request_timeout=self._timeout,
                )
            )
        except ApiException as error:
            if error.status in (404, 409):
                raise ConflictError(
                    _describe(error, f"replace {kind} {meta['name']}", meta.get("namespace"))
                ) from error
            if error.status in (403, 422):
                raise _refused(error, f"replace {kind} {meta['name']}", meta.get("namespace")) from error
            raise KubeError(_describe(error, f"replace {kind} {meta['name']}", meta.get("namespace"))) from error
        except TRANSPORT_ERRORS as error:
            raise KubeError(_unanswered(error, f"replace {kind} {meta['name']}", meta.get("namespace"))) from error
        return result

    def patch_status(self, obj: dict, status: dict) -> dict:
        """Merge-patch the status subresource, guarded by the object's resourceVersion."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        meta = obj["metadata"]
        self._count("patch", kind, meta.get("namespace"))
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        action = f"update the status of {kind} {meta['name']}"
        try:
            result = _decoded(
                self._resource(api_version, kind).status.patch(
                    body=body,
                    name=meta["name"],
                    namespace=meta.get("namespace"),
                    content_type="application/merge-patch+json",
                    serialize=False,
                    _request_timeout=self._timeout,
                )
            )
        except ApiException as error:
            if error.status in (404, 409):
                raise ConflictError(_describe(error, action, meta.get("namespace"))) from error
            raise KubeError(_describe(error, action, meta.get("namespace"))) from error
        except TRANSPORT_ERRORS as error:
            raise KubeError(_unanswered(error, action, meta.get("namespace"))) from error
        return result

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, uid: str = "") -> bool:
        """Delete one object; whether it was deleted. One already gone is fine (False).

        With `uid`, only the object of that uid: another one of the same name (its name taken since)
        is left alone (False), the server checking the precondition.
        """
        self._count("delete", kind, namespace)
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self._resource(api_version, kind).delete(
                name=name, namespace=namespace, body=body, _request_timeout=self._timeout
            )
        except ApiException as error:
            if error.status == 404 or (uid and error.status == 409):
                return False
            if error.status in (403, 422):
                raise _refused(error, f"delete {kind} {name}", namespace) from error
            raise KubeError(_describe(error, f"delete {kind} {name}", namespace)) from error
        except TRANSPORT_ERRORS as error:
            raise KubeError(_unanswered(error, f"delete {kind} {name}", namespace)) from error
        return True

    def create(self, obj: dict) -> dict:
        self._count("create", obj["kind"], obj["metadata"].get("namespace"))
        try:
            result = _decoded(
                self._resource(obj["apiVersion"], obj["kind"]).create(
                    body=obj,
                    namespace=obj["metadata"].get("namespace"),
                    serialize=False,
                    _request_timeout=self._timeout,
                )
            )
        except ApiException as error:
            name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
            message = _describe(error, f"create {obj['kind']} {name}", obj["metadata"].get("namespace"))
            if error.status == 409:
                raise AlreadyExistsError(message) from error
            if error.status in (403, 422):
                raise _refused(error, f"create {obj['kind']} {name}", obj["metadata"].get("namespace")) from error
            raise KubeError(message) from error
        except TRANSPORT_ERRORS as error:
            name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
            raise KubeError(
                _unanswered(error, f"create {obj['kind']} {name}", obj["metadata"].get("namespace"))
            ) from error
        return result


def _decoded(response) -> dict:
    """The answer's JSON as plain dicts: the dynamic client's own objects (serialize=True) wrap every field and are
    then turned back into dicts, a quarter of a second per list of 1,000 hosts."""
    return json.loads(response.data)


def _describe(error, action: str, namespace: str | None) -> str:
    where = f" in namespace {namespace}" if namespace else ""
    return f"cannot {action}{where}: {error.status} {error.reason}"


def _refused(error, action: str, namespace: str | None) -> RefusedError:
    """A 403/422 with the server's own message (which says who refused and why) kept and shown."""
    try:
        server_message = str(json.loads(error.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        server_message = ""
    described = _describe(error, action, namespace)
    return RefusedError(f"{described}: {server_message}" if server_message else described, server_message)


def _unanswered(error, action: str, namespace: str | None) -> str:
    where = f" in namespace {namespace}" if namespace else ""
    return f"cannot {action}{where}: {type(error).__name__}: {error}"
