# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tenant hooks, the I/O edge: read a hook's credentials Secret, POST a payload. Decisions are in _tenancy.pure.hooks.

Requests go straight to the hook's URL: no proxy from the environment (credentials would pass through it) and no
redirect followed (a redirect would carry the Authorization header elsewhere; a 3xx is an answer other than 200).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import KubeError
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure import hooks as plan

USER_AGENT = "metalclaim-tenant-hooks/1"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # the 3xx is returned as an HTTPError, i.e. not 200


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


class Deliverer:
    """Sends hook payloads for one run; every message it returns has the credentials it used redacted."""

    def __init__(self, kube):
        self.kube = kube
        self._credentials: dict[str, tuple[str, list[str], str]] = {}
        self.secrets: list[str] = []  # every credential value seen this run, for redaction
        self.sent = 0

    def _authorization(self, hook: plan.Hook) -> tuple[str, str]:
        if not hook.credentials:
            return "", ""
        if hook.credentials not in self._credentials:
            try:
                secret = self.kube.get("v1", "Secret", hook.credentials, plan.CREDENTIALS_NAMESPACE)
            except KubeError as error:
                self._credentials[hook.credentials] = ("", [], f"credentials Secret not readable: {error}")
            else:
                self._credentials[hook.credentials] = plan.authorization(secret, hook.credentials)
            self.secrets += self._credentials[hook.credentials][1]
        header, _values, problem = self._credentials[hook.credentials]
        return header, problem

    def send(self, hook: plan.Hook, body: dict) -> str:
        """POST `body` to the hook: "" when it answered 200, else why not (credentials redacted)."""
        header, problem = self._authorization(hook)
        if problem:
            return plan.redact(problem, self.secrets)
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        if header:
            headers["Authorization"] = header
        request = urllib.request.Request(
            hook.url, data=json.dumps(body, sort_keys=True).encode(), headers=headers, method="POST"
        )
        self.sent += 1
        try:
            with _OPENER.open(request, timeout=hook.timeout) as answer:
                status, text = answer.status, answer.read(plan.ANSWER_EXCERPT * 4)
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read(plan.ANSWER_EXCERPT * 4) if error.fp else b""
        except TimeoutError:
            return f"no answer within {hook.timeout:g}s"
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            if isinstance(reason, TimeoutError):
                return f"no answer within {hook.timeout:g}s"
            return plan.redact(f"not delivered: {reason}", self.secrets)
        if status == 200:
            return ""
        detail = plan.excerpt(text)
        return plan.redact(f"answered {status}" + (f": {detail}" if detail else ""), self.secrets)
