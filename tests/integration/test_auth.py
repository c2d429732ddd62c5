"""The modules connect as kubernetes.core's modules do: ~/.kube/config, KUBECONFIG, K8S_AUTH_*, options,
in-cluster service account, TLS settings, impersonation and module_defaults, on the real API server.

Modules run as a user runs them, `ansible localhost -m ...` (or ansible-playbook) in a subprocess whose
environment is built from scratch: no KUBECONFIG or K8S_AUTH_* unless the test sets it, HOME a temporary
directory. The controller identity may run hostdeploypolicy_check on cluster-ns; tenant-a may not (403),
which tells which identity a run used.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from metalclaim_dev.support import REPO_ROOT

pytestmark = pytest.mark.integration

ANSIBLE_BIN = Path(sys.executable).parent
CHECK = "metalclaim.hostclaim.hostdeploypolicy_check"
TENANT_NS = "cluster-ns"
FORBIDDEN = "cannot get Namespace cluster-ns: 403 Forbidden"


def environment(home: Path, **extra: str) -> dict:
    """A user's shell: PATH, HOME, the collections path; nothing Kubernetes-related unless given."""
    env = {
        "PATH": f"{ANSIBLE_BIN}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections"),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_NOCOLOR": "true",
    }
    env.update(extra)
    return env


def adhoc(env: dict, args: dict | str, module: str = CHECK) -> dict:
    """`ansible localhost -m module -a args`; the module's result, with `failed` set."""
    argv = [
        str(ANSIBLE_BIN / "ansible"),
        "localhost",
        "-m",
        module,
        "-a",
        args if isinstance(args, str) else json.dumps(args),
    ]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    # The minimal callback: "localhost | SUCCESS => {...}" or "localhost | FAILED! => {...}".
    # Errors are displayed before it.
    found = re.search(r"^localhost \| (\S+) => (\{.*)", run.stdout, flags=re.M | re.S)
    assert found, f"rc={run.returncode}\n{run.stdout}\n{run.stderr}"
    result = json.loads(found.group(2))
    result["failed"] = found.group(1) == "FAILED!"
    assert result["failed"] == (run.returncode != 0), run.stdout
    return result


def playbook_result(env: dict, tmp_path: Path, play: dict, task: dict) -> dict:
    """ansible-playbook with one localhost play running `task`; its registered result."""
    name = uuid.uuid4().hex[:6]
    out = tmp_path / f"result-{name}.json"
    tasks = [
        {**task, "register": "outcome", "ignore_errors": True},
        {"ansible.builtin.copy": {"content": "{{ outcome | to_json }}", "dest": str(out), "mode": "0600"}},
    ]
    path = tmp_path / f"play-{name}.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, **play, "tasks": tasks}]))
    run = subprocess.run(
        [str(ANSIBLE_BIN / "ansible-playbook"), str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.exists(), f"rc={run.returncode}\n{run.stdout}\n{run.stderr}"
    result = json.loads(out.read_text())
    result["failed"] = bool(result.get("failed"))
    return result


def succeeded(result: dict) -> None:
    assert not result["failed"], result
    assert result["changed"] is False
    assert "authorized_namespaces" in result, result


def forbidden(result: dict) -> None:
    assert result["failed"], result
    assert result["msg"] == FORBIDDEN, result


def identity_parts(devenv, identity: str, directory: Path) -> dict:
    """server, ca, cert, key of an identity's kubeconfig, embedded data written to files."""
    config = yaml.safe_load(Path(devenv.kubeconfig(identity)).read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    directory.mkdir(parents=True, exist_ok=True)

    def file_of(entry: dict, key: str, name: str) -> str:
        if f"{key}-data" in entry:
            path = directory / name
            path.write_bytes(base64.b64decode(entry[f"{key}-data"]))
            path.chmod(0o600)
            return str(path)
        return entry[key]

    return {
        "server": cluster["server"],
        "ca": file_of(cluster, "certificate-authority", "ca.crt"),
        "cert": file_of(user, "client-certificate", f"{identity}.crt"),
        "key": file_of(user, "client-key", f"{identity}.key"),
        "context": config["current-context"],
    }


def home_with(tmp_path: Path, kubeconfig: str | None) -> Path:
    """A HOME whose ~/.kube/config is a copy of `kubeconfig` (none when None)."""
    home = tmp_path / f"home-{uuid.uuid4().hex[:6]}"
    (home / ".kube").mkdir(parents=True)
    if kubeconfig:
        shutil.copy(kubeconfig, home / ".kube" / "config")
    return home


def edited_kubeconfig(devenv, identity: str, path: Path, **cluster_changes) -> str:
    """A copy of an identity's kubeconfig with cluster fields changed (None removes one)."""
    config = yaml.safe_load(Path(devenv.kubeconfig(identity)).read_text())
    cluster = config["clusters"][0]["cluster"]
    for key, value in cluster_changes.items():
        key = key.replace("_", "-")
        if value is None:
            cluster.pop(key, None)
        else:
            cluster[key] = value
    path.write_text(json.dumps(config))
    return str(path)


# -- where the configuration comes from -------------------------------------------------------


def test_readme_command_with_only_home_kubeconfig(devenv, tmp_path):
    """The README's own command, with nothing but ~/.kube/config (this failed: 'Service host/port is not set')."""
    env = environment(home_with(tmp_path, devenv.kubeconfig("controller")))
    succeeded(adhoc(env, f"namespace={TENANT_NS}"))
    # The identity really is the one in ~/.kube/config.
    forbidden(adhoc(environment(home_with(tmp_path, devenv.kubeconfig("tenant-a"))), f"namespace={TENANT_NS}"))


def test_nothing_configured_says_what_was_tried(tmp_path):
    result = adhoc(environment(home_with(tmp_path, None)), {"namespace": TENANT_NS})
    assert result["failed"]
    assert result["msg"].startswith("cannot build a Kubernetes client: no Kubernetes connection configured: ")
    assert "not in a cluster" in result["msg"] and "~/.kube/config" in result["msg"]


def test_kubeconfig_variables_beat_home_kubeconfig(devenv, tmp_path):
    home = home_with(tmp_path, devenv.kubeconfig("tenant-a"))
    succeeded(adhoc(environment(home, K8S_AUTH_KUBECONFIG=devenv.kubeconfig("controller")), {"namespace": TENANT_NS}))
    succeeded(adhoc(environment(home, KUBECONFIG=devenv.kubeconfig("controller")), {"namespace": TENANT_NS}))
    # K8S_AUTH_KUBECONFIG is the module's own kubeconfig setting: it wins over KUBECONFIG.
    env = environment(
        home, K8S_AUTH_KUBECONFIG=devenv.kubeconfig("tenant-a"), KUBECONFIG=devenv.kubeconfig("controller")
    )
    forbidden(adhoc(env, {"namespace": TENANT_NS}))


@pytest.mark.parametrize(
    "names",
    [
        ("K8S_AUTH_CLIENT_CERT", "K8S_AUTH_CLIENT_KEY", "K8S_AUTH_SSL_CA_CERT"),
        ("K8S_AUTH_CERT_FILE", "K8S_AUTH_KEY_FILE", "K8S_AUTH_CA_CERT"),
    ],
    ids=["option-names", "attribute-names"],
)
def test_host_and_client_certificate_from_environment(devenv, tmp_path, names):
    """Host plus a client certificate is enough: neither ~/.kube/config nor K8S_AUTH_KUBECONFIG is read."""
    parts = identity_parts(devenv, "controller", tmp_path / "pki")
    cert, key, ca = names
    env = environment(
        home_with(tmp_path, devenv.kubeconfig("tenant-a")),
        K8S_AUTH_HOST=parts["server"] + "/",
        K8S_AUTH_KUBECONFIG=devenv.kubeconfig("tenant-a"),
        **{cert: parts["cert"], key: parts["key"], ca: parts["ca"]},
    )
    succeeded(adhoc(env, {"namespace": TENANT_NS}))


def test_module_options_beat_environment(devenv, tmp_path):
    parts = identity_parts(devenv, "controller", tmp_path / "pki")
    tenant = identity_parts(devenv, "tenant-a", tmp_path / "pki")
    home = home_with(tmp_path, devenv.kubeconfig("tenant-a"))
    env = environment(
        home,
        K8S_AUTH_KUBECONFIG=devenv.kubeconfig("tenant-a"),
        K8S_AUTH_HOST=parts["server"],
        K8S_AUTH_CLIENT_CERT=tenant["cert"],
        K8S_AUTH_CLIENT_KEY=tenant["key"],
        K8S_AUTH_SSL_CA_CERT=tenant["ca"],
    )
    forbidden(adhoc(env, {"namespace": TENANT_NS}))
    options = {
        "host": parts["server"],
        "client_cert": parts["cert"],
        "client_key": parts["key"],
        "ca_cert": parts["ca"],
    }
    succeeded(adhoc(env, {"namespace": TENANT_NS, **options}))
    # Aliases, as kubernetes.core spells them.
    aliased = {
        "host": parts["server"],
        "cert_file": parts["cert"],
        "key_file": parts["key"],
        "ssl_ca_cert": parts["ca"],
    }
    succeeded(adhoc(env, {"namespace": TENANT_NS, **aliased}))
    # The kubeconfig option beats K8S_AUTH_KUBECONFIG (and ~/.kube/config)...
    kubeconfig_only = environment(home, K8S_AUTH_KUBECONFIG=devenv.kubeconfig("tenant-a"))
    succeeded(adhoc(kubeconfig_only, {"namespace": TENANT_NS, "kubeconfig": devenv.kubeconfig("controller")}))
    succeeded(adhoc(kubeconfig_only, {"namespace": TENANT_NS, "kubeconfig_path": devenv.kubeconfig("controller")}))
    # ...but, as in kubernetes.core, host with a client certificate (here from the environment) is complete
    # on its own and no kubeconfig is read at all.
    forbidden(adhoc(env, {"namespace": TENANT_NS, "kubeconfig": devenv.kubeconfig("controller")}))


def test_kubeconfig_as_a_dictionary(devenv, tmp_path):
    config = yaml.safe_load(Path(devenv.kubeconfig("controller")).read_text())
    succeeded(adhoc(environment(home_with(tmp_path, None)), {"namespace": TENANT_NS, "kubeconfig": config}))


def test_context_selects_among_several(devenv, tmp_path):
    """Two kubeconfig files (K8S_AUTH_KUBECONFIG with ':'), the tenant's and the controller's: context picks one."""
    merged = f"{devenv.kubeconfig('tenant-a')}:{devenv.kubeconfig('controller')}"
    env = environment(home_with(tmp_path, None), K8S_AUTH_KUBECONFIG=merged)
    tenant = identity_parts(devenv, "tenant-a", tmp_path / "pki")["context"]
    controller = identity_parts(devenv, "controller", tmp_path / "pki")["context"]
    forbidden(adhoc(env, {"namespace": TENANT_NS, "context": tenant}))
    succeeded(adhoc(env, {"namespace": TENANT_NS, "context": controller}))
    succeeded(adhoc({**env, "K8S_AUTH_CONTEXT": controller}, {"namespace": TENANT_NS}))
    forbidden(adhoc({**env, "K8S_AUTH_CONTEXT": controller}, {"namespace": TENANT_NS, "context": tenant}))


def test_wrong_context_is_named(devenv, tmp_path):
    path = devenv.kubeconfig("controller")
    context = identity_parts(devenv, "controller", tmp_path / "pki")["context"]
    result = adhoc(
        environment(home_with(tmp_path, None), K8S_AUTH_KUBECONFIG=path), {"namespace": TENANT_NS, "context": "nope"}
    )
    assert result["failed"]
    assert (
        result["msg"]
        == f"cannot build a Kubernetes client: context 'nope' is not in kubeconfig {path} (its contexts: {context})"
    )


# -- TLS verification -------------------------------------------------------------------------


def test_validate_certs_absent_keeps_the_kubeconfigs_ca(devenv, tmp_path):
    home = home_with(tmp_path, None)
    # The kubeconfig's CA verifies the server; validate_certs not given.
    succeeded(adhoc(environment(home, K8S_AUTH_KUBECONFIG=devenv.kubeconfig("controller")), {"namespace": TENANT_NS}))
    # Without the CA, verification is on and fails...
    no_ca = edited_kubeconfig(devenv, "controller", tmp_path / "no-ca.kubeconfig", certificate_authority=None)
    result = adhoc(environment(home, K8S_AUTH_KUBECONFIG=no_ca), {"namespace": TENANT_NS})
    assert result["failed"] and "CERTIFICATE_VERIFY_FAILED" in result["msg"], result
    # ...and validate_certs: false (or K8S_AUTH_VERIFY_SSL=no) turns it off.
    succeeded(adhoc(environment(home, K8S_AUTH_KUBECONFIG=no_ca), {"namespace": TENANT_NS, "validate_certs": False}))
    succeeded(adhoc(environment(home, K8S_AUTH_KUBECONFIG=no_ca, K8S_AUTH_VERIFY_SSL="no"), {"namespace": TENANT_NS}))


def test_insecure_skip_tls_verify_kubeconfig(devenv, tmp_path):
    insecure = edited_kubeconfig(
        devenv,
        "controller",
        tmp_path / "insecure.kubeconfig",
        certificate_authority=None,
        insecure_skip_tls_verify=True,
    )
    home = home_with(tmp_path, insecure)
    succeeded(adhoc(environment(home), {"namespace": TENANT_NS}))
    # validate_certs given overrides the kubeconfig.
    result = adhoc(environment(home), {"namespace": TENANT_NS, "validate_certs": True})
    assert result["failed"] and "CERTIFICATE_VERIFY_FAILED" in result["msg"], result


# -- impersonation ----------------------------------------------------------------------------


def test_impersonation(devenv, tmp_path):
    controller_user = identity_parts(devenv, "controller", tmp_path / "pki")["context"]  # context named after its user
    env = environment(home_with(tmp_path, devenv.kubeconfig("admin")))
    succeeded(adhoc(env, {"namespace": TENANT_NS, "impersonate_user": controller_user}))
    forbidden(adhoc(env, {"namespace": TENANT_NS, "impersonate_user": "tenant-a"}))
    forbidden(adhoc({**env, "K8S_AUTH_IMPERSONATE_USER": "tenant-a"}, {"namespace": TENANT_NS}))


def test_impersonated_groups_each_arrive(devenv, monkeypatch, tmp_path):
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube

    kube = Kube(
        {
            "kubeconfig": devenv.kubeconfig("admin"),
            "impersonate_user": "someone",
            "impersonate_groups": ["g-one", "g-two"],
        }
    )
    user = who_am_i(kube)
    assert user["username"] == "someone"
    assert {"g-one", "g-two"} <= set(user["groups"])


def who_am_i(kube) -> dict:
    review = kube.create({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}})
    return review["status"]["userInfo"]


# -- in-cluster service account ---------------------------------------------------------------


@pytest.fixture
def service_account(clients):
    """A ServiceAccount in cluster-ns and a short-lived token for it (TokenRequest, as admin)."""
    from kubernetes import client as kube_client

    name = f"auth-test-{uuid.uuid4().hex[:6]}"
    accounts = clients["admin"].resources.get(api_version="v1", kind="ServiceAccount")
    accounts.create(
        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}, namespace=TENANT_NS
    )
    core = kube_client.CoreV1Api(clients["admin"].client)
    token = core.create_namespaced_service_account_token(
        name,
        TENANT_NS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
    ).status.token
    yield f"system:serviceaccount:{TENANT_NS}:{name}", token
    accounts.delete(name=name, namespace=TENANT_NS)


def test_in_cluster_service_account_beats_home_kubeconfig(devenv, service_account, monkeypatch, tmp_path):
    """In a pod (service host/port set, token and CA mounted) the service account is used, as kubernetes.core does."""
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import Kube
    from kubernetes.config import incluster_config

    username, token = service_account
    parts = identity_parts(devenv, "controller", tmp_path / "pki")
    (tmp_path / "token").write_text(token)
    shutil.copy(parts["ca"], tmp_path / "ca.crt")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    host, port = parts["server"].removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    for name in [n for n in os.environ if n.startswith("K8S_AUTH_")] + ["KUBECONFIG"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home_with(tmp_path, devenv.kubeconfig("tenant-a"))))
    assert who_am_i(Kube({}))["username"] == username
    # An explicit kubeconfig still wins over the pod's service account.
    assert who_am_i(Kube({"kubeconfig": devenv.kubeconfig("tenant-a")}))["username"] == "tenant-a"


def test_host_and_token(devenv, service_account, tmp_path):
    _username, token = service_account
    parts = identity_parts(devenv, "controller", tmp_path / "pki")
    env = environment(
        home_with(tmp_path, devenv.kubeconfig("controller")),
        K8S_AUTH_HOST=parts["server"],
        K8S_AUTH_API_KEY=token,
        K8S_AUTH_SSL_CA_CERT=parts["ca"],
    )
    # The service account may not read Namespaces: the token, not ~/.kube/config, was used.
    result = adhoc(env, {"namespace": TENANT_NS})
    assert result["failed"] and result["msg"] == FORBIDDEN, result
    assert token not in json.dumps(result)


# -- module_defaults --------------------------------------------------------------------------


@pytest.mark.parametrize("group", ["group/metalclaim.hostclaim.k8s", "group/metalclaim.hostclaim.hostclaim"])
def test_module_defaults_group(devenv, tmp_path, group):
    env = environment(home_with(tmp_path, devenv.kubeconfig("tenant-a")))
    play = {"module_defaults": {group: {"kubeconfig": devenv.kubeconfig("controller"), "request_timeout": 20}}}
    succeeded(playbook_result(env, tmp_path, play, {CHECK: {"namespace": TENANT_NS}}))
