# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a BMC can fetch what the provisioner hands it. Pure: no I/O, no name resolution.

The provisioner gives BMCs two URLs of its own settings: the deploy ISO (inserted as the CD) and the media server's
(each host's config drive, inserted beside it; the image writer calls back there too). BMCs and the hosts' writer are
on the provisioning network and resolve names with its DNS, never the cluster's. A host name that only a cluster's
DNS answers cannot work there, whatever the network does: a deploy or cleaning given one fails at once, saying what to
set, instead of after the callback timeout (or at a BMC's own fetch, with its own message).

Cluster-internal, precisely: a name (never an IP address) whose last label is `svc` (a Service's
`<name>.<namespace>.svc`), that ends in `.cluster.local` (Kubernetes' default cluster domain, so `....svc.cluster.local`
too), or that has no dot at all (a Service's short name, resolved through a pod's search path), except `localhost`.
The provisioner has no setting that says its BMCs resolve the cluster's names: a site whose DNS does (it forwards the
cluster domain, its routers reach Service IPs) names the media server under a domain of its own, or by address.
"""

from __future__ import annotations

import ipaddress
import urllib.parse

CLUSTER_SUFFIXES = (".svc", ".cluster.local")
LOCAL_NAMES = ("localhost",)

# What sets each URL, as the infra team configures the provisioner: its Deployment's variable (config/manager), the
# controller's flag, the provisioner role's variable.
MEDIA_URL_SETTING = (
    "the metalclaim-media Service exposed there: MEDIA_URL in the metalclaim-provisioner Deployment, --media-url, "
    "provisioner_media_url"
)
DEPLOY_ISO_SETTING = (
    "METALCLAIM_DEPLOY_ISO_URL in the metalclaim-provisioner Deployment, --deploy-iso-url, provisioner_deploy_iso_url"
)


def cluster_host(url: str | None) -> str:
    """The host name of `url` when only a cluster's DNS resolves it (see the module's docstring), else ""."""
    try:
        host = urllib.parse.urlsplit(str(url or "")).hostname or ""
    except ValueError:
        return ""
    host = host.rstrip(".").lower()
    if not host or host in LOCAL_NAMES or host.endswith(".localhost"):
        return ""
    try:
        ipaddress.ip_address(host)
        return ""
    except ValueError:
        pass
    if "." not in host:
        return "" if host.isdigit() else host  # a number alone is an IPv4 address to most resolvers
    return host if host.endswith(CLUSTER_SUFFIXES) else ""


def _problem(what: str, url: str | None, setting: str) -> str:
    """The host's name is left out (the claim's condition shows this message to its tenant): its kind says enough."""
    host = cluster_host(url)
    if not host:
        return ""
    suffix = next((suffix for suffix in CLUSTER_SUFFIXES if host.endswith(suffix)), "")
    kind = f"a name ending in {suffix}" if suffix else "a name without a dot"
    return (
        f"{what} names a cluster-internal host ({kind}) that BMCs and the image writer cannot resolve: set it to an "
        f"address the provisioning network reaches ({setting})"
    )


def media_problem(media_url: str | None, deploy_iso_url: str | None) -> str:
    """Why a deploy of a disk image, or a cleaning, cannot work with these settings, or "" (an empty URL is not
    judged here: what needs it says so)."""
    return _problem("the media URL", media_url, MEDIA_URL_SETTING) or _problem(
        "the deploy ISO URL", deploy_iso_url, DEPLOY_ISO_SETTING
    )
