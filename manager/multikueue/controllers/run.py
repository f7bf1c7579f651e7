"""MultiKueue's part of the manager process: its informers and controllers, started with the
manager's own (see `manager.controllers.run.Process`)."""

from __future__ import annotations

from typing import Any

from manager.api import kueue
from manager.api.config import MULTIKUEUE_MANAGER_QUOTA_AUTOMATION
from manager.api.core import Secret
from manager.controllers.run import Process
from manager.kube.informer import Informer
from manager.multikueue.controllers.admission_check import AdmissionCheckController
from manager.multikueue.controllers.clusters import ClusterController
from manager.multikueue.controllers.gc import GarbageCollector
from manager.multikueue.controllers.propagation import QueuePropagator
from manager.multikueue.controllers.quota_controller import QuotaAutomationController
from manager.multikueue.controllers.read_api import ReadApi
from manager.multikueue.controllers.workload import WorkloadController
from manager.multikueue.rules.settings import Settings
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
            on_quotas=lambda remote: self.on_quotas(remote),
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
        # Kueue's manager quota automation, behind Kueue's alpha gate (off by default).
        self.quotas: QuotaAutomationController | None = None
        if process.configuration.feature_enabled(MULTIKUEUE_MANAGER_QUOTA_AUTOMATION):
            self.quotas = QuotaAutomationController(
                client,
                cluster_queues=process.caches.cluster_queues,
                local_queues=process.caches.local_queues,
                checks=process.caches.admission_checks,
                configs=self.configs,
                workers=lambda: {name: remote.quotas() for name, remote in self.clusters.remotes.items()},
                metrics=process.metrics,
            )
        # A config's clusters or cluster selector, or a worker's labels, change which workers a
        # Workload may go to: dispatch and the refusal look again.
        self.configs.add_handler(lambda kind, old, new: self.on_selection_inputs(process))
        self.cluster_objects.add_handler(
            lambda kind, old, new: (
                self.on_selection_inputs(process) if old is None or new is None or old.metadata.labels != new.metadata.labels else None
            )
        )
        for jobs in process.job_controllers:
            jobs.runs_elsewhere = self.workloads.runs_on_a_worker

    def on_selection_inputs(self, process: Process) -> None:
        self.workloads.resync()
        process.admission.refusal_may_have_changed()

    def on_connection_change(self, remote: Any) -> None:
        self.workloads.on_connection_change(remote)
        if self.quotas is not None:
            self.quotas.resync()

    def on_quotas(self, remote: Any) -> None:
        self.workloads.on_quotas(remote)
        if self.quotas is not None:
            self.quotas.resync()

    def runnables(self) -> list[Runnable]:
        quotas = [self.quotas.runnable()] if self.quotas is not None else []
        return [
            *self.clusters.runnables(),
            self.workloads.runnable(),
            self.checks.runnable(),
            self.gc.runnable(),
            self.propagation.runnable(),
            *quotas,
        ]

    async def stop(self) -> None:
        for controller in (self.clusters.controller, self.workloads.controller, self.checks.controller):
            controller.stop()
        if self.quotas is not None:
            self.quotas.controller.stop()
        await self.clusters.stop()


def extension(process: Process) -> MultiKueue:
    return MultiKueue(process)
