"""A remote claim's kubeconfig: what is refused (and why, without its values), what is used."""

from __future__ import annotations

import base64
import copy
import json

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure import kubeconfig as kc

TOKEN = "s3cr3t-token-value"
GOOD = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "hw", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="}}],
    "users": [{"name": "me", "user": {"token": TOKEN}}],
    "contexts": [{"name": "ctx", "context": {"cluster": "hw", "user": "me", "namespace": "tenant-x"}}],
    "current-context": "ctx",
}


def claim(**ref) -> dict:
    return {
        "metadata": {"namespace": "cluster-ns", "name": "c"},
        "spec": {"kind": "remote", "remote": {"kubeconfigSecretRef": ref}},
    }


def with_user(**user) -> dict:
    config = copy.deepcopy(GOOD)
    config["users"][0]["user"] = user
    return config


def refused(config: dict, **options) -> kc.Refused:
    with pytest.raises(kc.Refused) as caught:
        kc.target(config, **options)
    assert TOKEN not in str(caught.value) and "127.0.0.1" not in str(caught.value)
    return caught.value


def test_a_good_kubeconfig_is_rebuilt_from_allowed_fields_only():
    config = copy.deepcopy(GOOD)
    config["clusters"][0]["cluster"]["extensions"] = [{"name": "x"}]
    target = kc.target(config)
    assert target.namespace == "tenant-x"
    assert target.config["users"][0]["user"] == {"token": TOKEN}
    assert target.config["clusters"][0]["cluster"] == {
        "server": "https://127.0.0.1:6443",
        "certificate-authority-data": "Q0E=",
    }
    assert target.config["contexts"][0]["context"]["namespace"] == "tenant-x"


@pytest.mark.parametrize(
    ("user", "says"),
    [
        ({"exec": {"command": "touch", "args": ["/tmp/x"]}}, "exec (runs a command)"),
        ({"auth-provider": {"name": "oidc"}}, "auth-provider"),
        ({"tokenFile": "/var/run/secrets/token"}, "tokenFile (reads a file"),
        ({"client-certificate": "/etc/c.crt", "client-key": "/etc/c.key"}, "client-certificate (reads a file"),
        ({"token": TOKEN, "as": "system:admin"}, "impersonates"),
        ({"username": "u", "password": "p"}, "sends a password"),
    ],
)
def test_plugins_files_and_impersonation_are_refused(user, says):
    assert says in str(refused(with_user(**user)))


def test_a_forbidden_field_in_an_unused_user_refuses_the_file():
    config = copy.deepcopy(GOOD)
    config["users"].append({"name": "other", "user": {"exec": {"command": "sh"}}})
    assert refused(config).reason == kc.KUBECONFIG_REFUSED


def test_insecure_tls_and_plain_http_are_refused():
    config = copy.deepcopy(GOOD)
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    assert "turns off server verification" in str(refused(config))
    config = copy.deepcopy(GOOD)
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:8080"
    assert "https://" in str(refused(config))


def test_the_namespace_must_be_named_pinned_and_allowed():
    config = copy.deepcopy(GOOD)
    del config["contexts"][0]["context"]["namespace"]
    assert "namespace must be named" in str(refused(config))
    assert refused(GOOD, pinned="other").reason == kc.NAMESPACE_NOT_ALLOWED
    assert refused(GOOD, allowed=kc.compile_allowed(["prod-.*"])).reason == kc.NAMESPACE_NOT_ALLOWED
    assert kc.target(GOOD, allowed=kc.compile_allowed(["tenant-.*"]), pinned="tenant-x").namespace == "tenant-x"


def test_one_way_to_authenticate_embedded():
    assert "either token" in str(refused(with_user()))
    both = {"token": TOKEN, "client-certificate-data": "QQ==", "client-key-data": "QQ=="}
    assert "either token" in str(refused(with_user(**both)))
    cert = kc.target(with_user(**{"client-certificate-data": "QQ==", "client-key-data": "QQ=="}))
    assert set(cert.config["users"][0]["user"]) == {"client-certificate-data", "client-key-data"}
    assert "not base64" in str(refused(with_user(**{"client-certificate-data": "%%", "client-key-data": "QQ=="})))


def test_the_secret_reference_must_stay_in_the_claims_namespace():
    with pytest.raises(kc.Refused) as caught:
        kc.check_ref(claim(name="kc", namespace="infrahost"))
    assert caught.value.reason == kc.CROSS_NAMESPACE
    assert kc.check_ref(claim(name="kc")) == ("kc", "kubeconfig")
    assert kc.check_ref(claim(name="kc", namespace="cluster-ns", key="config")) == ("kc", "config")
    with pytest.raises(kc.Refused):
        kc.check_ref(claim())


def test_the_secrets_text_is_checked_without_quoting_it():
    encoded = base64.b64encode(json.dumps(GOOD).encode()).decode()
    assert json.loads(kc.kubeconfig_text({"data": {"kubeconfig": encoded}}, "kc", "kubeconfig")) == GOOD
    for secret, reason in (
        (None, kc.KUBECONFIG_MISSING),
        ({"data": {}}, kc.KUBECONFIG_MISSING),
        ({"data": {"kubeconfig": "!!"}}, kc.KUBECONFIG_REFUSED),
    ):
        with pytest.raises(kc.Refused) as caught:
            kc.kubeconfig_text(secret, "kc", "kubeconfig")
        assert caught.value.reason == reason
    with pytest.raises(kc.Refused):
        kc.check_parsed(["not", "a", "mapping"])
