"""Kueue's admission loop on a real cluster: `python -m manager` against the local harness."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import find_condition, is_condition_true
from manager.controllers.caches import Caches
from manager.controllers.webhooks import queue_uses_multikueue
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from manager.kube.errors import InvalidError, NotFoundError
from tests.harness import Provider, eventually
from tests.integration.controllers import ControllerProcess, crd_cluster, running_manager

RUNS = {"type": "kwok"}  # the fake nodes' label: pods with it schedule and complete
PARKED = {"kfed-test/pool": "parked"}  # no node has it: pods stay Pending, the Job stays active


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "ctl", jobs=True)


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    with running_manager(cluster, tmp_path_factory.mktemp("manager")) as process:
        yield process


async def make_queues(
    kube: KubeClient,
    namespace: str,
    *,
    cq: str,
    cpu: int | str,
    flavor: str,
    node_labels: dict[str, str],
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    preemption: dict[str, Any] | None = None,
    lq: str = "user-queue",
) -> None:
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    try:
        await kube.create(
            kueue.ResourceFlavor,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {"nodeLabels": node_labels},
            },
        )
    except Exception as err:
        if "already exists" not in str(err):
            raise
    resource: dict[str, Any] = {"name": "cpu", "nominalQuota": cpu}
    if borrowing_limit is not None:
        resource["borrowingLimit"] = borrowing_limit
    if lending_limit is not None:
        resource["lendingLimit"] = lending_limit
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [resource]}]}],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    await kube.create(
        kueue.ClusterQueue, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": spec}
    )
    await kube.create(
        kueue.LocalQueue,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": lq, "namespace": namespace},
            "spec": {"clusterQueue": cq},
        },
    )


def job_manifest(
    name: str,
    namespace: str,
    *,
    queue: str = "user-queue",
    cpu: str = "1",
    parallelism: int = 1,
    priority_class: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    all_labels = {c.QUEUE_NAME_LABEL: queue, **(labels or {})}
    if priority_class:
        all_labels[c.PRIORITY_CLASS_LABEL] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": all_labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
                }
            },
        },
    }


async def workload_of(kube: KubeClient, job: Job) -> kueue.Workload | None:
    listed = await kube.list(kueue.Workload, namespace=job.namespace)
    for wl in listed.items:
        if any(ref.uid == job.metadata.uid for ref in wl.metadata.owner_references or []):
            return wl
    return None


def condition(wl: kueue.Workload | None, kind: str) -> tuple[str, str, str] | None:
    cond = find_condition(wl.status.conditions if wl and wl.status else None, kind)
    return (cond.status, cond.reason, cond.message) if cond else None


async def cq_usage(kube: KubeClient, name: str) -> str:
    cq = await kube.get(kueue.ClusterQueue, name)
    if cq.status is None or not cq.status.flavors_reservation:
        return ""
    return str((cq.status.flavors_reservation[0].resources or [])[0].total)


# --- the Job lifecycle -------------------------------------------------------------------------------
async def test_a_queued_job_is_suspended_admitted_run_and_finished(manager: ControllerProcess, kube: KubeClient, names: Any) -> None:
    ns, cq, flavor = names("life"), names("life-cq"), names("runs")
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels=RUNS)
    created = await kube.create(Job, job_manifest("train", ns, parallelism=2))
    # The webhook suspended it before any pod could start.
    assert created.spec.suspend is True

    async def admitted_and_started() -> Any:
        job = await kube.get(Job, "train", namespace=ns)
        wl = await workload_of(kube, job)
        if wl is None or not is_condition_true(wl.status.conditions if wl.status else None, c.ADMITTED) or job.spec.suspend:
            return None
        return job, wl

    job, wl = await eventually(admitted_and_started, timeout=60, what="the Job admitted and unsuspended")
    assert wl.name.startswith("job-train-")
    assert wl.spec.pod_sets[0].count == 2
    assert str(wl.spec.pod_sets[0].template["spec"]["containers"][0]["resources"]["requests"]["cpu"]) == "1"
    assert wl.status is not None and wl.status.admission is not None
    assert wl.status.admission.cluster_queue == cq
    assert wl.status.admission.pod_set_assignments[0].flavors == {"cpu": flavor}
    assert job.spec.template.spec.node_selector == RUNS

    async def finished() -> Any:
        current = await kube.get(kueue.Workload, wl.name, namespace=ns)
        return current if is_condition_true(current.status.conditions if current.status else None, c.FINISHED) else None

    done = await eventually(finished, timeout=120, what="the Workload Finished")
    assert condition(done, c.FINISHED)[:2] == ("True", "Succeeded")  # type: ignore[index]
    assert await eventually(lambda: _usage_is(kube, cq, "0"), timeout=30, what="the ClusterQueue's usage back to 0")
    final = await kube.get(kueue.ClusterQueue, cq)
    assert final.status is not None and final.status.admitted_workloads == 0 and final.status.pending_workloads == 0
    active = find_condition(final.status.conditions, c.ACTIVE)
    assert active is not None and active.status == "True"


async def _usage_is(kube: KubeClient, cq: str, value: str) -> bool:
    return await cq_usage(kube, cq) == value


# --- quota between ClusterQueues -----------------------------------------------------------------------
async def test_borrowing_between_cluster_queues_stops_at_the_lenders_lending_limit(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    cohort, flavor = names("co"), names("parked")
    lender, borrower = names("lender"), names("borrower")
    ns_lender, ns_borrower = names("ns-lender"), names("ns-borrower")
    # The lender keeps 1 of its 3 cpu for itself; the borrower may take 2 more than its 1.
    await make_queues(kube, ns_lender, cq=lender, cpu=3, flavor=flavor, node_labels=PARKED, cohort=cohort, lending_limit=2)
    await make_queues(kube, ns_borrower, cq=borrower, cpu=1, flavor=flavor, node_labels=PARKED, cohort=cohort)
    for i in range(4):
        await kube.create(Job, job_manifest(f"b{i}", ns_borrower))

    async def three_admitted() -> Any:
        wls = (await kube.list(kueue.Workload, namespace=ns_borrower)).items
        admitted = [w for w in wls if is_condition_true(w.status.conditions if w.status else None, c.ADMITTED)]
        pending = [w for w in wls if w not in admitted and condition(w, c.QUOTA_RESERVED) and condition(w, c.QUOTA_RESERVED)[0] == "False"]  # type: ignore[index]
        return (admitted, pending) if len(admitted) == 3 and len(pending) == 1 else None

    _admitted, pending = await eventually(three_admitted, timeout=60, what="3 of 4 borrower Jobs admitted (1 own + 2 borrowed)")
    assert condition(pending[0], c.QUOTA_RESERVED)[1] == "WaitingForQuota"  # type: ignore[index]
    assert "insufficient unused quota" in condition(pending[0], c.QUOTA_RESERVED)[2]  # type: ignore[index]

    async def borrowed() -> Any:
        cq = await kube.get(kueue.ClusterQueue, borrower)
        usage = (cq.status.flavors_reservation[0].resources or [])[0] if cq.status and cq.status.flavors_reservation else None
        return usage if usage is not None and str(usage.total) == "3" else None

    usage = await eventually(borrowed, timeout=30, what="the borrower's status showing 3 cpu, 2 borrowed")
    assert str(usage.borrowed) == "2"
    # The lender can still use what it did not lend.
    await kube.create(Job, job_manifest("own", ns_lender))

    async def lender_runs() -> Any:
        job = await kube.get(Job, "own", namespace=ns_lender)
        return job.spec.suspend is False

    await eventually(lender_runs, timeout=60, what="the lender's own Job admitted within its kept quota")


async def test_a_lower_priority_job_is_preempted_suspended_requeued_and_readmitted(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("pre"), names("pre-cq"), names("parked")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels=PARKED, preemption={"withinClusterQueue": "LowerPriority"})
    low, high = names("low"), names("high")
    for name, value in ((low, 10), (high, 1000)):
        await kube.create(
            kueue.WorkloadPriorityClass,
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )
    await kube.create(Job, job_manifest("victim", ns, cpu="2", priority_class=low))

    async def running(name: str) -> Any:
        job = await kube.get(Job, name, namespace=ns)
        return job if job.spec.suspend is False and job.status is not None and (job.status.active or 0) > 0 else None

    await eventually(lambda: running("victim"), timeout=60, what="the low-priority Job running (pods Pending on parked nodes)")
    await kube.create(Job, job_manifest("urgent", ns, cpu="2", priority_class=high))

    async def preempted() -> Any:
        victim = await kube.get(Job, "victim", namespace=ns)
        wl = await workload_of(kube, victim)
        requeued = condition(wl, c.REQUEUED)
        return (victim, wl) if victim.spec.suspend is True and requeued is not None and requeued[0] == "True" else None

    victim, wl = await eventually(preempted, timeout=60, what="the victim suspended and requeued")
    evicted = condition(wl, c.EVICTED)
    assert evicted is not None and evicted[:2] == ("True", "Preempted")
    assert "Preempted to accommodate a workload" in evicted[2] and "due to prioritization in the ClusterQueue" in evicted[2]
    assert condition(wl, c.PREEMPTED)[:2] == ("True", "InClusterQueue")  # type: ignore[index]
    assert condition(wl, c.QUOTA_RESERVED)[0] == "False"  # type: ignore[index]
    assert victim.spec.template.spec.node_selector in (None, {})  # restored to what the user wrote
    await eventually(lambda: running("urgent"), timeout=60, what="the preemptor running")
    events = await kube.request("GET", f"/api/v1/namespaces/{ns}/events")
    assert any(e["reason"] == "Preempted" and e["involvedObject"]["name"] == wl.name for e in events["items"])
    # Kueue's counter: one preemption, under the preemptor's ClusterQueue, once it was written.
    status, body = manager.get("/metrics")
    assert status == 200
    counted = [
        sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == "kueue_preempted_workloads_total" and sample.labels.get("preempting_cluster_queue") == cq
    ]
    assert counted == [1.0]
    # Quota frees up: the victim comes back.
    await kube.delete(Job, "urgent", namespace=ns)
    await eventually(lambda: running("victim"), timeout=60, what="the victim readmitted once the preemptor is gone")


async def test_stop_policy_hold_stops_admission_and_hold_and_drain_evicts(manager: ControllerProcess, kube: KubeClient, names: Any) -> None:
    ns, cq, flavor = names("stop"), names("stop-cq"), names("parked")
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels=PARKED)
    await kube.create(Job, job_manifest("first", ns))

    async def unsuspended(name: str) -> bool:
        return (await kube.get(Job, name, namespace=ns)).spec.suspend is False

    await eventually(lambda: unsuspended("first"), timeout=60, what="the first Job admitted")
    await kube.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "Hold"}})

    async def inactive() -> Any:
        got = await kube.get(kueue.ClusterQueue, cq)
        active = find_condition(got.status.conditions if got.status else None, c.ACTIVE)
        return active if active is not None and active.status == "False" else None

    active = await eventually(inactive, timeout=30, what="the ClusterQueue inactive")
    assert active.reason == "Stopped"
    await kube.create(Job, job_manifest("second", ns))

    async def second_pending() -> Any:
        job = await kube.get(Job, "second", namespace=ns)
        wl = await workload_of(kube, job)
        return wl if condition(wl, c.QUOTA_RESERVED) is not None else None

    wl = await eventually(second_pending, timeout=30, what="the second Job's Workload with a QuotaReserved condition")
    assert condition(wl, c.QUOTA_RESERVED)[0] == "False"  # type: ignore[index]
    assert "is stopped" in condition(wl, c.QUOTA_RESERVED)[2]  # type: ignore[index]
    assert await unsuspended("first")  # Hold keeps what runs
    await kube.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "HoldAndDrain"}})

    async def drained() -> Any:
        job = await kube.get(Job, "first", namespace=ns)
        wl = await workload_of(kube, job)
        return wl if job.spec.suspend is True and condition(wl, c.EVICTED) is not None else None

    wl = await eventually(drained, timeout=60, what="the running Job evicted by HoldAndDrain")
    assert condition(wl, c.EVICTED)[:2] == ("True", "ClusterQueueStopped")  # type: ignore[index]
    await kube.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "None"}})
    await eventually(lambda: unsuspended("second"), timeout=60, what="admission resumed once the ClusterQueue runs again")


# --- handing work to a worker ----------------------------------------------------------------------------
async def test_a_prebuilt_workload_is_adopted_and_a_multikueue_job_is_not_run(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("pre-built"), names("pb-cq"), names("runs")
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels=RUNS)
    template = job_manifest("x", ns)["spec"]["template"]
    await kube.create(
        kueue.Workload,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "handed-over", "namespace": ns, "labels": {c.MULTIKUEUE_ORIGIN_LABEL: "multikueue"}},
            "spec": {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": template}]},
        },
    )
    await kube.create(Job, job_manifest("remote", ns, labels={c.PREBUILT_WORKLOAD_LABEL: "handed-over"}))

    async def adopted_and_done() -> Any:
        wl = await kube.get(kueue.Workload, "handed-over", namespace=ns)
        return wl if is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED) else None

    wl = await eventually(adopted_and_done, timeout=120, what="the prebuilt Workload adopted, admitted and Finished")
    job = await kube.get(Job, "remote", namespace=ns)
    assert [ref.uid for ref in wl.metadata.owner_references or []] == [job.metadata.uid]
    assert len((await kube.list(kueue.Workload, namespace=ns)).items) == 1  # no second Workload was made
    # A Job handed to MultiKueue is admitted here, but its own controller must not run it.
    managed = job_manifest("managed", ns)
    managed["spec"]["managedBy"] = c.MULTIKUEUE_MANAGED_BY
    await kube.create(Job, managed)
    await eventually(lambda: unsuspended_job(kube, ns, "managed"), timeout=60, what="the managed Job admitted")
    pods = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods", query=[("labelSelector", "job-name=managed")])
    assert pods["items"] == []
    job = await kube.get(Job, "managed", namespace=ns)
    assert job.status is None or not job.status.active


async def test_a_job_naming_its_prebuilt_workload_only_by_annotation_adopts_it_and_its_pods_carry_kueues_labels(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    """What an upstream Kueue v0.18+ manager sends a worker: the prebuilt Workload's name only as
    an annotation, here 73 characters long (no label could hold it)."""
    ns, cq, flavor = names("pb-annotation"), names("pba-cq"), names("runs")
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels=RUNS)
    job_name = "j" * 62
    workload_name = f"job-{job_name}-abcde"
    template = job_manifest("x", ns)["spec"]["template"]
    await kube.create(
        kueue.Workload,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": workload_name, "namespace": ns, "labels": {c.MULTIKUEUE_ORIGIN_LABEL: "multikueue"}},
            "spec": {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": template}]},
        },
    )
    handed = job_manifest(job_name, ns)
    handed["metadata"]["annotations"] = {c.PREBUILT_WORKLOAD_ANNOTATION: workload_name}
    await kube.create(Job, handed)
    await kube.create(Job, job_manifest("plain", ns))

    async def finished(name: str) -> Any:
        wl = await kube.get(kueue.Workload, name, namespace=ns)
        return wl if is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED) else None

    wl = await eventually(lambda: finished(workload_name), timeout=120, what="the prebuilt Workload adopted, admitted and Finished")
    job = await kube.get(Job, job_name, namespace=ns)
    assert [ref.uid for ref in wl.metadata.owner_references or []] == [job.metadata.uid]
    plain = await kube.get(Job, "plain", namespace=ns)
    plain_wl = await eventually(lambda: workload_of(kube, plain), timeout=30, what="the plain Job's Workload")
    # Exactly one Workload per Job: the annotation was read, no second Workload was made.
    assert sorted(item.name for item in (await kube.list(kueue.Workload, namespace=ns)).items) == sorted([workload_name, plain_wl.name])

    async def pods_of(name: str) -> Any:
        listed = await kube.request(
            "GET", f"/api/v1/namespaces/{ns}/pods", query=[("labelSelector", f"batch.kubernetes.io/job-name={name}")]
        )
        return listed["items"] or None

    queue_labels = {c.PODSET_LABEL: "main", c.LOCAL_QUEUE_LABEL: "user-queue", c.CLUSTER_QUEUE_LABEL: cq}
    for name, wl_name, extra in ((job_name, workload_name, {c.MULTIKUEUE_WORKER_POD_LABEL: "true"}), ("plain", plain_wl.name, {})):
        pods = await eventually(lambda name=name: pods_of(name), timeout=60, what=f"the pods of {name}")  # type: ignore[misc]
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            assert {k: labels.get(k) for k in [*queue_labels, c.MULTIKUEUE_WORKER_POD_LABEL]} == {
                **queue_labels,
                c.MULTIKUEUE_WORKER_POD_LABEL: extra.get(c.MULTIKUEUE_WORKER_POD_LABEL),
            }
            assert (pod["metadata"].get("annotations") or {}).get(c.WORKLOAD_ANNOTATION) == wl_name


async def unsuspended_job(kube: KubeClient, ns: str, name: str) -> bool:
    return (await kube.get(Job, name, namespace=ns)).spec.suspend is False


# --- bad input -------------------------------------------------------------------------------------------
async def test_a_job_for_a_missing_queue_stays_suspended_with_a_clear_condition(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns = names("noqueue")
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    await kube.create(Job, job_manifest("lost", ns, queue="does-not-exist"))

    async def explained() -> Any:
        job = await kube.get(Job, "lost", namespace=ns)
        wl = await workload_of(kube, job)
        return (job, wl) if condition(wl, c.QUOTA_RESERVED) is not None else None

    job, wl = await eventually(explained, timeout=30, what="the Workload's QuotaReserved condition")
    assert job.spec.suspend is True
    status, reason, message = condition(wl, c.QUOTA_RESERVED)  # type: ignore[misc]
    assert (status, reason) == ("False", "Misconfigured")
    assert message == "LocalQueue does-not-exist doesn't exist"


async def test_a_job_whose_priority_class_comes_later_gets_its_workload_once_the_class_exists(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    """Same as Kueue: the job reconciler retries, with backoff, a Job it could not turn into a
    Workload; a WorkloadPriorityClass created after the Job (or not yet in the cache) is found."""
    ns, cq, flavor, priority = names("latepc"), names("latepc-cq"), names("latepc-flavor"), names("late")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels={})
    job = await kube.create(Job, job_manifest("early", ns, priority_class=priority))
    await kube.create(
        kueue.WorkloadPriorityClass,
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": priority}, "value": 500},
    )
    wl = await eventually(lambda: workload_of(kube, job), timeout=60, what="the Workload, once its priority class exists")
    assert wl.spec.priority == 500
    assert wl.spec.priority_class_ref is not None and wl.spec.priority_class_ref.name == priority


async def test_an_invalid_cluster_queue_is_rejected_with_the_field_path(manager: ControllerProcess, kube: KubeClient, names: Any) -> None:
    bad = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": names("bad")},
        "spec": {
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "a", "resources": [{"name": "cpu", "nominalQuota": 1}]}]},
                # The same resource in a second group: the CRD schema cannot see across groups.
                {"coveredResources": ["cpu"], "flavors": [{"name": "b", "resources": [{"name": "cpu", "nominalQuota": 1}]}]},
            ]
        },
    }
    with pytest.raises(InvalidError) as caught:
        await kube.create(kueue.ClusterQueue, bad)
    assert 'spec.resourceGroups[1].coveredResources[0]: Duplicate value: "cpu"' in caught.value.message
    assert "denied the request" in caught.value.message


async def test_v1beta1_objects_are_converted_by_the_webhook(manager: ControllerProcess, kube: KubeClient, names: Any) -> None:
    name, cohort = names("old"), names("old-cohort")
    old = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}
            ],
        },
    }
    created = await kube.request("POST", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues", body=old)
    assert created["spec"]["cohort"] == cohort
    stored = await kube.get(kueue.ClusterQueue, name)
    assert stored.spec.cohort_name == cohort
    with pytest.raises(NotFoundError):
        await kube.get(kueue.ClusterQueue, names("never-made"))


async def test_a_job_submitted_right_after_its_queue_is_marked_for_multikueue(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    """The defaulting webhook decides managedBy from its caches. A queue created a moment before
    the job may not be in them yet; the webhook then reads it from the apiserver, so the job is
    still dispatched to a worker rather than run on the manager."""
    ns, cq, check = names("fresh"), names("fresh-cq"), names("fresh-check")
    await kube.create(
        kueue.AdmissionCheck,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {"controllerName": c.MULTIKUEUE_CONTROLLER_NAME},
        },
    )
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=names("fresh-flavor"), node_labels=RUNS, lq="federated")
    await kube.patch(kueue.ClusterQueue, cq, {"spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": check}]}}})
    other = names("fresh-other")
    await make_queues(kube, other, cq=names("fresh-local"), cpu=4, flavor=names("fresh-flavor"), node_labels=RUNS, lq="local")

    # Submitted through the manager's webhook the moment the queues exist.
    federated = await kube.create(Job, job_manifest("right-after", ns, queue="federated"), namespace=ns)
    local = await kube.create(Job, job_manifest("right-after", other, queue="local"), namespace=other)
    assert federated.spec.managed_by == c.MULTIKUEUE_MANAGED_BY
    assert local.spec.managed_by is None and local.spec.suspend is True
    # The same decision from caches that have seen nothing at all, so the read path is certain to run.
    unsynced = Caches.create(kube)  # never started: it has seen none of these objects
    assert await queue_uses_multikueue(unsynced, kube, ns, "federated")
    assert not await queue_uses_multikueue(unsynced, kube, other, "local")
    assert not await queue_uses_multikueue(unsynced, kube, ns, "no-such-queue")
