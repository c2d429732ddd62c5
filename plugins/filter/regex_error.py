# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""regex_error: why a pattern is not a valid Python regular expression ('' when it is)."""

from __future__ import annotations

import re

DOCUMENTATION = r"""
name: regex_error
short_description: Why a pattern is not a valid Python regular expression
version_added: 0.1.0
description:
  - Compiles the input with Python's C(re) module, as the claim layer does for a HostDeployPolicy's C(nameMatches),
    and returns the compiler's error message, or an empty string when the pattern is valid.
author:
  - metalclaim maintainers (@metalclaim)
positional: _input
options:
  _input:
    description: The regular expression.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Refuse an invalid nameMatches before writing the policy
  ansible.builtin.assert:
    that: policy.hostclaimNamespaces.nameMatches | metalclaim.hostclaim.regex_error == ''
"""

RETURN = r"""
_value:
  description: The error message (with its position in the pattern), or C('') for a valid pattern.
  type: str
"""


def regex_error(pattern) -> str:
    try:
        re.compile(str(pattern))
    except re.error as error:
        return str(error)
    return ""


class FilterModule:
    def filters(self):
        return {"regex_error": regex_error}
