"""The controller's side of its contract with the collection: one entry per kind of key.

Each group says which playbook a batch of its keys runs, the role variable that names the batch's objects, the
options the controller's flags pass (only those set: the roles' defaults are the one source of a default), whether
its step runs in ansible-playbook's own process and may be handed to a standby run, and which task's result
carries the run's ``outcomes`` (the shape is the collection's: plugins/module_utils/_common/pure/outcomes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import collection
from .mapper import CAPI_CLUSTER, CAPI_MACHINE, CATALOG, CLAIM, CLAIMSET, HOST, REMOTE, TENANT

COLLECTION = "metalclaim.hostclaim"


@dataclass(frozen=True)
class Group:
    playbook: str  # playbooks/<playbook>.yml; also the `playbook` label of the run metrics
    module: str  # the task (module FQCN) whose result carries the outcomes
    objects_var: str  # the role variable naming the batch's objects
    by_name: bool = False  # the objects are cluster-scoped: a list of names, not {namespace, name}
    # The role's variable (prefix + "_in_process") saying its step runs in ansible-playbook's process (the action
    # plugin, no module process); and (prefix + "_standby") a standby run's socket and token (see standby.py).
    role_prefix: str = ""
    in_process: bool = False
    standby: bool = False
    options: Callable[[object], dict] = field(default=lambda settings: {})

    @property
    def in_process_var(self) -> str:
        return f"{self.role_prefix}_in_process"

    @property
    def standby_var(self) -> str:
        return f"{self.role_prefix}_standby"

    def extravars(self, keys: list, settings) -> dict:
        if self.by_name:
            objects = [name for _kind, _namespace, name in keys]
        else:
            objects = [{"namespace": namespace, "name": name} for _kind, namespace, name in keys]
        return {self.objects_var: objects, **self.run_options(settings)}

    def run_options(self, settings) -> dict:
        """A run's variables besides its objects (all a standby run starts with: its objects come later)."""
        extravars = dict(self.options(settings))
        if self.in_process:
            extravars[self.in_process_var] = True
        return extravars

    def playbook_path(self) -> str:
        return collection.playbook(self.playbook)

    def result_of(self, results: dict) -> dict | None:
        """The run's result of this group's task (None: the task never ran)."""
        return results.get(f"{COLLECTION}.{self.module}")


def _set(**options) -> dict:
    """The options given a value (flags left unset leave the roles' defaults)."""
    return {name: value for name, value in options.items() if value}


def _remote_options(settings) -> dict:
    return _set(remote_allowed_namespaces=list(settings.remote_allowed_namespaces))


def _tenant_options(settings) -> dict:
    return {
        "tenancy_fail_on_refusal": False,  # a refusal is the Tenant's status, not a run to retry
        "tenancy_claim_side_subjects": [settings.tenant_claim_side],
        "tenancy_required_prefix": settings.tenant_required_prefix,
    }


def _provision_options(settings) -> dict:
    return _set(
        provisioner_deploy_iso_url=settings.deploy_iso_url,
        provisioner_media_dir=settings.media_dir,
        provisioner_media_url=settings.media_url,
        provisioner_max_concurrent=settings.provision_max_concurrent,
        provisioner_callback_timeout=settings.provision_callback_timeout,
        provisioner_power_poll_interval=settings.provision_power_poll_interval,
        provisioner_cleaning_erase=settings.provision_cleaning_erase,
        # With a media directory the provisioner side watches the writers' callbacks (manager.py): each wakes its
        # host, so a writer at work needs no short poll.
        provisioner_callback_events=bool(settings.media_dir),
    )


GROUPS = {
    CLAIM: Group(
        "reconcile", "hostclaim_reconcile", "claims_list", role_prefix="claims", in_process=True, standby=True
    ),
    REMOTE: Group("remote", "hostclaim_remote", "remote_claims", options=_remote_options),
    CLAIMSET: Group("claimsets", "hostclaimset_reconcile", "claimsets_list"),
    CATALOG: Group("catalog", "hostclaim_catalog", "catalog_list"),
    CAPI_MACHINE: Group("capi_machines", "metalclaim_machine_reconcile", "capi_machines"),
    CAPI_CLUSTER: Group("capi_clusters", "metalclaim_cluster_reconcile", "capi_clusters"),
    TENANT: Group("tenant", "tenant_reconcile", "tenancy_names", by_name=True, options=_tenant_options),
    HOST: Group(
        "provision",
        "bmh_redfish",
        "provisioner_hosts",
        role_prefix="provisioner",
        in_process=True,
        standby=True,
        options=_provision_options,
    ),
}
