"""Offline checks of the CRDs in config/crd (no cluster needed).

* every CRD is structural-looking (every schema node has a type, no forbidden
  constructs) and carries the names / version / subresource / columns we rely on;
* the HostClaim and HostDeployPolicy of Metal3's HostClaim walkthrough (tests/fixtures), its status
  examples and its merge patches only use fields the schemas declare;
* an existing Metal3 BareMetalHost inventory (tests/fixtures) applies unchanged;
* the HostClaim selector operators (every Metal3 and Kubernetes spelling) and their number of
  values agree between the CRD and the admission policies of config/admission.

The instance checker mimics what the API server does with strict field
validation (``kubectl apply`` default): unknown fields are errors. It also
checks types, enums, patterns and required fields. Formats (date-time) and
CEL rules (x-kubernetes-validations) are left to the API server.
"""

import re
from pathlib import Path

import pytest
import yaml

from metalclaim_dev.support import manifest_objects

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "config" / "crd"
ADMISSION_DIR = REPO / "config" / "admission"
FIXTURES = REPO / "tests" / "fixtures"
WALKTHROUGH = "metal3_hostclaim_walkthrough.yaml"
GROUP = "metal3.io"
CRD_FILES = {
    "HostClaim": "metal3.io_hostclaims.yaml",
    "HostClaimSet": "metal3.io_hostclaimsets.yaml",
    "HostCatalog": "metal3.io_hostcatalogs.yaml",
    "HostDeployPolicy": "metal3.io_hostdeploypolicies.yaml",
    "BareMetalHost": "metal3.io_baremetalhosts.yaml",
    "HardwareData": "metal3.io_hardwaredata.yaml",
    "HostFirmwareSettings": "metal3.io_hostfirmwaresettings.yaml",
}
EXPECTED_NAMES = {
    "HostClaim": ("hostclaims", ["hc"]),
    "HostClaimSet": ("hostclaimsets", ["hcs"]),
    "HostCatalog": ("hostcatalogs", ["hcat"]),
    "HostDeployPolicy": ("hostdeploypolicies", ["hdp"]),
    "BareMetalHost": ("baremetalhosts", ["bmh", "bmhost"]),
    "HardwareData": ("hardwaredata", ["hd"]),
    "HostFirmwareSettings": ("hostfirmwaresettings", ["hfs"]),
}


# --------------------------------------------------------------------------- loading
def load_crd(kind):
    docs = [d for d in yaml.safe_load_all((CRD_DIR / CRD_FILES[kind]).read_text()) if d]
    assert len(docs) == 1, f"{CRD_FILES[kind]} must hold exactly one document"
    return docs[0]


def openapi_schema(kind):
    versions = load_crd(kind)["spec"]["versions"]
    return versions[0]["schema"]["openAPIV3Schema"]


def walkthrough_docs():
    """Metal3's HostClaim walkthrough (tests/fixtures): its objects, status fragments and merge patches, in order."""
    return fixture_docs(WALKTHROUGH)


def fixture_docs(name):
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


# --------------------------------------------------------------------------- checker
TYPE_CHECKS = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def check_instance(value, schema, path="", required=True, root=True):
    """Walk ``value`` against an openAPIV3Schema node; return a list of problems.

    Honors properties / additionalProperties / items and
    x-kubernetes-preserve-unknown-fields. ``required=False`` is for partial
    documents (merge patches, status fragments). Each problem names the path.
    """
    where = path or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null is not allowed"]
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or TYPE_CHECKS["integer"](value)):
            return [f"{where}: expected int-or-string, got {type(value).__name__}"]
        return []
    typ = schema.get("type")
    if typ and not TYPE_CHECKS[typ](value):
        return [f"{where}: expected {typ}, got {type(value).__name__} ({value!r})"]
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        problems.append(f"{where}: {value!r} does not match {schema['pattern']!r}")
    if isinstance(value, dict):
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
        if required:
            for key in schema.get("required", []):
                if key not in value:
                    problems.append(f"{path}.{key}: required field is missing")
        for key, sub in value.items():
            sub_path = f"{path}.{key}"
            if root and key == "metadata":
                continue  # ObjectMeta: validated by the API server itself
            if props is not None and key in props:
                problems += check_instance(sub, props[key], sub_path, required, root=False)
            elif isinstance(additional, dict):
                problems += check_instance(sub, additional, sub_path, required, root=False)
            elif additional is True or preserve:
                continue
            else:
                problems.append(f"{sub_path}: unknown field")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += check_instance(item, schema["items"], f"{path}[{i}]", required, root=False)
    return problems


def assert_valid(doc, kind, required=True):
    problems = check_instance(doc, openapi_schema(kind), required=required)
    assert not problems, f"{kind} {doc.get('metadata', {}).get('name', '')}:\n  " + "\n  ".join(problems)


# --------------------------------------------------------------------------- CRD shape
def walk_schema(node, path="<root>"):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from walk_schema(sub, f"{path}.{key}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk_schema(node["additionalProperties"], f"{path}.<value>")
    if "items" in node:
        yield from walk_schema(node["items"], f"{path}[]")


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_crd_names_version_and_subresources(kind):
    crd = load_crd(kind)
    plural, short = EXPECTED_NAMES[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    names = spec["names"]
    assert names["kind"] == kind
    assert names["listKind"] == f"{kind}List"
    assert names["plural"] == plural
    assert names["shortNames"] == short
    assert names["categories"] == ["metal3"]
    [version] = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert version["served"] is True and version["storage"] is True
    scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
    scale["labelSelectorPath"] = ".status.selector"  # kubectl scale, and an autoscaler's selector
    assert version["subresources"] == ({"status": {}, "scale": scale} if kind == "HostClaimSet" else {"status": {}})


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_crd_schema_is_structural(kind):
    schema = openapi_schema(kind)
    assert schema["type"] == "object"
    assert schema["properties"]["metadata"] == {"type": "object"}, "metadata may not be restricted"
    for path, node in walk_schema(schema):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{kind} {path}: missing type"
        for forbidden in ("anyOf", "allOf", "oneOf", "not", "$ref", "definitions", "dependencies"):
            assert forbidden not in node, f"{kind} {path}: {forbidden} is not used in these CRDs"
        assert not ("properties" in node and "additionalProperties" in node), f"{kind} {path}: both kinds of properties"
        if node.get("type") == "array":
            assert "items" in node, f"{kind} {path}: array without items"
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            item = node["items"]
            for key in keys:
                assert key in item.get("required", []) or "default" in item["properties"][key], (
                    f"{kind} {path}: list-map key {key} must be required"
                )
        if "default" in node:
            problems = check_instance(node["default"], node, path)
            assert not problems, f"{kind} {path}: default does not validate: {problems}"


def schema_at(schema, json_path):
    """Resolve a printer-column jsonPath (e.g. .status.conditions[?(@.type=="Ready")].status)."""
    node = schema
    for token in re.findall(r"\.([A-Za-z0-9_-]+)|(\[[^\]]*\])", json_path):
        name, index = token
        if index:
            assert node.get("type") == "array", f"{json_path}: indexing a non-array"
            node = node["items"]
        elif name == "metadata" and node is schema:
            return {"type": "object", "properties": {"creationTimestamp": {"type": "string", "format": "date-time"}}}
        else:
            assert name in node.get("properties", {}), f"{json_path}: {name} not in schema"
            node = node["properties"][name]
    return node


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_printer_columns_point_at_schema_fields(kind):
    version = load_crd(kind)["spec"]["versions"][0]
    columns = version["additionalPrinterColumns"]
    assert all(c["name"] and c["description"] for c in columns), "columns must be named and described"
    assert any(c["name"] == "Age" and c["type"] == "date" for c in columns)
    schema = version["schema"]["openAPIV3Schema"]
    for column in columns:
        path = column["jsonPath"]
        if path == ".metadata.creationTimestamp":
            continue
        node = schema_at(schema, path)
        if column["type"] == "string" and node.get("type") == "array":
            node = node["items"]  # a list of scalars is printed as a string
        assert node.get("type") == column["type"], f"{kind} column {column['name']}"


def test_required_printer_columns():
    def columns(kind):
        return {c["name"]: c["jsonPath"] for c in load_crd(kind)["spec"]["versions"][0]["additionalPrinterColumns"]}

    hc = columns("HostClaim")
    assert hc["Online"] == ".spec.online"
    assert hc["Host"] == ".status.hardwareData.name"
    assert hc["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert hc["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert hc["State"] == '.status.conditions[?(@.type=="Provisioned")].reason'  # the host's provisioning state
    hdp = columns("HostDeployPolicy")
    assert "Ready" not in hdp  # nothing writes a policy's status: no column may pretend it does
    assert hdp["Names"] == ".spec.hostclaimNamespaces.names"
    bmh = columns("BareMetalHost")
    assert bmh["State"] == ".status.provisioning.state"
    assert bmh["Consumer"] == ".spec.consumerRef.name"
    assert bmh["Online"] == ".spec.online"
    assert bmh["Error"] == ".status.errorType"


def test_kustomization_lists_the_crds():
    kustomization = yaml.safe_load((CRD_DIR / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    # The metal3.io kinds, and the Tenant (tenancy.metalclaim.io, tests/unit/.../_tenancy).
    capi = [f"infrastructure.cluster.x-k8s.io_metalclaim{k}.yaml" for k in ("clusters", "machines", "machinetemplates")]
    assert sorted(kustomization["resources"]) == sorted(
        [*CRD_FILES.values(), "tenancy.metalclaim.io_tenants.yaml", *capi]
    )


# --------------------------------------------------------------------------- schema details
def test_hostclaim_spec_details():
    spec = openapi_schema("HostClaim")["properties"]["spec"]["properties"]
    assert spec["online"]["type"] == spec["poweredOn"]["type"] == "boolean"
    assert spec["kind"]["default"] == "baremetal"
    assert spec["image"]["required"] == ["url"]
    assert spec["image"]["properties"]["checksumType"]["enum"] == ["md5", "sha256", "sha512", "auto"]
    assert spec["image"]["properties"]["format"]["enum"] == ["raw", "qcow2", "vdi", "vmdk", "live-iso"]
    for ref in ("userData", "metaData", "networkData"):
        assert spec[ref]["required"] == ["name"]
        assert set(spec[ref]["properties"]) == {"name", "namespace"}
    expression = spec["hostSelector"]["properties"]["matchExpressions"]["items"]
    assert expression["required"] == ["key", "operator"]
    assert {"In", "NotIn", "Exists", "DoesNotExist"} <= set(expression["properties"]["operator"]["enum"])
    status = openapi_schema("HostClaim")["properties"]["status"]["properties"]
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert conditions["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert status["hardware"]["x-kubernetes-preserve-unknown-fields"] is True


def test_hostdeploypolicy_aliases_share_one_schema():
    spec = openapi_schema("HostDeployPolicy")["properties"]["spec"]["properties"]

    def strip(node):
        return {k: v for k, v in node.items() if k != "description"}

    assert strip(spec["hostclaimNamespaces"]) == strip(spec["hostClaimNamespaces"])
    assert set(spec["hostclaimNamespaces"]["properties"]) == {"names", "nameMatches", "hasLabels"}
    assert set(spec["metadataCopy"]["properties"]) == {"labels", "annotations"}
    for kind in ("labels", "annotations"):  # lists of key patterns, as _claim_metadata reads them
        patterns = spec["metadataCopy"]["properties"][kind]
        assert (patterns["type"], patterns["items"]["type"]) == ("array", "string")
        assert "whole key" in patterns["description"]


def test_baremetalhost_defaults_and_hardware_shared_with_hardwaredata():
    bmh = openapi_schema("BareMetalHost")
    spec = bmh["properties"]["spec"]
    assert "online" not in spec.get("required", []), "online is optional here (defaults to false)"
    assert spec["properties"]["online"]["default"] is False
    assert spec["properties"]["automatedCleaningMode"]["default"] == "metadata"
    assert spec["properties"]["bmc"]["required"] == ["address", "credentialsName"]
    hd = openapi_schema("HardwareData")["properties"]["spec"]["properties"]["hardware"]
    assert hd == bmh["properties"]["status"]["properties"]["hardware"]


# --------------------------------------------------------------------------- the checker itself
def test_checker_reports_unknown_field_paths():
    doc = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaim",
        "metadata": {"name": "x", "labels": {"a": "b"}},
        "spec": {"imge": {"url": "u"}, "hostSelector": {"matchExpression": []}, "userData": {"nme": "s"}},
    }
    problems = check_instance(doc, openapi_schema("HostClaim"))
    assert ".spec.imge: unknown field" in problems
    assert ".spec.hostSelector.matchExpression: unknown field" in problems
    assert ".spec.userData.nme: unknown field" in problems
    assert ".spec.userData.name: required field is missing" in problems


def test_checker_reports_types_and_enums():
    doc = {"spec": {"bmc": {"address": "ipmi://h", "credentialsName": "c"}, "online": "yes", "bootMode": "uefi"}}
    problems = check_instance(doc, openapi_schema("BareMetalHost"))
    assert any(p.startswith(".spec.online: expected boolean") for p in problems)
    assert any(p.startswith(".spec.bootMode: 'uefi' is not one of") for p in problems)


def test_checker_honors_preserve_unknown_fields():
    status = {"status": {"hardware": {"cpu": {"arch": "x86_64"}, "anything": [1, 2]}}}
    assert check_instance(status, openapi_schema("HostClaim"), required=False) == []


# --------------------------------------------------------------------------- Metal3's walkthrough
def test_walkthrough_hostclaim_and_hostdeploypolicy_apply_verbatim():
    full = [d for d in walkthrough_docs() if "kind" in d]
    assert sorted(d["kind"] for d in full) == ["HostClaim", "HostDeployPolicy"], "the fixture changed: review this test"
    for doc in full:
        assert doc["apiVersion"] == f"{GROUP}/v1alpha1"
        assert_valid(doc, doc["kind"])


def test_walkthrough_hostclaim_status_examples_fit_the_status_schema():
    fragments = [d for d in walkthrough_docs() if set(d) == {"status"}]
    assert len(fragments) == 2, "the fixture changed: review this test"
    for fragment in fragments:
        assert_valid(fragment, "HostClaim", required=True)
        types = {c["type"] for c in fragment["status"]["conditions"]}
        assert {"Ready", "Association", "Provisioned", "Synchronization"} <= types


def test_walkthrough_hostclaim_patches_fit_the_spec_schema():
    patches = [d for d in walkthrough_docs() if set(d) == {"spec"}]
    assert len(patches) == 2, "the fixture changed: review this test"
    for patch in patches:
        assert_valid(patch, "HostClaim", required=False)


# --------------------------------------------------------------------------- Metal3 inventory
def test_metal3_bmh_inventory_applies_unchanged():
    docs = fixture_docs("metal3_bmh_inventory.yaml")
    hosts = [d for d in docs if d["kind"] == "BareMetalHost"]
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    assert hosts, "fixture holds no BareMetalHost"
    assert {d["kind"] for d in docs} == {"BareMetalHost", "Secret"}
    for host in hosts:
        assert host["apiVersion"] == f"{GROUP}/v1alpha1"
        assert_valid(host, "BareMetalHost")
        spec = host["spec"]
        for field in ("bmc", "bootMACAddress", "bootMode", "online", "rootDeviceHints"):
            assert field in spec, f"{host['metadata']['name']}: fixture should exercise {field}"
        secret = secrets[spec["bmc"]["credentialsName"]]
        assert secret["metadata"]["namespace"] == host["metadata"]["namespace"]
        assert {"username", "password"} <= set(secret.get("data", {})) | set(secret.get("stringData", {}))


def test_unknown_bmh_field_is_rejected():
    host = next(d for d in fixture_docs("metal3_bmh_inventory.yaml") if d["kind"] == "BareMetalHost")
    host["spec"]["bmc"]["port"] = 623
    assert check_instance(host, openapi_schema("BareMetalHost")) == [".spec.bmc.port: unknown field"]


# --------------------------------------------------------------------------- selector operators
# Metal3's spellings (k8s.io/apimachinery/pkg/selection) and Kubernetes' LabelSelector ones, with
# the number of values each takes: "some" (at least one), "one" (exactly one), "none".
OPERATOR_ARITY = {
    "In": "some",
    "NotIn": "some",
    "in": "some",
    "notin": "some",
    "=": "one",
    "==": "one",
    "!=": "one",
    "Exists": "none",
    "DoesNotExist": "none",
    "exists": "none",
    "!": "none",
}


def match_expression_schema():
    spec = openapi_schema("HostClaim")["properties"]["spec"]["properties"]
    return spec["hostSelector"]["properties"]["matchExpressions"]["items"]


def crd_arity_lists():
    """The operator lists of the CRD's CEL rule: (no values, exactly one value)."""
    [rule] = match_expression_schema()["x-kubernetes-validations"]
    lists = re.findall(r"self\.operator in \[([^\]]*)\]", rule["rule"])
    assert len(lists) == 2, rule["rule"]
    none, one = (set(re.findall(r"'([^']*)'", found)) for found in lists)
    return none, one


def test_crd_accepts_every_operator_spelling():
    assert sorted(match_expression_schema()["properties"]["operator"]["enum"]) == sorted(OPERATOR_ARITY)


def test_crd_arity_rule_classifies_every_spelling():
    none, one = crd_arity_lists()
    assert none == {op for op, arity in OPERATOR_ARITY.items() if arity == "none"}
    assert one == {op for op, arity in OPERATOR_ARITY.items() if arity == "one"}
    # The rule's last branch (at least one value) is every other spelling.
    assert set(OPERATOR_ARITY) - none - one == {op for op, arity in OPERATOR_ARITY.items() if arity == "some"}


@pytest.mark.parametrize("operator", sorted(OPERATOR_ARITY))
def test_claim_with_each_operator_fits_the_schema(operator):
    values = {"some": ["a", "b"], "one": ["a"], "none": []}[OPERATOR_ARITY[operator]]
    claim = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaim",
        "metadata": {"name": "ops"},
        "spec": {"hostSelector": {"matchExpressions": [{"key": "infra-kind", "operator": operator, "values": values}]}},
    }
    assert_valid(claim, "HostClaim")


def test_unknown_operators_are_not_in_the_enum():
    # gt and lt are selection operators too, but Metal3's webhook refuses them.
    for operator in ("gt", "lt", "Like", "NOTIN", "=~"):
        expression = {"key": "k", "operator": operator, "values": ["1"]}
        problems = check_instance(expression, match_expression_schema(), ".spec.hostSelector.matchExpressions[0]")
        [problem] = problems
        assert problem.startswith(f".spec.hostSelector.matchExpressions[0].operator: {operator!r} is not one of")


# --------------------------------------------------------------------------- admission policies
def admission_docs(name):
    return manifest_objects(yaml.safe_load_all((ADMISSION_DIR / name).read_text()))


def admission_objects():
    kustomization = yaml.safe_load((ADMISSION_DIR / "kustomization.yaml").read_text())
    return [doc for name in kustomization["resources"] for doc in admission_docs(name)]


def test_admission_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((ADMISSION_DIR / "kustomization.yaml").read_text())
    on_disk = sorted(p.name for p in ADMISSION_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == on_disk


def test_admission_bindings_name_their_policy_and_parameters():
    objects = admission_objects()
    kinds = {}
    for obj in objects:
        kinds.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    policies = kinds["ValidatingAdmissionPolicy"]
    bindings = kinds["ValidatingAdmissionPolicyBinding"]
    assert sorted(policies) == sorted(b["spec"]["policyName"] for b in bindings.values())
    for binding in bindings.values():
        assert binding["spec"]["validationActions"] == ["Deny"]
        policy = policies[binding["spec"]["policyName"]]
        assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
        resources = {r for rule in policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
        tenancy = {"namespaces", "resourcequotas", "rolebindings", "hostdeploypolicies"}
        hosts = {"baremetalhosts", "baremetalhosts/status"}
        assert resources in ({"hostclaims"}, {"secrets"}, tenancy, hosts, {"leases"}), resources
        if "paramKind" in policy["spec"]:
            ref = binding["spec"]["paramRef"]
            param = kinds[policy["spec"]["paramKind"]["kind"]][ref["name"]]
            assert param["metadata"]["namespace"] == ref["namespace"]
            namespace = yaml.safe_load((REPO / "config" / "namespace" / "namespace.yaml").read_text())
            assert ref["namespace"] == namespace["metadata"]["name"]  # config/namespace, applied first
            # The HostClaim finalizer guard fails closed; the cluster-wide guards (every Secret write, every
            # Namespace, ResourceQuota and RoleBinding write) fail open (see their bindings).
            assert ref["parameterNotFoundAction"] == ("Deny" if resources == {"hostclaims"} else "Allow")


def test_admission_policy_operators_agree_with_the_crd():
    [policy] = admission_docs("hostclaim_policy.yaml")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}

    def spellings(name):
        return set(re.findall(r"'([^']*)'", variables[name]))

    none, one = crd_arity_lists()
    assert spellings("noValueOperators") == none
    assert spellings("oneValueOperators") == one
    assert spellings("setOperators") == {op for op, arity in OPERATOR_ARITY.items() if arity == "some"}


def test_finalizer_parameters_default_to_the_controller_and_break_glass():
    [params] = admission_docs("finalizer_params.yaml")
    controller_users = ["metalclaim-controller", "system:serviceaccount:metalclaim-system:metalclaim-controller"]
    assert params["data"] == {"users": "".join(f"{u}\n" for u in controller_users), "groups": "system:masters\n"}
    defaults = yaml.safe_load((REPO / "roles" / "install" / "defaults" / "main.yml").read_text())
    assert defaults["install_finalizer_users"] == controller_users
    assert defaults["install_finalizer_groups"] == ["system:masters"]


def test_the_claim_layer_names_the_secret_policies_and_their_label():
    # The claim layer recognises these policies' refusals as "the copy's name is taken" by their names.
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import secrets

    policies = {o["metadata"]["name"]: o for o in admission_objects() if o["kind"] == "ValidatingAdmissionPolicy"}
    assert set(secrets.COPY_POLICIES) <= set(policies)
    for name in secrets.COPY_POLICIES:
        text = yaml.safe_dump(policies[name]["spec"])
        assert f"'{secrets.COPY_OF_LABEL}'" in text
        [rule] = policies[name]["spec"]["matchConstraints"]["resourceRules"]
        assert (rule["apiGroups"], rule["resources"]) == ([""], ["secrets"])
    copy_only_on_create = policies["metalclaim-secret-copy-on-create"]["spec"]
    assert copy_only_on_create["matchConstraints"]["resourceRules"][0]["operations"] == ["UPDATE"]
    assert "paramKind" not in copy_only_on_create  # no parameters: it holds for everyone
    guard = policies["metalclaim-claim-side-secrets"]["spec"]
    assert guard["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]


def test_claim_side_secret_guard_parameters_name_the_controller_and_no_group():
    [params] = admission_docs("claim_secrets_params.yaml")
    [finalizer_params] = admission_docs("finalizer_params.yaml")
    # The same identities as may release a host: the controller (devenv user, ServiceAccount).
    assert params["data"] == {"users": finalizer_params["data"]["users"], "groups": ""}
    [binding] = admission_docs("claim_secrets_binding.yaml")
    assert binding["spec"]["paramRef"]["name"] == params["metadata"]["name"]
    # It sees every Secret write in the cluster: a missing ConfigMap must not refuse them all.
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"


def _without_transition_rules(node):
    """A schema with its x-kubernetes-validations that compare with oldSelf left out."""
    if isinstance(node, list):
        return [_without_transition_rules(item) for item in node]
    if not isinstance(node, dict):
        return node
    found = {}
    for name, value in node.items():
        if name == "x-kubernetes-validations":
            value = [rule for rule in value if "oldSelf" not in rule["rule"]]
            if not value:
                continue
        found[name] = _without_transition_rules(value)
    return found


def test_hostclaimset_template_is_a_hostclaim_spec():
    """A set's template takes exactly what a HostClaim takes (its transition rules aside: a template change applies to
    the claims made afterwards), so a member the set makes is never refused for its spec."""
    template = openapi_schema("HostClaimSet")["properties"]["spec"]["properties"]["template"]
    claim_spec = openapi_schema("HostClaim")["properties"]["spec"]
    ignored = ("description",)
    ours = {k: v for k, v in template["properties"]["spec"].items() if k not in ignored}
    theirs = {k: v for k, v in _without_transition_rules(claim_spec).items() if k not in ignored}
    assert ours == theirs
    assert set(template["properties"]["metadata"]["properties"]) == {"labels", "annotations"}  # no namespace, owner


def test_hostclaimset_spec_status_and_columns():
    schema = openapi_schema("HostClaimSet")
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["selector", "template"]
    replicas = spec["properties"]["replicas"]
    assert (replicas["minimum"], replicas["maximum"], replicas["default"]) == (0, 1000, 1)
    assert any("oldSelf" in rule["rule"] for rule in spec["properties"]["selector"]["x-kubernetes-validations"])
    assert any("metadata.name" in rule["rule"] for rule in schema["x-kubernetes-validations"])
    status = schema["properties"]["status"]["properties"]
    for count in ("replicas", "boundReplicas", "readyReplicas", "waitingReplicas", "releasingReplicas"):
        assert status[count]["type"] == "integer"
    assert status["selector"]["type"] == "string"
    assert status["conditions"] == openapi_schema("HostClaim")["properties"]["status"]["properties"]["conditions"]
    columns = {
        c["name"]: c["jsonPath"] for c in load_crd("HostClaimSet")["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert columns["Desired"] == ".spec.replicas"
    assert columns["Bound"] == ".status.boundReplicas"
    assert columns["Ready"] == ".status.readyReplicas"
    assert columns["Waiting"] == ".status.waitingReplicas"
