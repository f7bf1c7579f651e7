"""The MultiKueue AdmissionCheck controller: each check's `Active` condition, from its
MultiKueueConfig and the `Active` of the clusters it lists (Kueue's admissioncheck controller)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from datetime import datetime

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import Condition, find_condition, same_condition, set_condition, utcnow
from manager.engine.workload import is_multikueue_check
from manager.kube.client import KubeClient
from manager.kube.errors import NotFoundError
from manager.kube.informer import Informer
from manager.multikueue.rules import federation
from manager.multikueue.rules.plan import admission_check_active
from manager.runtime.controller import Controller, Result
from manager.runtime.metrics import Registry
from manager.runtime.runnables import Runnable, leader


@dataclass(eq=False)
class AdmissionCheckController:
    """Writes `Active` on every AdmissionCheck whose controller is MultiKueue."""

    client: KubeClient
    _: KW_ONLY
    checks: Informer[kueue.AdmissionCheck]
    configs: Informer[kueue.MultiKueueConfig]
    clusters: Informer[kueue.MultiKueueCluster]
    metrics: Registry
    clock: Callable[[], datetime] = utcnow

    def __post_init__(self) -> None:
        self.controller = Controller("multikueue-admissioncheck", self.reconcile, metrics=self.metrics, workers=2)
        self.checks.add_handler(lambda kind, old, new: self._enqueue((new or old).name))
        self.configs.add_handler(lambda kind, old, new: self.resync())
        self.clusters.add_handler(self._on_cluster)

    def _enqueue(self, name: str) -> None:
        self.controller.enqueue(name)

    def runnable(self) -> Runnable:
        """Writes check status, so only the lease holder runs it, starting with every check."""

        async def run() -> None:
            self.resync()
            await self.controller.run()

        return leader(self.controller.name, run)

    def _on_cluster(self, kind: str, old: kueue.MultiKueueCluster | None, new: kueue.MultiKueueCluster | None) -> None:
        def active(obj: kueue.MultiKueueCluster | None) -> str | None:
            cond = find_condition(obj.status.conditions if obj and obj.status else None, c.ACTIVE)
            return cond.status if cond else None

        if old is None or new is None or active(old) != active(new):
            self.resync()

    def resync(self) -> None:
        for check in self.checks.items():
            self._enqueue(check.name)

    async def reconcile(self, name: str) -> Result | None:
        check = self.checks.get(name)
        if not is_multikueue_check(check):
            return None
        config_name = federation.config_name(check)
        config = self.configs.get(config_name) if config_name else None
        clusters = {}
        for cluster in self.clusters.items():
            cond = find_condition(cluster.status.conditions if cluster.status else None, c.ACTIVE)
            clusters[cluster.name] = cond is not None and cond.status == "True"
        status, reason, message = admission_check_active(
            config_name=config_name, config_clusters=config.spec.clusters if config else None, clusters=clusters
        )
        new = Condition(type=c.ACTIVE, status=status, reason=reason, message=message, observed_generation=check.metadata.generation)
        old_conditions = check.status.conditions if check.status else None
        if same_condition(find_condition(old_conditions, c.ACTIVE), new):
            return None
        body = {"status": {"conditions": [cond.to_dict() for cond in set_condition(old_conditions, new, now=self.clock())]}}
        with contextlib.suppress(NotFoundError):
            await self.client.patch(kueue.AdmissionCheck, name, body, subresource="status")
        return None
