# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `claims` option every claim-layer step takes."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  claims:
    description:
      - The claims to consider, for example those an event named. Default is every HostClaim the identity can list.
    type: list
    elements: dict
    suboptions:
      namespace:
        description: Namespace of the claim.
        type: str
        required: true
      name:
        description: Name of the claim.
        type: str
        required: true
"""
