# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tenant namespace's HostCatalog: which kinds of hosts its policies admit and how many of each are free, bound,
booked. Pure: no I/O, no clock (the run's timestamp is given).

Infra publishes hosts per HostDeployPolicy: a policy with ``spec.catalog`` lists, in ``publicLabels``, the host label
keys tenants may see (a host class, say). A namespace gets a catalog when at least one such policy admits it
(_common/pure/policy.py); the hosts counted are those of the infra namespaces of those policies, narrowed as a claim of
the namespace is (the tenant's host pools, hosts reserved for another tenant left out), grouped by the values of the
union of the public labels those policies list. A class is its label values, nothing else: a catalog never holds a
host's name, namespace, BMC address or MAC, and a public label whose value would tell one (a label infra chose badly)
is shown as HIDDEN, said in the Ready condition without naming anything. What is compared is the whole fleet's
(Fleet, issue 40: a value naming another host, another tenant's namespace or a BMC's IP was shown in clear): every
host's name and namespace, every tenant namespace (one a policy admits, or a Tenant's), every BMC's host part (an IPv4
address in its dotted and dashed forms), each as the whole value or a run of its ``.``/``-``/``_``-separated parts;
and every boot or NIC MAC, in any spelling (its 12 hex digits anywhere among the value's hex digits).

Counts: ``total`` hosts of the class not being deleted; ``free``, those a claim could bind now (no consumer, in a free
provisioning state, not paused, in error, still to be deprovisioned or held for a node reuse); ``bound``, those with
a HostClaim consumer; ``booked``, the bookings ahead (HostClaim ``spec.lease.start``) accepted on the class's hosts
whose start is still to come, of any namespace (the claim layer keeps them on the host: its ``metalclaim.io/bookings``
annotation). A host booked later may be free now: it counts in both. ``lastUpdated`` moves only when a count or a
condition changes, so a run over an unchanged fleet writes nothing.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import urllib.parse
from dataclasses import dataclass

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import metal3
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import DONE, Outcomes
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import (
    evaluate_policies,
    evaluate_policy,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.status import (
    status_patch as object_status_patch,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    TENANT_LABEL,
    host_pools,
    in_host_pool,
    may_bind,
)

API_VERSION = metal3.API_VERSION
KIND = metal3.CATALOG_KIND
HOST_KIND = "BareMetalHost"
POLICY_KIND = "HostDeployPolicy"
NAME = metal3.CATALOG_NAME  # one catalog per tenant namespace, always this name
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "metalclaim"
# The claim layer's record of a host's accepted bookings (_claims/pure/booking.py ANNOTATION; a unit test keeps them
# equal): a JSON list of {uid, namespace, name, start, end}.
BOOKINGS_ANNOTATION = "metalclaim.io/bookings"
# A released host the claim layer holds for the next claim of one namespace with a reuse key (_claims/pure/reuse.py
# HOLD_ANNOTATION): free for nobody else, so counted as neither free nor bound.
HOLD_ANNOTATION = "metalclaim.io/reuse-hold"
HIDDEN = metal3.CATALOG_HIDDEN  # a public label's value that would name a host, a namespace or a BMC
NONE = ""  # a host without a public label: the class's label is shown empty
COUNTS = ("total", "free", "bound", "booked")
# Classes listed at most (the totals count every host); the API server takes the object whatever the fleet.
MAX_CLASSES = 256
SUMMARY_CLASSES = 8

READY = cond.READY
COUNTED = "Counted"
VALUES_HIDDEN = "ValuesHidden"
TOO_MANY_CLASSES = "TooManyClasses"


def key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def public_labels(policy: dict) -> list[str] | None:
    """The host label keys a policy publishes; None when it publishes no catalog."""
    catalog = (policy.get("spec") or {}).get("catalog")
    if not isinstance(catalog, dict):
        return None
    return [label for label in catalog.get("publicLabels") or [] if isinstance(label, str) and label]


def publishing(policies: list[dict], namespace: str, labels: dict | None) -> list[dict]:
    """The policies with a catalog that admit `namespace` (whose labels are given)."""
    return [p for p in policies if public_labels(p) is not None and evaluate_policy(p, namespace, labels).admitted]


def catalog_namespaces(policies: list[dict], namespaces: dict[str, dict | None]) -> list[str]:
    """The namespaces (name -> labels) that get a catalog: admitted by at least one policy with a catalog."""
    if not any(public_labels(p) is not None for p in policies):
        return []
    return sorted(name for name, labels in namespaces.items() if publishing(policies, name, labels))


def host_state(host: dict) -> str | None:
    """free, bound or other (counted in the total only); None for a host being deleted (not counted)."""
    meta, status = host.get("metadata") or {}, host.get("status") or {}
    if meta.get("deletionTimestamp"):
        return None
    ref = (host.get("spec") or {}).get("consumerRef") or {}
    if ref:
        return "bound" if ref.get("kind") == "HostClaim" else "other"
    annotations = meta.get("annotations") or {}
    state = (status.get("provisioning") or {}).get("state", "")
    if (
        state in metal3.FREE_STATES
        and not status.get("errorType")
        and metal3.PAUSED_ANNOTATION not in annotations
        and metal3.IN_USE_ANNOTATION not in annotations
        and HOLD_ANNOTATION not in annotations
    ):
        return "free"
    return "other"


def _time(text) -> datetime.datetime | None:
    try:
        parsed = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def bookings_ahead(host: dict, now: str) -> int:
    """The host's accepted bookings whose start is after `now` (an unreadable annotation or entry counts none)."""
    text = ((host.get("metadata") or {}).get("annotations") or {}).get(BOOKINGS_ANNOTATION)
    moment = _time(now)
    if not text or moment is None:
        return 0
    try:
        entries = json.loads(text)
    except ValueError:
        return 0
    if not isinstance(entries, list):
        return 0
    starts = [_time(entry.get("start")) for entry in entries if isinstance(entry, dict)]
    return sum(1 for start in starts if start is not None and start > moment)


_SEPARATOR = re.compile(r"[._-]")
_NOT_HEX = re.compile(r"[^0-9a-f]")
MAC_HEX_DIGITS = 12


@dataclass(frozen=True)
class Fleet:
    """What a public label's value must not tell, fleet-wide (lowercase): names (hosts', namespaces', BMCs' host
    parts) and MACs (as their 12 hex digits)."""

    names: frozenset
    macs: frozenset

    def tells(self, value: str) -> bool:
        lowered = value.lower()
        if any(span in self.names for span in _spans(lowered)):
            return True
        digits = _NOT_HEX.sub("", lowered)
        return len(digits) >= MAC_HEX_DIGITS and any(mac in digits for mac in self.macs)


def _spans(value: str) -> set[str]:
    """The value and every run of its separator-bounded parts: "r1-n-7" -> r1, n, 7, r1-n, n-7, r1-n-7."""
    cuts = [m.start() for m in _SEPARATOR.finditer(value)]
    starts, ends = [0, *(cut + 1 for cut in cuts)], [*cuts, len(value)]
    return {value[start:end] for start in starts for end in ends if end > start}


def _bmc_host(address) -> str:
    """The host part of a BMC address (redfish+https://10.0.0.5:8000/..., ipmi://bmc-7, or a bare host)."""
    if not isinstance(address, str) or not address:
        return ""
    try:
        return urllib.parse.urlsplit(address if "://" in address else f"//{address}").hostname or ""
    except ValueError:
        return ""


def _dashed(address: str) -> str:
    """An IPv4 address as a label value could spell it ("10-0-0-5"); "" for anything else."""
    try:
        return str(ipaddress.IPv4Address(address)).replace(".", "-")
    except ValueError:
        return ""


def _macs_of(host: dict) -> set[str]:
    spec, status = host.get("spec") or {}, host.get("status") or {}
    nics = ((status.get("hardware") or {}).get("nics")) or []
    found = [spec.get("bootMACAddress"), *(nic.get("mac") for nic in nics if isinstance(nic, dict))]
    digits = (_NOT_HEX.sub("", mac.lower()) for mac in found if isinstance(mac, str))
    return {mac for mac in digits if len(mac) == MAC_HEX_DIGITS}


def fleet(hosts: list[dict], namespaces: dict[str, dict | None], policies: list[dict]) -> Fleet:
    """The Fleet of every host and every namespace (name -> its metadata): tenant namespaces are those a policy admits
    or a Tenant made (its label); the namespaces holding hosts count too."""
    names: set[str] = set()
    macs: set[str] = set()
    for host in hosts:
        namespace, name = key(host)
        bmc = _bmc_host(((host.get("spec") or {}).get("bmc") or {}).get("address"))
        names.update({namespace, name, bmc})
        names.add(_dashed(bmc))
        macs |= _macs_of(host)
    for namespace, meta in namespaces.items():
        labels = (meta or {}).get("labels") or {}
        if TENANT_LABEL in labels or (policies and evaluate_policies(policies, namespace, labels)[0]):
            names.add(namespace)
    return Fleet(frozenset(n.lower() for n in names if n), frozenset(macs))


def count(
    namespace: str,
    namespace_meta: dict | None,
    policies: list[dict],
    hosts: list[dict],
    infra_namespaces: set[str] | None = None,
    now: str = "",
    told: Fleet | None = None,
) -> dict:
    """{"labels": [keys], "classes": [...], "hidden": n, "admitted": bool} for one tenant namespace.

    `namespace_meta`: the Namespace's metadata (labels feed the policies, annotations the host pools); `told`: what
    no value may tell (fleet(), once per run; by default `hosts`' and those of `infra_namespaces` and `namespace`);
    `now`: the run's time (bookings starting later are counted)."""
    meta = namespace_meta or {}
    labels = meta.get("labels") or {}
    admitting = publishing(policies, namespace, labels)
    keys_by_infra: dict[str, set[str]] = {}
    for policy in admitting:
        keys_by_infra.setdefault(key(policy)[0], set()).update(public_labels(policy) or [])
    label_keys = sorted(set().union(*keys_by_infra.values())) if keys_by_infra else []
    pools = host_pools(meta.get("annotations"))
    if told is None:
        tenants = {name: {"labels": {TENANT_LABEL: ""}} for name in {*(infra_namespaces or set()), namespace}}
        told = fleet(hosts, tenants, [])
    classes: dict[tuple, dict] = {}
    hidden = 0
    for host in hosts:
        infra = key(host)[0]
        if infra not in keys_by_infra or not in_host_pool(host, pools) or not may_bind(host, labels):
            continue
        state = host_state(host)
        if state is None:
            continue
        host_labels = (host.get("metadata") or {}).get("labels") or {}
        values = []
        for label in label_keys:
            value = str(host_labels.get(label, NONE)) if label in keys_by_infra[infra] else NONE
            if value and told.tells(value):
                value, hidden = HIDDEN, hidden + 1
            values.append(value)
        entry = classes.setdefault(tuple(values), dict.fromkeys(COUNTS, 0))
        entry["total"] += 1
        if state in ("free", "bound"):
            entry[state] += 1
        entry["booked"] += bookings_ahead(host, now) if now else 0
    listed = [
        {"labels": dict(zip(label_keys, values, strict=True)), **counts} for values, counts in sorted(classes.items())
    ]
    return {"admitted": bool(admitting), "labels": label_keys, "classes": listed, "hidden": hidden}


def _summary(classes: list[dict]) -> str:
    """`kubectl get`'s one line: free/total per class, the classes with the most free hosts first."""

    def name(entry: dict) -> str:
        return ",".join(v or "-" for v in entry["labels"].values()) or "all"

    ranked = sorted(classes, key=lambda e: (-e["free"], name(e)))
    shown = [f"{name(e)}={e['free']}/{e['total']}" for e in ranked[:SUMMARY_CLASSES]]
    more = len(ranked) - SUMMARY_CLASSES
    return " ".join(shown) + (f" +{more} more" if more > 0 else "")


def desired_status(counted: dict, current: dict | None, timestamp: str) -> dict:
    """The catalog's status from count(): classes, totals, the summary column and its Ready condition.
    `lastUpdated` is the current one unless something else changes (status_patch decides)."""
    classes = counted["classes"]
    listed = classes[:MAX_CLASSES]
    totals = {name: sum(entry[name] for entry in classes) for name in COUNTS}
    if len(classes) > MAX_CLASSES:
        reason = TOO_MANY_CLASSES
        message = (
            f"{len(classes)} classes of hosts, the first {MAX_CLASSES} listed (the totals count every host): "
            "infra may publish fewer labels (HostDeployPolicy spec.catalog.publicLabels)"
        )
    elif counted["hidden"]:
        reason = VALUES_HIDDEN
        message = (
            f"{counted['hidden']} public label values are shown as {HIDDEN}: they would name a host, a namespace or "
            "a BMC (infra: HostDeployPolicy spec.catalog.publicLabels)"
        )
    else:
        reason = COUNTED
        message = f"{totals['total']} hosts in {len(classes)} classes"
    previous = (current or {}).get("conditions")
    conditions = cond.set_condition(previous, READY, "True", reason, message, 1, timestamp)
    status = {
        "groupedBy": counted["labels"],
        "classes": listed,
        "classCount": len(classes),
        **totals,
        "summary": _summary(classes),
        "conditions": conditions,
    }
    status["lastUpdated"] = (current or {}).get("lastUpdated") or timestamp
    return status


def status_patch(current: dict | None, desired: dict, timestamp: str) -> dict | None:
    """A merge patch from the current status to `desired` (with lastUpdated moved to `timestamp`), or None when
    nothing but lastUpdated would change."""
    patch = object_status_patch({"status": current or {}}, desired)
    return None if patch is None else {**patch, "lastUpdated": timestamp}


def new_catalog(namespace: str) -> dict:
    """The object made in a namespace that gets a catalog (its status is written next)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": NAME, "namespace": namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
    }


def ours(catalog: dict) -> bool:
    """A catalog this step made (and may delete): our name and our label."""
    meta = catalog.get("metadata") or {}
    return meta.get("name") == NAME and (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY


def catalog_outcomes(results: list[dict]) -> list[dict]:
    found = Outcomes()
    for result in results:
        found.note(result["namespace"], result["name"], result.get("result", DONE), None, result.get("state", ""))
    return found.listed()
