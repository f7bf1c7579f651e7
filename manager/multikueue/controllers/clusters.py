"""The MultiKueueCluster controller.

A MultiKueueCluster names a kubeconfig (a Secret in the manager's namespace, or a file under
the allowed prefix). Its controller loads and validates it, keeps one RemoteCluster per
worker, and writes the `Active` condition with Kueue's reasons.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Secret
from manager.api.meta import MAX_CONDITION_MESSAGE, Condition, find_condition, same_condition, set_condition, utcnow
from manager.engine.integrations.adapter import JobAdapter
from manager.engine.integrations.registry import BATCH_JOB
from manager.kube.client import KubeClient
from manager.kube.errors import NotFoundError
from manager.kube.informer import Informer
from manager.multikueue.controllers.remote import RemoteCluster
from manager.multikueue.rules.agent_health import REASON_AGENT_NOT_RUNNING
from manager.multikueue.rules.kubeconfig import REASON_BAD, KubeconfigRejectedError, check_kubeconfig_path, parse_kubeconfig
from manager.multikueue.rules.plan import WORKER_NAMESPACES_ANNOTATION, connection_failed_message, worker_namespaces
from manager.multikueue.rules.queues import KEPT_CONDITION, QUEUES_CONDITION
from manager.runtime.controller import Controller, Result
from manager.runtime.metrics import Registry
from manager.runtime.runnables import Runnable, always, leader

log = logging.getLogger("kfed.multikueue.clusters")

REASON_BAD_NAMESPACES = "BadWorkerNamespaces"


def _what_connects(cluster: kueue.MultiKueueCluster) -> tuple[Any, ...]:
    annotations = cluster.metadata.annotations or {}
    return cluster.spec, cluster.metadata.deletion_timestamp, annotations.get(WORKER_NAMESPACES_ANNOTATION)


@dataclass(eq=False)
class ClusterController:
    """Keeps `remotes` (one RemoteCluster per MultiKueueCluster) in line with the objects."""

    client: KubeClient
    _: KW_ONLY
    namespace: str
    origin: str
    qps: float
    burst: int
    path_prefix: str
    allow_insecure_http: bool = False
    clusters: Informer[kueue.MultiKueueCluster]
    secrets: Informer[Secret]
    on_connection_change: Callable[[RemoteCluster], None]
    on_remote_object: Callable[[RemoteCluster, str, str], None]
    metrics: Registry
    clock: Callable[[], datetime] = utcnow
    adapters: Sequence[JobAdapter[Any]] = (BATCH_JOB,)  # the job kinds each worker is watched for
    # Capacity-aware dispatch: each worker's queues are watched too, and a change is reported.
    on_quotas: Callable[[RemoteCluster], None] | None = None

    def __post_init__(self) -> None:
        self.remotes: dict[str, RemoteCluster] = {}
        # Clusters whose object went away while a config still lists them: when it went (the
        # worker-lost clock for what they admitted; Kueue would use "now" forever).
        self.removed_at: dict[str, datetime] = {}
        # What each cluster's Active condition should say: judged by every replica (each keeps
        # its own connections warm), written by the lease holder's status controller.
        self.verdicts: dict[str, tuple[str, str, str]] = {}
        # What each cluster's `kfed.dev/QueuesInSync` condition should say, where the manager
        # propagates queues (`manager.multikueue.controllers.propagation` reports it; written with Active).
        self.queue_verdicts: dict[str, tuple[str, str, str]] = {}
        # And its `kfed.dev/NamespacesKept` condition: namespaces the manager created there and
        # keeps because they hold objects it did not create.
        self.kept_verdicts: dict[str, tuple[str, str, str]] = {}
        self.controller = Controller("multikueuecluster", self.reconcile, metrics=self.metrics, workers=4)
        self.status_controller = Controller("multikueuecluster-status", self._publish, metrics=self.metrics, workers=2)
        self._connected = self.metrics.gauge("kfed_multikueue_cluster_connected", "1 when the worker cluster is connected.", ("cluster",))
        self._reconnects = self.metrics.gauge("kfed_multikueue_cluster_reconnects", "Reconnections after a failure.", ("cluster",))
        self._failures = self.metrics.gauge("kfed_multikueue_cluster_failed_attempts", "Failed connection attempts in a row.", ("cluster",))
        self._latency = self.metrics.histogram(
            "kfed_multikueue_remote_request_seconds", "Latency of requests to worker clusters.", ("cluster", "verb")
        )
        self.clusters.add_handler(self._on_cluster)
        self.secrets.add_handler(self._on_secret)

    # --- events ------------------------------------------------------------------------------------
    def _on_cluster(self, kind: str, old: kueue.MultiKueueCluster | None, new: kueue.MultiKueueCluster | None) -> None:
        if new is not None and new.name in self.verdicts:
            # `_publish` compares the verdict with the cached condition. A verdict that came
            # while the cache still showed it (before the cache saw an older verdict's write)
            # was skipped then; this update is its next chance (seen after a manager restart:
            # the cluster left BadKubeConfig on the apiserver while connected).
            self.status_controller.enqueue(new.name)
        if old is not None and new is not None and _what_connects(old) == _what_connects(new):
            return  # a status write of ours
        obj = new or old
        if obj is not None:
            self.controller.enqueue(obj.name)

    def _on_secret(self, kind: str, old: Secret | None, new: Secret | None) -> None:
        secret = new or old
        if secret is None:
            return
        for cluster in self.clusters.items():
            ref = cluster.spec.cluster_source.kube_config
            if ref is not None and ref.effective_location_type == "Secret" and ref.location == secret.name:
                self.controller.enqueue(cluster.name)

    def _remote_changed(self, remote: RemoteCluster) -> None:
        self._connected.set(1 if remote.connected else 0, remote.name)
        self._reconnects.set(remote.reconnects, remote.name)
        self._failures.set(remote.failed_attempts, remote.name)
        self.controller.enqueue(remote.name)
        self.on_connection_change(remote)

    def _observe(self, cluster: str, verb: str, seconds: float) -> None:
        self._latency.observe(seconds, cluster, verb)

    # --- reconcile ---------------------------------------------------------------------------------
    async def reconcile(self, name: str) -> Result | None:
        cluster = self.clusters.get(name)
        if cluster is None or cluster.metadata.deletion_timestamp is not None:
            remote = self.remotes.pop(name, None)
            if remote is not None:
                await remote.stop()
                self.on_connection_change(remote)
            self.removed_at.setdefault(name, self.clock())
            self.verdicts.pop(name, None)
            self.queue_verdicts.pop(name, None)
            self.kept_verdicts.pop(name, None)
            self._connected.set(0, name)
            return None
        self.removed_at.pop(name, None)
        remote = self.remotes.get(name)
        if remote is None:
            remote = RemoteCluster(
                name,
                origin=self.origin,
                qps=self.qps,
                burst=self.burst,
                on_change=self._remote_changed,
                on_object=self.on_remote_object,
                observe_latency=self._observe,
                clock=self.clock,
                adapters=self.adapters,
                on_quotas=self.on_quotas,
            )
            self.remotes[name] = remote
        try:
            kubeconfig = await self._load(cluster)
        except KubeconfigRejectedError as err:
            # Same as Kueue: the client is kept but disconnected, so the worker-lost clock of
            # what it admitted keeps running.
            await remote.stop(reason=str(err))
            self._judge(cluster, "False", err.reason, f"load client config failed: {err}")
            self.on_connection_change(remote)
            return None
        try:
            namespaces = worker_namespaces(cluster.metadata.annotations)
        except ValueError as err:
            await remote.stop(reason=str(err))
            self._judge(cluster, "False", REASON_BAD_NAMESPACES, str(err))
            self.on_connection_change(remote)
            return None
        remote.start(kubeconfig, namespaces=namespaces)
        agent = remote.agent_verdict()
        if remote.connected and agent.running is False:
            self._judge(cluster, "False", REASON_AGENT_NOT_RUNNING, agent.message)
        elif remote.connected:
            self._judge(cluster, "True", "Active", "Connected")
        elif remote.failed_attempts > 0 and remote.next_attempt is not None:
            message = connection_failed_message(remote.last_error, attempts=remote.failed_attempts, next_attempt=remote.next_attempt)
            self._judge(cluster, "False", "ClientConnectionFailed", message)
        return None

    async def _load(self, cluster: kueue.MultiKueueCluster) -> dict[str, Any]:
        ref = cluster.spec.cluster_source.kube_config
        if ref is None:
            raise KubeconfigRejectedError("BadClusterProfile", "clusterProfileRef is not supported; use kubeConfig")
        if ref.effective_location_type == "Path":
            path = check_kubeconfig_path(ref.location, self.path_prefix)
            try:
                raw = await asyncio.to_thread(Path(path).read_bytes)
            except OSError as err:
                raise KubeconfigRejectedError(REASON_BAD, f'cannot read "{path}": {err.strerror}') from None
            return parse_kubeconfig(raw, allow_http=self.allow_insecure_http)
        secret = self.secrets.get(f"{self.namespace}/{ref.location}")
        if secret is None:
            raise KubeconfigRejectedError(REASON_BAD, f'Secret "{ref.location}" not found')
        encoded = (secret.data or {}).get(c.MULTIKUEUE_SECRET_KEY)
        if encoded is None:
            raise KubeconfigRejectedError(REASON_BAD, f'key "{c.MULTIKUEUE_SECRET_KEY}" not found in secret "{ref.location}"')
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise KubeconfigRejectedError(REASON_BAD, f'key "{c.MULTIKUEUE_SECRET_KEY}" in secret "{ref.location}" is not base64') from None
        return parse_kubeconfig(raw, allow_http=self.allow_insecure_http)

    def _judge(self, cluster: kueue.MultiKueueCluster, status: str, reason: str, message: str) -> None:
        """Record what the cluster's Active condition should say; the lease holder writes it."""
        self.verdicts[cluster.name] = (status, reason, message[:MAX_CONDITION_MESSAGE])
        self.status_controller.enqueue(cluster.name)

    def report_queues(self, name: str, verdict: tuple[str, str, str]) -> None:
        """Record what the cluster's `kfed.dev/QueuesInSync` condition should say."""
        status, reason, message = verdict
        self.queue_verdicts[name] = (status, reason, message[:MAX_CONDITION_MESSAGE])
        self.status_controller.enqueue(name)

    def report_kept(self, name: str, verdict: tuple[str, str, str]) -> None:
        """Record what the cluster's `kfed.dev/NamespacesKept` condition should say."""
        status, reason, message = verdict
        self.kept_verdicts[name] = (status, reason, message[:MAX_CONDITION_MESSAGE])
        self.status_controller.enqueue(name)

    async def _publish(self, name: str) -> Result | None:
        """Write a cluster's Active condition from its latest verdict (and its queues' one, where
        there is one), when they differ."""
        cluster = self.clusters.get(name)
        wanted = [
            (c.ACTIVE, self.verdicts.get(name)),
            (QUEUES_CONDITION, self.queue_verdicts.get(name)),
            (KEPT_CONDITION, self.kept_verdicts.get(name)),
        ]
        if cluster is None or wanted[0][1] is None:
            return None
        old_conditions = cluster.status.conditions if cluster.status else None
        conditions = old_conditions
        for kind, verdict in wanted:
            if verdict is None:
                continue
            status, reason, message = verdict
            new = Condition(type=kind, status=status, reason=reason, message=message, observed_generation=cluster.metadata.generation)
            if not same_condition(find_condition(conditions, kind), new):
                conditions = set_condition(conditions, new, now=self.clock())
        if conditions is old_conditions:
            return None
        body = {"status": {"conditions": [cond.to_dict() for cond in conditions or []]}}
        try:
            await self.client.patch(kueue.MultiKueueCluster, cluster.name, body, subresource="status")
        except NotFoundError:
            return None
        status, reason, _ = self.verdicts[name]
        log.info("cluster condition", extra={"cluster": cluster.name, "status": status, "reason": reason})
        return None

    def runnables(self) -> list[Runnable]:
        """Every replica connects to the workers; only the lease holder writes their status."""

        async def publish() -> None:
            for name in list(self.verdicts):
                self.status_controller.enqueue(name)
            await self.status_controller.run()

        return [always(self.controller.name, self._connect), leader(self.status_controller.name, publish)]

    async def _connect(self) -> None:
        for cluster in self.clusters.items():
            self.controller.enqueue(cluster.name)
        await self.controller.run()

    async def stop(self) -> None:
        self.status_controller.stop()
        for remote in list(self.remotes.values()):
            await remote.stop()

    # --- what the workload controller asks ---------------------------------------------------------
    def resync(self) -> None:
        for cluster in self.clusters.items():
            self.controller.enqueue(cluster.name)
