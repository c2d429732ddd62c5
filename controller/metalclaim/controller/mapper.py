"""Event -> keys: which claims and hosts an API change concerns. Pure: no I/O, no clock.

Each side compares only the fields it reads (its fingerprint of an object), never
resourceVersions, and leaves out the fields it writes itself: a claim's status, finalizers and
the claim layer's annotations; a host's status and the provisioner's annotations for the
provisioner side. So the controller's own writes never cause a run, while a tenant's spec
edit, a provisioner's state change or an infra team's label always does.

Keys are ("claim", namespace, name) for reconcile.yml, ("remote", namespace, name) for remote.yml,
("claimset", namespace, name) for claimsets.yml and ("host", namespace, name) for provision.yml. A claim's `kind`
(immutable) picks its key: a kind no playbook serves gets none, and the controller drops the keys of kinds it was not
asked to serve (--kinds). A member claim of a HostClaimSet also concerns its set (its controller owner reference).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ansible_collections.metalclaim.hostclaim.plugins.module_utils.controller_contract import (
    BAREMETAL_KIND,
    BINDING_ANNOTATIONS,
    BUSY_STATES,
    CALLBACK_SUFFIX,
    CAPI_CLUSTER_KIND,
    CAPI_CLUSTER_NAME_LABEL,
    CAPI_MACHINE_KIND,
    CAPI_PAUSED_ANNOTATION,
    CATALOG_BOOKINGS_ANNOTATION,
    CATALOG_HOLD_ANNOTATION,
    CATALOG_NAME,
    DATA_ROLES,
    DETACHED_ANNOTATION,
    FREE_STATES,
    HOLD_ANNOTATION,
    HOST_POOLS_ANNOTATION,
    IN_USE_ANNOTATION,
    PAUSED_ANNOTATION,
    PROVISIONER_ANNOTATION,
    REBOOT_ANNOTATION,
    REMOTE_KIND,
    RESERVED_FOR_ANNOTATION,
    TOKEN_RE,
    asks_before_binding,
    capi_failure_domains,
    capi_owner,
    catalog_namespaces,
    claim_kind,
    compile_allowed,
    event_fingerprint,
    opened_operation,
    operation,
    owner_set,
    public_labels,
    secret_ref,
    tokens_of,
    wants_claim_events,
)

CLAIM = "claim"
HOST = "host"
TENANT = "tenant"  # ("tenant", "", name) for tenant.yml
REMOTE = "remote"  # ("remote", namespace, name) for remote.yml: a claim mirrored into its hardware cluster
CLAIMSET = "claimset"  # ("claimset", namespace, name) for claimsets.yml: a HostClaimSet and its member claims
# The key (so the playbook) of a claim of each kind; a kind not here is served by no playbook of ours.
KEY_OF_CLAIM_KIND = {BAREMETAL_KIND: CLAIM, REMOTE_KIND: REMOTE}
CLAIM_KIND_OF_KEY = {key: kind for kind, key in KEY_OF_CLAIM_KIND.items()}
CLAIM_KINDS = tuple(KEY_OF_CLAIM_KIND)
DEFAULT_KINDS = (BAREMETAL_KIND,)
INSPECT_ANNOTATION = "inspect.metal3.io"
# Host annotations the provisioner acts on (the ones it writes itself are left out).
_HOST_REQUESTS = (PAUSED_ANNOTATION, DETACHED_ANNOTATION, INSPECT_ANNOTATION, PROVISIONER_ANNOTATION)


def key_of(kind: str, obj: dict) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (kind, meta.get("namespace", ""), meta["name"])


def parse_kinds(text: str) -> tuple[str, ...]:
    """--kinds: the claim kinds this controller serves, each one a playbook of ours runs."""
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in KEY_OF_CLAIM_KIND]
    if unknown or not kinds:
        raise ValueError(f"--kinds {text!r}: a comma-separated list of {', '.join(CLAIM_KINDS)}")
    return kinds


def parse_allowed_namespaces(text: str) -> tuple[str, ...]:
    """--remote-allowed-namespaces: the patterns, each checked as the module will (a bad one is a flag error)."""
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    try:
        compile_allowed(list(patterns))
    except ValueError as error:
        raise ValueError(f"--remote-allowed-namespaces: {error}") from error
    return patterns


def claim_key(claim: dict) -> tuple[str, str, str] | None:
    """The key of a claim by its kind; None for a kind no playbook of ours serves (another controller's)."""
    key_kind = KEY_OF_CLAIM_KIND.get(claim_kind(claim))
    return None if key_kind is None else key_of(key_kind, claim)


def is_baremetal(claim: dict) -> bool:
    """Bound by the claim layer to a host of this cluster (hosts, policies and namespace labels concern it)."""
    return claim_kind(claim) == BAREMETAL_KIND


def _baremetal_keys(claims: list[dict]) -> list[tuple[str, str, str]]:
    return sorted(key_of(CLAIM, claim) for claim in claims if is_baremetal(claim))


def _meta(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def _reboots(annotations: dict | None) -> tuple:
    return tuple(
        sorted(
            (k, v)
            for k, v in (annotations or {}).items()
            if k == REBOOT_ANNOTATION or k.startswith(REBOOT_ANNOTATION + "/")
        )
    )


def claim_fingerprint(claim: dict | None):
    """What the claim layer reads of a claim and does not write itself."""
    if claim is None:
        return None
    meta = _meta(claim)
    return (
        meta.get("uid"),
        meta.get("generation"),
        bool(meta.get("deletionTimestamp")),
        _reboots(meta.get("annotations")),
    )


def host_fingerprint_for_claims(host: dict | None):
    """What the claim layer reads of a host and does not write itself (it writes spec and consumerRef)."""
    if host is None:
        return None
    meta, status = _meta(host), host.get("status") or {}
    provisioning = status.get("provisioning") or {}
    return (
        meta.get("uid"),
        bool(meta.get("deletionTimestamp")),
        tuple(sorted((meta.get("labels") or {}).items())),
        provisioning.get("state"),
        status.get("poweredOn"),
        status.get("operationalStatus"),
        status.get("errorType"),
        status.get("errorMessage"),
        IN_USE_ANNOTATION in (meta.get("annotations") or {}),  # the provisioner's: release and bind wait on it
    )


def host_fingerprint_for_provisioner(host: dict | None):
    """What the provisioner reads of a host and does not write itself (it writes status and its annotations)."""
    if host is None:
        return None
    meta = _meta(host)
    annotations = meta.get("annotations") or {}
    requests = tuple(sorted((k, v) for k, v in annotations.items() if k in _HOST_REQUESTS))
    return (
        meta.get("uid"),
        meta.get("generation"),
        bool(meta.get("deletionTimestamp")),
        requests,
        _reboots(annotations),
    )


def consumer_key(host: dict | None) -> tuple[str, str, str] | None:
    ref = ((host or {}).get("spec") or {}).get("consumerRef") or {}
    if ref.get("kind") != "HostClaim" or not ref.get("name"):
        return None
    return (CLAIM, ref.get("namespace") or _meta(host).get("namespace", ""), ref["name"])


def is_free(host: dict | None) -> bool:
    if host is None or _meta(host).get("deletionTimestamp"):
        return False
    state = ((host.get("status") or {}).get("provisioning") or {}).get("state", "")
    # In use (to be deprovisioned and cleaned): not free yet; the provisioner's write that ends it wakes the waiting.
    in_use = IN_USE_ANNOTATION in (_meta(host).get("annotations") or {})
    return consumer_key(host) is None and state in FREE_STATES and not in_use


def _hold_ended(old: dict | None, new: dict | None) -> bool:
    """Node reuse: a free host's hold (free then for its key's claims only) ended: free for everyone now."""
    return HOLD_ANNOTATION in (_meta(old).get("annotations") or {}) and HOLD_ANNOTATION not in (
        _meta(new).get("annotations") or {}
    )


def is_bound(claim: dict) -> bool:
    return bool((claim.get("status") or {}).get("hardwareData"))


def secret_refs(claim: dict) -> list[tuple[str, str]]:
    """(namespace, name) of each Secret a claim references: its data Secrets, and a remote claim's kubeconfig
    (cross-namespace ones are refused in the run; indexed here all the same, as nothing is read)."""
    namespace = _meta(claim).get("namespace", "")
    spec = claim.get("spec") or {}
    refs = [
        ((spec[role] or {}).get("namespace") or namespace, spec[role]["name"])
        for role in DATA_ROLES
        if isinstance(spec.get(role), dict) and spec[role].get("name")
    ]
    kubeconfig = secret_ref(claim) if claim_kind(claim) == REMOTE_KIND else {}
    if kubeconfig.get("name"):
        refs.append((kubeconfig.get("namespace") or namespace, kubeconfig["name"]))
    return refs


def secret_watch_plan(watched, claims: list[dict], served) -> tuple[set, set]:
    """The namespaces whose Secret watch to start and to stop: a namespace is watched while it holds a claim this
    controller serves (`served(claim_key)`), deleted or not, and only then. `claims` may be those of one namespace
    (then `watched` should hold at most that one): the plan covers the namespaces given."""
    wanted = {_meta(claim).get("namespace", "") for claim in claims if served(claim_key(claim))}
    watched = set(watched)
    return wanted - watched, watched - wanted


@dataclass
class Keys:
    """The keys one event concerns; `dropped` says it changed nothing a side reads (a self-caused event, often).
    `wake`: keys it concerns only while they wait (WorkQueue.wake): a claim a run binds meanwhile is not run again."""

    keys: list = field(default_factory=list)
    dropped: bool = False
    wake: list = field(default_factory=list)


def claim_changed(old: dict | None, new: dict | None, named_by_a_host: bool = True) -> Keys:
    """A claim's spec, reboot requests or deletion. A baremetal claim gone concerns the claim layer only while a host
    still names it (`named_by_a_host`: an orphaned host to release); otherwise its going is the echo of our own last
    writes (the host given back, then the finalizer removed), and a run would find nothing to do."""
    if claim_fingerprint(old) == claim_fingerprint(new):
        return Keys(dropped=True)
    if new is None and not named_by_a_host and is_baremetal(old):
        return Keys(dropped=True)
    key = claim_key(new or old)
    return Keys([] if key is None else [key])


def host_changed(
    old: dict | None, new: dict | None, unbound_claims: list[dict], slot_waiting_hosts: list[dict] = ()
) -> Keys:
    """A host event: its own key for the provisioner, its consumer claims, and waiting claims when it became free;
    the hosts waiting for a provisioning slot (`slot_waiting_hosts`) when it gave one up."""
    keys = []
    if host_fingerprint_for_provisioner(old) != host_fingerprint_for_provisioner(new):
        keys.append(key_of(HOST, new or old))
    if host_fingerprint_for_claims(old) != host_fingerprint_for_claims(new):
        keys += [k for k in dict.fromkeys((consumer_key(old), consumer_key(new))) if k is not None]
    wake = []
    if is_free(new) and (not is_free(old) or _hold_ended(old, new)):
        # Which waiting claims its namespace's policies admit is the claim layer's call, in the run.
        wake = _baremetal_keys(unbound_claims)
    if holds_a_slot(old) and not holds_a_slot(new):
        # Which waiting host takes the slot is the provisioner's call (in name order), in the run: now, not at the
        # waiting hosts' own requeue.
        wake += [key_of(HOST, host) for host in slot_waiting_hosts]
    wake = sorted(set(wake) - set(keys))
    return Keys(sorted(set(keys)), dropped=not keys and not wake, wake=wake)


def holds_a_slot(host: dict | None) -> bool:
    """Provisioning or deprovisioning: the host counts against the provisioner's concurrency."""
    return host is not None and ((host.get("status") or {}).get("provisioning") or {}).get("state") in BUSY_STATES


def waits_for_a_slot(host: dict) -> bool:
    """The provisioner delayed the host's (de)provisioning: every slot was taken (Metal3's "delayed" status)."""
    return (host.get("status") or {}).get("operationalStatus") == "delayed"


def policy_changed(old: dict | None, new: dict | None, claims: list[dict]) -> Keys:
    """A policy's spec may admit waiting claims or refuse bound ones, anywhere: every baremetal claim is concerned."""
    if (old or {}).get("spec") == (new or {}).get("spec") and bool(old) == bool(new):
        return Keys(dropped=True)
    return Keys(_baremetal_keys(claims))


def namespace_changed(old: dict | None, new: dict | None, claims_in_namespace: list[dict]) -> Keys:
    """Namespace labels feed policies (and a tenant's limit), its tenancy annotations the hooks' verdicts and the
    tenant's host pools: the namespace's baremetal claims are concerned when they change. A namespace appearing or
    going (in or out of the namespace selector) concerns all its claims."""
    if bool(old) != bool(new):
        return Keys(sorted(key for key in map(claim_key, claims_in_namespace) if key is not None))

    def binding_inputs(namespace: dict | None):
        meta = _meta(namespace)
        annotations = meta.get("annotations") or {}
        return meta.get("labels"), [annotations.get(name) for name in BINDING_ANNOTATIONS]

    if binding_inputs(old) == binding_inputs(new):
        return Keys(dropped=True)
    return Keys(_baremetal_keys(claims_in_namespace))


def infra_namespace_changed(old: dict | None, new: dict | None, hosts_in_namespace: list[dict]) -> Keys:
    """A namespace's provisioner label opts its hosts in or out: the provisioner side takes each host up again."""
    label = PROVISIONER_ANNOTATION
    if (_meta(old).get("labels") or {}).get(label) == (_meta(new).get("labels") or {}).get(label):
        return Keys(dropped=True)
    return Keys(sorted(key_of(HOST, host) for host in hosts_in_namespace))


def operation_tokens(host: dict | None, key: bytes) -> list[str]:
    """The media tokens a host's provisioner operation holds: its job's, the warm writer's it was handed to, the one a
    cleaning's writer would wait under. A callback under any of them is news for that host (the host store's index).
    The host records references only; `key` (the media directory's) opens them."""
    return tokens_of(opened_operation(operation(host or {}), key)[0])


def callback_token(filename: str) -> str | None:
    """The token whose callback a file of the media directory's callbacks/ is; None for any other file (the media
    server's temporary ones start with a dot)."""
    token = filename[: -len(CALLBACK_SUFFIX)] if filename.endswith(CALLBACK_SUFFIX) else ""
    return token if TOKEN_RE.fullmatch(token) else None


def callback_arrived(token: str, hosts_holding: list[dict], key: bytes) -> Keys:
    """An image writer called back (or a warm one took its job) under `token`: the host whose operation holds it is
    stepped now, not at its next poll. `hosts_holding`: those the host store's operation_tokens index names for it.
    A token no host's operation holds (withdrawn, not recorded yet, or nobody's) wakes nothing."""
    return Keys(sorted({key_of(HOST, host) for host in hosts_holding if token in operation_tokens(host, key)}))


def secret_changed(old: dict | None, new: dict | None, referencing_claims: list[dict]) -> Keys:
    """A tenant Secret, known by its metadata only: a new resourceVersion is a new content (we never write them)."""
    if _meta(old).get("resourceVersion") == _meta(new).get("resourceVersion"):
        return Keys(dropped=True)
    return Keys(sorted(key for key in map(claim_key, referencing_claims) if key is not None))


def tenant_changed(old: dict | None, new: dict | None) -> Keys:
    """A Tenant's spec or deletion (its status and finalizer are the tenant step's own writes). Gone: nothing left."""

    def fingerprint(tenant: dict | None):
        meta = _meta(tenant)
        return (meta.get("uid"), meta.get("generation"), bool(meta.get("deletionTimestamp")))

    if new is None or fingerprint(old) == fingerprint(new):
        return Keys(dropped=True)
    return Keys([key_of(TENANT, new)])


def tenant_claim_namespaces(tenant: dict) -> list[str]:
    """The namespaces whose claims concern a Tenant: its children, when one of its hooks wants claim events."""
    if not wants_claim_events(tenant):
        return []
    spec = tenant.get("spec") or {}
    children = [f"{spec.get('tenantName', '')}-{child}" for child in spec.get("childNamespaces") or []]
    return sorted(set(children) | set((tenant.get("status") or {}).get("childNamespaces") or []))


def claim_changed_for_tenants(old: dict | None, new: dict | None, tenants: list[dict]) -> Keys:
    """A claim's bound or provisioned state, its lease's warning or end (or the claim itself) changing is a claim
    event for the tenants whose hooks want them (tenants: those of the claim's namespace, by
    tenant_claim_namespaces); a lease entering its warning is also when blocking CLAIM_EXPIRED hooks are asked. A
    claim made (its binding to be asked about) or gone (its verdict to drop) concerns the tenants with blocking
    CLAIM_BOUND hooks."""
    if (old is None) != (new is None):
        asking = [tenant for tenant in tenants if asks_before_binding(tenant)]
        if asking:
            return Keys(sorted(key_of(TENANT, tenant) for tenant in asking))
    # A claim absent is an unbound one: its creation tells nothing, its deletion once bound is a release.
    if not tenants or event_fingerprint(old) == event_fingerprint(new):
        return Keys()
    return Keys(sorted(key_of(TENANT, tenant) for tenant in tenants))


def claimset_changed(old: dict | None, new: dict | None) -> Keys:
    """A HostClaimSet's spec (replicas: `kubectl scale` too) or its creation; its status is the step's own write. Gone:
    the garbage collector deletes its claims, nothing is left to run."""

    def fingerprint(claim_set: dict | None):
        meta = _meta(claim_set)
        return (meta.get("uid"), meta.get("generation"), bool(meta.get("deletionTimestamp")))

    if new is None or fingerprint(old) == fingerprint(new):
        return Keys(dropped=True)
    return Keys([key_of(CLAIMSET, new)])


def member_fingerprint(claim: dict | None):
    """What a set's status counts of a member claim: that it is there, being deleted, bound, Ready."""
    if claim is None:
        return None
    conditions = {c.get("type"): c.get("status") for c in (claim.get("status") or {}).get("conditions") or []}
    return (
        _meta(claim).get("uid"),
        bool(_meta(claim).get("deletionTimestamp")),
        conditions.get("Association"),
        conditions.get("Ready"),
    )


def claim_changed_for_sets(old: dict | None, new: dict | None) -> Keys:
    """A member claim made, bound, Ready, deleted or gone: its set (the controller owner reference) counts again."""
    owner = owner_set(new or old)
    if owner is None or not owner.get("name"):
        return Keys()
    if member_fingerprint(old) == member_fingerprint(new):
        return Keys()  # counted by the claim's own mapping (claim_changed), not twice
    return Keys([(CLAIMSET, _meta(new or old).get("namespace", ""), owner["name"])])


# -- HostCatalogs: ("catalog", namespace, "hosts") for catalog.yml, one per tenant namespace a publishing policy admits.
# The handlers queue these keys --catalog-interval late (handlers.EventHandlers._enqueue_catalogs): however many host
# events come meanwhile, a namespace's catalog is counted once then.

CATALOG = "catalog"


def catalog_key(namespace: str) -> tuple[str, str, str]:
    return (CATALOG, namespace, CATALOG_NAME)


def host_fingerprint_for_catalogs(host: dict | None):
    """What a catalog counts of a host: its labels (the classes), whether it is free, bound or neither, and what a
    public label's value is checked against (BMC address, boot MAC)."""
    if host is None:
        return None
    meta, spec = _meta(host), host.get("spec") or {}
    status = host.get("status") or {}
    return (
        meta.get("uid"),
        bool(meta.get("deletionTimestamp")),
        tuple(sorted((meta.get("labels") or {}).items())),
        tuple(sorted((k, v) for k, v in (meta.get("annotations") or {}).items() if k in _CATALOG_ANNOTATIONS)),
        (spec.get("consumerRef") or {}).get("kind"),
        (status.get("provisioning") or {}).get("state"),
        bool(status.get("errorType")),
        (spec.get("bmc") or {}).get("address"),
        spec.get("bootMACAddress"),
    )


_CATALOG_ANNOTATIONS = (PAUSED_ANNOTATION, IN_USE_ANNOTATION, RESERVED_FOR_ANNOTATION)
_CATALOG_ANNOTATIONS += (CATALOG_BOOKINGS_ANNOTATION, CATALOG_HOLD_ANNOTATION)


def publishes(policy: dict, infra_namespace: str) -> bool:
    """Whether a policy of this infra namespace publishes its hosts in catalogs."""
    return _meta(policy).get("namespace") == infra_namespace and public_labels(policy) is not None


def catalog_keys(policies: list[dict], namespaces: dict) -> list[tuple[str, str, str]]:
    return [catalog_key(name) for name in catalog_namespaces(policies, namespaces)]


def host_changed_for_catalogs(old: dict | None, new: dict | None, policies: list[dict], namespaces: dict) -> Keys:
    """A host counted differently: the catalogs of the namespaces its infra namespace's policies publish it to
    (namespaces: name -> labels)."""
    if host_fingerprint_for_catalogs(old) == host_fingerprint_for_catalogs(new):
        return Keys()
    infra = _meta(new or old).get("namespace", "")
    return Keys(catalog_keys([p for p in policies if publishes(p, infra)], namespaces))


def policy_changed_for_catalogs(old: dict | None, new: dict | None, namespaces: dict) -> Keys:
    """A policy's spec: the catalogs of the namespaces it published to before or does now (one it no longer
    publishes to is deleted by the run)."""
    if (old or {}).get("spec") == (new or {}).get("spec") and bool(old) == bool(new):
        return Keys()
    keys = catalog_keys([old] if old else [], namespaces) + catalog_keys([new] if new else [], namespaces)
    return Keys(sorted(set(keys)))


def namespace_changed_for_catalogs(old: dict | None, new: dict | None, policies: list[dict]) -> Keys:
    """A namespace's labels (they feed the policies) or host pools: its own catalog, if a publishing policy admitted
    it before or does now. A namespace gone takes its catalog with it."""

    def inputs(namespace: dict | None):
        meta = _meta(namespace)
        return meta.get("labels"), (meta.get("annotations") or {}).get(HOST_POOLS_ANNOTATION)

    if new is None or (old is not None and inputs(old) == inputs(new)):
        return Keys()
    name = _meta(new).get("name", "")
    before = catalog_keys(policies, {name: _meta(old).get("labels")}) if old else []
    return Keys(sorted(set(before + catalog_keys(policies, {name: _meta(new).get("labels")}))))


# -- Cluster API: ("capimachine", namespace, name) for capi_machines.yml, ("capicluster", namespace, name) for
# capi_clusters.yml (--cluster-api). What each reads: the MetalClaimMachine's spec (its providerID, our write, left
# out), owner Machine, pause and deletion; the Machine's bootstrap data, cluster, failure domain; the Cluster's pause
# and infrastructure; the machine's HostClaim as far as the machine's status shows it.

CAPI_MACHINE = "capimachine"
CAPI_CLUSTER = "capicluster"


def _capi_paused(obj: dict | None) -> bool:
    return CAPI_PAUSED_ANNOTATION in (_meta(obj).get("annotations") or {})


def metal_machine_cluster(metal_machine: dict) -> list[tuple[str, str]]:
    """[(namespace, cluster name)] of a MetalClaimMachine (Cluster API labels it), for the handlers' index."""
    meta = _meta(metal_machine)
    name = (meta.get("labels") or {}).get(CAPI_CLUSTER_NAME_LABEL)
    return [(meta.get("namespace", ""), name)] if name else []


def metal_machine_fingerprint(metal_machine: dict | None):
    if metal_machine is None:
        return None
    meta = _meta(metal_machine)
    spec = {k: v for k, v in (metal_machine.get("spec") or {}).items() if k != "providerID"}
    return (
        meta.get("uid"),
        repr(sorted(spec.items())),
        bool(meta.get("deletionTimestamp")),
        capi_owner(metal_machine, "Machine"),
        (meta.get("labels") or {}).get(CAPI_CLUSTER_NAME_LABEL),
        _capi_paused(metal_machine),
    )


def metal_machine_changed(old: dict | None, new: dict | None) -> Keys:
    """A MetalClaimMachine made, changed by its owner or user, paused or deleted; gone: its claim goes with it (the
    garbage collector), nothing is left to run."""
    if new is None or metal_machine_fingerprint(old) == metal_machine_fingerprint(new):
        return Keys(dropped=True)
    return Keys([key_of(CAPI_MACHINE, new)])


def _infrastructure_ref(obj: dict | None, kind: str) -> str:
    ref = ((obj or {}).get("spec") or {}).get("infrastructureRef") or {}
    return ref.get("name", "") if ref.get("kind") == kind else ""


def capi_machine_changed(old: dict | None, new: dict | None) -> Keys:
    """A Cluster API Machine whose infrastructure is a MetalClaimMachine: its bootstrap data, cluster, failure domain,
    deletion (its MetalClaimMachine is the key)."""

    def fingerprint(machine: dict | None):
        if machine is None:
            return None
        spec = machine.get("spec") or {}
        return (
            _meta(machine).get("uid"),
            (spec.get("bootstrap") or {}).get("dataSecretName"),
            spec.get("clusterName"),
            spec.get("failureDomain"),
            bool(_meta(machine).get("deletionTimestamp")),
        )

    name = _infrastructure_ref(new, CAPI_MACHINE_KIND) or _infrastructure_ref(old, CAPI_MACHINE_KIND)
    if not name or fingerprint(old) == fingerprint(new):
        return Keys()
    return Keys([(CAPI_MACHINE, _meta(new or old).get("namespace", ""), name)])


def capi_cluster_changed(old: dict | None, new: dict | None, metal_machines: list[dict]) -> Keys:
    """A Cluster paused or resumed, or its infrastructure provisioned: its MetalClaimCluster and, given as
    `metal_machines`, the MetalClaimMachines of its namespace labelled with its name."""

    def fingerprint(cluster: dict | None):
        if cluster is None:
            return None
        spec, status = cluster.get("spec") or {}, cluster.get("status") or {}
        return (
            _meta(cluster).get("uid"),
            bool(spec.get("paused")),
            _capi_paused(cluster),
            bool((status.get("initialization") or {}).get("infrastructureProvisioned")),
        )

    if fingerprint(old) == fingerprint(new):
        return Keys()
    namespace = _meta(new or old).get("namespace", "")
    keys = sorted(key_of(CAPI_MACHINE, m) for m in metal_machines)
    infrastructure = _infrastructure_ref(new, CAPI_CLUSTER_KIND) or _infrastructure_ref(old, CAPI_CLUSTER_KIND)
    if infrastructure:
        keys.append((CAPI_CLUSTER, namespace, infrastructure))
    return Keys(keys)


def metal_cluster_changed(old: dict | None, new: dict | None) -> Keys:
    """A MetalClaimCluster made, its endpoint changed, owned by its Cluster, paused; its status is the step's own."""

    def fingerprint(metal_cluster: dict | None):
        meta = _meta(metal_cluster)
        return (
            meta.get("uid"),
            meta.get("generation"),
            capi_owner(metal_cluster, "Cluster"),
            _capi_paused(metal_cluster),
        )

    if new is None or fingerprint(old) == fingerprint(new):
        return Keys(dropped=True)
    return Keys([key_of(CAPI_CLUSTER, new)])


def claim_changed_for_capi(old: dict | None, new: dict | None) -> Keys:
    """A HostClaim a MetalClaimMachine controls: bound, given its host's facts, Ready, deleted, gone (the machine's
    status and its release follow it)."""
    claim = new or old
    owner = next(
        (
            ref.get("name")
            for ref in _meta(claim).get("ownerReferences") or []
            if ref.get("kind") == CAPI_MACHINE_KIND and ref.get("controller")
        ),
        None,
    )
    if not owner:
        return Keys()

    def fingerprint(found: dict | None):
        if found is None:
            return None
        status = found.get("status") or {}
        conditions = {c.get("type"): (c.get("status"), c.get("reason")) for c in status.get("conditions") or []}
        nics = ((status.get("hardware") or {}).get("nics")) or []
        return (
            _meta(found).get("uid"),
            bool(_meta(found).get("deletionTimestamp")),
            conditions.get("Association"),
            conditions.get("Ready"),
            repr(status.get("hardwareData")),
            tuple(nic.get("ip") for nic in nics),
        )

    if fingerprint(old) == fingerprint(new):
        return Keys()
    return Keys([(CAPI_MACHINE, _meta(claim).get("namespace", ""), owner)])


def catalog_changed_for_capi(old: dict | None, new: dict | None, metal_clusters: list[dict]) -> Keys:
    """A namespace's HostCatalog whose published failure domains changed: the MetalClaimClusters of that namespace
    (given) show them."""
    if capi_failure_domains(old) == capi_failure_domains(new):
        return Keys()
    return Keys(sorted(key_of(CAPI_CLUSTER, c) for c in metal_clusters))
