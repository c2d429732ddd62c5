# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Tenant's lease cap (its spec.maxLeaseDuration, a label on each of its namespaces): the smaller of it and the
policies' cap applies, it requires a lease, and the tenant is told the cap and who sets it, nothing else."""

import datetime

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding, lease
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    MAX_LEASE_DURATION_LABEL,
    TENANT_LABEL,
)

T0 = datetime.datetime(2030, 1, 1, 10, 0, 0, tzinfo=datetime.UTC)
HOST = {
    "metadata": {"namespace": "infra-1", "name": "h1", "labels": {}},
    "spec": {"online": False},
    "status": {"provisioning": {"state": "available"}, "operationalStatus": "OK"},
}


def labels(cap: str | None, tenant: str = "blue") -> dict:
    found = {TENANT_LABEL: tenant} if tenant else {}
    if cap is not None:
        found[MAX_LEASE_DURATION_LABEL] = cap
    return found


def claim(duration: str | None = None, status: dict | None = None) -> dict:
    spec = {"lease": {"duration": duration}} if duration else {}
    return {"metadata": {"namespace": "blue-a", "name": "c", "uid": "u"}, "spec": spec, "status": status or {}}


def test_the_tenant_cap_is_read_from_a_tenant_namespace_only_and_fails_closed():
    assert lease.tenant_cap(labels("2h")) == 7200
    assert lease.tenant_cap(labels(None)) is None
    assert lease.tenant_cap(labels("2h", tenant="")) is None  # not a tenant's namespace: not the tenants side's
    assert lease.tenant_cap(labels("forever")) == 0


def test_the_smaller_cap_applies():
    caps = {"infra-1": 3600, "infra-2": None, "infra-3": 10800}
    assert lease.with_tenant_cap(caps, labels("2h")) == {"infra-1": 3600, "infra-2": 7200, "infra-3": 7200}
    assert lease.with_tenant_cap(caps, labels(None)) is caps
    assert lease.smaller(False, 60) is False


def test_plan_refuses_over_the_tenant_cap_naming_the_tenant_and_the_cap_only():
    refused = binding.plan(claim("3h"), [HOST], ["infra-1"], labels("2h"), lease_caps={"infra-1": None}, now=T0)
    assert (refused.action, refused.reason) == ("refuse", lease.LEASE_OVER_CAP)
    assert refused.message.endswith("this namespace's Tenant allows at most 2h0m0s"), refused.message
    assert "infra" not in refused.message
    # The policies' cap is smaller: they are named.
    refused = binding.plan(claim("3h"), [HOST], ["infra-1"], labels("5h"), lease_caps={"infra-1": 3600}, now=T0)
    assert refused.message.endswith("the HostDeployPolicies admitting this namespace allow at most 1h0m0s")


def test_the_tenant_cap_requires_a_lease_and_binds_within_it():
    refused = binding.plan(claim(), [HOST], ["infra-1"], labels("2h"), lease_caps={"infra-1": None}, now=T0)
    assert (refused.reason, refused.message.split(":")[0]) == (
        lease.LEASE_REQUIRED,
        "this namespace's Tenant requires a lease",
    )
    assert binding.plan(
        claim("2h"), [HOST], ["infra-1"], labels("2h"), lease_caps={"infra-1": None}, now=T0
    ).action == ("bind")


def test_an_extension_over_the_tenant_cap_is_refused_and_keeps_the_end():
    status = {"lease": {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z"}}
    found = lease.decide(claim("3h", status), True, lease.smaller(None, 7200), T0, tenant=7200)
    assert found.end == lease.parse_time("2030-01-01T11:00:00Z")
    ((_type, state, reason, message),) = found.conditions
    assert (state, reason) == ("False", lease.LEASE_OVER_CAP)
    assert "this namespace's Tenant allows at most 2h0m0s" in message
