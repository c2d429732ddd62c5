# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Tenant's spec.maxLeaseDuration: a label on each of its namespaces, gone with the cap."""

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import MAX_LEASE_DURATION_LABEL
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import tenant as plan


def tenant(**spec) -> dict:
    return {"metadata": {"name": "blue"}, "spec": {"tenantName": "blue", "childNamespaces": ["a"], **spec}}


def test_the_cap_is_a_label_of_each_namespace_and_goes_with_the_cap():
    capped = plan.desired_objects(tenant(maxLeaseDuration="720h"), [])[0]
    assert capped["metadata"]["labels"][MAX_LEASE_DURATION_LABEL] == "720h"
    current = {
        "kind": "Namespace",
        "metadata": {"name": "blue-a", "labels": {"team": "x", **capped["metadata"]["labels"]}},
    }
    assert plan.updated_object(capped, current) is None  # settled: nothing to write
    lifted = plan.updated_object(plan.desired_objects(tenant(), [])[0], current)
    assert MAX_LEASE_DURATION_LABEL not in lifted["metadata"]["labels"] and lifted["metadata"]["labels"]["team"] == "x"


@pytest.mark.parametrize("cap", ["0s", "0h0m", "1d", "1.5h", "", 5])
def test_a_cap_that_is_not_a_duration_is_refused(cap):
    problems = plan.validate(tenant(maxLeaseDuration=cap))
    assert [p.field for p in problems] == ["spec.maxLeaseDuration"]


def test_a_valid_cap_is_no_problem():
    assert plan.validate(tenant(maxLeaseDuration="2h30m")) == []
