# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A remote claim's kubeconfig: where it may point and what it may hold. Pure.

The kubeconfig is the tenant's, read from a Secret in the claim's own namespace, and the
controller connects with it in its own process. So nothing in it may make that process do
more than send requests as the kubeconfig's identity:

- no ``exec`` or ``auth-provider`` (they run commands or plugins in the controller);
- no file paths (``certificate-authority``, ``client-certificate``, ``client-key``,
  ``tokenFile``): they would read the controller's own files (its credentials);
- no ``insecure-skip-tls-verify``, no proxy: the hardware cluster is reached directly and verified;
- the current context names a namespace (the target: no server default decides it), one the
  operator allows (``allowed`` full-match patterns, none: any) and the claim pins if it says one.

What is used is rebuilt from the allowed fields only (one cluster, one user, one context), so an
unknown field the client library might honour one day is never passed on. Messages name fields,
never their values: a kubeconfig's contents appear in no status, Event or log.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from dataclasses import dataclass

# Reasons (the Mirrored condition's), in the tenant guide.
KUBECONFIG_REFUSED = "KubeconfigRefused"
KUBECONFIG_MISSING = "KubeconfigMissing"
CROSS_NAMESPACE = "CrossNamespaceReference"
NAMESPACE_NOT_ALLOWED = "RemoteNamespaceNotAllowed"

DEFAULT_KEY = "kubeconfig"
# A kubeconfig with embedded certificates is a few KiB; anything much larger is not one.
MAX_SIZE = 64 * 1024

_CLUSTER_FIELDS = ("server", "certificate-authority-data", "tls-server-name")
_USER_FIELDS = ("token", "client-certificate-data", "client-key-data")
_FORBIDDEN = {
    "exec": "runs a command",
    "auth-provider": "runs an authentication plugin",
    "tokenFile": "reads a file of the controller's",
    "client-certificate": "reads a file of the controller's",
    "client-key": "reads a file of the controller's",
    "certificate-authority": "reads a file of the controller's",
    "insecure-skip-tls-verify": "turns off server verification",
    "proxy-url": "goes through a proxy",
    "username": "sends a password",
    "password": "sends a password",
    "as": "impersonates another identity",
    "as-uid": "impersonates another identity",
    "as-groups": "impersonates another identity",
    "as-user-extra": "impersonates another identity",
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class Refused(Exception):
    """The kubeconfig may not be used: `reason` (a condition reason) and a message naming fields, not values."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Target:
    """What a usable kubeconfig gives: the client configuration (a kubeconfig dict) and the target namespace."""

    config: dict
    namespace: str
    server: str  # for the process only (never shown): two claims with the same target share a client


def secret_ref(claim: dict) -> dict:
    return ((claim.get("spec") or {}).get("remote") or {}).get("kubeconfigSecretRef") or {}


def check_ref(claim: dict) -> tuple[str, str]:
    """(secret name, key) to read in the claim's namespace; Refused (before anything is read) for another namespace."""
    ref = secret_ref(claim)
    namespace = claim["metadata"]["namespace"]
    if not ref.get("name"):
        raise Refused(KUBECONFIG_MISSING, "spec.remote.kubeconfigSecretRef.name: a Secret in the claim's namespace")
    if ref.get("namespace", namespace) != namespace:
        raise Refused(
            CROSS_NAMESPACE,
            f"spec.remote.kubeconfigSecretRef.namespace {ref['namespace']!r}: only a Secret in the claim's namespace "
            f"{namespace!r} may be used",
        )
    return ref["name"], ref.get("key") or DEFAULT_KEY


def kubeconfig_text(secret: dict | None, name: str, key: str) -> str:
    """The kubeconfig in a Secret (as read from the API: data base64-encoded)."""
    if secret is None:
        raise Refused(KUBECONFIG_MISSING, f"spec.remote.kubeconfigSecretRef: Secret {name!r} does not exist")
    encoded = (secret.get("data") or {}).get(key)
    if encoded is None:
        raise Refused(KUBECONFIG_MISSING, f"spec.remote.kubeconfigSecretRef: Secret {name!r} has no key {key!r}")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise Refused(KUBECONFIG_REFUSED, f"Secret {name!r} key {key!r} is not base64") from error
    if len(raw) > MAX_SIZE:
        raise Refused(KUBECONFIG_REFUSED, f"Secret {name!r} key {key!r}: larger than {MAX_SIZE} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Refused(KUBECONFIG_REFUSED, f"Secret {name!r} key {key!r} is not UTF-8 text") from error


def check_parsed(config) -> dict:
    """A parsed kubeconfig (the I/O edge parses: YAML is not the pure layer's) that is at least a mapping."""
    if not isinstance(config, dict):
        raise Refused(KUBECONFIG_REFUSED, "the kubeconfig is not a mapping (kind: Config)")
    return config


def _named(config: dict, section: str, name: str) -> dict:
    entries = [e for e in config.get(section) or [] if isinstance(e, dict) and e.get("name") == name]
    if len(entries) != 1:
        raise Refused(KUBECONFIG_REFUSED, f"{section}: exactly one entry named by the current context is needed")
    inner = entries[0].get(section[:-1])  # clusters[].cluster, users[].user, contexts[].context
    if not isinstance(inner, dict):
        raise Refused(KUBECONFIG_REFUSED, f"{section}[{name!r}].{section[:-1]} is not a mapping")
    return inner


def _forbidden_fields(config: dict) -> list[str]:
    """Every forbidden field anywhere in users and clusters (not only the current context's: the file is refused)."""
    found = []
    for section, inner_key in (("users", "user"), ("clusters", "cluster")):
        for entry in config.get(section) or []:
            inner = (entry or {}).get(inner_key) if isinstance(entry, dict) else None
            for field_name in sorted(inner or {}):
                if field_name in _FORBIDDEN and (inner[field_name] not in (None, False, "", [], {})):
                    found.append(f"{section}[].{inner_key}.{field_name} ({_FORBIDDEN[field_name]})")
    return found


def _check_base64(value, field_name: str) -> None:
    if not isinstance(value, str):
        raise Refused(KUBECONFIG_REFUSED, f"{field_name} is not a string")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as error:
        raise Refused(KUBECONFIG_REFUSED, f"{field_name} is not base64") from error


def target(config: dict, allowed: list | None = None, pinned: str = "") -> Target:
    """The Target of a parsed kubeconfig, or Refused saying which field is wrong.

    `allowed`: compiled patterns a namespace must fully match (None or empty: any);
    `pinned`: the namespace the claim says it wants (spec.remote.namespace), "" when it leaves it to the kubeconfig.
    """
    forbidden = _forbidden_fields(config)
    if forbidden:
        raise Refused(KUBECONFIG_REFUSED, "the kubeconfig may not use " + "; ".join(forbidden))
    current = config.get("current-context")
    if not current or not isinstance(current, str):
        raise Refused(KUBECONFIG_REFUSED, "current-context: the context to use must be named")
    context = _named(config, "contexts", current)
    cluster = _named(config, "clusters", context.get("cluster") or "")
    user = _named(config, "users", context.get("user") or "")
    namespace = context.get("namespace")
    if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
        raise Refused(
            KUBECONFIG_REFUSED, "contexts[current].context.namespace: the hardware cluster namespace must be named"
        )
    if pinned and namespace != pinned:
        raise Refused(
            NAMESPACE_NOT_ALLOWED,
            f"the kubeconfig's context targets namespace {namespace!r}, "
            f"the claim's spec.remote.namespace says {pinned!r}",
        )
    if allowed and not any(pattern.fullmatch(namespace) for pattern in allowed):
        raise Refused(
            NAMESPACE_NOT_ALLOWED,
            f"the kubeconfig's context targets namespace {namespace!r}, which this controller does not allow "
            "(its operator's allowed remote namespaces)",
        )
    server = cluster.get("server")
    parsed = urllib.parse.urlsplit(server) if isinstance(server, str) else None
    if parsed is None or parsed.scheme != "https" or not parsed.hostname or parsed.username or parsed.password:
        raise Refused(KUBECONFIG_REFUSED, "clusters[current].cluster.server: an https:// URL without credentials")
    if "certificate-authority-data" in cluster:
        _check_base64(cluster["certificate-authority-data"], "clusters[current].cluster.certificate-authority-data")
    has_token = bool(user.get("token"))
    has_cert = bool(user.get("client-certificate-data")) and bool(user.get("client-key-data"))
    if has_token == has_cert:
        raise Refused(
            KUBECONFIG_REFUSED,
            "users[current].user: either token, or client-certificate-data with client-key-data (one way, embedded)",
        )
    for field_name in ("client-certificate-data", "client-key-data"):
        if has_cert:
            _check_base64(user[field_name], f"users[current].user.{field_name}")
    if has_token and not isinstance(user["token"], str):
        raise Refused(KUBECONFIG_REFUSED, "users[current].user.token is not a string")
    rebuilt = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "remote", "cluster": {k: cluster[k] for k in _CLUSTER_FIELDS if k in cluster}}],
        "users": [{"name": "remote", "user": {k: user[k] for k in _USER_FIELDS if user.get(k)}}],
        "contexts": [{"name": "remote", "context": {"cluster": "remote", "user": "remote", "namespace": namespace}}],
        "current-context": "remote",
    }
    return Target(rebuilt, namespace, server)


def compile_allowed(patterns: list | None) -> list:
    """The operator's allowed-namespace patterns compiled (full match); ValueError naming a bad one."""
    compiled = []
    for pattern in patterns or []:
        try:
            compiled.append(re.compile(pattern))
        except re.error as error:
            raise ValueError(f"allowed_namespaces: {pattern!r} is not a valid regular expression ({error})") from error
    return compiled
