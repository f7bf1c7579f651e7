"""The MPIJob adapter (kubeflow.org/v2beta1, the Kubeflow MPI Operator; Kueue's
pkg/controller/jobs/mpijob and its MultiKueue adapter).

One PodSet per replica type the MPIJob has, Launcher first, then Worker (Kueue's order), named
after it in lower case, of its replicas' pods. It is suspended through
`spec.runPolicy.suspend` and handed to MultiKueue through `spec.runPolicy.managedBy`. Starting
unsuspends it and merges each admitted PodSet's nodeSelector, tolerations, labels and
annotations into its replica type's pod template (the operator passes them on to the launcher
Job and the worker pods it creates); an eviction gives each template back what the Workload
recorded. It finishes with its Succeeded or Failed condition, and its pods are all up with its
Running condition. A worker gets the whole MPIJob with managedBy cleared, and its status comes
back whole on every sync.

`spec.mpiReplicaSpecs` is a map, which a merge patch merges key by key: the start and restore
patches name only the keys that change (a null removes one), and carry the tolerations, a list,
whole, with a resourceVersion precondition.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from manager.api import mpijob as api
from manager.api.kueue import PodSet, Workload
from manager.api.mpijob import MPIJob, ReplicaSpec
from manager.engine.integrations.adapter import Finished, JobAdapter, PodQuery, true_condition
from manager.engine.integrations.templates import restore_template
from manager.engine.jobs import JobConversionError, PodSetInfo, map_patch, original_template


def replica_types(job: MPIJob) -> list[str]:
    """Kueue's orderedReplicaTypes: Launcher, then Worker, each only when the MPIJob has it."""
    specs = job.spec.mpi_replica_specs
    return [kind for kind in api.REPLICA_TYPES if specs.get(kind) is not None]


def pod_set_name(replica_type: str) -> str:
    """Kueue names a PodSet after its replica type, in lower case (`launcher`, `worker`)."""
    return replica_type.lower()


def replica_path(replica_type: str) -> str:
    return f"spec.mpiReplicaSpecs[{replica_type}].template"


def _replica(job: MPIJob, replica_type: str) -> ReplicaSpec:
    spec = job.spec.mpi_replica_specs.get(replica_type)
    if spec is None:  # replica_types lists only the ones present
        raise JobConversionError(f"spec.mpiReplicaSpecs[{replica_type}]", "Required value")
    return spec


def _raw_template(job: MPIJob, replica_type: str) -> dict[str, Any]:
    """One replica type's pod template as written (empty parts as empty maps)."""
    raw = ((job.to_dict().get("spec") or {}).get("mpiReplicaSpecs") or {}).get(replica_type) or {}
    template: dict[str, Any] = copy.deepcopy(raw.get("template") or {})
    template.setdefault("metadata", {})
    template.setdefault("spec", {})
    return template


def _merged(have: Mapping[str, str], add: Mapping[str, str], *, path: str) -> dict[str, str]:
    """Kueue's podset.Merge for one map: a key may be added, never given another value (a
    conflict is a JobConversionError: Kueue finishes such a Workload as FailedToStart).
    Not `templates.merge_into_template` only for the conflict's words: that one words it as
    JobSet's and Ray's adapters do, and an MPIJob's FailedToStart message has its own (its
    tests pin them); sharing it would change what a user reads."""
    for key, value in add.items():
        if key in have and have[key] != value:
            raise JobConversionError(path, f'conflict for "{key}": the template has "{have[key]}", the admission sets "{value}"')
    return {**have, **add}


def _template_patch(have: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """The merge patch turning pod template `have`'s four admission fields into `want`'s (the
    maps as key changes, the tolerations whole); empty when nothing changes."""
    patch: dict[str, Any] = {}
    for section, key in (("metadata", "labels"), ("metadata", "annotations"), ("spec", "nodeSelector")):
        want_map = (want.get(section) or {}).get(key) or {}
        changes = map_patch((have.get(section) or {}).get(key) or {}, want_map)
        if changes:
            # An emptied map goes whole, so that the template is left without it (as it was).
            patch.setdefault(section, {})[key] = changes if want_map else None
    want_tolerations = (want.get("spec") or {}).get("tolerations") or None
    if ((have.get("spec") or {}).get("tolerations") or None) != want_tolerations:
        patch.setdefault("spec", {})["tolerations"] = copy.deepcopy(want_tolerations)
    return patch


class MPIJobAdapter(JobAdapter[MPIJob]):
    framework = "kubeflow.org/mpijob"
    model = MPIJob
    cli_name = "mpijob"
    pod_label = api.JOB_NAME_LABEL
    default_managed_by = api.CONTROLLER_NAME
    managed_by_field = ("spec", "runPolicy", "managedBy")

    def pod_query(self, wl: Workload) -> PodQuery | None:
        """Kueue's PodLabelSelector for an MPIJob: its name's label and the operator's."""
        query = super().pod_query(wl)
        if query is None:
            return None
        return PodQuery(label_selector=f"{query.label_selector},{api.OPERATOR_NAME_LABEL}={api.OPERATOR_NAME}")

    # --- the Workload ---------------------------------------------------------------------------
    def template_path(self, index: int) -> str:
        # A valid MPIJob has its Launcher (the operator requires it), so PodSet 0 is the
        # launcher's and PodSet 1 the workers'.
        return replica_path(api.REPLICA_TYPES[index] if index < len(api.REPLICA_TYPES) else f"#{index}")

    def pod_sets(self, job: MPIJob) -> list[PodSet]:
        unknown = sorted(kind for kind in job.spec.mpi_replica_specs if kind not in api.REPLICA_TYPES)
        if unknown:
            raise JobConversionError(
                f"spec.mpiReplicaSpecs[{unknown[0]}]", f"Unsupported value: the replica types are {' and '.join(api.REPLICA_TYPES)}"
            )
        kinds = replica_types(job)
        if not kinds:
            raise JobConversionError("spec.mpiReplicaSpecs", "Required value: an MPIJob needs a Launcher or a Worker")
        return [
            PodSet(
                name=pod_set_name(kind),
                template=_replica(job, kind).template.model_dump(by_alias=True, exclude_none=True, mode="json"),
                count=_replica(job, kind).effective_replicas,
            )
            for kind in kinds
        ]

    def priority_class_of(self, job: MPIJob) -> tuple[str, str] | None:
        """Kueue's PriorityClass for an MPIJob: its runPolicy's schedulingPolicy names one before
        any pod template does."""
        policy = job.spec.run_policy.scheduling_policy
        if policy is not None and policy.priority_class:
            return policy.priority_class, "spec.runPolicy.schedulingPolicy.priorityClass"
        return None

    # --- running and stopping ---------------------------------------------------------------------
    def is_suspended(self, job: MPIJob) -> bool:
        return job.spec.run_policy.suspend is True

    def suspend_patch(self, job: MPIJob) -> dict[str, Any]:
        return {"spec": {"runPolicy": {"suspend": True}}}

    def creation_patch(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """Suspended at creation through its runPolicy, which is made when absent (so that the
        webhook's managedBy patch, which follows, has it to go into)."""
        run_policy = (obj.get("spec") or {}).get("runPolicy")
        if not isinstance(run_policy, dict):
            return [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
        if run_policy.get("suspend") is True:
            return []
        return [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]

    def start_patch(self, job: MPIJob, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        """Kueue's RunWithPodSetsInfo: one admitted PodSet per replica type, in order, merged
        into its pod template."""
        kinds = replica_types(job)
        if len(pod_sets) != len(kinds):
            raise JobConversionError("spec.mpiReplicaSpecs", f"expecting {len(kinds)} admitted PodSets, got {len(pod_sets)}")
        replicas: dict[str, Any] = {}
        for kind, info in zip(kinds, pod_sets, strict=True):
            path = replica_path(kind)
            template = _raw_template(job, kind)
            merged = copy.deepcopy(template)
            meta, spec = merged["metadata"], merged["spec"]
            meta["labels"] = _merged(meta.get("labels") or {}, info.labels, path=f"{path}.metadata.labels")
            meta["annotations"] = _merged(meta.get("annotations") or {}, info.annotations, path=f"{path}.metadata.annotations")
            spec["nodeSelector"] = _merged(spec.get("nodeSelector") or {}, info.node_selector, path=f"{path}.spec.nodeSelector")
            tolerations = list(spec.get("tolerations") or [])
            spec["tolerations"] = tolerations + [toleration for toleration in info.tolerations if toleration not in tolerations]
            patch = _template_patch(template, merged)
            if patch:
                replicas[kind] = {"template": patch}
        spec_patch: dict[str, Any] = {"runPolicy": {"suspend": False}}
        if replicas:
            spec_patch["mpiReplicaSpecs"] = replicas
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": spec_patch}

    def restore_patch(self, job: MPIJob, wl: Workload) -> dict[str, Any] | None:
        """Kueue's RestorePodSpec for each replica type: its pod template's labels, annotations,
        nodeSelector and tolerations become what the Workload recorded for its PodSet. A Workload
        whose PodSets do not match the replica types restores nothing."""
        kinds = replica_types(job)
        if [pod_set_name(kind) for kind in kinds] != [pod_set.name for pod_set in wl.spec.pod_sets]:
            return None
        replicas: dict[str, Any] = {}
        for kind in kinds:
            template = _raw_template(job, kind)
            restored = copy.deepcopy(template)
            restore_template(restored, original_template(wl, pod_set_name(kind)))
            patch = _template_patch(template, restored)
            if patch:
                replicas[kind] = {"template": patch}
        if not replicas:
            return None
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": {"mpiReplicaSpecs": replicas}}

    def finished(self, job: MPIJob) -> Finished | None:
        """Kueue's Finished: the first Succeeded or Failed condition that is True."""
        cond = true_condition(job.status.conditions if job.status else None, api.SUCCEEDED, api.FAILED)
        if cond is None:
            return None
        succeeded = cond.type == api.SUCCEEDED
        return Finished(succeeded, cond.message or ("MPIJob finished successfully" if succeeded else "MPIJob failed"))

    def active_count(self, job: MPIJob) -> int:
        """Its running launcher and worker pods, as the operator counts them."""
        statuses = (job.status.replica_statuses if job.status else None) or {}
        return sum(status.active or 0 for status in statuses.values() if status is not None)

    def pods_ready(self, job: MPIJob) -> bool:
        """Kueue's PodsReady for an MPIJob: its Running condition (the launcher and every worker run)."""
        return true_condition(job.status.conditions if job.status else None, api.RUNNING) is not None

    def managed_by(self, job: MPIJob) -> str | None:
        return job.spec.run_policy.managed_by

    # --- MultiKueue ------------------------------------------------------------------------------
    def lost_pods_status(self, job: MPIJob) -> dict[str, Any]:
        statuses = (job.status.replica_statuses if job.status else None) or {}
        return {"status": {"replicaStatuses": {kind: {"active": 0} for kind, status in statuses.items() if status is not None}}}
