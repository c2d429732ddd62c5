"""HostClaims refused at `kubectl apply`, as Metal3's HostClaim webhook refuses them (config/admission).

Metal3's webhook test table (baremetal-operator, hostclaim_validation_test.go) restated as
`kubectl apply --dry-run=server` runs by the tenant (tenant-a in cluster-ns), plus every operator
spelling, the reboot annotation values, and the finalizer guard played as an attack. Each verdict
is collected and printed at the end of the module as a table (also written to
$METALCLAIM_ADMISSION_TABLE when set) to paste into a note.

Some refusals come from the CRD's own schema (the operator enum and the number of values), which
the API server checks before the admission policies; every refusal names the field it is about.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from metalclaim_dev.support import eventually

pytestmark = pytest.mark.integration

TENANT = "tenant-a"
NAMESPACE = "cluster-ns"
FINALIZER = "metal3.io/hostclaim"
CHECKSUM = "be254ebfd73e66ca91f6d91f5050aa2ee1ec4813ee65ba472f608ed340cbff09"

RESULTS: list[dict] = []


def claim(name: str = "adm", annotations: dict | None = None, **spec) -> dict:
    body = {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"online": False, **spec},
    }
    if annotations is not None:
        body["metadata"]["annotations"] = annotations
    return body


def selector(match_labels: dict | None = None, *expressions: tuple) -> dict:
    result: dict = {}
    if match_labels is not None:
        result["matchLabels"] = match_labels
    if expressions:
        result["matchExpressions"] = [
            {"key": key, "operator": operator, **({"values": values} if values is not None else {})}
            for key, operator, values in expressions
        ]
    return {"hostSelector": result}


def reboot(value: str, key: str = "reboot.metal3.io") -> dict:
    return claim(annotations={key: value})


def verdict(result) -> tuple[str, str]:
    """('accepted', '') or ('refused', the server's message)."""
    if result.returncode == 0:
        return "accepted", ""
    message = result.stderr.strip()
    for marker in ("denied request: ", "is invalid: \n", "is invalid: "):
        if marker in message:
            message = message.split(marker, 1)[1]
            break
    return "refused", " ".join(message.split())


def record(case: str, outcome: str, message: str, expected: str) -> None:
    RESULTS.append({"case": case, "outcome": outcome, "message": message, "expected": expected})


def dry_run(devenv, body: dict, identity: str = TENANT):
    return devenv.kubectl(
        identity, "apply", "--dry-run=server", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(body), check=False
    )


@pytest.fixture(scope="module", autouse=True)
def table(request):
    """Print every verdict of this module as a Markdown table when it ends."""
    yield
    if not RESULTS:
        return
    lines = ["| case | expected | verdict | message |", "| --- | --- | --- | --- |"]
    for row in RESULTS:
        message = row["message"].replace("|", "\\|")
        lines.append(f"| {row['case']} | {row['expected']} | {row['outcome']} | {message} |")
    text = "\n".join(lines) + "\n"
    target = os.environ.get("METALCLAIM_ADMISSION_TABLE")
    if target:
        Path(target).write_text(text)
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_line("admission verdicts (kubectl apply --dry-run=server as tenant-a in cluster-ns):")
        for line in lines:
            reporter.write_line(line)


@pytest.fixture(scope="module")
def policies(devenv):
    """The policies are enforced once the API server has loaded them (asynchronously after `up`)."""
    probe = claim(**selector({"-probe-": "v"}))
    eventually(
        lambda: "ValidatingAdmissionPolicy" in dry_run(devenv, probe).stderr,
        timeout=30,
        message="the metalclaim-hostclaim admission policy refusing a bad label key",
    )
    return devenv


# -- Metal3's webhook table, restated --------------------------------------------------------------

LONG = "a" * 64
# (case, claim, expected fragments of the refusal or None when accepted)
CASES = [
    # TestValidateHostClaimSelectorCreate
    ("valid selector", claim(**selector({"key": "value"}, ("key", "=", ["v"]))), None),
    (
        "invalid key matchLabel",
        claim(**selector({"-key-": "value"})),
        ["spec.hostSelector.matchLabels: -key-=value: name part must consist of alphanumeric characters"],
    ),
    (
        "invalid value matchLabel",
        claim(**selector({"key": "-value-"})),
        ["spec.hostSelector.matchLabels: key=-value-: a valid label must be an empty string or consist of"],
    ),
    (
        "invalid key matchExpr",
        claim(**selector(None, ("-key-", "=", ["v"]))),
        ["spec.hostSelector.matchExpressions[0].key: -key-: name part must consist of"],
    ),
    (
        "bad arity = matchExpr",
        claim(**selector(None, ("key", "=", []))),
        ["spec.hostSelector.matchExpressions[0]: Invalid value", "exactly one for =, == and !="],
    ),
    (
        "bad value = matchExpr",
        claim(**selector(None, ("key", "=", ["-vvv-"]))),
        ['spec.hostSelector.matchExpressions[0].values: "-vvv-": a valid label must be'],
    ),
    (
        "bad arity exists matchExpr",
        claim(**selector(None, ("key", "exists", ["vvv"]))),
        ["spec.hostSelector.matchExpressions[0]: Invalid value", "none for Exists, DoesNotExist, exists and !"],
    ),
    (
        "bad value in matchExpr",
        claim(**selector(None, ("key", "in", ["vvv", "-bad-"]))),
        ['spec.hostSelector.matchExpressions[0].values: "-bad-": a valid label must be'],
    ),
    (
        "bad operator",
        claim(**selector(None, ("key", "badOp", ["vvv"]))),
        ['spec.hostSelector.matchExpressions[0].operator: Unsupported value: "badOp"'],
    ),
    # More of the same rules (label keys and values, number of values).
    ("prefixed key", claim(**selector({"topology.kubernetes.io/zone": "zone-1"})), None),
    ("empty label value", claim(**selector({"infra-kind": ""})), None),
    (
        "invalid key prefix",
        claim(**selector(None, ("Bad_Prefix/zone", "Exists", None))),
        ["spec.hostSelector.matchExpressions[0].key: Bad_Prefix/zone: prefix part a lowercase RFC 1123 subdomain"],
    ),
    (
        "key name of 64 characters",
        claim(**selector({LONG: "v"})),
        [f"spec.hostSelector.matchLabels: {LONG}=v: name part must be no more than 63"],
    ),
    (
        "label value of 64 characters",
        claim(**selector({"k": LONG})),
        [f"spec.hostSelector.matchLabels: k={LONG}: must be no more than 63"],
    ),
    (
        "in without values",
        claim(**selector(None, ("key", "in", []))),
        ["spec.hostSelector.matchExpressions[0]: Invalid value", "at least one for In, NotIn, in and notin"],
    ),
    (
        "== with two values",
        claim(**selector(None, ("key", "==", ["a", "b"]))),
        ["spec.hostSelector.matchExpressions[0]: Invalid value", "exactly one for =, == and !="],
    ),
    (
        "gt (a selection operator Metal3 refuses)",
        claim(**selector(None, ("key", "gt", ["1"]))),
        ['spec.hostSelector.matchExpressions[0].operator: Unsupported value: "gt"'],
    ),
    # TestValidateHostClaimImageCreate
    ("valid image", claim(image={"url": "https://example.com/image", "checksum": CHECKSUM}), None),
    (
        "invalid image",
        claim(image={"url": "test1", "checksum": CHECKSUM}),
        ['spec.image.url: image URL test1 is invalid: parse "test1": invalid URI for request'],
    ),
    (
        "image URL with a bad port",
        claim(image={"url": "http://127.0.0.1:port/img.iso", "format": "live-iso"}),
        ["spec.image.url: image URL http://127.0.0.1:port/img.iso is invalid: parse", 'invalid port ":port"'],
    ),
    # Go's url.ParseRequestURI, which Metal3 uses, accepts an absolute path.
    ("image URL that is an absolute path", claim(image={"url": "/images/live.iso", "format": "live-iso"}), None),
    # TestValidateHostClaimSecretReference
    (
        "crossNamespaceUserData",
        claim(userData={"name": "test-secret", "namespace": "different-namespace"}),
        ["spec.userData.namespace: cross-namespace Secret references are not allowed"],
    ),
    (
        "crossNamespaceNetworkData",
        claim(networkData={"name": "test-secret", "namespace": "different-namespace"}),
        ["spec.networkData.namespace: cross-namespace Secret references are not allowed"],
    ),
    (
        "crossNamespaceMetaData",
        claim(metaData={"name": "test-secret", "namespace": "different-namespace"}),
        ["spec.metaData.namespace: cross-namespace Secret references are not allowed"],
    ),
    (
        "multipleSecretsCrossNamespace",
        claim(
            userData={"name": "test-secret1", "namespace": "different-namespace1"},
            networkData={"name": "test-secret2", "namespace": "different-namespace2"},
            metaData={"name": "test-secret3", "namespace": "different-namespace3"},
        ),
        [
            "spec.userData.namespace: cross-namespace Secret references are not allowed",
            "spec.networkData.namespace: cross-namespace",
            "spec.metaData.namespace: cross-namespace",
        ],
    ),
    (
        "sameNamespaceSecrets",
        claim(
            userData={"name": "test-secret1", "namespace": NAMESPACE},
            networkData={"name": "test-secret2", "namespace": NAMESPACE},
            metaData={"name": "test-secret3", "namespace": NAMESPACE},
        ),
        None,
    ),
    ("secret reference without namespace", claim(userData={"name": "test-secret1"}), None),
    # Every problem in one answer, each naming its field.
    (
        "several problems at once",
        claim(
            annotations={"reboot.metal3.io/x": '{"mode": "fast"}'},
            image={"url": "test1", "format": "live-iso"},
            **selector({"key": "-value-"}, ("-k-", "notin", ["ok"])),
        ),
        [
            "spec.hostSelector.matchLabels: key=-value-:",
            "spec.hostSelector.matchExpressions[0].key: -k-:",
            "spec.image.url: image URL test1 is invalid",
            "metadata.annotations[reboot.metal3.io/x]: invalid mode",
        ],
    ),
]


@pytest.mark.parametrize(("case", "body", "expected"), CASES, ids=[c[0] for c in CASES])
def test_metal3_webhook_cases(policies, case, body, expected):
    outcome, message = verdict(dry_run(policies, body))
    record(case, outcome, message, "accepted" if expected is None else "refused")
    if expected is None:
        assert outcome == "accepted", message
    else:
        assert outcome == "refused"
        for fragment in expected:
            assert fragment in message, f"{fragment!r} not in {message!r}"


# -- every operator spelling -------------------------------------------------------------------------

OPERATORS = [
    ("In", ["medium", "large"]),
    ("NotIn", ["small"]),
    ("Exists", None),
    ("DoesNotExist", []),
    ("in", ["medium"]),
    ("notin", ["small", "tiny"]),
    ("exists", []),
    ("!", None),
    ("=", ["medium"]),
    ("==", ["medium"]),
    ("!=", ["small"]),
]


@pytest.mark.parametrize(("operator", "values"), OPERATORS, ids=[o[0] for o in OPERATORS])
def test_every_metal3_operator_spelling_is_accepted(policies, operator, values):
    body = claim(**selector(None, ("infra-kind", operator, values)))
    outcome, message = verdict(dry_run(policies, body))
    record(f"operator {operator} {json.dumps(values)}", outcome, message, "accepted")
    assert outcome == "accepted", message


# -- reboot annotations --------------------------------------------------------------------------------

REBOOT_BAD_JSON = 'failed to unmarshal the data from the reboot.metal3.io annotation: want "" or a JSON object'
REBOOT_CASES = [
    ("reboot.metal3.io", "", None),
    ("reboot.metal3.io", '{"mode": "hard"}', None),
    ("reboot.metal3.io/maintenance", '{"mode": "soft", "force": true}', None),
    ("reboot.metal3.io/maintenance", '{"force": false}', None),
    ("reboot.metal3.io/maintenance", "{}", None),
    ("reboot.metal3.io/maintenance", '{"mode": ""}', None),  # Metal3's default mode
    ("reboot.metal3.io", '{"mode": "hard"', REBOOT_BAD_JSON),
    ("reboot.metal3.io", "hard", REBOOT_BAD_JSON),
    ("reboot.metal3.io/maintenance", '["hard"]', REBOOT_BAD_JSON),
    ("reboot.metal3.io", '{"mode": "fast"}', 'invalid mode in the reboot.metal3.io annotation, allowed are "hard"'),
    ("reboot.metal3.io/maintenance", '{"mode": 1}', "invalid mode in the reboot.metal3.io annotation"),
    ("reboot.metal3.io/maintenance", '{"force": "yes"}', "invalid force in the reboot.metal3.io annotation"),
    # Other annotations are not reboot requests.
    ("reboot.metal3.io.example/other", "anything", None),
]


@pytest.mark.parametrize(
    ("key", "value", "expected"), REBOOT_CASES, ids=[f"{k}={v or '<empty>'}" for k, v, _expected in REBOOT_CASES]
)
def test_reboot_annotation_values(policies, key, value, expected):
    outcome, message = verdict(dry_run(policies, reboot(value, key)))
    record(f"annotation {key}: {value or '<empty>'}", outcome, message, "accepted" if expected is None else "refused")
    if expected is None:
        assert outcome == "accepted", message
    else:
        assert outcome == "refused"
        assert f"metadata.annotations[{key}]: {expected}" in message


# -- updates -------------------------------------------------------------------------------------------


@pytest.fixture
def stored(policies, clients):
    """A claim stored by the tenant (really created), deleted afterwards whatever its finalizers."""
    names: list[str] = []
    api = clients[TENANT].resources.get(api_version="metal3.io/v1alpha1", kind="HostClaim")

    def create(**spec) -> str:
        name = f"adm-{uuid.uuid4().hex[:6]}"
        api.create(body=claim(name, **spec))
        names.append(name)
        return name

    yield create
    admin = clients["admin"].resources.get(api_version="metal3.io/v1alpha1", kind="HostClaim")
    for name in names:
        admin.patch(
            body={"metadata": {"finalizers": None}},
            name=name,
            namespace=NAMESPACE,
            content_type="application/merge-patch+json",
        )
        admin.delete(name=name, namespace=NAMESPACE)


def patch(devenv, identity: str, name: str, body, kind: str = "merge", *extra: str):
    return devenv.kubectl(
        identity,
        "patch",
        "hostclaim",
        name,
        "-n",
        NAMESPACE,
        f"--type={kind}",
        "-p",
        json.dumps(body),
        *extra,
        check=False,
    )


def test_updates_are_checked_too(policies, stored):
    name = stored(**selector({"infra-kind": "medium"}))
    outcome, message = verdict(patch(policies, TENANT, name, {"spec": selector(None, ("zone", "in", ["-z-"]))}))
    record("update: selector value", outcome, message, "refused")
    assert outcome == "refused"
    assert 'spec.hostSelector.matchExpressions[0].values: "-z-": a valid label' in message
    outcome, message = verdict(patch(policies, TENANT, name, {"spec": {"online": True}}))
    record("update: online only", outcome, message, "accepted")
    assert outcome == "accepted", message


# -- the finalizer guard, as an attack ----------------------------------------------------------------------


def hold(devenv, name: str, status: dict) -> None:
    """The controller adds its finalizer, then (as admin, through the status subresource) the claim gets a host."""
    added = patch(devenv, "controller", name, {"metadata": {"finalizers": [FINALIZER]}})
    assert added.returncode == 0, added.stderr
    status_patch = json.dumps({"status": status})
    devenv.kubectl(
        "admin", "patch", "hostclaim", name, "-n", NAMESPACE, "--subresource=status", "--type=merge", "-p", status_patch
    )


REMOVE_FINALIZERS = [{"op": "remove", "path": "/metadata/finalizers"}]


def test_tenant_cannot_remove_the_finalizer_of_a_claim_holding_a_host(policies, stored):
    name = stored(**selector({"infra-kind": "medium"}))
    hold(policies, name, {"hardwareData": {"name": "bm-00", "namespace": "infrahost"}})
    for how, body, kind in (
        ("json patch", REMOVE_FINALIZERS, "json"),
        ("merge patch", {"metadata": {"finalizers": None}}, "merge"),
        ("replaced by another", {"metadata": {"finalizers": ["example.com/mine"]}}, "merge"),
    ):
        outcome, message = verdict(patch(policies, TENANT, name, body, kind))
        record(f"finalizer: tenant removes it ({how}), claim holds infrahost/bm-00", outcome, message, "refused")
        assert outcome == "refused", how
        assert message.startswith("metadata.finalizers: the metal3.io/hostclaim finalizer of a HostClaim that holds a")
        assert "(infrahost/bm-00)" in message and "user tenant-a may not remove it" in message
    # The guard is about the finalizer only: the tenant still edits the claim.
    outcome, message = verdict(patch(policies, TENANT, name, {"spec": {"online": True}}))
    record("finalizer: tenant changes online, claim holds a host", outcome, message, "accepted")
    assert outcome == "accepted", message
    # Break-glass: a cluster administrator (system:masters) may.
    outcome, message = verdict(patch(policies, "admin", name, REMOVE_FINALIZERS, "json", "--dry-run=server"))
    record("finalizer: admin (system:masters) removes it", outcome, message, "accepted")
    assert outcome == "accepted", message
    # The controller, once it has released the host, does.
    outcome, message = verdict(patch(policies, "controller", name, REMOVE_FINALIZERS, "json"))
    record("finalizer: controller removes it", outcome, message, "accepted")
    assert outcome == "accepted", message


def test_host_uid_alone_is_a_host(policies, stored):
    name = stored()
    hold(policies, name, {"hostUID": str(uuid.uuid4())})
    outcome, message = verdict(patch(policies, TENANT, name, REMOVE_FINALIZERS, "json"))
    record("finalizer: tenant removes it, claim has status.hostUID", outcome, message, "refused")
    assert outcome == "refused"
    assert "(status.hostUID " in message and "user tenant-a may not remove it" in message


def test_tenant_may_remove_the_finalizer_of_a_claim_without_a_host(policies, stored):
    name = stored()
    added = patch(policies, "controller", name, {"metadata": {"finalizers": [FINALIZER]}})
    assert added.returncode == 0, added.stderr
    outcome, message = verdict(patch(policies, TENANT, name, REMOVE_FINALIZERS, "json"))
    record("finalizer: tenant removes it, claim without a host", outcome, message, "accepted")
    assert outcome == "accepted", message
