# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Everything the metalclaim controller (controller/metalclaim) takes from this collection, in one place.

The controller runs the collection's playbooks; to decide *which* runs an event calls for, it also reads a few facts
the collection defines: the annotations and states that make a host free or busy, which claims a host, policy or
Tenant change can wake, the provisioner's media token layout. They come through this module and no other
(tests/unit/controller/test_contract.py fails when the controller imports any other module of the collection), so a
change to a private helper of a concern cannot silently change which events wake which claims: whoever changes a
name here changes the controller's contract, and sees it.

Only pure code, but token_key (the provisioner's media key: the controller opens operation references with it).
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure.cluster import (
    failure_domains as capi_failure_domains,  # what of a HostCatalog a MetalClaimCluster's status shows
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure.machine import (
    API_VERSION as CAPI_PROVIDER_API_VERSION,  # MetalClaimMachine, MetalClaimCluster (infrastructure.cluster.x-k8s.io)
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure.machine import (
    CAPI_API_VERSION,  # the Cluster API version the provider reads Machines and Clusters in
    capi_owner,  # the Cluster API Machine or Cluster owning one of the provider's objects
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure.machine import (
    CLUSTER_KIND as CAPI_CLUSTER_KIND,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure.machine import (
    CLUSTER_NAME_LABEL as CAPI_CLUSTER_NAME_LABEL,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure.machine import (
    MACHINE_KIND as CAPI_MACHINE_KIND,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._capi.pure.machine import (
    PAUSED_ANNOTATION as CAPI_PAUSED_ANNOTATION,  # Cluster API's pause of one object
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._catalog.pure.catalog import (
    BOOKINGS_ANNOTATION as CATALOG_BOOKINGS_ANNOTATION,  # a host's bookings: what a catalog counts as booked
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._catalog.pure.catalog import (
    HOLD_ANNOTATION as CATALOG_HOLD_ANNOTATION,  # a host's node-reuse hold: what a catalog counts as held
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._catalog.pure.catalog import (
    NAME as CATALOG_NAME,  # the one HostCatalog of a tenant namespace
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._catalog.pure.catalog import (
    catalog_namespaces,  # the tenant namespaces whose catalog a policy or namespace change touches
    public_labels,  # a policy's catalog rule (None: it publishes nothing)
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.binding import (
    DEFAULT_CLAIM_KIND as BAREMETAL_KIND,  # the claims this collection's claim layer serves
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.binding import (
    claim_kind,  # spec.kind, baremetal when unset
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure.reuse import (
    HOLD_ANNOTATION,  # node reuse: a host held for one namespace's key is free for nobody else
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.claimsets import (
    owner_set,  # the HostClaimSet a claim is a member of
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.metal3 import (
    API_VERSION,
    DATA_ROLES,
    DETACHED_ANNOTATION,
    FREE_STATES,
    IN_USE_ANNOTATION,
    PAUSED_ANNOTATION,
    REBOOT_ANNOTATION,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.tenancy import (
    BINDING_ANNOTATIONS,
    HOST_POOLS_ANNOTATION,
    RESERVED_FOR_ANNOTATION,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.media import (
    token_key,  # the media directory's key: token references open under it
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.machine import (
    BUSY_STATES,  # a host in one of these holds a provisioning slot (--provision-max-concurrent)
    PROVISIONER_ANNOTATION,  # who provisions a host (ours, or Metal3's BMO): a host annotation or namespace label
    operation,  # the provisioner's operation in flight on a host (its annotation)
    tokens_of,  # the media tokens an operation holds
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.media_protocol import (
    CALLBACK_SUBDIR,
    CALLBACK_SUFFIX,
    TOKEN_RE,
    opened_operation,  # an operation's token references as the tokens they stand for (under the media key)
    redact,  # a token as logs may show it
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.reach import (
    media_problem,  # why the media settings cannot work (said at start), or ""
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure.kubeconfig import (
    compile_allowed,
    secret_ref,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._remote.pure.mirror import REMOTE_KIND
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._tenancy.pure.hooks import (
    asks_before_binding,  # a Tenant whose hooks must answer before its claims bind
    event_fingerprint,  # what of a Tenant its claim-event hooks read
    wants_claim_events,  # a Tenant with hooks on claim events
)

__all__ = [
    "API_VERSION",
    "BAREMETAL_KIND",
    "BINDING_ANNOTATIONS",
    "BUSY_STATES",
    "CALLBACK_SUBDIR",
    "CALLBACK_SUFFIX",
    "CAPI_API_VERSION",
    "CAPI_CLUSTER_KIND",
    "CAPI_CLUSTER_NAME_LABEL",
    "CAPI_MACHINE_KIND",
    "CAPI_PAUSED_ANNOTATION",
    "CAPI_PROVIDER_API_VERSION",
    "CATALOG_BOOKINGS_ANNOTATION",
    "CATALOG_HOLD_ANNOTATION",
    "CATALOG_NAME",
    "DATA_ROLES",
    "DETACHED_ANNOTATION",
    "FREE_STATES",
    "HOLD_ANNOTATION",
    "HOST_POOLS_ANNOTATION",
    "IN_USE_ANNOTATION",
    "PAUSED_ANNOTATION",
    "PROVISIONER_ANNOTATION",
    "REBOOT_ANNOTATION",
    "REMOTE_KIND",
    "RESERVED_FOR_ANNOTATION",
    "TOKEN_RE",
    "asks_before_binding",
    "capi_failure_domains",
    "capi_owner",
    "catalog_namespaces",
    "claim_kind",
    "compile_allowed",
    "event_fingerprint",
    "media_problem",
    "opened_operation",
    "operation",
    "owner_set",
    "public_labels",
    "redact",
    "secret_ref",
    "token_key",
    "tokens_of",
    "wants_claim_events",
]
