#!/usr/bin/python
# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: bmh_redfish
short_description: Provision BareMetalHosts over Redfish, one step per host per run
version_added: 0.1.0
description:
  - "Drives BareMetalHosts the way Metal3's baremetal-operator does, without Ironic: each run
    advances every selected host by one step of Metal3's state machine (C(registering),
    C(inspecting), C(available), C(provisioning), C(provisioned), C(deprovisioning),
    C(externally provisioned), C(powering off before delete), C(deleting)) and writes Metal3's
    status fields (C(operationalStatus), C(errorType), C(errorMessage), C(errorCount),
    C(goodCredentials), C(hardware), C(poweredOn), C(operationHistory)). A step is computed from
    the host and what its BMC reports now, so a run may be repeated or interrupted at any point."
  - "Registration checks the BMC credentials (the Secret C(spec.bmc.credentialsName) in the host's
    own namespace, keys C(username) and C(password)); a new Secret version is checked again.
    Inspection reads the Redfish inventory into C(status.hardware) and a HardwareData object of
    the same name, and checks C(spec.bootMACAddress) against the NICs."
  - "Power follows C(spec.online). C(reboot.metal3.io) reboots the host (soft, then hard after
    O(power_off_timeout); C({\"mode\": \"hard\"}) goes hard at once) and is removed once the host
    is off; keyed C(reboot.metal3.io/<key>) annotations hold the host off until removed."
  - "As in the user guide, provisioning starts once the host has C(spec.image) and C(spec.online)
    is true. C(live-iso) images are inserted as virtual CD with a one-time boot override to CD,
    then the host is powered on (or reset); the host is C(provisioned) when the BMC confirms media,
    boot target and power. Disk images (C(qcow2), C(raw)) boot O(deploy_iso_url), the image writer,
    with a per-host config drive (the tenant's user/meta/network data and the writer's
    instructions) served by the media server under an unguessable path; the writer's callback
    completes provisioning, and none within O(callback_timeout) is a C(provisioning error)."
  - "Removing the image deprovisions: media ejected, boot override cleared, powered off, and with
    C(automatedCleaningMode: metadata) (the default) the image writer cleans every fixed disk, as deep as
    O(cleaning_erase) says (or C(full) where the host is annotated C(metalclaim.io/cleaning-erase: full)),
    each disk reported in the host's C(Cleaned) condition. Without a deploy ISO the host's C(Cleaned)
    condition says cleaning is unsupported (disks not wiped); it is never skipped silently."
  - "Firmware: while a host provisions, the BIOS attributes its HostFirmwareSettings (same name) asks for in
    C(spec.settings) are set where they differ, before the deploy or live ISO boots; the values they had are
    first recorded in the host annotation C(provisioner.metalclaim.io/firmware-baseline) and put back while it
    deprovisions, before the cleaning boot. The attributes read back go to the HostFirmwareSettings' status
    (C(settings), conditions C(Valid) and C(ChangeDetected)). An attribute the BMC does not have is a
    C(provisioning error) naming it. Hosts with nothing asked and nothing to put back cost no BIOS request."
  - "Errors set Metal3's error fields and back off exponentially (O(backoff_base) doubling up to
    O(backoff_cap)). C(baremetalhost.metal3.io/paused) stops all actions on a host,
    C(baremetalhost.metal3.io/detached) all BMC actions. At most O(max_concurrent) hosts provision
    or deprovision at once; others wait with C(operationalStatus: delayed)."
  - "Only hosts that opt in are driven: annotated C(metalclaim.io/provisioner: metalclaim), or not
    annotated and in a namespace labelled C(metalclaim.io/provisioner=metalclaim). Another value on
    the host or its namespace leaves it to that provisioner (for example Metal3's baremetal-operator),
    and a host marked neither way is left untouched (beside a baremetal-operator it is the operator's),
    unless it already holds this provisioner's finalizer C(metalclaim.io/provisioner) (it finishes
    what it started)."
author:
  - metalclaim maintainers (@metalclaim)
extends_documentation_fragment:
  - metalclaim.hostclaim.k8s_auth
  - metalclaim.hostclaim.standby
options:
  hosts:
    description: The hosts to advance; all hosts this provisioner owns when omitted.
    type: list
    elements: dict
    suboptions:
      namespace:
        description: The host's namespace.
        type: str
        required: true
      name:
        description: The host's name.
        type: str
        required: true
  namespaces:
    description: Only hosts in these namespaces.
    type: list
    elements: str
  deploy_iso_url:
    description:
      - URL of the image writer's live ISO. Needed for disk images and for cleaning.
      - Those build config drives, so the module fails at once when this is set and the C(pycdlib)
        Python package is missing.
    type: str
  media_dir:
    description: The media server's directory (C(python -m metalclaim.mediaserver --dir)).
    type: path
  media_url:
    description: The media server's base URL, as the hosts reach it.
    type: str
  max_concurrent:
    description: How many hosts may be provisioning or deprovisioning at once.
    type: int
    default: 20
  power_off_timeout:
    description: Seconds a soft power-off may take before a hard one.
    type: float
    default: 60
  callback_timeout:
    description: Seconds the image writer has to call back.
    type: float
    default: 1800
  callback_events:
    description:
      - Whether the caller is woken when an image writer calls back, as the controller's provisioner side is (it
        watches the callbacks in O(media_dir) and runs the host's step when one arrives). A host whose writer is at
        work then asks for its next step (RV(hosts[].requeue_after)) only about once a minute, as a safety net, or
        when its O(callback_timeout) falls due if that is sooner, instead of every few seconds.
      - Leave it false when nothing watches the callbacks (a playbook run by hand), where only the short poll finds
        them.
    type: bool
    default: false
  power_poll_interval:
    description:
      - Seconds after which a host whose power agrees with its spec is read again (RV(hosts[].poll_after)), so
        a power change made behind the provisioner's back shows in C(status.poweredOn), and on its claim,
        within this bound.
    type: float
    default: 60
  cleaning_erase:
    description:
      - How deep automated cleaning goes on every host (C(automatedCleaningMode) other than C(disabled)), as
        Ironic's two cleaning steps.
      - C(metadata) (Ironic's C(erase_devices_metadata)) wipes partition tables and filesystem, RAID and LVM
        signatures (the first and last MiB of each disk and of each partition it had); data between them stays on
        the disk, readable by whoever reads it raw. Seconds per disk.
      - C(full) (Ironic's C(erase_devices), with zeros) overwrites every byte of every fixed disk with zeros
        (C(blkdiscard --zeroout), else written zeros), then reads samples back; the time grows with the disks' size
        and speed (a spinning 8 TB disk written at 200 MB/s takes about 11 hours), so O(callback_timeout) must
        cover it.
      - A host annotated C(metalclaim.io/cleaning-erase) C(full) is fully erased whatever this says; the stronger
        mode wins, and an annotation with another value stops cleaning with a C(provisioning error) until fixed.
    type: str
    choices: [metadata, full]
    default: metadata
  backoff_base:
    description: Seconds to wait after a first error; doubled after each further one.
    type: float
    default: 10
  backoff_cap:
    description: The longest wait between retries, in seconds.
    type: float
    default: 600
  redfish_timeout:
    description: Seconds to wait for one Redfish request.
    type: float
    default: 10
  redfish_retries:
    description: Retries of a Redfish request the BMC answered with a server error.
    type: int
    default: 1
  wait:
    description:
      - Repeat steps until no host needs another one soon, or this many seconds have passed
        (0 runs one step per host).
      - While waiting, a host is stepped again only once its own RV(hosts[].requeue_after) has passed,
        and its BMC connection (service root, login) is reused from step to step.
      - The first step lists BareMetalHosts and Namespaces (one request each); later steps read
        again only the hosts they step (one GET each; one LIST instead when more than 1 + N/20 of
        N hosts are due, as a LIST then costs less) and otherwise follow the hosts the API returned
        from this run's own writes. The BMC
        Secret is read when a connection is opened, so once per host per run unless the BMC fails.
    type: float
    default: 0
  workers:
    description:
      - How many hosts are read and driven at once. Redfish requests to different BMCs overlap;
        the provisioning slots of O(max_concurrent) are still handed out one host at a time, in name order.
    type: int
    default: 8
requirements:
  - sushy >= 5
  - pycdlib (for disk images and cleaning, when O(deploy_iso_url) is set)
attributes:
  check_mode:
    support: full
    description: Reads the BMCs and reports the step each host would take; changes nothing.
  diff_mode:
    support: partial
    description: Shows, per object the run wrote (or, in check mode, would write), the fields it changed,
      from before the run's first step to after its last.
    details:
      - "Of a BareMetalHost: its annotations, finalizers and status (C(provisioning.state), C(poweredOn),
        C(operationalStatus), C(errorType), C(errorMessage), ...), without C(status.lastUpdated); a HardwareData
        written by inspection is shown by its C(spec) (in check mode, as one to be created)."
      - Actions on the BMCs and the media server are not objects, so they are not in the diff (RV(hosts[].actions)
        lists them), nor are Events.
      - Built from the objects the run already holds, so asking for a diff costs no API request. The BMC Secret is
        only read and never shown, and the media token in the operation annotation is redacted.
  idempotent:
    support: full
    description: A host whose BMC already matches its spec takes no action, and nothing is written for it
      (no status, annotation, HardwareData or Event).
"""

EXAMPLES = r"""
- name: Advance every host by one step
  metalclaim.hostclaim.bmh_redfish:
  register: provisioner

- name: Bring the hosts of one namespace up to date, with disk images and cleaning
  metalclaim.hostclaim.bmh_redfish:
    namespaces: [infrahost]
    deploy_iso_url: http://192.0.2.1:8080/images/image-writer.iso
    media_dir: /var/lib/metalclaim/media
    media_url: http://192.0.2.1:8081
    wait: 300
"""

RETURN = r"""
hosts:
  description: One entry per host considered.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The host's namespace.
      type: str
    name:
      description: The host's name.
      type: str
    previous:
      description: The provisioning state before this run.
      type: str
    state:
      description: The provisioning state after this run (its last step).
      type: str
    actions:
      description: What was done on the BMC and the media server (no URLs or tokens).
      type: list
      elements: str
    error:
      description: The error recorded on the host.
      type: str
      returned: on error
    event_error:
      description: Why the step's Event could not be recorded; the step itself was carried out and written.
      type: str
      returned: when recording the Event failed
    firmware_error:
      description: Why the HostFirmwareSettings' status could not be written; the next step writes it again.
      type: str
      returned: when that write failed
    skipped:
      description: Why nothing was done (paused, detached, backing off).
      type: str
      returned: when nothing was done
    requeue_after:
      description: Seconds after which the host wants another step.
      type: float
    poll_after:
      description: The host has settled; seconds after which its power should be read again (O(power_poll_interval)).
      type: float
      returned: when the host has settled
    redfish_requests:
      description: HTTP requests made to the host's BMC in this run.
      type: int
    api_calls:
      description:
        - Requests made to the Kubernetes API for this host in this run, by verb and kind
          (C(get Secret) is its BMC Secret, or a data Secret when a config drive is built).
        - The run's lists (RV(api_calls)) belong to no host and are not counted here.
      type: dict
      sample: {"get Secret": 1, "patch BareMetalHost": 1, "create Event": 1}
    changed:
      description: Whether anything was done or written for this host in this run.
      type: bool
states:
  description: How many of the considered hosts are in each provisioning state.
  returned: always
  type: dict
requeue_after:
  description: The soonest any host wants another step, in seconds; null when none does.
  returned: always
  type: float
redfish_requests:
  description: HTTP requests made to all BMCs in this run.
  returned: always
  type: int
media_swept:
  description:
    - Media withdrawn because no host records their operation any more and they are older than
      O(callback_timeout) plus 5 minutes (a step that published and then failed to record them).
  returned: when any was
  type: int
outcomes:
  description:
    - What this run says about each host it reconciled, one entry per host (the controller reads these; see
      docs/architecture.md). C(result) is C(done) (nothing left to do), C(wait) (for another object's change),
      C(retry) (a temporary failure such as a conflict, backed off) or C(error) (this host failed
      by itself, backed off).
    - C(after), when set, is when to look again, in seconds; C(reason) says why, briefly.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: rack-1
      name: h1
      result: done
      after: 2.5
      reason: provisioning
api_calls:
  description:
    - Requests made to the Kubernetes API in this run, by verb (C(list), C(get), C(create), C(replace),
      C(patch), C(delete)); every verb is present. C(create), C(replace), C(patch) and C(delete) are writes.
    - A run on settled hosts writes nothing and reads one list of each of BareMetalHosts and
      Namespaces and each stepped host's BMC Secret.
  returned: always
  type: dict
  sample: {"list": 2, "get": 4, "create": 0, "replace": 0, "patch": 0, "delete": 0}
steps:
  description: How many steps the run made (1 without O(wait)).
  returned: always
  type: int
"""

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.module import STANDBY_ARG_SPEC, run_module
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.provisioner import (
    BMH_REDFISH_ARG_SPEC,
    libraries,
    provision,
    validate,
)

ARGUMENT_SPEC = {**BMH_REDFISH_ARG_SPEC, **STANDBY_ARG_SPEC}


def main():
    run_module(ARGUMENT_SPEC, provision, libraries=libraries, validate=validate)


if __name__ == "__main__":
    main()
