"""config/default on a real node: the image as pods (kubelet, containerd), users with kubectl only.

The devenv's node (metalclaim_dev.devenv.node) has no kube-proxy or pod network and its API server listens on
loopback, so a test overlay (written here, in the test's tmp dir) runs both Deployments with hostNetwork,
KUBERNETES_SERVICE_HOST/PORT pointing at the API server, and every port (metrics, probes, media) on a free
loopback port; one node, so the claim side runs one replica that a rollout replaces (maxSurge 0): its Lease
passes from pod to pod. hostNetwork is beyond the restricted Pod Security profile the namespace enforces
(config/namespace), so the overlay lowers its enforce and warn labels to privileged. Everything else is
config/default as shipped: read-only root, user 65532, the ServiceAccounts and their in-cluster token, the probes,
the namespace bindings of config/components.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from metalclaim_dev.devenv import REPO_ROOT, node
from metalclaim_dev.devenv.env import INFRA_NAMESPACE, TENANT_NAMESPACES
from metalclaim_dev.devenv.processes import free_port
from metalclaim_dev.support import eventually

NAMESPACE = "metalclaim-system"
TENANT_NS = TENANT_NAMESPACES["tenant-a"]
ROLLED_TAG = "rolled"
# The config/ tree applied: the checkout's, or another (METALCLAIM_CONFIG_DIR, e.g. a release's, exported).
CONFIG_DIR = Path(os.environ.get("METALCLAIM_CONFIG_DIR") or REPO_ROOT / "config").resolve()
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def cluster(devenv, image):
    """The devenv with its node up and the image in the node's containerd (as built, and under a second tag)."""
    started = time.monotonic()
    node.up(devenv)
    TIMINGS["node up"] = time.monotonic() - started
    started = time.monotonic()
    name = image.rsplit(":", 1)[0]
    node.load_podman_image(devenv, image, f"{name}:{ROLLED_TAG}")
    TIMINGS["image into containerd"] = time.monotonic() - started
    yield devenv
    if not os.environ.get("METALCLAIM_DEVENV"):
        node.down(devenv)  # before the session's devenv goes: pods, mounts, cgroups, /var/lib/kubelet


def json_patch(target: dict, ops: list[dict]) -> dict:
    return {"target": target, "patch": yaml.safe_dump(ops)}


def overlay(directory: Path, image: str, apiserver: str, ports: dict[str, int]) -> Path:
    """config/default (and the namespace bindings of config/components) as this node can run it."""
    server = urlparse(apiserver)
    service_env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": server.hostname},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(server.port)},
    ]

    def on_loopback(index: int, named_ports: dict[str, int], probe_port: str) -> list[dict]:
        path = f"/spec/template/spec/containers/{index}"
        return [
            {
                "op": "replace",
                "path": f"{path}/ports",
                "value": [{"name": k, "containerPort": v} for k, v in named_ports.items()],
            },
            {"op": "add", "path": f"{path}/livenessProbe/httpGet/host", "value": "127.0.0.1"},
            {"op": "add", "path": f"{path}/readinessProbe/httpGet/host", "value": "127.0.0.1"},
            {"op": "replace", "path": f"{path}/livenessProbe/httpGet/port", "value": probe_port},
            {"op": "replace", "path": f"{path}/readinessProbe/httpGet/port", "value": probe_port},
        ]

    def controller(side: str) -> list[dict]:
        base = "/spec/template/spec/containers/0"
        metrics, probes = ports[f"{side}-metrics"], ports[f"{side}-probes"]
        return [
            {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
            # The last of a repeated flag wins: the shipped args stay, these bind on loopback.
            {"op": "add", "path": f"{base}/args/-", "value": f"--metrics-bind-address=127.0.0.1:{metrics}"},
            {"op": "add", "path": f"{base}/args/-", "value": f"--health-probe-bind-address=127.0.0.1:{probes}"},
            *({"op": "add", "path": f"{base}/env/-", "value": env} for env in service_env),
            *on_loopback(0, {"https": metrics, "probes": probes}, "probes"),  # /metrics: HTTPS, as shipped
        ]

    claims = [
        *controller("claims"),
        {"op": "replace", "path": "/spec/replicas", "value": 1},
        {
            "op": "add",
            "path": "/spec/strategy",
            "value": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        },
    ]
    media = ports["media"]
    provisioner = [
        *controller("provisioner"),
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/args/-",
            "value": f"--media-url=http://127.0.0.1:{media}",
        },
        {"op": "add", "path": "/spec/template/spec/containers/1/args/-", "value": "--listen=127.0.0.1"},
        {"op": "add", "path": "/spec/template/spec/containers/1/args/-", "value": f"--port={media}"},
        *on_loopback(1, {"media": media}, "media"),
    ]
    # hostNetwork (above) is beyond the restricted profile the namespace enforces (and baseline). Added, not
    # replaced: the config/ tree of a release before those labels (METALCLAIM_CONFIG_DIR) has none.
    privileged = [
        {"op": "add", "path": f"/metadata/labels/pod-security.kubernetes.io~1{mode}", "value": "privileged"}
        for mode in ("enforce", "warn")
    ]
    name, tag = image.rsplit(":", 1)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    # As config/samples/overlay: the controller (config/default), one directory per namespace it serves, and
    # the transformer that writes the controller's namespace into the RoleBindings' subjects.
    files = {
        "kustomization.yaml": {
            **kustomization,
            "resources": ["controller", *(f"namespaces/{ns}" for ns in (INFRA_NAMESPACE, TENANT_NS))],
            "transformers": [os.path.relpath(CONFIG_DIR / "components/namespace-references", directory)],
        },
        "controller/kustomization.yaml": {
            **kustomization,
            "namespace": NAMESPACE,
            "resources": [os.path.relpath(CONFIG_DIR / "default", directory / "controller")],
            "images": [{"name": "metalclaim-controller", "newName": name, "newTag": tag}],
            "patches": [
                json_patch({"kind": "Namespace"}, privileged),
                json_patch({"kind": "Deployment", "name": "metalclaim-controller"}, claims),
                json_patch({"kind": "Deployment", "name": "metalclaim-provisioner"}, provisioner),
            ],
        },
    }
    for namespace, component in ((INFRA_NAMESPACE, "infra"), (TENANT_NS, "tenant")):
        here = directory / "namespaces" / namespace
        files[f"namespaces/{namespace}/kustomization.yaml"] = {
            **kustomization,
            "namespace": namespace,
            "components": [os.path.relpath(CONFIG_DIR / "components/namespace-bindings" / component, here)],
        }
    for path, content in files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(yaml.safe_dump(content, sort_keys=False))
    return directory


def kubectl_json(env, identity: str, *args: str) -> dict:
    return json.loads(env.kubectl(identity, *args, "-o", "json").stdout)


def condition(obj: dict, kind: str) -> str | None:
    return next((c["status"] for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def tenant_claim(env, name: str, kind: str) -> None:
    claim = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaim",
        "metadata": {"name": name, "namespace": TENANT_NS},
        "spec": {"online": False, "hostSelector": {"matchLabels": {"infra-kind": kind}}},
    }
    env.kubectl("tenant-a", "apply", "-f", "-", stdin=json.dumps(claim))


def wait_associated(env, name: str, timeout: int = 120) -> float:
    started = time.monotonic()
    env.kubectl(
        "tenant-a",
        "wait",
        "-n",
        TENANT_NS,
        "--for=condition=Association=True",
        f"--timeout={timeout}s",
        f"hostclaim/{name}",
    )
    return time.monotonic() - started


def wait_available(env, timeout: int = 240) -> float:
    started = time.monotonic()
    result = env.kubectl(
        "admin",
        "wait",
        "-n",
        NAMESPACE,
        "--for=condition=Available",
        f"--timeout={timeout}s",
        "deployment",
        "--all",
        check=False,
    )
    assert result.returncode == 0, result.stderr + diagnose(env)
    return time.monotonic() - started


def lease_holder(env, lease: str = "metalclaim-controller") -> str:
    return kubectl_json(env, "admin", "get", "lease", "-n", NAMESPACE, lease).get("spec", {}).get("holderIdentity", "")


def diagnose(env) -> str:
    """Pods, events and the containers' last log lines (read from the node's pod logs: the API server cannot
    reach the kubelet by its node name)."""
    pods = env.kubectl("admin", "get", "pods", "-n", NAMESPACE, "-o", "wide", check=False).stdout
    events = env.kubectl("admin", "get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp", check=False).stdout
    logs = []
    for log in sorted((env.directory / "kubelet" / "pod-logs").glob(f"{NAMESPACE}_*/*/*.log")):
        tail = log.read_text(errors="replace").splitlines()[-15:]
        logs.append(f"--- {log.parent.parent.name}/{log.parent.name}\n" + "\n".join(line[:600] for line in tail))
    return f"\n{pods}\n{events[-3000:]}\n" + "\n".join(logs)[-8000:]


def wait(env, check, timeout: float, what: str):
    """eventually(), and what the node shows if it does not come."""
    try:
        return eventually(check, timeout=timeout, message=what)
    except AssertionError as error:
        raise AssertionError(f"{error}{diagnose(env)}") from None


def consumers(env) -> dict[str, str]:
    hosts = kubectl_json(env, "infra", "get", "baremetalhosts", "-n", INFRA_NAMESPACE)["items"]
    return {h["metadata"]["name"]: (h["spec"].get("consumerRef") or {}).get("name", "") for h in hosts}


def test_config_default_runs_on_the_node(cluster, image, tmp_path):
    env = cluster
    ports = {
        p: free_port()
        for p in ("claims-metrics", "claims-probes", "provisioner-metrics", "provisioner-probes", "media")
    }
    directory = overlay(tmp_path / "overlay", image, env.state["apiserver"], ports)
    started = time.monotonic()
    env.kubectl("admin", "apply", "--server-side", "--force-conflicts", "-k", str(directory))
    wait_available(env)
    TIMINGS["apply -> both Deployments Available"] = time.monotonic() - started

    # The provisioner pod registers and inspects the fleet over Redfish (the devenv's emulator, on loopback).
    started = time.monotonic()

    def all_available() -> bool:
        hosts = kubectl_json(env, "infra", "get", "baremetalhosts", "-n", INFRA_NAMESPACE)["items"]
        return hosts and all(h.get("status", {}).get("provisioning", {}).get("state") == "available" for h in hosts)

    wait(env, all_available, 180, "every host available")
    TIMINGS["hosts registered -> available"] = time.monotonic() - started

    # The infra team admits the tenant namespace; the tenant, with kubectl only, claims a host.
    policy = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostDeployPolicy",
        "metadata": {"name": "node-test", "namespace": INFRA_NAMESPACE},
        "spec": {"hostclaimNamespaces": {"names": [TENANT_NS]}},
    }
    env.kubectl("infra", "apply", "-f", "-", stdin=json.dumps(policy))
    tenant_claim(env, "c1", "medium")
    TIMINGS["c1 -> Associated"] = wait_associated(env, "c1")

    # The claim side's leader pod goes; the pod that replaces it takes the Lease and binds the next claim.
    leader = lease_holder(env)
    assert leader.startswith("metalclaim-controller-"), leader
    started = time.monotonic()
    env.kubectl("admin", "delete", "pod", "-n", NAMESPACE, leader, "--wait=false")
    wait(env, lambda: lease_holder(env) not in ("", leader), 120, "a new Lease holder")
    TIMINGS["leader pod deleted -> Lease taken"] = time.monotonic() - started
    tenant_claim(env, "c2", "large")
    TIMINGS["c2 -> Associated (new leader)"] = wait_associated(env, "c2")

    # A rollout to another tag while a claim is created: no claim lost, each keeps its host.
    before = consumers(env)
    name = image.rsplit(":", 1)[0]
    started = time.monotonic()
    env.kubectl(
        "admin", "set", "image", "-n", NAMESPACE, "deployment/metalclaim-controller", f"controller={name}:{ROLLED_TAG}"
    )
    tenant_claim(env, "c3", "medium")
    env.kubectl("admin", "rollout", "status", "-n", NAMESPACE, "deployment/metalclaim-controller", "--timeout=240s")
    TIMINGS["rollout"] = time.monotonic() - started
    wait_associated(env, "c3")
    pods = kubectl_json(env, "admin", "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=controller")
    assert {c["image"] for p in pods["items"] for c in p["spec"]["containers"]} == {f"{name}:{ROLLED_TAG}"}
    after = consumers(env)
    for host, claim in before.items():
        if claim:
            assert after[host] == claim, (before, after)
    for claim in ("c1", "c2", "c3"):
        obj = kubectl_json(env, "tenant-a", "get", "hostclaim", "-n", TENANT_NS, claim)
        assert condition(obj, "Association") == "True", obj.get("status")
    assert sorted(c for c in after.values() if c) == ["c1", "c2", "c3"], after
    print("\n" + "\n".join(f"  {step:<40} {seconds:6.1f} s" for step, seconds in TIMINGS.items()))
