"""Small builders for engine scenarios: Kueue objects as dicts, run through the real loader."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from manager.api import constants as c
from manager.api.manifest import Document, load_document
from manager.engine.simulate import Simulation, SimulationResult, Source
from manager.engine.workload import WorkloadInfo

V = "kueue.x-k8s.io/v1beta2"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def flavor(name: str, *, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if labels:
        spec["nodeLabels"] = labels
    if taints:
        spec["nodeTaints"] = taints
    return {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


Quota = str | int | tuple[Any, Any, Any]


def _groups(groups: list[dict[str, dict[str, Quota]]] | dict[str, dict[str, Quota]]) -> list[dict[str, Any]]:
    """Resource groups from `{flavor: {resource: nominal | (nominal, borrowingLimit, lendingLimit)}}`."""
    if isinstance(groups, dict):
        groups = [groups]
    out = []
    for group in groups:
        covered: list[str] = []
        flavors = []
        for flavor_name, resources in group.items():
            entries = []
            for resource, quota in resources.items():
                if resource not in covered:
                    covered.append(resource)
                entry: dict[str, Any] = {"name": resource}
                if isinstance(quota, tuple):
                    nominal, borrowing, lending = quota
                    entry["nominalQuota"] = str(nominal)
                    if borrowing is not None:
                        entry["borrowingLimit"] = str(borrowing)
                    if lending is not None:
                        entry["lendingLimit"] = str(lending)
                else:
                    entry["nominalQuota"] = str(quota)
                entries.append(entry)
            flavors.append({"name": flavor_name, "resources": entries})
        out.append({"coveredResources": covered, "flavors": flavors})
    return out


def cluster_queue(
    name: str,
    groups: Any,
    *,
    cohort: str | None = None,
    preemption: dict[str, Any] | None = None,
    strategy: str | None = None,
    fungibility: dict[str, Any] | None = None,
    namespace_selector: dict[str, Any] | None = None,
    stop_policy: str | None = None,
    checks: list[str] | None = None,
    weight: str | None = None,
    admission_scope: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {} if namespace_selector is None else namespace_selector,
        "resourceGroups": _groups(groups),
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    if strategy:
        spec["queueingStrategy"] = strategy
    if fungibility:
        spec["flavorFungibility"] = fungibility
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if admission_scope:
        spec["admissionScope"] = {"admissionMode": admission_scope}
    return {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def cohort(
    name: str, *, parent: str | None = None, groups: dict[str, dict[str, Quota]] | None = None, weight: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if groups:
        spec["resourceGroups"] = _groups(groups)
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": V, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def local_queue(
    name: str, cluster_queue_name: str, *, namespace: str = "default", stop_policy: str | None = None, weight: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"clusterQueue": cluster_queue_name}
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": V, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def pod_spec(requests: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"requests": requests}}], **extra}


def workload(
    name: str,
    queue: str,
    requests: dict[str, str] | None = None,
    *,
    namespace: str = "default",
    count: int = 1,
    min_count: int | None = None,
    priority: int | None = None,
    created: int | None = None,
    pod_sets: list[dict[str, Any]] | None = None,
    admitted: tuple[str, dict[str, str]] | None = None,
    checks: dict[str, str] | None = None,
    active: bool | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    """A Workload; `created` is seconds after T0; `admitted=(cq, {resource: flavor})` makes it running."""
    if pod_sets is None:
        ps: dict[str, Any] = {"name": "main", "count": count, "template": {"spec": pod_spec(requests or {"cpu": "1"}, **spec_extra)}}
        if min_count is not None:
            ps["minCount"] = min_count
        pod_sets = [ps]
    spec: dict[str, Any] = {"queueName": queue, "podSets": pod_sets}
    if priority is not None:
        spec["priority"] = priority
    if active is not None:
        spec["active"] = active
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if created is not None:
        meta["creationTimestamp"] = (T0 + timedelta(seconds=created)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj: dict[str, Any] = {"apiVersion": V, "kind": "Workload", "metadata": meta, "spec": spec}
    status: dict[str, Any] = {}
    if admitted is not None:
        cq_name, flavors = admitted
        assignments = []
        for p in pod_sets:
            reqs = p["template"]["spec"]["containers"][0]["resources"]["requests"]
            from manager.api.quantity import Quantity

            usage = {r: str(Quantity(nanos=Quantity.parse(v).nanos * p.get("count", 1))) for r, v in reqs.items()}
            assignments.append(
                {"name": p["name"], "flavors": {r: flavors[r] for r in reqs}, "resourceUsage": usage, "count": p.get("count", 1)}
            )
        reserved_at = (T0 + timedelta(seconds=created or 0)).strftime("%Y-%m-%dT%H:%M:%SZ")
        status["admission"] = {"clusterQueue": cq_name, "podSetAssignments": assignments}
        status["conditions"] = [
            {
                "type": c.QUOTA_RESERVED,
                "status": "True",
                "reason": "QuotaReserved",
                "message": f"Quota reserved in ClusterQueue {cq_name}",
                "lastTransitionTime": reserved_at,
            },
            {
                "type": c.ADMITTED,
                "status": "True",
                "reason": "Admitted",
                "message": "The workload is admitted",
                "lastTransitionTime": reserved_at,
            },
        ]
    if checks:
        status["admissionChecks"] = [{"name": n, "state": s, "message": ""} for n, s in checks.items()]
    if status:
        obj["status"] = status
    return obj


def sources(objects: list[dict[str, Any]]) -> list[Source]:
    out = []
    for i, data in enumerate(objects):
        loaded = load_document(Document("test.yaml", i, data))
        assert not loaded.errors, [str(e) for e in loaded.errors]
        if loaded.objects:
            out.append(Source(f"test.yaml[{i}]", loaded.objects[0][1]))
    return out


@dataclass
class Outcome:
    result: SimulationResult
    simulation: Simulation

    def info(self, name: str) -> WorkloadInfo:
        for info in self.result.infos:
            if info.name == name:
                return info
        raise KeyError(name)

    def admitted(self) -> list[str]:
        return sorted(i.name for i in self.result.infos if i.reserved)

    def pending(self) -> list[str]:
        return sorted(i.name for i in self.result.infos if not i.reserved)

    def condition(self, name: str, kind: str = c.QUOTA_RESERVED) -> tuple[str, str, str]:
        cond = self.info(name).conditions[kind]
        return cond.status, cond.reason, cond.message

    def flavors(self, name: str) -> dict[str, str]:
        admission = self.info(name).admission
        assert admission is not None, f"{name} is not admitted"
        return {r: f for a in admission for r, f in a.flavors.items()}

    def usage(self, cq: str, flavor_name: str, resource: str) -> int:
        return self.simulation.cache.cluster_queues[cq].node.usage.get((flavor_name, resource), 0)


def run(
    objects: list[dict[str, Any]],
    *,
    cycles: int | None = None,
    config: dict[str, Any] | None = None,
    max_cycles: int = 1000,
    release_after: float | None = 0.0,
) -> Outcome:
    objs = list(objects)
    if config is not None:
        objs.insert(0, {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **config})
    simulation = Simulation(sources(objs), release_after=release_after)
    result = simulation.run(cycles, max_cycles=max_cycles)
    assert result.converged, f"still changing after {result.cycles} cycles"
    return Outcome(result, simulation)
