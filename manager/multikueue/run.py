"""MultiKueue's part of the manager process: its informers and controllers, started with the
manager's own (see `manager.controllers.run.Process`)."""

from __future__ import annotations

from typing import Any

from manager.api import kueue
from manager.api.core import Secret
from manager.controllers.run import Process
from manager.kube.informer import Informer
from manager.multikueue.admission_check import AdmissionCheckController
from manager.multikueue.clusters import ClusterController
from manager.multikueue.gc import GarbageCollector
from manager.multikueue.propagation import QueuePropagator
from manager.multikueue.read_api import ReadApi
from manager.multikueue.settings import Settings
from manager.multikueue.workload import WorkloadController
from manager.runtime.runnables import Runnable


class MultiKueue:
    def __init__(self, process: Process) -> None:
        opts = process.opts
        client = process.client
        self.settings = Settings.from_configuration(process.configuration, kubeconfig_path_prefix=opts.kubeconfig_path_prefix)
        self.cluster_objects: Informer[kueue.MultiKueueCluster] = Informer(client, kueue.MultiKueueCluster)
        self.configs: Informer[kueue.MultiKueueConfig] = Informer(client, kueue.MultiKueueConfig)
        # Only the manager's own namespace: the kubeconfig Secrets live there (least privilege).
        self.secrets: Informer[Secret] = Informer(client, Secret, namespace=opts.namespace)
        self.informers: list[Any] = [self.cluster_objects, self.configs, self.secrets]
        self.clusters = ClusterController(
            client,
            namespace=opts.namespace,
            origin=self.settings.origin,
            qps=opts.qps,
            burst=opts.burst,
            path_prefix=self.settings.kubeconfig_path_prefix,
            allow_insecure_http=opts.multikueue_allow_insecure_http,
            clusters=self.cluster_objects,
            secrets=self.secrets,
            adapters=process.integrations.multikueue,
            on_connection_change=lambda remote: self.on_connection_change(remote),
            on_remote_object=lambda remote, ns, name: self.workloads.on_remote_object(remote, ns, name),
            # Every dispatcher reads the workers' queues: the refusal of a Workload no worker
            # could ever admit holds for all of them.
            on_quotas=lambda remote: self.workloads.on_quotas(remote),
            metrics=process.metrics,
        )
        self.propagation = QueuePropagator(
            caches=process.caches, configs=self.configs, clusters=self.clusters, settings=self.settings, metrics=process.metrics
        )
        self.workloads = WorkloadController(
            client,
            process.caches,
            settings=self.settings,
            clusters=self.clusters,
            configs=self.configs,
            recorder=process.recorder,
            on_refusal_inputs=process.admission.refusal_may_have_changed,
            on_admitted=process.admission.admitted_by_check,
            propagation=self.propagation,
            metrics=process.metrics,
        )
        process.admission.refuse_with(self.workloads.refusal)
        self.checks = AdmissionCheckController(
            client, checks=process.caches.admission_checks, configs=self.configs, clusters=self.cluster_objects, metrics=process.metrics
        )
        self.gc = GarbageCollector(
            local_workloads=process.caches.workloads,
            remotes=lambda: list(self.clusters.remotes.values()),
            origin=self.settings.origin,
            interval=self.settings.gc_interval.total_seconds(),
            metrics=process.metrics,
        )
        # kfed's read API, served by the manager's aggregated API server beside Kueue's visibility API.
        self.reads = ReadApi(
            caches=process.caches,
            configs=self.configs,
            cluster_objects=self.cluster_objects,
            clusters=self.clusters,
            origin=self.settings.origin,
            adapters=process.integrations.multikueue,
        )
        self.api_groups = [self.reads.group()]
        self.configs.add_handler(lambda kind, old, new: self.workloads.resync())
        for jobs in process.job_controllers:
            jobs.runs_elsewhere = self.workloads.runs_on_a_worker

    def on_connection_change(self, remote: Any) -> None:
        self.workloads.on_connection_change(remote)

    def runnables(self) -> list[Runnable]:
        return [
            *self.clusters.runnables(),
            self.workloads.runnable(),
            self.checks.runnable(),
            self.gc.runnable(),
            self.propagation.runnable(),
        ]

    async def stop(self) -> None:
        for controller in (self.clusters.controller, self.workloads.controller, self.checks.controller):
            controller.stop()
        await self.clusters.stop()


def extension(process: Process) -> MultiKueue:
    return MultiKueue(process)
