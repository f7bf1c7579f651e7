"""The manager's `/metrics` after a Job ran through the federation: Kueue's MultiKueue and
finished-workload metrics, under Kueue's names."""

from __future__ import annotations

import re
import uuid
from typing import Any

from manager.api.core import Job
from tests.e2e.federation import RUNS, Clients, Federation, job_manifest
from tests.harness import eventually
from tests.integration.test_metrics import scrape, value


async def test_a_federated_job_counts_its_dispatch_admission_and_finish(fed: Federation, kube: Clients) -> None:
    tag = f"m{uuid.uuid4().hex[:6]}"
    ns = f"{tag}-metrics"
    names = await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=tag)
    cq = names["manager"]
    await kube.manager.create(Job, job_manifest("train", ns))

    async def completed() -> Any:
        job = await kube.manager.get(Job, "train", namespace=ns)
        conditions = job.status.conditions if job.status else None
        return job if any(cond.type == "Complete" and cond.status == "True" for cond in conditions or []) else None

    await eventually(completed, timeout=90, what="the manager's Job Complete")
    wl = await kube.manager_workload(ns, "train")
    assert wl is not None and wl.status is not None and wl.status.cluster_name
    manager = fed.process
    assert manager is not None

    def finished() -> Any:
        samples = scrape(manager)
        return samples if value(samples, "kueue_finished_workloads_total", cluster_queue=cq) == 1 else None

    samples = await eventually(finished, timeout=30, what=f'kueue_finished_workloads_total{{cluster_queue="{cq}"}} 1')
    winner = wl.status.cluster_name
    assert value(samples, "multikueue_workloads_admitted_total", cluster_queue=cq, cluster=winner, replica_role="leader") == 1
    assert (value(samples, "multikueue_workloads_dispatched_total", cluster_queue=cq, cluster=winner) or 0) >= 1
    # The same events under kfed's own names.
    assert value(samples, "kfed_multikueue_workloads_admitted_total", cluster_queue=cq, cluster=winner) == 1
    assert value(samples, "kueue_admitted_workloads_total", cluster_queue=cq) == 1
    assert value(samples, "kueue_admission_checks_wait_time_seconds_count", cluster_queue=cq) == 1  # admitted after the check
    assert value(samples, "kueue_finished_workloads", cluster_queue=cq) == 1  # finished and still there
    # Its Events went out (they wait behind other requests, but none was dropped).
    assert (value(samples, "kfed_events_total", outcome="sent") or 0) >= 1
    assert value(samples, "kfed_events_total", outcome="dropped") == 0
    # The check's Ready carried the admission; it is told as Kueue's workload controller tells
    # one made after its checks: one Admitted Event, with the seconds the checks took.
    selector = f"involvedObject.kind=Workload,involvedObject.name={wl.name},reason=Admitted"

    async def admitted_events() -> list[str] | None:
        events = await kube.manager.request("GET", f"/api/v1/namespaces/{ns}/events", query=[("fieldSelector", selector)])
        messages = [event["message"] for event in events["items"]]
        return messages or None

    [message] = await eventually(admitted_events, timeout=30, what=f"the Admitted Event of {ns}/{wl.name}")
    assert re.fullmatch(rf"Admitted by ClusterQueue {cq}, wait time since reservation was \d+s", message), message
