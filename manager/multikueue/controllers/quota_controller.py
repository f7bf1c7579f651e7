"""The I/O shell of MultiKueue manager quota automation (`quota_automation.py` decides): with
Kueue's `MultiKueueManagerQuotaAutomation` gate on, each manager ClusterQueue is reconciled on
any change of the manager's ClusterQueues, LocalQueues, AdmissionChecks and MultiKueueConfigs,
and of the workers' queues and connections; it writes the ClusterQueue's quota and its
`MultiKueueManagerQuotaAutomation` condition."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from datetime import datetime

from manager.api import kueue
from manager.api.meta import Condition, find_condition, set_condition, utcnow
from manager.kube.client import KubeClient
from manager.kube.errors import NotFoundError
from manager.kube.informer import Informer
from manager.multikueue.rules import federation
from manager.multikueue.rules import quota_automation as qa
from manager.multikueue.rules.capacity import WorkerQuotas
from manager.runtime.controller import Controller, Result
from manager.runtime.metrics import Registry
from manager.runtime.runnables import Runnable, leader


@dataclass(eq=False)
class QuotaAutomationController:
    client: KubeClient
    _: KW_ONLY
    cluster_queues: Informer[kueue.ClusterQueue]
    local_queues: Informer[kueue.LocalQueue]
    checks: Informer[kueue.AdmissionCheck]
    configs: Informer[kueue.MultiKueueConfig]
    workers: Callable[[], Mapping[str, WorkerQuotas | None]]  # each worker's queues; None: not connected
    metrics: Registry
    clock: Callable[[], datetime] = utcnow

    def __post_init__(self) -> None:
        self.controller = Controller("multikueue-quota-automation", self.reconcile, metrics=self.metrics, workers=1)
        self.cluster_queues.add_handler(lambda kind, old, new: self.controller.enqueue((new or old).name))
        self.local_queues.add_handler(self._on_local_queue)
        self.checks.add_handler(lambda kind, old, new: self.resync())
        self.configs.add_handler(lambda kind, old, new: self.resync())

    def _on_local_queue(self, kind: str, old: kueue.LocalQueue | None, new: kueue.LocalQueue | None) -> None:
        for lq in (old, new):
            if lq is not None and lq.spec.cluster_queue:
                self.controller.enqueue(lq.spec.cluster_queue)

    def resync(self) -> None:
        """Every manager ClusterQueue again: a worker's queues or connection changed, or a check or config."""
        for cq in self.cluster_queues.items():
            self.controller.enqueue(cq.name)

    def runnable(self) -> Runnable:
        """Writes ClusterQueues, so only the lease holder runs it, starting with every queue."""

        async def run() -> None:
            self.resync()
            await self.controller.run()

        return leader(self.controller.name, run)

    def _config_of(self, check: kueue.AdmissionCheck) -> kueue.MultiKueueConfig | None:
        name = federation.config_name(check)
        return self.configs.get(name) if name else None

    async def reconcile(self, name: str) -> Result | None:
        cq = self.cluster_queues.get(name)
        if cq is None:
            return None
        check = qa.multikueue_check(cq, {ac.name: ac for ac in self.checks.items()})
        config = self._config_of(check) if check is not None else None
        local = [(lq.namespace, lq.name) for lq in self.local_queues.items() if lq.spec.cluster_queue == name]
        decision = qa.decide(cq, check, config, local, self.workers())
        with contextlib.suppress(NotFoundError):
            if decision.resources is not None:
                # Kueue updates the spec with the object it read: a conflict means a newer one, reconciled next.
                patch = qa.spec_patch(cq, decision.resources)
                patch["metadata"] = {"resourceVersion": cq.metadata.resource_version}
                await self.client.patch(kueue.ClusterQueue, name, patch)
            await self._write_condition(cq, decision.condition)
        return None

    async def _write_condition(self, cq: kueue.ClusterQueue, state: qa.ConditionState | None) -> None:
        old_conditions = cq.status.conditions if cq.status else None
        old = find_condition(old_conditions, qa.CONDITION)
        if state is None:
            if old is None:
                return
            kept = [cond.to_dict() for cond in old_conditions or [] if cond.type != qa.CONDITION]
            await self.client.patch(kueue.ClusterQueue, cq.name, {"status": {"conditions": kept}}, subresource="status")
            return
        status, reason, message = state
        if old is not None and (old.status, old.reason, old.message) == state:  # Kueue's cmpConditionState
            return
        new = Condition(type=qa.CONDITION, status=status, reason=reason, message=message, observed_generation=cq.metadata.generation)
        body = {"status": {"conditions": [cond.to_dict() for cond in set_condition(old_conditions, new, now=self.clock())]}}
        await self.client.patch(kueue.ClusterQueue, cq.name, body, subresource="status")
