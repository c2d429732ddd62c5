# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options shared by every module that talks to the Kubernetes API.

The options, environment variables and precedence of kubernetes.core's k8s_auth_options
(kubernetes.core 6.x), plus request_timeout. Kept in step with AUTH_ARG_SPEC in
plugins/module_utils/_common/io/kube.py (tests/unit/test_kube_auth.py compares the two, and both
with kubernetes.core).
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, several paths separated by V(:) (V(;) on Windows), or a kubeconfig
        given as a dictionary. Can also be specified via the E(K8S_AUTH_KUBECONFIG) environment variable.
      - When neither this, O(context) nor O(host) with credentials is given, the in-cluster service
        account is used when running in a pod, else the files in E(KUBECONFIG), else C(~/.kube/config).
    type: raw
    aliases: [kubeconfig_path]
  context:
    description:
      - The name of a context found in the kubeconfig; its current context when not given.
        Can also be specified via the E(K8S_AUTH_CONTEXT) environment variable.
    type: str
  host:
    description:
      - The URL of the API server. Can also be specified via the E(K8S_AUTH_HOST) environment variable.
      - With O(api_key), O(username) and O(password), or O(client_cert) and O(client_key), no kubeconfig
        and no in-cluster configuration is read. Otherwise it overrides the server of the configuration loaded.
    type: str
  api_key:
    description:
      - Token used to authenticate with the API. Can also be specified via the E(K8S_AUTH_API_KEY)
        environment variable.
    type: str
  username:
    description:
      - Username for HTTP basic authentication with the API. Can also be specified via the
        E(K8S_AUTH_USERNAME) environment variable.
      - Only for clusters configured to use HTTP basic authentication.
    type: str
  password:
    description:
      - Password for HTTP basic authentication with the API. Can also be specified via the
        E(K8S_AUTH_PASSWORD) environment variable.
    type: str
  client_cert:
    description:
      - Path to a certificate used to authenticate with the API. Can also be specified via the
        E(K8S_AUTH_CLIENT_CERT) or E(K8S_AUTH_CERT_FILE) environment variable.
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the key of O(client_cert). Can also be specified via the E(K8S_AUTH_CLIENT_KEY) or
        E(K8S_AUTH_KEY_FILE) environment variable.
    type: path
    aliases: [key_file]
  ca_cert:
    description:
      - Path to a CA certificate used to verify the API server's certificate; the full chain must be
        provided. Can also be specified via the E(K8S_AUTH_CA_CERT) or E(K8S_AUTH_SSL_CA_CERT) environment
        variable.
    type: path
    aliases: [ssl_ca_cert]
  validate_certs:
    description:
      - Whether to verify the API server's certificate. Can also be specified via the
        E(K8S_AUTH_VALIDATE_CERTS) or E(K8S_AUTH_VERIFY_SSL) environment variable.
      - When not given, the configuration loaded decides (a kubeconfig's C(insecure-skip-tls-verify));
        certificates are verified by default.
    type: bool
    aliases: [verify_ssl]
  proxy:
    description:
      - The URL of an HTTP proxy to use for the connection. Can also be specified via the
        E(K8S_AUTH_PROXY) environment variable.
      - The usual proxy environment variables (E(HTTP_PROXY) and so on) are not used.
    type: str
  no_proxy:
    description:
      - Comma-separated hosts, domains, IP addresses or CIDRs that must not go through O(proxy).
        Can also be specified via the E(K8S_AUTH_NO_PROXY) environment variable.
      - The E(NO_PROXY) environment variable is not used.
    type: str
  proxy_headers:
    description:
      - Headers for the HTTP proxy, as U(https://urllib3.readthedocs.io/en/latest/reference/urllib3.util.html)
        C(make_headers) builds them.
    type: dict
    suboptions:
      proxy_basic_auth:
        description:
          - Colon-separated username:password for the proxy's basic authentication.
            Can also be specified via the E(K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH) environment variable.
        type: str
      basic_auth:
        description:
          - Colon-separated username:password for a basic authentication header.
            Can also be specified via the E(K8S_AUTH_PROXY_HEADERS_BASIC_AUTH) environment variable.
        type: str
      user_agent:
        description:
          - The user agent to send, such as C(foo/1.0).
            Can also be specified via the E(K8S_AUTH_PROXY_HEADERS_USER_AGENT) environment variable.
        type: str
  persist_config:
    description:
      - Whether to save refreshed tokens (for example OIDC refresh tokens) back to the kubeconfig file.
        Can also be specified via the E(K8S_AUTH_PERSIST_CONFIG) environment variable.
      - Not saved when not given.
    type: bool
  impersonate_user:
    description:
      - Username to impersonate for the operation.
        Can also be specified via the E(K8S_AUTH_IMPERSONATE_USER) environment variable.
    type: str
  impersonate_groups:
    description:
      - Groups to impersonate for the operation.
        Can also be specified via the E(K8S_AUTH_IMPERSONATE_GROUPS) environment variable, comma-separated.
    type: list
    elements: str
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
  - "The connection options, their E(K8S_AUTH_*) environment variables and their precedence are those of
    the C(kubernetes.core) modules: an option given to the module wins over its environment variable; then
    O(host) with credentials, else O(kubeconfig)/O(context), else the in-cluster service account, else
    E(KUBECONFIG) or C(~/.kube/config); the other options given then override what was loaded."
  - "Set them once for every module of this collection with C(module_defaults) and the group
    C(group/metalclaim.hostclaim.k8s)."
  - "Boolean environment variables are false when V(0), V(false) or V(no) (any case), true otherwise."
"""
