"""kfed's read API (`reads.kfed.dev/v1alpha1`), served by the manager's aggregated API server
beside Kueue's visibility API: what the CLI used to read from the workers with their
credentials, now answered by the manager from what its MultiKueue controllers hold, so that a
user needs no worker credential (the answers are `manager.multikueue.rules.reads`'s):

- `clusters` and `clusters/{name}` (cluster-scoped; `list` and `get`): each worker's health and
  capacity, from its MultiKueueCluster and the manager's connection and caches;
- `namespaces/{ns}/workloads/{name}/verdicts` (`get`): each worker's verdict on a Workload;
- `namespaces/{ns}/workloads/{name}/pods` and `.../log?pod=P[&container=C][&follow=true]`
  (`get`): the pods of the job on the worker that runs it, and one container's log, read by
  the manager from the worker with its worker credential. The caller must also be allowed to
  `get pods/log` in the namespace on the manager, as for a pod of the manager's own.

Every request is authorized by a SubjectAccessReview for the caller (`VisibilityServer.guard`),
per namespace for the namespaced resources. A fleet-level read names no namespace that the
caller may not read: `clusters` names a worker's queue drift and kept namespaces only in the
namespaces whose LocalQueues the caller may list, and counts the others (`reads.for_reader`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Container, Sequence
from typing import Any

from aiohttp import web

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Pod
from manager.api.meta import find_condition
from manager.controllers.caches import Caches
from manager.controllers.visibility import ApiGroup, VisibilityServer, add_discovery, status
from manager.engine.integrations.adapter import JobAdapter
from manager.kube.errors import InvalidError, KubeError, NotFoundError
from manager.kube.informer import Informer
from manager.multikueue.controllers.clusters import ClusterController
from manager.multikueue.controllers.remote import RemoteCluster
from manager.multikueue.rules import federation, reads, selection

log = logging.getLogger("kfed.multikueue.reads")

# The caller's right that reading a pod's log on a worker stands for: the same on the manager.
POD_LOG = {"group": "", "version": "v1", "resource": "pods", "subresource": "log", "verb": "get"}


def attributes(verb: str, resource: str, *, namespace: str = "", name: str = "") -> dict[str, str]:
    """A SubjectAccessReview's resource attributes for `resource` (`workloads/verdicts`: a
    subresource after the slash) of the read API."""
    plural, _, subresource = resource.partition("/")
    found = {"group": reads.GROUP, "version": reads.VERSION, "resource": plural, "verb": verb}
    for key, value in (("subresource", subresource), ("namespace", namespace), ("name", name)):
        if value:
            found[key] = value
    return found


def worker_error(cluster: str, err: KubeError) -> web.Response:
    """The answer for a worker's refusal of a read made for the caller: its own words, with its
    meaning kept for what the caller asked wrong (a container the pod does not have: 400; a pod
    gone since: 404); anything else is the worker's trouble, to try again (503)."""
    message = f"worker {cluster}: {err}"
    if isinstance(err, InvalidError):
        return status(400, "BadRequest", message)
    if isinstance(err, NotFoundError):
        return status(404, "NotFound", message)
    return status(503, "ServiceUnavailable", message)


class ReadApi:
    """The read API's handlers, over the manager's caches and MultiKueue's connections."""

    def __init__(
        self,
        *,
        caches: Caches,
        configs: Informer[kueue.MultiKueueConfig],
        cluster_objects: Informer[kueue.MultiKueueCluster],
        clusters: ClusterController,
        origin: str,
        adapters: Sequence[JobAdapter[Any]],
    ) -> None:
        self.caches = caches
        self.configs = configs
        self.cluster_objects = cluster_objects
        self.clusters = clusters
        self.origin = origin
        self.adapters = tuple(adapters)
        self.server: VisibilityServer | None = None

    def group(self) -> ApiGroup:
        return ApiGroup(reads.GROUP, reads.VERSIONS, self.routes)

    def routes(self, server: VisibilityServer, app: web.Application) -> None:
        self.server = server
        base = f"/apis/{reads.GROUP}"
        served = f"{base}/{reads.VERSION}"
        add_discovery(app, reads.GROUP, reads.VERSIONS, reads.group_document, reads.resource_list)
        app.router.add_get(f"{served}/clusters", self.list_clusters)
        app.router.add_get(f"{served}/clusters/{{name}}", self.get_cluster)
        workload = f"{served}/namespaces/{{namespace}}/workloads/{{name}}"
        app.router.add_get(f"{workload}/verdicts", self.verdicts)
        app.router.add_get(f"{workload}/pods", self.pods)
        app.router.add_get(f"{workload}/log", self.log)

    async def _guard(self, request: web.Request, *checks: dict[str, str]) -> web.Response | None:
        assert self.server is not None
        return await self.server.guard(request, *checks)

    # --- workers' health and capacity ---------------------------------------------------------------
    async def _readable(
        self, request: web.Request, clusters: Sequence[kueue.MultiKueueCluster], *, name: str = ""
    ) -> Container[str] | web.Response:
        """Of the namespaces the clusters' conditions name, those the caller may read: all of
        them for a caller who may read the MultiKueueClusters themselves (`EVERY_NAMESPACE`)."""
        assert self.server is not None
        named = reads.namespaces_named(clusters)
        whole = reads.CLUSTER_OBJECTS
        objects = {**whole, "verb": "get", "name": name} if name else {**whole, "verb": "list"}
        allowed = await self.server.permitted(request, [objects, *({**reads.LIST_LOCAL_QUEUES, "namespace": ns} for ns in named)])
        if isinstance(allowed, web.Response):
            return allowed
        if allowed[0]:
            return reads.EVERY_NAMESPACE
        return {ns for ns, ok in zip(named, allowed[1:], strict=True) if ok}

    def _cluster_item(self, cluster: kueue.MultiKueueCluster, readable: Container[str]) -> dict[str, Any]:
        remote = self.clusters.remotes.get(cluster.name)
        quotas = remote.quotas() if remote is not None else None
        seen = reads.WorkerSighting(
            cluster,
            connected=remote is not None and remote.connected,
            error=(remote.last_error if remote is not None else "") or "not connected",
            copies=remote.workloads.items() if remote is not None and remote.workloads is not None else None,
            cluster_queues=quotas.cluster_queues if quotas is not None else None,
        )
        return reads.cluster_item(seen, origin=self.origin, readable=readable, worker_words=readable is reads.EVERY_NAMESPACE)

    async def list_clusters(self, request: web.Request) -> web.Response:
        refused = await self._guard(request, attributes("list", reads.CLUSTERS))
        if refused is not None:
            return refused
        clusters = sorted(self.cluster_objects.items(), key=lambda cl: cl.name)
        readable = await self._readable(request, clusters)
        if isinstance(readable, web.Response):
            return readable
        return web.json_response(reads.clusters_document([self._cluster_item(cluster, readable) for cluster in clusters]))

    async def get_cluster(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        refused = await self._guard(request, attributes("get", reads.CLUSTERS, name=name))
        if refused is not None:
            return refused
        cluster = self.cluster_objects.get(name)
        if cluster is None:
            return status(404, "NotFound", f'{reads.CLUSTERS}.{reads.GROUP} "{name}" not found')
        readable = await self._readable(request, [cluster], name=name)
        if isinstance(readable, web.Response):
            return readable
        return web.json_response(reads.cluster_document(self._cluster_item(cluster, readable)))

    # --- a Workload's verdicts --------------------------------------------------------------------------
    def _workload(self, request: web.Request) -> kueue.Workload | web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        wl = self.caches.workloads.get(f"{namespace}/{name}")
        if wl is None:
            return status(404, "NotFound", f'workloads.{c.GROUP} "{name}" not found')
        return wl

    def _workers_of(self, wl: kueue.Workload) -> list[str]:
        """The workers of the Workload's MultiKueue check: on the Workload once it has quota,
        else on its ClusterQueue (as the check will be)."""
        config = self._config_of(wl)
        return sorted(config.spec.clusters) if config is not None else []

    def _config_of(self, wl: kueue.Workload) -> kueue.MultiKueueConfig | None:
        cq_name = wl.status.admission.cluster_queue if wl.status and wl.status.admission else ""
        if not cq_name:
            lq = self.caches.local_queues.get(f"{wl.namespace}/{wl.spec.queue_name}")
            cq_name = (lq.spec.cluster_queue or "") if lq is not None else ""
        cq = self.caches.cluster_queues.get(cq_name) if cq_name else None
        check = federation.workload_check(wl, cq, self.caches.admission_checks)
        return federation.config_of_check(check, self.caches.admission_checks.get, self.configs.get)

    def _remote(self, name: str, wl: kueue.Workload) -> reads.Remote:
        cluster = self.cluster_objects.get(name)
        if cluster is None:
            return reads.Remote(name, False, "MissingCluster", error="no MultiKueueCluster of this name")
        cond = find_condition(cluster.status.conditions if cluster.status else None, c.ACTIVE)
        reason = cond.reason if cond is not None else ""
        if cond is None or cond.status != "True":
            return reads.Remote(name, False, reason, error=cond.message if cond is not None else "")
        remote = self.clusters.remotes.get(name)
        if remote is None or not remote.connected:
            return reads.Remote(name, False, "unreachable", error=(remote.last_error if remote is not None else "") or "not connected")
        return reads.Remote(name, True, reason, copy=remote.workload(wl.key), offers=reads.largest_offers(wl, remote.quotas()))

    async def verdicts(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        refused = await self._guard(request, attributes("get", reads.VERDICTS, namespace=namespace, name=name))
        if refused is not None:
            return refused
        wl = self._workload(request)
        if isinstance(wl, web.Response):
            return wl
        excluded = selection.for_workload(wl, self._config_of(wl), self.cluster_objects.get).excluded
        remotes = [dataclasses.replace(self._remote(worker, wl), excluded=excluded.get(worker, "")) for worker in self._workers_of(wl)]
        return web.json_response(reads.verdicts_document(wl, remotes))

    # --- pods and logs on the worker ------------------------------------------------------------------
    async def _worker_pods(self, request: web.Request, resource: str) -> tuple[kueue.Workload, RemoteCluster, list[Pod]] | web.Response:
        """The Workload, the worker that runs it, and its job's pods there; or the Status to
        answer with. The caller must be allowed `resource` and to read pods' logs here."""
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        refused = await self._guard(
            request, attributes("get", resource, namespace=namespace, name=name), {**POD_LOG, "namespace": namespace}
        )
        if refused is not None:
            return refused
        wl = self._workload(request)
        if isinstance(wl, web.Response):
            return wl
        cluster = (wl.status.cluster_name or "") if wl.status else ""
        if not cluster:
            return status(404, "NotFound", f"workload {namespace}/{name} runs on no worker")
        remote = self.clusters.remotes.get(cluster)
        if remote is None or remote.client is None or not remote.connected:
            why = (remote.last_error if remote is not None else "") or "not connected"
            return status(503, "ServiceUnavailable", f"worker {cluster} cannot be reached: {why}")
        # Its adapter says where its pods are: a Job's by its name label, a single Pod by its own
        # name, a pod group's by the group's label (a group's Workload has no controller owner).
        query = next((q for a in self.adapters if (q := a.pod_query(wl)) is not None), None)
        if query is None:
            return status(404, "NotFound", f"workload {namespace}/{name} has no job of a kind MultiKueue runs")
        try:
            listed = await remote.client.list(
                Pod, namespace=namespace, label_selector=query.label_selector, field_selector=query.field_selector
            )
        except KubeError as err:
            return status(503, "ServiceUnavailable", f"worker {cluster}: {err}")
        return wl, remote, listed.items

    async def pods(self, request: web.Request) -> web.Response:
        found = await self._worker_pods(request, reads.PODS)
        if isinstance(found, web.Response):
            return found
        wl, remote, pods = found
        return web.json_response(reads.pods_document(wl, remote.name, pods))

    async def log(self, request: web.Request) -> web.StreamResponse:
        found = await self._worker_pods(request, reads.LOG)
        if isinstance(found, web.Response):
            return found
        wl, remote, pods = found
        wanted, container = request.query.get("pod", ""), request.query.get("container") or None
        pod = next((p for p in pods if p.name == wanted), None)
        if pod is None:
            names = ", ".join(p.name for p in pods) or "none"
            return status(400, "BadRequest", f"pod: Invalid value: {wanted!r}: not a pod of workload {wl.key} (its pods: {names})")
        follow = request.query.get("follow", "") == "true"
        assert remote.client is not None
        lines = remote.client.pod_logs(pod.name, namespace=pod.namespace, container=container, follow=follow)
        try:
            first: str | None = await anext(lines)
        except StopAsyncIteration:
            first = None
        except KubeError as err:
            return worker_error(remote.name, err)
        response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await response.prepare(request)
        try:
            if first is not None:
                await response.write(f"{first}\n".encode())
                async for line in lines:
                    await response.write(f"{line}\n".encode())
        except KubeError as err:
            log.warning("a worker's log stream broke", extra={"key": wl.key, "cluster": remote.name, "error": str(err)})
        finally:
            await lines.aclose()
        await response.write_eof()
        return response
