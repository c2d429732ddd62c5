"""`kubectl kustomize` of config/: what `kubectl apply -k` would install, rendered offline (no cluster).

* config/default is the controller whole: both sides, the metrics Service, the media server beside the provisioner
  (a media directory shared with it, a port and Service of its own), standby runs on both sides, probes on
  ports no Service exposes, the recommended labels on every object;
* an overlay that sets another namespace (and lists config/components/namespace-references, as config/default
  says) renders every object as config/default does with nothing but the namespace changed: no value still names
  metalclaim-system (admission parameters, the policies' user names, paramRefs), none is mangled;
* config/components/namespace-bindings renders, for the namespaces a kustomization names, the Secret RoleBindings
  the install role grants for install_infra_namespaces / _tenant_namespaces;
* config/samples/overlay renders the lot, and follows its controller's namespace into the bindings' subjects;
* the namespace enforces the restricted Pod Security profile;
* each side has a PodDisruptionBudget that selects its pods and never holds a drain for ever, and the install role
  applies every file config/manager lists;
* config/components/beside-metal3 renders config/default less Metal3's three CRDs.

kubectl is the devenv's (built by `make controlplane`, ~/.cache/metalclaim) or the one on PATH; without either
the tests are skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from metalclaim_dev.support import manifest_objects

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config"
NAMESPACE = "metalclaim-system"
OTHER = "other-ns"
RECOMMENDED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
)


class _Loader(yaml.SafeLoader):
    """YAML 1.1 without the `=` value tag: the CRDs list `=` as a selector operator."""


_Loader.yaml_implicit_resolvers = {
    first: [resolver for resolver in resolvers if resolver[0] != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _load_all(text: str) -> list[dict]:
    return manifest_objects(yaml.load_all(text, Loader=_Loader))


def _kubectl() -> str | None:
    cache = Path(os.environ.get("METALCLAIM_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))))
    if "METALCLAIM_CACHE" not in os.environ:
        cache = cache / "metalclaim"
    built = sorted(cache.glob("kubernetes-v*/kubectl"))
    return str(built[-1]) if built else shutil.which("kubectl")


KUBECTL = _kubectl()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="no kubectl (make controlplane builds one)")


def render(directory: Path) -> str:
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def key(obj: dict) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def by_key(objects: list[dict]) -> dict[tuple[str, str, str], dict]:
    keyed = {key(obj): obj for obj in objects}
    assert len(keyed) == len(objects), "two rendered objects of the same kind, namespace and name"
    return keyed


def write_kustomization(directory: Path, body: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    document = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", **body}
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return directory


def relative(target: Path, start: Path) -> str:
    """kustomize takes no absolute path: `target` as seen from `start`."""
    return os.path.relpath(target, start)


@pytest.fixture(scope="module")
def default_text() -> str:
    return render(CONFIG / "default")


@pytest.fixture(scope="module")
def default(default_text) -> dict:
    return by_key(_load_all(default_text))


@pytest.fixture(scope="module")
def other_namespace_text(tmp_path_factory) -> str:
    """config/default under an overlay that moves it, as config/default/kustomization.yaml says to write one."""
    overlay = tmp_path_factory.mktemp("other-namespace")
    write_kustomization(
        overlay,
        {
            "namespace": OTHER,
            "resources": [relative(CONFIG / "default", overlay)],
            "transformers": [relative(CONFIG / "components" / "namespace-references", overlay)],
        },
    )
    return render(overlay)


def deployment(default: dict, name: str) -> dict:
    return default["Deployment", NAMESPACE, name]


def container(deploy: dict, name: str) -> dict:
    return next(c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def flag(container_: dict, name: str) -> str | None:
    """The value of `--name=value` in the container's args (None when absent)."""
    for arg in container_.get("args", []):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def port(container_: dict, name: str) -> int:
    return next(p["containerPort"] for p in container_.get("ports", []) if p["name"] == name)


def selects(service: dict, deploy: dict) -> bool:
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


# -- config/default -------------------------------------------------------------------------------------------------


def test_default_renders_one_namespace_and_no_fixed_one(default):
    assert [k for k in default if k[0] == "Namespace"] == [("Namespace", "", NAMESPACE)]
    namespaced = {k[1] for k in default if k[1]}
    assert namespaced == {NAMESPACE}, "every namespaced object of config/default is in the controller's namespace"
    # metalclaim-hooks is fixed (the tenants side reads it by name): config/rbac has it, config/default leaves it out.
    assert ("Role", "metalclaim-hooks", "metalclaim-tenancy-hook-credentials") not in default
    rbac = by_key(_load_all(render(CONFIG / "rbac")))
    assert ("Namespace", "", "metalclaim-hooks") in rbac


def test_the_metrics_service_reaches_both_sides(default):
    service = default["Service", NAMESPACE, "metalclaim-metrics"]
    (service_port,) = service["spec"]["ports"]
    assert (service_port["name"], service_port["port"], service_port["targetPort"]) == ("https", 8443, "https")
    for name in ("metalclaim-controller", "metalclaim-provisioner"):
        deploy = deployment(default, name)
        assert selects(service, deploy), name
        controller = container(deploy, "controller")
        # /metrics over HTTPS behind a token and a right (--metrics-secure), on 8443 as kubebuilder projects serve it.
        assert flag(controller, "metrics-bind-address") == f":{port(controller, 'https')}" == ":8443"
        assert flag(controller, "metrics-secure") == "true"
        assert flag(controller, "health-probe-bind-address") == f":{port(controller, 'probes')}"
        assert port(controller, "https") != port(controller, "probes")
        for probe in ("livenessProbe", "readinessProbe"):
            assert controller[probe]["httpGet"]["port"] == "probes", (name, probe)
    # The probes stay the kubelet's: no Service exposes them.
    services = [obj for k, obj in default.items() if k[0] == "Service"]
    assert all(p["targetPort"] != "probes" for s in services for p in s["spec"]["ports"])


def test_the_media_server_runs_beside_the_provisioner(default):
    deploy = deployment(default, "metalclaim-provisioner")
    spec = deploy["spec"]
    # Its media directory is the pod's: one pod, never two at once, or the Service would lead BMCs to the wrong one.
    # The old pod goes before the new one starts (Recreate's effect, upgradable from a RollingUpdate Deployment).
    assert spec["replicas"] == 1 and spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    provisioner, media = container(deploy, "controller"), container(deploy, "media-server")
    assert media["command"] == ["metalclaim-mediaserver"]
    assert media["image"] == provisioner["image"]
    mounts = {c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for c in (provisioner, media)}
    shared = set(mounts["controller"]) & set(mounts["media-server"])
    assert shared == {"media"}, "the media server sees the media directory and nothing else of the provisioner's"
    volume = next(v for v in spec["template"]["spec"]["volumes"] if v["name"] == "media")
    assert "emptyDir" in volume
    assert flag(provisioner, "media-dir") == mounts["controller"]["media"] == flag(media, "dir")
    assert flag(provisioner, "media-url") == "$(MEDIA_URL)"
    env = {e["name"]: e for e in provisioner["env"]}
    names = [e["name"] for e in provisioner["env"]]
    assert names.index("POD_NAMESPACE") < names.index("MEDIA_URL"), "$(POD_NAMESPACE) expands only once defined"
    media_port = port(media, "media")
    assert flag(media, "port") == str(media_port) and flag(media, "listen") == "0.0.0.0"
    assert media_port not in (port(provisioner, "probes"), port(provisioner, "https"))
    for probe in ("livenessProbe", "readinessProbe"):
        assert media[probe]["httpGet"] == {"path": "/healthz", "port": "media"}
    service = default["Service", NAMESPACE, "metalclaim-media"]
    assert selects(service, deploy) and not selects(service, deployment(default, "metalclaim-controller"))
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(media_port, "media")]
    assert env["MEDIA_URL"]["value"] == f"http://metalclaim-media.$(POD_NAMESPACE).svc:{media_port}"


def test_both_sides_run_standby_runs_and_elect_in_their_namespace(default):
    claims = container(deployment(default, "metalclaim-controller"), "controller")
    assert flag(claims, "controllers") == "claims" and flag(claims, "standby") == "true"
    provisioner = container(deployment(default, "metalclaim-provisioner"), "controller")
    assert flag(provisioner, "controllers") == "provisioner" and flag(provisioner, "standby") == "true"
    for name in ("metalclaim-controller", "metalclaim-provisioner"):
        controller = container(deployment(default, name), "controller")
        assert flag(controller, "leader-election-namespace") == "$(POD_NAMESPACE)", name
        env = {e["name"]: e for e in controller["env"]}
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def _rules(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def test_both_sides_may_review_a_scraper_and_a_reader_role_grants_metrics(default):
    """Each side's ServiceAccount creates the TokenReview and SubjectAccessReview its /metrics asks for; reading
    /metrics is the right of metalclaim-metrics-reader, and of no role the shipped bindings give."""
    reviews = {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    bindings = [obj for k, obj in default.items() if k[0] == "ClusterRoleBinding"]
    bound = {b["subjects"][0]["name"]: b["roleRef"]["name"] for b in bindings}
    for name in ("metalclaim-controller", "metalclaim-provisioner"):
        account = deployment(default, name)["spec"]["template"]["spec"]["serviceAccountName"]
        role = default["ClusterRole", "", bound[account]]
        assert reviews <= _rules(role), name
    reader = default["ClusterRole", "", "metalclaim-metrics-reader"]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert "metalclaim-metrics-reader" not in {b["roleRef"]["name"] for b in bindings}  # yours to bind
    others = [k for k, obj in default.items() if k[0] == "ClusterRole" and k[2] != "metalclaim-metrics-reader"]
    assert not [k for k in others if any("nonResourceURLs" in r for r in default[k]["rules"])]


def test_the_install_role_applies_every_rbac_manifest_kustomize_does():
    """roles/install and config/rbac/kustomization.yaml install the same files (the leader-election Roles by a task
    of their own, which adds the Leases)."""
    tasks = yaml.safe_load((REPO / "roles" / "install" / "tasks" / "main.yml").read_text())
    task = next(t for t in tasks if t.get("name", "").startswith("Apply the ClusterRoles"))
    applied = task["vars"]["_files"]
    kustomization = yaml.safe_load((CONFIG / "rbac" / "kustomization.yaml").read_text())
    assert sorted([*applied, "leader_election_role.yaml"]) == sorted(kustomization["resources"])
    assert "metrics_reader_role.yaml" in applied
    on_disk = sorted(p.name for p in (CONFIG / "rbac").glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == on_disk


def test_every_object_carries_the_recommended_labels(default):
    for k, obj in default.items():
        labels = obj["metadata"].get("labels", {})
        missing = [label for label in RECOMMENDED_LABELS if not labels.get(label)]
        assert not missing, f"{k}: {missing}"
        assert labels["app.kubernetes.io/name"] == "metalclaim"
    for name in ("metalclaim-controller", "metalclaim-provisioner"):
        deploy = deployment(default, name)
        template = deploy["spec"]["template"]["metadata"]["labels"]
        assert all(template.get(label) for label in RECOMMENDED_LABELS), name
        # A Deployment's selector is immutable: the labels must not have reached it.
        assert set(deploy["spec"]["selector"]["matchLabels"]) == {
            "app.kubernetes.io/name",
            "app.kubernetes.io/component",
        }


SIDES = ("metalclaim-controller", "metalclaim-provisioner")


def _disruptions_allowed(budget: dict, replicas: int, healthy: int) -> int:
    """The evictions a PodDisruptionBudget allows (the disruption controller's status.disruptionsAllowed) for a
    Deployment of `replicas` pods of which `healthy` are Ready."""
    spec = budget["spec"]
    desired = replicas - spec["maxUnavailable"] if "maxUnavailable" in spec else spec["minAvailable"]
    return max(0, healthy - desired)


def test_each_side_has_a_disruption_budget_that_never_holds_a_drain_for_ever(default):
    budgets = {k[2]: obj for k, obj in default.items() if k[0] == "PodDisruptionBudget"}
    assert sorted(budgets) == sorted(SIDES), "one budget per side, named for its Deployment"
    for name, budget in budgets.items():
        deploy = deployment(default, name)
        assert budget["metadata"]["namespace"] == NAMESPACE
        # The Deployment's own selector, exactly: the budget counts the pods the Deployment counts.
        assert budget["spec"]["selector"] == deploy["spec"]["selector"], name
        for other in SIDES:
            selected = all(
                deployment(default, other)["spec"]["template"]["metadata"]["labels"].get(k) == v
                for k, v in budget["spec"]["selector"]["matchLabels"].items()
            )
            assert selected == (other == name), f"{name}'s budget and {other}'s pods"
        # A pod that is not Ready protects nothing: evicting it is always allowed.
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        # Whatever an overlay scales the side to, a drain of Ready pods goes on (a minAvailable of 1 on one replica
        # would allow no eviction ever).
        for replicas in (1, 2, 3):
            assert _disruptions_allowed(budget, replicas, healthy=replicas) >= 1, (name, replicas)
    claims = budgets["metalclaim-controller"]
    replicas = deployment(default, "metalclaim-controller")["spec"]["replicas"]
    assert replicas == 2
    # The claim side one pod at a time: while the replacement of an evicted pod is not Ready, the other stays.
    assert _disruptions_allowed(claims, replicas, healthy=2) == 1
    assert _disruptions_allowed(claims, replicas, healthy=1) == 0
    # The provisioner's one pod (its media directory its own: nothing can stand in for it) may go at once.
    provisioner = budgets["metalclaim-provisioner"]
    assert deployment(default, "metalclaim-provisioner")["spec"]["replicas"] == 1
    assert _disruptions_allowed(provisioner, 1, healthy=1) == 1


def test_the_namespace_enforces_the_restricted_pod_security_profile(default):
    """tests/integration/test_pod_security.py: the API server admits both sides' pods there, and refuses others."""
    labels = default["Namespace", "", NAMESPACE]["metadata"]["labels"]
    for mode in ("enforce", "warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted", mode
    # enforce pinned (an upgrade of the cluster never starts refusing the pods), warn and audit the server's latest.
    assert re.fullmatch(r"v1\.\d+", labels["pod-security.kubernetes.io/enforce-version"])
    assert labels["pod-security.kubernetes.io/warn-version"] == "latest"
    assert labels["pod-security.kubernetes.io/audit-version"] == "latest"


def _source_objects() -> dict[tuple[str, str], dict]:
    """Every object of the files config/default is built from, by kind and name."""
    objects = {}
    for directory in ("namespace", "crd", "rbac", "admission", "manager"):
        for path in sorted((CONFIG / directory).glob("*.yaml")):
            if path.name != "kustomization.yaml":
                for obj in _load_all(path.read_text()):
                    objects[obj["kind"], obj["metadata"]["name"]] = obj
    return objects


def _spaced(value):
    """Whitespace runs as one space, in every string: kustomize (kyaml) writes a folded scalar with more-indented
    lines back with a blank line before them, one line break more once parsed. Harmless where it happens (CEL, where
    a line break is a space), and not the namespace transformer's doing: plain config/admission renders so too."""
    if isinstance(value, str):
        return re.sub(r"\s+", " ", value)
    if isinstance(value, dict):
        return {k: _spaced(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_spaced(v) for v in value]
    return value


def test_the_namespace_transformer_leaves_the_default_namespace_alone(default):
    """config/default's own run of namespace-references changes no value: what is rendered is what the files say
    (metadata and the pod templates' labels aside)."""
    sources = _source_objects()
    for k, obj in default.items():
        source = sources[k[0], k[2]]
        if k[0] == "Deployment":
            obj, source = obj["spec"], source["spec"]
            obj = {**obj, "template": {**obj["template"], "metadata": {}}}
            source = {**source, "template": {**source["template"], "metadata": {}}}
        else:
            obj = {f: v for f, v in obj.items() if f != "metadata"}
            source = {f: v for f, v in source.items() if f != "metadata"}
        assert _spaced(obj) == _spaced(source), f"{k} is not rendered as its file says"


# -- another namespace ----------------------------------------------------------------------------------------------


def test_another_namespace_leaves_no_value_naming_the_default_one(other_namespace_text):
    rendered = _load_all(other_namespace_text)
    mentions = [key(obj) for obj in rendered if NAMESPACE in yaml.safe_dump(obj)]
    assert not mentions, f"still naming {NAMESPACE}: {mentions}"
    assert {k[1] for k in map(key, rendered) if k[1]} == {OTHER}


def test_another_namespace_changes_the_namespace_and_nothing_else(default_text, other_namespace_text):
    """The overlay's render is config/default's with the namespace's name replaced: every reference followed (a
    position of namespace-references' that no longer matches a policy shows here), nothing else touched."""
    expected = by_key(_load_all(default_text.replace(NAMESPACE, OTHER)))
    got = by_key(_load_all(other_namespace_text))
    assert sorted(got) == sorted(expected)
    for k, obj in expected.items():
        assert got[k] == obj, f"{k} differs from config/default beyond the namespace"


def test_the_admission_parameters_follow_the_namespace(other_namespace_text):
    rendered = by_key(_load_all(other_namespace_text))
    bindings = [obj for k, obj in rendered.items() if k[0] == "ValidatingAdmissionPolicyBinding"]
    with_params = [b for b in bindings if "paramRef" in b["spec"]]
    assert len(with_params) >= 3
    for binding in with_params:
        ref = binding["spec"]["paramRef"]
        assert ("ConfigMap", OTHER, ref["name"]) in rendered, binding["metadata"]["name"]
        assert ref["namespace"] == OTHER
    users = rendered["ConfigMap", OTHER, "metalclaim-hostclaim-finalizer"]["data"]["users"].split()
    assert f"system:serviceaccount:{OTHER}:metalclaim-controller" in users


# -- the namespace bindings -----------------------------------------------------------------------------------------


def _install_role_grants() -> dict[str, set[tuple[str, str]]]:
    """{infra|tenant: {(ClusterRole, ServiceAccount)}}: what the install role binds in each such namespace."""
    tasks = yaml.safe_load((REPO / "roles" / "install" / "tasks" / "main.yml").read_text())
    task = next(t for t in tasks if t.get("name", "").startswith("Bind the controller's sides to their Secret"))
    return {
        side: {(grant["role"], grant["account"]) for grant in task["vars"][f"_{side}_roles"]}
        for side in ("infra", "tenant")
    }


def _grants(rendered: list[dict]) -> dict[str, set[tuple[str, str, str]]]:
    """{namespace: {(ClusterRole, ServiceAccount namespace, ServiceAccount)}} of the RoleBindings rendered."""
    grants: dict[str, set[tuple[str, str, str]]] = {}
    for obj in rendered:
        if obj["kind"] != "RoleBinding" or obj["roleRef"]["kind"] != "ClusterRole":
            continue
        assert obj["metadata"]["name"] == obj["roleRef"]["name"], "named for its role, as the install role names it"
        for subject in obj["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            grants.setdefault(obj["metadata"]["namespace"], set()).add(
                (obj["roleRef"]["name"], subject["namespace"], subject["name"])
            )
    return grants


def test_the_bindings_component_grants_what_the_install_role_grants(tmp_path):
    infra, tenants = ["rack-1", "rack-2"], ["team-x"]
    top = tmp_path / "bindings"
    for namespace, side in [*((n, "infra") for n in infra), *((n, "tenant") for n in tenants)]:
        directory = top / namespace
        component = CONFIG / "components" / "namespace-bindings" / side
        write_kustomization(directory, {"namespace": namespace, "components": [relative(component, directory)]})
    write_kustomization(top, {"resources": [*infra, *tenants]})
    rendered = _load_all(render(top))
    role = _install_role_grants()
    expected = {n: {(r, NAMESPACE, a) for r, a in role["infra"]} for n in infra}
    expected |= {n: {(r, NAMESPACE, a) for r, a in role["tenant"]} for n in tenants}
    assert _grants(rendered) == expected
    assert all(obj["kind"] == "RoleBinding" for obj in rendered)
    for obj in rendered:
        labels = obj["metadata"]["labels"]
        assert all(labels.get(label) for label in RECOMMENDED_LABELS), key(obj)


def test_the_sample_overlay_installs_the_controller_and_its_bindings(tmp_path):
    rendered = _load_all(render(CONFIG / "samples" / "overlay"))
    objects = by_key(rendered)
    assert ("Deployment", NAMESPACE, "metalclaim-provisioner") in objects
    role = _install_role_grants()
    grants = _grants(rendered)
    assert grants["infrahost"] == {(r, NAMESPACE, a) for r, a in role["infra"]}
    assert grants["cluster-ns"] == {(r, NAMESPACE, a) for r, a in role["tenant"]}
    deployments = [obj for k, obj in objects.items() if k[0] == "Deployment"]
    images = {c["image"] for obj in deployments for c in obj["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.example.com/metalclaim/controller:0.2.0"}

    # Its controller's namespace changed (a copy of config/): the bindings' subjects follow, nothing names the old.
    copy = tmp_path / "config"
    shutil.copytree(CONFIG, copy)
    controller = copy / "samples" / "overlay" / "controller" / "kustomization.yaml"
    body = yaml.safe_load(controller.read_text())
    assert body["namespace"] == NAMESPACE, "the sample says the namespace in controller/kustomization.yaml"
    controller.write_text(yaml.safe_dump({**body, "namespace": OTHER}, sort_keys=False))
    moved = _load_all(render(copy / "samples" / "overlay"))
    mentions = [key(obj) for obj in moved if NAMESPACE in yaml.safe_dump(obj)]
    assert not mentions, f"still naming {NAMESPACE}: {mentions}"
    grants = _grants(moved)
    assert grants["infrahost"] == {(r, OTHER, a) for r, a in role["infra"]}
    assert grants["cluster-ns"] == {(r, OTHER, a) for r, a in role["tenant"]}


# -- the install role -----------------------------------------------------------------------------------------------


def test_the_install_role_applies_what_config_manager_and_config_namespace_list():
    """install_controller applies each file of config/manager (the PodDisruptionBudgets too), and the role applies
    the Namespace file config/default renders (its Pod Security labels too)."""
    tasks = yaml.safe_load((REPO / "roles" / "install" / "tasks" / "main.yml").read_text())
    manager = []
    for task in tasks:
        if task.get("when") != "install_controller | bool":
            continue
        if "/manager/" in str(task["vars"].get("_docs", "")):
            manager += task["vars"]["_files"]
        elif "/manager/" in str(task["vars"].get("_deployment", "")):
            manager += task["loop"]
    listed = yaml.safe_load((CONFIG / "manager" / "kustomization.yaml").read_text())["resources"]
    assert sorted(manager) == sorted(listed)
    namespace = next(t for t in tasks if t.get("name", "").startswith("Apply the controller's namespace"))
    assert namespace["kubernetes.core.k8s"]["src"].endswith("/namespace/namespace.yaml")
    assert yaml.safe_load((CONFIG / "namespace" / "kustomization.yaml").read_text())["resources"] == ["namespace.yaml"]


# -- beside Metal3 --------------------------------------------------------------------------------------------------

METAL3_CRDS = ("baremetalhosts.metal3.io", "hardwaredata.metal3.io", "hostfirmwaresettings.metal3.io")


def test_beside_metal3_the_component_leaves_metal3s_crds_alone(default, tmp_path):
    """config/default with config/components/beside-metal3: none of the CRDs Metal3 owns, everything else as is."""
    overlay = write_kustomization(
        tmp_path / "beside-metal3",
        {
            "resources": [relative(CONFIG / "default", tmp_path / "beside-metal3")],
            "components": [relative(CONFIG / "components" / "beside-metal3", tmp_path / "beside-metal3")],
        },
    )
    rendered = by_key(_load_all(render(overlay)))
    metal3 = {("CustomResourceDefinition", "", name) for name in METAL3_CRDS}
    assert metal3 <= set(default), "config/default installs them"
    assert not metal3 & set(rendered)
    assert sorted(rendered) == sorted(set(default) - metal3)
    for k, obj in rendered.items():
        assert obj == default[k], f"{k} differs from config/default"
    # The CRDs the install role leaves to Metal3 are the same three (its read of the cluster, its files).
    tasks = yaml.safe_load((REPO / "roles" / "install" / "tasks" / "main.yml").read_text())
    read = next(t for t in tasks if t.get("name", "").startswith("Read the Metal3 CRDs"))
    applied = next(t for t in tasks if t.get("name", "").startswith("Apply the CRDs"))
    assert sorted(read["loop"]) == sorted(applied["vars"]["_metal3_crd_files"]) == sorted(METAL3_CRDS)


def _expanded(argument: str, env: dict[str, str]) -> str:
    """$(VAR) as the kubelet expands it from the container's env (fieldRefs given sample values)."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), argument)


def test_the_shipped_arguments_are_the_programs_own(default):
    """Each container's args parse with the program it runs (its flags as they are spelled now)."""
    from metalclaim import mediaserver
    from metalclaim.controller import __main__ as controller_cli

    for name in ("metalclaim-controller", "metalclaim-provisioner"):
        for container_ in deployment(default, name)["spec"]["template"]["spec"]["containers"]:
            env = {"POD_NAMESPACE": NAMESPACE, "METALCLAIM_IDENTITY": "pod-0"}
            for variable in container_.get("env", []):
                if "value" in variable:
                    env[variable["name"]] = _expanded(variable["value"], env)
            argv = [_expanded(a, env) for a in container_.get("args", [])]
            assert not [a for a in argv if "$(" in a], f"{name}/{container_['name']}: a variable not defined"
            if container_.get("command") == ["metalclaim-mediaserver"]:
                args = mediaserver.parser().parse_args(argv)
                assert (args.dir, args.port) == ("/var/lib/metalclaim/media", 8082)
            else:
                assert "command" not in container_, "the image's entry point: metalclaim-controller"
                args = controller_cli.parser().parse_args(argv)
                assert args.leader_election_namespace == NAMESPACE
                if name == "metalclaim-provisioner":
                    assert args.media_url == f"http://metalclaim-media.{NAMESPACE}.svc:8082"
                assert args.standby is True
