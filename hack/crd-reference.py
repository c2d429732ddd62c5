#!/usr/bin/env python3
"""Write docs/crd-reference.md from the CRDs in config/crd (the schema is the one source of truth).

hack/crd-reference.py            # rewrite docs/crd-reference.md
hack/crd-reference.py --check    # exit 1 when the file is not what the CRDs give (tests/unit/test_docs.py)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRDS = ("metal3.io_hostclaims.yaml", "metal3.io_hostclaimsets.yaml", "metal3.io_hostdeploypolicies.yaml")
CRDS += ("metal3.io_hostcatalogs.yaml",)
CRDS += ("metal3.io_baremetalhosts.yaml",)
CRDS += ("metal3.io_hardwaredata.yaml", "metal3.io_hostfirmwaresettings.yaml", "tenancy.metalclaim.io_tenants.yaml")
CRDS += tuple(
    f"infrastructure.cluster.x-k8s.io_metalclaim{k}.yaml" for k in ("clusters", "machines", "machinetemplates")
)
OUTPUT = ROOT / "docs" / "crd-reference.md"
HEADER = """# CRD reference

Generated from `config/crd/` by `hack/crd-reference.py` (do not edit by hand; `tests/unit/test_docs.py` fails
when this file and the CRDs disagree). Every kind but the last is `metal3.io/v1alpha1`: `HostClaim`,
`HostClaimSet` and `HostDeployPolicy` are this project's (a set's `spec.template.spec` is a HostClaim's `spec`, not
repeated here); `BareMetalHost`, `HardwareData` and `HostFirmwareSettings` follow Metal3's baremetal-operator
(on a cluster that already runs Metal3, its own CRDs are used: see the operator guide). `Tenant`
(`tenancy.metalclaim.io/v1alpha1`, cluster-scoped) is the infrastructure team's onboarding object. The last three,
`infrastructure.cluster.x-k8s.io/v1alpha1`, are the Cluster API provider's (a machine's HostClaim fields, and a
machine template's `spec.template.spec`, are a HostClaim's, not repeated here).

Field types: `[]` marks a list (its items' fields follow as `field[].x`), `{}` a map of free keys.
"""


def _text(description: str | None) -> str:
    return " ".join((description or "").split()).replace("|", "\\|")


def _type(schema: dict) -> str:
    kind = schema.get("type") or ("int-or-string" if schema.get("x-kubernetes-int-or-string") else "")
    if kind == "array":
        return f"[]{_type(schema.get('items') or {})}"
    if kind == "object" and not schema.get("properties") and schema.get("additionalProperties"):
        return "{}" + _type(schema["additionalProperties"])
    extra = []
    if "enum" in schema:
        extra.append("one of " + ", ".join(f"`{value}`" for value in schema["enum"]))
    if "default" in schema:
        extra.append(f"default `{json.dumps(schema['default'])}`")
    return kind + (f" ({'; '.join(extra)})" if extra else "")


# Fields whose schema is another kind's, documented there: their own fields are not listed again (per kind).
CLAIM_FIELDS = ("hostSelector", "image", "customDeploy", "kind", "lease", "nodeReuse", "firmware", "networkData")
NOT_REPEATED = {
    "HostClaimSet": {"spec.template.spec"},
    "MetalClaimMachine": {f"spec.{name}" for name in CLAIM_FIELDS},
    "MetalClaimMachineTemplate": {"spec.template.spec"},
}


def _rows(schema: dict, path: str, required: set[str], skip: frozenset = frozenset()):
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        mark = " (required)" if name in required else ""
        yield f"| `{here}` | {_type(sub)}{mark} | {_text(sub.get('description'))} |"
        nested = sub.get("items") if sub.get("type") == "array" else sub
        if nested and nested.get("properties") and here not in skip:
            suffix = "[]" if sub.get("type") == "array" else ""
            yield from _rows(nested, here + suffix, set(nested.get("required") or ()), skip)


def render() -> str:
    parts = [HEADER]
    for filename in CRDS:
        crd = yaml.safe_load((ROOT / "config" / "crd" / filename).read_text())
        names = crd["spec"]["names"]
        (version,) = crd["spec"]["versions"]
        schema = version["schema"]["openAPIV3Schema"]
        parts.append(f"## {names['kind']}\n")
        parts.append(_text(schema.get("description")) + "\n")
        short = ", ".join(f"`{n}`" for n in names.get("shortNames") or ())
        parts.append(
            f"`kubectl get {names['plural']}`" + (f" (short: {short})" if short else "") + f"; {crd['spec']['scope']}; "
            f"subresources: {', '.join(sorted(version.get('subresources') or {})) or 'none'}. "
            f"From `config/crd/{filename}`.\n"
        )
        columns = version.get("additionalPrinterColumns") or []
        if columns:
            parts.append("| column | from | wide only |\n| --- | --- | --- |")
            parts.extend(f"| {c['name']} | `{c['jsonPath']}` | {'yes' if c.get('priority') else ''} |" for c in columns)
            parts.append("")
        for section in ("spec", "status"):
            sub = (schema.get("properties") or {}).get(section)
            if not sub:
                continue
            parts.append(f"### {names['kind']} {section}\n")
            parts.append("| field | type | description |\n| --- | --- | --- |")
            skip = frozenset(NOT_REPEATED.get(names["kind"], ()))
            parts.extend(_rows(sub, section, set(sub.get("required") or ()), skip))
            parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render()
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run hack/crd-reference.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
