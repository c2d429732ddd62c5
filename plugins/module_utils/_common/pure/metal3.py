# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names of Metal3's API that the claim layer and the provisioner share. Pure: constants only."""

from __future__ import annotations

API_VERSION = "metal3.io/v1alpha1"

# Annotations on BareMetalHosts (and, for reboot, on HostClaims), as Metal3 spells them.
PAUSED_ANNOTATION = "baremetalhost.metal3.io/paused"
DETACHED_ANNOTATION = "baremetalhost.metal3.io/detached"
REBOOT_ANNOTATION = "reboot.metal3.io"
# Ours, read by both sides: the provisioner marks a host that may have run a consumer's OS while it was free of any
# image (powered on, {"consumer": uid, "since": time}) and removes the mark only when deprovisioning ends. The claim
# layer gives no host back (clears no consumerRef) and binds none while it is there.
IN_USE_ANNOTATION = "provisioner.metalclaim.io/in-use"
# Ours, read by both sides: the claim side marks a host whose release kept its disks for node reuse
# ({"namespace", "namespaceUID", "claim", "since"}) and may never change or remove the mark; only the provisioner
# removes it, at the end of a deprovisioning that wiped the disks. While it is there only a claim of that namespace
# object (its uid) under a live hold binds the host; any other end of the hold cleans it first.
UNCLEANED_ANNOTATION = "metalclaim.io/uncleaned"
# Ours, written by the provisioner only (the claim side may not: config/admission/host_fields_policy.yaml): the host
# is available and powered on in the deploy system it booted, after a power-off, for its last cleaning, its writer
# waiting for a job (value: since when). Such a host counts as given back and free although it is on, and the binder
# prefers it for disk images.
WARM_ANNOTATION = "provisioner.metalclaim.io/warm"

# A host's firmware (BIOS) settings: the claim layer writes spec.settings, the provisioner status (same name and
# namespace as the BareMetalHost).
FIRMWARE_SETTINGS_KIND = "HostFirmwareSettings"

# The data Secrets a claim (and a host) references, in the order the guide lists them.
DATA_ROLES = ("userData", "metaData", "networkData")
# A host's failure domain: Cluster API's label (what Metal3 users set), else the well-known zone label. The binder
# prefers a claim's spec.failureDomain by it; the Cluster API provider lists the values a catalog publishes.
FAILURE_DOMAIN_LABELS = ("infrastructure.cluster.x-k8s.io/failure-domain", "topology.kubernetes.io/zone")
# A tenant namespace's one HostCatalog (the claim side writes it, _catalog), and the value it shows for a public
# label's value that would name a host, a namespace or a BMC.
CATALOG_KIND = "HostCatalog"
CATALOG_NAME = "hosts"
CATALOG_HIDDEN = "HIDDEN"

# Every value of BareMetalHost status.provisioning.state (baremetal-operator's ProvisioningState).
STATES = (
    "",
    "unmanaged",
    "registering",
    "match profile",
    "preparing",
    "ready",
    "available",
    "provisioning",
    "provisioned",
    "externally provisioned",
    "deprovisioning",
    "inspecting",
    "powering off before delete",
    "deleting",
)
PROVISIONED_STATES = ("provisioned", "externally provisioned")
FREE_STATES = ("available", "ready")
