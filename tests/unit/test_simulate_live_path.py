"""`kfed simulate` runs the live admission path (`AdmissionState`): a running workload is evicted
for the same reasons as on a cluster, and its quota comes back as its Job's would once stopped."""

from __future__ import annotations

from typing import Any

from manager.api import constants as c
from tests.unit.scenario import cluster_queue, flavor, local_queue, run, workload

RUNNING = ("cq", {"cpu": "default-flavor"})


def setup(**cq: Any) -> list[dict[str, Any]]:
    return [flavor("default-flavor"), cluster_queue("cq", {"default-flavor": {"cpu": 2}}, **cq), local_queue("q", "cq")]


def owned_by_job(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": obj["metadata"]["name"], "uid": "job-uid", "controller": True}
    ]
    return obj


def test_a_deactivated_running_workload_is_evicted_and_its_quota_goes_to_the_next() -> None:
    objs = setup() + [workload("off", "q", {"cpu": "2"}, admitted=RUNNING, active=False, created=0), workload("next", "q", {"cpu": "2"})]
    outcome = run(objs)
    assert outcome.admitted() == ["next"]
    assert outcome.condition("off", c.EVICTED) == ("True", "Deactivated", "The workload is deactivated")
    # Same as Kueue's job integration: Requeued=False after a deactivation (it waits for spec.active).
    assert outcome.condition("off", c.REQUEUED)[:2] == ("False", "Deactivated")


def test_a_drained_workload_is_released_with_requeued_false() -> None:
    outcome = run(setup(stop_policy="HoldAndDrain") + [workload("running", "q", {"cpu": "2"}, admitted=RUNNING)])
    assert outcome.admitted() == []
    assert outcome.condition("running", c.EVICTED)[:2] == ("True", "ClusterQueueStopped")
    assert outcome.condition("running", c.REQUEUED)[:2] == ("False", "ClusterQueueStopped")


def test_a_preempted_job_gives_its_quota_back_once_stopped() -> None:
    victim = owned_by_job(workload("low", "q", {"cpu": "2"}, priority=0, admitted=RUNNING, created=0))
    objs = setup(preemption={"withinClusterQueue": "LowerPriority"}) + [victim, workload("high", "q", {"cpu": "2"}, priority=10, created=1)]
    outcome = run(objs)
    assert outcome.admitted() == ["high"]
    assert outcome.result.preemptions == 1
    assert outcome.condition("low", c.EVICTED)[:2] == ("True", "Preempted")
    assert outcome.condition("low", c.REQUEUED)[:2] == ("True", "Preempted")
    assert outcome.usage("cq", "default-flavor", "cpu") == 2000


def test_the_output_is_what_the_admission_controller_wrote() -> None:
    """The Workloads in the output carry the status the live path flushed, not a second rendering."""
    outcome = run(setup() + [workload("a", "q", {"cpu": "1"}), workload("b", "q", {"cpu": "3"})])
    state = outcome.simulation.state
    assert state.flush(outcome.simulation.now()) == [], "every status write was applied"
    by_name = {wl.name: wl for wl in outcome.result.workloads}
    for info in outcome.result.infos:
        assert by_name[info.name].status == info.obj.status


def test_a_finished_workload_holds_no_quota_and_comes_out_as_given() -> None:
    done = workload("done", "q", {"cpu": "2"}, admitted=RUNNING, created=0)
    done["status"]["conditions"].append(
        {"type": c.FINISHED, "status": "True", "reason": "Succeeded", "message": "done", "lastTransitionTime": "2026-01-01T00:00:01Z"}
    )
    outcome = run(setup() + [done, workload("next", "q", {"cpu": "2"})])
    assert outcome.admitted() == ["next"]
    (finished,) = [wl for wl in outcome.result.workloads if wl.name == "done"]
    assert finished.status is not None and finished.status.admission is not None, "its status is left as it was"
    assert [wl.name for wl in outcome.result.untracked] == ["done"]
