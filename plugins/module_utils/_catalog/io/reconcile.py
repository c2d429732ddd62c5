# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hostclaim_catalog: write each tenant namespace's HostCatalog. The I/O edge over _catalog/pure/catalog.py.

A CatalogRun is the run kernel (_common/io/run.py): the policies, Namespaces, BareMetalHosts and HostCatalogs listed
once each, cluster-wide, whatever the number of namespaces in the batch. Per namespace: a catalog made when a policy
with a catalog admits it and none is there, its status written only when a count or its condition changed, and the
catalog deleted (by uid) when no such policy admits it any more. A HostCatalog this step did not make (another name,
or without its label) is never touched.
"""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._catalog.pure import catalog as cat
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import (
    AlreadyExistsError,
    ConflictError,
    KubeError,
)
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.run import Run
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import conditions as cond
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.outcomes import DONE, ERROR, RETRY


class CatalogRun(Run):
    """A Run of the catalog step."""

    def __init__(self, kube, check_mode: bool, diff: bool = False):
        super().__init__(kube, cond.now(), check_mode, diff=diff, thread_name="catalog")


def reconcile_catalogs(run: CatalogRun, wanted: list[dict] | None) -> dict:
    policies = run.kube.list(cat.API_VERSION, cat.POLICY_KIND)
    namespaces = {ns["metadata"]["name"]: ns.get("metadata") or {} for ns in run.kube.list("v1", "Namespace")}
    hosts = run.kube.list(cat.API_VERSION, cat.HOST_KIND)
    catalogs = {cat.key(c)[0]: c for c in run.kube.list(cat.API_VERSION, cat.KIND) if cat.ours(c)}
    infra = {cat.key(h)[0] for h in hosts}
    told = cat.fleet(hosts, namespaces, policies)  # what no catalog may tell, the whole fleet's
    if wanted is None:
        labels = {name: meta.get("labels") for name, meta in namespaces.items()}
        chosen = sorted(set(cat.catalog_namespaces(policies, labels)) | set(catalogs))
        others = []
    else:
        asked = {(w["namespace"], w["name"]) for w in wanted}
        chosen = sorted({ns for ns, name in asked if name == cat.NAME})
        others = sorted((ns, name) for ns, name in asked if name != cat.NAME)

    def one(namespace: str) -> dict:
        return _reconcile(
            run, namespace, namespaces.get(namespace), policies, hosts, infra, catalogs.get(namespace), told
        )

    results = [{"namespace": ns, "name": name, "state": "absent", "changed": False} for ns, name in others]
    results += run.each(one, chosen)
    results.sort(key=lambda r: (r["namespace"], r["name"]))
    return run.finish(
        {
            "changed": any(r["changed"] for r in results),
            "catalogs": results,
            "outcomes": cat.catalog_outcomes(results),
            "writes": run.api.writes(),
        }
    )


def _reconcile(run, namespace, namespace_meta, policies, hosts, infra, catalog, told) -> dict:
    result = {"namespace": namespace, "name": cat.NAME, "changed": False, "result": DONE}
    try:
        return _apply(run, namespace, namespace_meta, policies, hosts, infra, catalog, result, told)
    except ConflictError as error:  # written meanwhile (another controller): the next run counts again
        result.update(result=RETRY, state="Conflict", reason=str(error))
    except KubeError as error:
        result.update(result=ERROR, state="Error", reason=str(error))
    return result


def _apply(run, namespace, namespace_meta, policies, hosts, infra, catalog, result, told) -> dict:
    if namespace_meta:
        counted = cat.count(namespace, namespace_meta, policies, hosts, infra, run.timestamp, told)
    else:
        counted = {"admitted": False}
    if not counted["admitted"]:
        if catalog is None:
            result.update(state="absent")
            return result
        uid = catalog["metadata"].get("uid", "")
        if run.check_mode or run.kube.delete(cat.API_VERSION, cat.KIND, cat.NAME, namespace, uid):
            run.record(cat.KIND, catalog, None)
        result.update(state="Withdrawn", changed=True)
        return result
    created = False
    if catalog is None:
        body = cat.new_catalog(namespace)
        try:
            catalog = body if run.check_mode else run.kube.create(body)
        except AlreadyExistsError:  # made meanwhile by a concurrent run: that run writes its counts
            result.update(result=RETRY, state="Conflict", reason=f"HostCatalog {cat.NAME} was made meanwhile")
            return result
        run.record(cat.KIND, None, catalog)
        created = True
    catalog.setdefault("apiVersion", cat.API_VERSION)
    catalog.setdefault("kind", cat.KIND)
    current = catalog.get("status")
    status = cat.desired_status(counted, current, run.timestamp)
    patch = cat.status_patch(current, status, run.timestamp)
    if patch:
        if not run.check_mode:
            run.kube.patch_status(catalog, patch)
        run.record_status(cat.KIND, catalog, patch)
    result.update(
        changed=bool(created or patch),
        state=cond.find(status["conditions"], cat.READY)["reason"],
        classes=status["classCount"],
        **{name: status[name] for name in cat.COUNTS},
    )
    return result
