"""The three deprecated role names no other test ran (issue 41): hostclaim_install, hostclaim_provision and tenant,
each played once with variables under their old names, as an old playbook would, as the identity that runs it.

Each warns once that it is deprecated and runs its new role with the old variables mapped (tests/unit/
test_role_shims.py checks the mapping is complete): the install shim applies the CRDs (already there: nothing
changes), the provisioner shim runs for a host that does not exist (none is stepped), the tenant shim for a
Tenant that does not exist.
"""

from __future__ import annotations

import json
import uuid

import pytest

from metalclaim_dev.runner import run

pytestmark = pytest.mark.integration


def test_the_install_provision_and_tenant_shims_run_with_their_old_variables(devenv, tmp_path):
    absent = f"absent-{uuid.uuid4().hex[:6]}"
    play = {"hosts": "localhost", "gather_facts": False}
    playbook = [
        {
            **play,
            "name": "install",
            "environment": {"K8S_AUTH_KUBECONFIG": devenv.kubeconfig("admin")},
            "roles": [
                {
                    "role": "metalclaim.hostclaim.hostclaim_install",
                    "vars": {"hostclaim_install_rbac": False, "hostclaim_install_admission": False},
                }
            ],
        },
        {
            **play,
            "name": "provision",
            "environment": {"K8S_AUTH_KUBECONFIG": devenv.kubeconfig("provisioner")},
            "roles": [
                {
                    "role": "metalclaim.hostclaim.hostclaim_provision",
                    "vars": {"hostclaim_provision_hosts": [{"namespace": "infrahost", "name": absent}]},
                }
            ],
            "post_tasks": [
                {
                    "name": "The provisioner ran for the host asked (absent: none stepped)",
                    "ansible.builtin.assert": {"that": ["provisioner_result.hosts | length == 0"]},
                }
            ],
        },
        {
            **play,
            "name": "tenant",
            # As the infra team runs tenant.yml by hand (the tenants side's own rights are test_tenant.py's).
            "environment": {"K8S_AUTH_KUBECONFIG": devenv.kubeconfig("admin")},
            "roles": [{"role": "metalclaim.hostclaim.tenant", "vars": {"tenant_names": [absent]}}],
            "post_tasks": [
                {
                    "name": "The absent Tenant was looked at",
                    "ansible.builtin.assert": {
                        "that": [f"tenancy_result.tenants | map(attribute='name') | list == ['{absent}']"]
                    },
                }
            ],
        },
    ]
    project = tmp_path / "old" / "project"
    project.mkdir(parents=True)
    (project / "old.yml").write_text(json.dumps(playbook))
    result = run(tmp_path / "old", devenv.kubeconfig("admin"), playbook="old.yml")
    assert result.status == "successful", result.stdout
    warnings = [t["msg"] for t in result.tasks if t["task"] == "Warn that this role is deprecated"]
    assert len(warnings) == 3, warnings
    for old, new in (("hostclaim_install", "install"), ("hostclaim_provision", "provisioner"), ("tenant", "tenancy")):
        assert any(f"metalclaim.hostclaim.{old} is renamed metalclaim.hostclaim.{new}" in w for w in warnings), warnings
    crds = [t for t in result.tasks if t["task"] == "Apply the CRDs and wait until they are Established"]
    assert crds and not crds[0].get("failed"), crds
