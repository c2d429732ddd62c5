# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options shared by every module that talks to the Kubernetes API."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file. Falls back to the E(K8S_AUTH_KUBECONFIG) or E(KUBECONFIG)
        environment variables, then to the in-cluster service account.
    type: path
    aliases: [kubeconfig_path]
  context:
    description:
      - The kubeconfig context to use. Defaults to the file's current context.
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's certificate.
    type: bool
    default: true
  request_timeout:
    description:
      - Seconds to wait for one API request before failing.
    type: float
    default: 30
requirements:
  - kubernetes >= 30.0.0 (Python client)
notes:
  - "Run these modules on the controller host (C(delegate_to: localhost) or a localhost play);
    they talk to the API server, not to the target."
"""
