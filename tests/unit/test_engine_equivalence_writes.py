"""What is written on the workloads parked with a failed head of their equivalence class.

Kueue v0.19.2 (SchedulingEquivalenceHashing, on by default) parks a failed head's whole class
as inadmissible without trying each member. Only the head gets its Pending condition written
(the scheduler's requeueAndUpdate); the workload controller writes "Bypassed scheduling
evaluation because an equivalent workload recently failed" on the others only with the
UnadmittedWorkloadsObservability gate, off by default. kfed wrote it on every member: under
Kueue's own scheduler-performance runner, 2,900 status writes per 1,500 Workloads that Kueue
does not make (issue #37), each one taken from the client's request budget that admissions use.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration
from manager.engine.scheduler import BYPASSED
from manager.engine.state import AdmissionState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def workload(name: str, cpu: int, *, created: int) -> kueue.Workload:
    pod = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}}
    return kueue.Workload.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "resourceVersion": "1",
                "creationTimestamp": (T0 + timedelta(seconds=created)).isoformat(),
            },
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": pod}]},
        }
    )


def state_with(config: Configuration) -> AdmissionState:
    state = AdmissionState(config)
    state.upsert_namespace("ns", {})
    state.upsert_flavor(kueue.ResourceFlavor.model_validate({"metadata": {"name": "default"}}))
    quota: dict[str, Any] = {"name": "default", "resources": [{"name": "cpu", "nominalQuota": 2}]}
    state.upsert_cluster_queue(
        kueue.ClusterQueue.model_validate(
            {
                "metadata": {"name": "cq"},
                "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [quota]}]},
            }
        )
    )
    state.upsert_local_queue(
        kueue.LocalQueue.model_validate({"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}})
    )
    state.rebuild_if_needed(T0)
    return state


def run_full_queue(config: Configuration) -> tuple[AdmissionState, set[str]]:
    """`running` takes the whole quota; three workloads of one shape wait behind it."""
    state = state_with(config)
    state.upsert_workload(workload("running", 2, created=0), T0)
    while state.cycle(T0).changed:
        pass
    state.flush(T0)
    for i in range(3):
        state.upsert_workload(workload(f"waiting-{i}", 1, created=1 + i), T0)
    now = T0 + timedelta(seconds=5)
    while state.cycle(now).changed:
        pass
    return state, {write.key for write in state.flush(now)}


def quota_reserved(state: AdmissionState, name: str) -> tuple[str, str] | None:
    cond = state.infos[f"ns/{name}"].conditions.get(c.QUOTA_RESERVED)
    return (cond.status, cond.message) if cond else None


def test_only_the_failed_head_gets_a_status_write_by_default() -> None:
    state, written = run_full_queue(Configuration())
    assert written == {"ns/waiting-0"}
    head = quota_reserved(state, "waiting-0")
    assert head is not None and head[0] == "False" and "couldn't assign flavors" in head[1]
    assert quota_reserved(state, "waiting-1") is None
    assert quota_reserved(state, "waiting-2") is None
    # Not tried, yet not forgotten: the engine can still say why they wait (kfed simulate does).
    assert state.scheduler.bypassed(state.infos["ns/waiting-1"]) == ("WaitingForQuota", BYPASSED)


@pytest.mark.parametrize("gate", [True, False])
def test_the_unadmitted_workloads_observability_gate_writes_bypassed_on_the_class(gate: bool) -> None:
    config = Configuration.model_validate({"featureGates": {"UnadmittedWorkloadsObservability": gate}})
    state, written = run_full_queue(config)
    if gate:
        assert written == {"ns/waiting-0", "ns/waiting-1", "ns/waiting-2"}
        assert quota_reserved(state, "waiting-2") == ("False", BYPASSED)
    else:
        assert written == {"ns/waiting-0"}
        assert quota_reserved(state, "waiting-2") is None


def test_a_head_left_in_the_heap_is_seen_by_the_loop_and_a_parked_class_is_not() -> None:
    # The admission loop keeps cycling (with Kueue's pause) while a head waits in a heap, and
    # waits for an event otherwise: a parked class alone must not keep it spinning.
    state, _ = run_full_queue(Configuration())
    assert not state.scheduler.has_heads()  # waiting-0 failed and its class is parked
    state.upsert_workload(workload("fresh", 1, created=99), T0 + timedelta(seconds=6))
    assert not state.scheduler.has_heads()  # the same shape: parked with its class at once
    state.upsert_workload(workload("other-shape", 2, created=100), T0 + timedelta(seconds=6))
    assert state.scheduler.has_heads()
