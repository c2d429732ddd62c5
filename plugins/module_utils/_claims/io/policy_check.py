# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostdeploypolicy_check: read policies and the tenant Namespace once, decide with _policy."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import API_VERSION
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import (
    evaluate_policies,
    refusal_message,
)


def check_namespace(kube, namespace: str, claim_name: str | None, infra_namespaces: list[str] | None) -> dict:
    tenant = kube.get("v1", "Namespace", namespace)
    if tenant is None:
        raise LookupError(f"namespace {namespace!r} does not exist")
    labels = (tenant.get("metadata") or {}).get("labels") or {}
    wanted = set(infra_namespaces) if infra_namespaces else None
    if claim_name:
        claim = kube.get(API_VERSION, "HostClaim", claim_name, namespace)
        if claim is None:
            raise LookupError(f"HostClaim {namespace}/{claim_name} does not exist")
        in_namespace = ((claim.get("spec") or {}).get("hostSelector") or {}).get("inNamespace")
        if in_namespace:
            wanted = {in_namespace} if wanted is None else wanted & {in_namespace}
    if wanted is None:
        policies = kube.list(API_VERSION, "HostDeployPolicy")
    else:
        policies = [p for ns in sorted(wanted) for p in kube.list(API_VERSION, "HostDeployPolicy", ns)]
    authorized, decisions = evaluate_policies(policies, namespace, labels)
    subject = f"HostClaim {namespace}/{claim_name}" if claim_name else f"namespace {namespace!r}"
    if authorized:
        message = f"{subject} may use hosts in: {', '.join(authorized)}"
    else:
        message = f"{subject} is not authorized: {refusal_message(decisions)}"
    return {
        "authorized_namespaces": authorized,
        "decisions": [d.as_dict() for d in decisions],
        "message": message,
    }
