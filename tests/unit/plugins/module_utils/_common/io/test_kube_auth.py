"""How the modules build their Kubernetes client: kubernetes.core's options, K8S_AUTH_* variables and precedence.

_kube reimplements kubernetes.core's client construction (plain ApiClient, no process-wide default
Configuration); the conformance tests here run kubernetes.core 6.x's own code on the same inputs and
compare the resulting Configuration, so an upgrade of kubernetes.core that changes behaviour shows up here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.metalclaim.hostclaim.plugins.doc_fragments.k8s_auth import ModuleDocFragment
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io import kube
from kubernetes import client as kube_client
from kubernetes.config import incluster_config
from kubernetes.config import kube_config as kube_config_module

core_args = pytest.importorskip("ansible_collections.kubernetes.core.plugins.module_utils.args_common")
core_client = pytest.importorskip("ansible_collections.kubernetes.core.plugins.module_utils.k8s.client")

REPO = Path(__file__).resolve().parents[6]
# Configuration attributes the options set; compared between kubernetes.core and us.
COMPARED = (
    "host",
    "api_key",
    "username",
    "password",
    "verify_ssl",
    "ssl_ca_cert",
    "cert_file",
    "key_file",
    "proxy",
    "no_proxy",
    "proxy_headers",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No K8S_AUTH_*, KUBECONFIG or pod environment from the caller; HOME without a kubeconfig."""
    import os

    for name in list(os.environ):
        if name.startswith(("K8S_AUTH_", "KUBERNETES_SERVICE_")) or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    # The Python client reads $KUBECONFIG once, at import: follow the environment set by each test.
    monkeypatch.setattr(kube_config_module, "KUBE_CONFIG_DEFAULT_LOCATION", "~/.kube/config")
    # kubernetes.core loads into the process-wide default Configuration; start each test without one.
    monkeypatch.setattr(kube_client.Configuration, "_default", None)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "no-token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "no-ca"))


def write_kubeconfig(path: Path, server: str, user: str, files: Path, **cluster_extra) -> Path:
    """A kubeconfig with contexts `<user>` (current) and `<user>-other` (another server)."""
    files.mkdir(parents=True, exist_ok=True)
    for name in ("ca.crt", f"{user}.crt", f"{user}.key"):
        (files / name).write_text(f"not really {name}\n")
    cluster = {"server": server, "certificate-authority": str(files / "ca.crt"), **cluster_extra}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "main", "cluster": cluster},
            {"name": "other", "cluster": {"server": "https://127.0.0.1:7443", "insecure-skip-tls-verify": True}},
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(files / f"{user}.crt"), "client-key": str(files / f"{user}.key")},
            },
            {"name": "token-user", "user": {"token": "kubeconfig-token"}},
        ],
        "contexts": [
            {"name": user, "context": {"cluster": "main", "user": user}},
            {"name": f"{user}-other", "context": {"cluster": "other", "user": "token-user"}},
        ],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return path


def in_cluster(monkeypatch, tmp_path: Path) -> None:
    """What a pod sees: the service host/port variables and the service account's token and CA."""
    (tmp_path / "sa-token").write_text("service-account-token")
    (tmp_path / "sa-ca.crt").write_text("not really a CA\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "sa-token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "sa-ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6449")


def ours(params: dict):
    return kube.client_configuration(kube.auth_settings(params))


def theirs(params: dict):
    kube_client.Configuration.set_default(None)
    auth = core_client._create_auth_spec(None, **params)
    return core_client._create_configuration(auth)


def settings(configuration) -> dict:
    return {name: getattr(configuration, name) for name in COMPARED}


# -- the option set ---------------------------------------------------------------------------


def normalized(spec: dict) -> dict:
    out = {}
    for name, option in spec.items():
        entry = {"type": option.get("type", "str")}
        for key in ("aliases", "no_log", "elements", "default"):
            if option.get(key) is not None:
                entry[key] = option[key]
        if "options" in option:
            entry["options"] = normalized(option["options"])
        out[name] = entry
    return out


def test_options_are_kubernetes_cores_plus_request_timeout():
    mine = normalized(kube.AUTH_ARG_SPEC)
    core = normalized(core_args.AUTH_ARG_SPEC)
    assert mine.pop("request_timeout") == {"type": "float", "default": 30}
    # kubeconfig_path: our earlier name of the option, still accepted.
    assert mine["kubeconfig"].pop("aliases") == ["kubeconfig_path"]
    assert mine == core
    attributes = kube.CONFIGURATION_ATTRIBUTES
    assert attributes == {option: attr for attr, option in core_args.AUTH_ARG_MAP.items()}


def test_doc_fragment_documents_exactly_the_options():
    doc = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]

    def documented(options: dict) -> dict:
        out = {}
        for name, option in options.items():
            entry = {"type": option.get("type", "str")}
            for key in ("aliases", "elements", "default"):
                if option.get(key) is not None:
                    entry[key] = option[key]
            if "suboptions" in option:
                entry["options"] = documented(option["suboptions"])
            out[name] = entry
        return out

    def spec_without_no_log(spec: dict) -> dict:
        return {
            name: {k: (spec_without_no_log(v) if k == "options" else v) for k, v in entry.items() if k != "no_log"}
            for name, entry in spec.items()
        }

    assert documented(doc) == spec_without_no_log(normalized(kube.AUTH_ARG_SPEC))
    text = ModuleDocFragment.DOCUMENTATION
    for option, attribute in kube.CONFIGURATION_ATTRIBUTES.items():
        if option != "proxy_headers":
            assert f"E(K8S_AUTH_{option.upper()})" in text, option
            assert f"E(K8S_AUTH_{attribute.upper()})" in text, attribute
    for option in list(kube.AUTH_PROXY_HEADERS_SPEC) + list(kube.IMPERSONATION_HEADERS):
        prefix = "K8S_AUTH_PROXY_HEADERS_" if option in kube.AUTH_PROXY_HEADERS_SPEC else "K8S_AUTH_"
        assert f"E({prefix}{option.upper()})" in text, option


def test_both_group_names_list_every_module():
    groups = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["action_groups"]
    modules = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    assert groups["k8s"] == modules
    assert groups["hostclaim"] == modules


# -- collecting options and environment variables --------------------------------------------


def test_an_option_given_beats_its_environment_variable():
    environ = {"K8S_AUTH_HOST": "https://from-env", "K8S_AUTH_CONTEXT": "env-context"}
    auth = kube.auth_settings({"host": "https://from-option", "context": None}, environ)
    assert auth["host"] == "https://from-option"
    assert auth["context"] == "env-context"


@pytest.mark.parametrize(
    ("variable", "attribute"),
    [
        ("K8S_AUTH_CA_CERT", "ssl_ca_cert"),
        ("K8S_AUTH_SSL_CA_CERT", "ssl_ca_cert"),
        ("K8S_AUTH_CLIENT_CERT", "cert_file"),
        ("K8S_AUTH_CERT_FILE", "cert_file"),
        ("K8S_AUTH_CLIENT_KEY", "key_file"),
        ("K8S_AUTH_KEY_FILE", "key_file"),
        ("K8S_AUTH_KUBECONFIG", "kubeconfig"),
        ("K8S_AUTH_API_KEY", "api_key"),
    ],
)
def test_either_variable_name_works(variable, attribute):
    assert kube.auth_settings({}, {variable: "/some/value"})[attribute] == "/some/value"


@pytest.mark.parametrize(
    ("value", "expected"), [("no", False), ("False", False), ("0", False), ("yes", True), ("true", True), ("1", True)]
)
def test_boolean_variables(value, expected):
    assert kube.auth_settings({}, {"K8S_AUTH_VERIFY_SSL": value})["verify_ssl"] is expected
    assert kube.auth_settings({}, {"K8S_AUTH_VALIDATE_CERTS": value})["verify_ssl"] is expected
    assert kube.auth_settings({}, {"K8S_AUTH_PERSIST_CONFIG": value})["persist_config"] is expected


def test_validate_certs_not_given_sets_nothing():
    assert "verify_ssl" not in kube.auth_settings({"validate_certs": None}, {})
    assert kube.auth_settings({"validate_certs": False}, {})["verify_ssl"] is False


def test_impersonation_from_options_and_variables():
    assert kube.impersonation({"impersonate_user": "bob", "impersonate_groups": ["a", "b"]}, {}) == {
        "Impersonate-User": "bob",
        "Impersonate-Group": ["a", "b"],
    }
    environ = {"K8S_AUTH_IMPERSONATE_USER": "eve", "K8S_AUTH_IMPERSONATE_GROUPS": "g1,,g2"}
    assert kube.impersonation({}, environ) == {"Impersonate-User": "eve", "Impersonate-Group": ["g1", "g2"]}
    assert kube.impersonation({"impersonate_groups": []}, {}) == {}


def test_impersonated_groups_are_separate_headers():
    api_client = kube._api_client(
        {"host": "https://127.0.0.1:6443", "api_key": "t", "impersonate_user": "u", "impersonate_groups": ["a", "b"]}
    )
    headers = [(str(k), v) for k, v in api_client.default_headers.items()]
    assert ("Impersonate-User", "u") in headers
    assert [v for k, v in headers if k == "Impersonate-Group"] == ["a", "b"]


@pytest.mark.parametrize(
    ("auth", "source"),
    [
        ({}, "default"),
        ({"host": "https://h"}, "default"),
        ({"host": "https://h", "api_key": "t", "kubeconfig": "/k"}, "parameters"),
        ({"host": "https://h", "username": "u", "password": "p"}, "parameters"),
        ({"host": "https://h", "cert_file": "/c", "key_file": "/k"}, "parameters"),
        ({"host": "https://h", "cert_file": "/c"}, "default"),
        ({"api_key": "t", "kubeconfig": "/k"}, "kubeconfig"),
        ({"kubeconfig": "/k"}, "kubeconfig"),
        ({"context": "c"}, "kubeconfig"),
        ({"kubeconfig": {}}, "default"),
    ],
)
def test_config_source(auth, source):
    assert kube.config_source(auth) == source


# -- the same Configuration as kubernetes.core ------------------------------------------------


def scenario_default_kubeconfig(monkeypatch, tmp_path):
    write_kubeconfig(Path.home() / ".kube" / "config", "https://127.0.0.1:6443", "home", tmp_path / "home-files")
    return {}


def scenario_kubeconfig_variable(monkeypatch, tmp_path):
    path = write_kubeconfig(tmp_path / "env.kubeconfig", "https://127.0.0.1:6444", "env", tmp_path / "env-files")
    monkeypatch.setattr(kube_config_module, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    monkeypatch.setenv("KUBECONFIG", str(path))
    return {}


def scenario_in_cluster_beats_default_kubeconfig(monkeypatch, tmp_path):
    scenario_default_kubeconfig(monkeypatch, tmp_path)
    in_cluster(monkeypatch, tmp_path)
    return {}


def scenario_k8s_auth_kubeconfig_beats_in_cluster(monkeypatch, tmp_path):
    in_cluster(monkeypatch, tmp_path)
    path = write_kubeconfig(tmp_path / "a.kubeconfig", "https://127.0.0.1:6445", "a", tmp_path / "a-files")
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", str(path))
    return {}


def scenario_kubeconfig_option_and_context(monkeypatch, tmp_path):
    path = write_kubeconfig(tmp_path / "a.kubeconfig", "https://127.0.0.1:6445", "a", tmp_path / "a-files")
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", "/does/not/matter")
    return {"kubeconfig": str(path), "context": "a-other"}


def scenario_context_alone_uses_default_file(monkeypatch, tmp_path):
    write_kubeconfig(Path.home() / ".kube" / "config", "https://127.0.0.1:6443", "home", tmp_path / "home-files")
    in_cluster(monkeypatch, tmp_path)
    return {"context": "home-other"}


def scenario_kubeconfig_dict(monkeypatch, tmp_path):
    path = write_kubeconfig(tmp_path / "d.kubeconfig", "https://127.0.0.1:6446", "d", tmp_path / "d-files")
    return {"kubeconfig": json.loads(path.read_text())}


def scenario_host_and_token_ignore_kubeconfig(monkeypatch, tmp_path):
    path = write_kubeconfig(tmp_path / "a.kubeconfig", "https://127.0.0.1:6445", "a", tmp_path / "a-files")
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", str(path))
    return {"host": "https://127.0.0.1:9443/", "api_key": "option-token", "ca_cert": "/ca.crt"}


def scenario_host_and_client_cert_from_environment(monkeypatch, tmp_path):
    scenario_default_kubeconfig(monkeypatch, tmp_path)
    monkeypatch.setenv("K8S_AUTH_HOST", "https://127.0.0.1:9443")
    monkeypatch.setenv("K8S_AUTH_CERT_FILE", "/c.crt")
    monkeypatch.setenv("K8S_AUTH_CLIENT_KEY", "/c.key")
    monkeypatch.setenv("K8S_AUTH_SSL_CA_CERT", "/ca.crt")
    monkeypatch.setenv("K8S_AUTH_VERIFY_SSL", "yes")
    return {}


def scenario_username_password(monkeypatch, tmp_path):
    return {"host": "https://127.0.0.1:9443", "username": "u", "password": "p", "validate_certs": False}


def scenario_host_alone_overrides_loaded_server(monkeypatch, tmp_path):
    scenario_default_kubeconfig(monkeypatch, tmp_path)
    return {"host": "https://127.0.0.1:8443///", "ca_cert": "/other-ca.crt"}


def scenario_validate_certs_false_overrides_kubeconfig(monkeypatch, tmp_path):
    path = write_kubeconfig(tmp_path / "a.kubeconfig", "https://127.0.0.1:6445", "a", tmp_path / "a-files")
    return {"kubeconfig": str(path), "validate_certs": False}


def scenario_insecure_kubeconfig_without_validate_certs(monkeypatch, tmp_path):
    path = write_kubeconfig(
        tmp_path / "i.kubeconfig",
        "https://127.0.0.1:6447",
        "i",
        tmp_path / "i-files",
        **{"insecure-skip-tls-verify": True},
    )
    return {"kubeconfig": str(path), "validate_certs": None}


def scenario_validate_certs_variable_overrides_insecure_kubeconfig(monkeypatch, tmp_path):
    monkeypatch.setenv("K8S_AUTH_VALIDATE_CERTS", "true")
    return scenario_insecure_kubeconfig_without_validate_certs(monkeypatch, tmp_path)


def scenario_proxy_options(monkeypatch, tmp_path):
    scenario_default_kubeconfig(monkeypatch, tmp_path)
    return {
        "proxy": "http://127.0.0.1:3128",
        "no_proxy": "localhost,127.0.0.1",
        "proxy_headers": {"proxy_basic_auth": "u:p", "basic_auth": None, "user_agent": "metalclaim/1"},
    }


def scenario_proxy_variables(monkeypatch, tmp_path):
    scenario_default_kubeconfig(monkeypatch, tmp_path)
    monkeypatch.setenv("K8S_AUTH_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("K8S_AUTH_NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("K8S_AUTH_PROXY_HEADERS_USER_AGENT", "env-agent/2")
    return {}


def scenario_api_key_over_kubeconfig_token(monkeypatch, tmp_path):
    path = write_kubeconfig(tmp_path / "a.kubeconfig", "https://127.0.0.1:6445", "a", tmp_path / "a-files")
    return {"kubeconfig": str(path), "context": "a-other", "api_key": "option-token"}


SCENARIOS = [value for name, value in sorted(globals().items()) if name.startswith("scenario_")]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.removeprefix("scenario_"))
def test_same_configuration_as_kubernetes_core(scenario, monkeypatch, tmp_path):
    params = scenario(monkeypatch, tmp_path)
    expected = settings(theirs(params))
    assert settings(ours(params)) == expected
    assert expected["host"].startswith("https://127.0.0.1:")  # the scenario really configured something


def test_same_impersonation_headers_as_kubernetes_core(monkeypatch):
    monkeypatch.setenv("K8S_AUTH_IMPERSONATE_GROUPS", "g1,g2")
    params = {"impersonate_user": "bob"}
    assert kube.impersonation(params) == core_client._create_headers(None, **params)


def test_no_process_wide_default_is_left_behind(monkeypatch, tmp_path):
    scenario_default_kubeconfig(monkeypatch, tmp_path)
    ours({})
    assert kube_client.Configuration._default is None
    # A second client with explicit credentials inherits nothing from the first.
    explicit = ours({"host": "https://127.0.0.1:9443", "api_key": "t"})
    assert explicit.cert_file is None and explicit.ssl_ca_cert is None


# -- failures say what was tried ---------------------------------------------------------------


def test_nothing_configured(monkeypatch):
    with pytest.raises(kube.KubeConfigError) as raised:
        ours({})
    message = str(raised.value)
    assert "not in a cluster" in message
    assert "~/.kube/config" in message
    assert "K8S_AUTH_" in message


def test_unknown_context_names_the_contexts(tmp_path):
    path = write_kubeconfig(tmp_path / "a.kubeconfig", "https://127.0.0.1:6445", "a", tmp_path / "a-files")
    with pytest.raises(kube.KubeConfigError) as raised:
        ours({"kubeconfig": str(path), "context": "nope"})
    assert str(raised.value) == f"context 'nope' is not in kubeconfig {path} (its contexts: a, a-other)"


def test_missing_kubeconfig_file(tmp_path):
    with pytest.raises(kube.KubeConfigError) as raised:
        ours({"kubeconfig": str(tmp_path / "absent")})
    assert str(tmp_path / "absent") in str(raised.value)


def test_kube_reports_configuration_errors_as_kube_errors(tmp_path):
    with pytest.raises(kube.KubeError, match="cannot build a Kubernetes client: context 'nope'"):
        kube.Kube(
            {
                "kubeconfig": str(write_kubeconfig(tmp_path / "k", "https://127.0.0.1:1", "a", tmp_path)),
                "context": "nope",
            }
        )
