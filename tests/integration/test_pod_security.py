"""Both sides' pods as the API server's Pod Security admission judges them in the controller's namespace.

config/namespace labels the namespace `pod-security.kubernetes.io/enforce: restricted` (warn and audit too). enforce
refuses Pods only (a Deployment is warned about, never refused), so the test makes Pods: one from each pod template of
config/default as `kubectl kustomize` renders it, created with --dry-run=server in config/default's own Namespace
under another name (its labels as shipped), beside its ServiceAccounts (the ServiceAccount admission plugin refuses a
Pod whose account is missing, and mounts the token the kubelet would). Each Pod is admitted with no warning; the same
Pod less one of its securityContext settings, or with a host namespace or volume, is refused naming the check it fails.
"""

from __future__ import annotations

import copy
import json
import os
import uuid

import pytest
import yaml

from metalclaim_dev.support import REPO_ROOT, manifest_objects

pytestmark = pytest.mark.integration

CONFIG = REPO_ROOT / "config"
SIDES = ("metalclaim-controller", "metalclaim-provisioner")


class _Loader(yaml.SafeLoader):
    """YAML 1.1 without the `=` value tag: the CRDs list `=` as a selector operator."""


_Loader.yaml_implicit_resolvers = {
    first: [resolver for resolver in resolvers if resolver[0] != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@pytest.fixture(scope="module")
def shipped(devenv, tmp_path_factory):
    """(namespace, {side: its rendered Deployment}): config/default moved to a namespace of this module's, whose
    Namespace (labels as shipped) and ServiceAccounts are applied."""
    namespace = f"pod-security-{uuid.uuid4().hex[:8]}"
    overlay = tmp_path_factory.mktemp("pod-security")
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
        "resources": [os.path.relpath(CONFIG / "default", overlay)],
        "transformers": [os.path.relpath(CONFIG / "components" / "namespace-references", overlay)],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body))
    rendered = manifest_objects(yaml.load_all(devenv.kubectl("admin", "kustomize", str(overlay)).stdout, _Loader))
    [namespace_object] = [o for o in rendered if o["kind"] == "Namespace"]
    assert namespace_object["metadata"]["name"] == namespace
    accounts = [o for o in rendered if o["kind"] == "ServiceAccount"]
    devenv.apply("admin", [namespace_object, *accounts])
    deployments = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "Deployment"}
    assert sorted(deployments) == sorted(SIDES)
    yield namespace, deployments
    devenv.kubectl("admin", "delete", "namespace", namespace, "--wait=false", check=False)


def pod_of(deployment: dict, name: str) -> dict:
    """A Pod as the Deployment's ReplicaSet would make it: the template's labels and spec."""
    template = copy.deepcopy(deployment["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": deployment["metadata"]["namespace"], **template["metadata"]},
        "spec": template["spec"],
    }


def dry_run(devenv, obj: dict):
    """`kubectl create --dry-run=server` as the cluster administrator: every admission plugin, nothing stored."""
    return devenv.kubectl("admin", "create", "--dry-run=server", "-f", "-", stdin=json.dumps(obj), check=False)


def enforced(devenv, namespace: str) -> str:
    """The profile and version the namespace enforces, as the API server names it in a refusal."""
    labels = json.loads(devenv.kubectl("admin", "get", "namespace", namespace, "-o", "json").stdout)
    labels = labels["metadata"]["labels"]
    return f"{labels['pod-security.kubernetes.io/enforce']}:{labels['pod-security.kubernetes.io/enforce-version']}"


def test_the_namespace_enforces_restricted_as_shipped(devenv, shipped):
    namespace, _ = shipped
    assert enforced(devenv, namespace).startswith("restricted:v1.")


def test_both_sides_pods_are_admitted_with_no_warning(devenv, shipped):
    _, deployments = shipped
    for side, deployment in deployments.items():
        result = dry_run(devenv, pod_of(deployment, f"{side}-pod"))
        assert result.returncode == 0, f"{side}: {result.stderr}"
        # warn follows the API server's latest profile: nothing a newer restricted would refuse either.
        assert "Warning" not in result.stderr, f"{side}: {result.stderr}"


def _unset(path: tuple, key: str):
    """A change to a pod spec: `key` removed from the mapping at `path`."""
    return lambda spec: _at(spec, path).pop(key)


def _set(path: tuple, key: str, value):
    """A change to a pod spec: `key` set to `value` in the mapping at `path`."""
    return lambda spec: _at(spec, path).__setitem__(key, value)


def _at(spec: dict, path: tuple):
    for step in path:
        spec = spec[step]
    return spec


def _host_path(spec: dict) -> None:
    spec["volumes"][0] = {"name": spec["volumes"][0]["name"], "hostPath": {"path": "/var/run/metalclaim"}}


def _violations(containers: int) -> list[tuple[str, object, str]]:
    """(what, a change to the pod spec, what the refusal names): one setting of restricted's missing each."""
    pod = ("securityContext",)
    cases = [
        ("pod runAsNonRoot unset", _unset(pod, "runAsNonRoot"), "runAsNonRoot != true"),
        ("pod seccompProfile unset", _unset(pod, "seccompProfile"), "seccompProfile"),
        ("pod runs as root", _set(pod, "runAsUser", 0), "runAsUser=0"),
        ("hostNetwork", _set((), "hostNetwork", True), "host namespaces"),
        ("a hostPath volume", _host_path, "restricted volume types"),
    ]
    for index in range(containers):
        context = ("containers", index, "securityContext")
        cases += [
            (f"container {index} escalates", _set(context, "allowPrivilegeEscalation", True), "PrivilegeEscalation"),
            (f"container {index} keeps capabilities", _unset(context, "capabilities"), "unrestricted capabilities"),
        ]
    return cases


def test_a_pod_short_of_restricted_is_refused(devenv, shipped):
    """The test can fail: the same pods, each less one setting, are refused by the namespace's profile."""
    namespace, deployments = shipped
    profile = enforced(devenv, namespace)
    for side, deployment in deployments.items():
        shipped_pod = pod_of(deployment, f"{side}-broken")
        for what, change, says in _violations(len(shipped_pod["spec"]["containers"])):
            pod = copy.deepcopy(shipped_pod)
            change(pod["spec"])
            result = dry_run(devenv, pod)
            assert result.returncode != 0, f"{side}, {what}: admitted"
            assert f'violates PodSecurity "{profile}"' in result.stderr, f"{side}, {what}: {result.stderr}"
            assert says in result.stderr, f"{side}, {what}: {result.stderr}"


def test_a_deployment_is_only_warned_about(devenv, shipped):
    """Why the test makes Pods: a Deployment short of the profile is admitted, with a warning; its pods are not."""
    _, deployments = shipped
    for side, deployment in deployments.items():
        result = dry_run(devenv, deployment)
        assert result.returncode == 0 and "Warning" not in result.stderr, f"{side}: {result.stderr}"
        broken = copy.deepcopy(deployment)
        del broken["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
        result = dry_run(devenv, broken)
        assert result.returncode == 0, f"{side}: {result.stderr}"
        assert 'would violate PodSecurity "restricted:latest"' in result.stderr, f"{side}: {result.stderr}"
