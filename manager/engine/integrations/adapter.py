"""The interface every job kind implements for the job integration (Kueue's GenericJob and
its MultiKueue adapter, as pure functions of the object).

An adapter says what Kueue needs to know about one kind: the PodSets its Workload asks for,
the patches that suspend, start and restore it, whether it is finished and how, whether its
pods still run, and, for MultiKueue, the object to create on a worker and the status to copy
back. `plan_job` (`manager.engine.integrations.plan`) decides every step from these answers,
so adding a kind is one adapter module and its entry in the registry.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from manager.api import constants as c
from manager.api.core import PriorityClass
from manager.api.kueue import PodSet, Workload, WorkloadPriorityClass, WorkloadSpec
from manager.api.meta import ObjectMeta, OwnerReference, Resource
from manager.engine.jobs import (
    JobConversionError,
    PodSetInfo,
    job_queue_name,
    multikueue_remote_metadata,
    prebuilt_keys,
    resolve_priority,
    workload_name,
)
from manager.engine.worker_restriction import JOB_ANNOTATIONS as RESTRICTION_ANNOTATIONS

J = TypeVar("J", bound=Resource)


def gvk_of(api_version: str, kind: str) -> str:
    """Kueue's GVK string (schema.GroupVersionKind.String()), e.g. `batch/v1, Kind=Job`."""
    return f"{api_version}, Kind={kind}"


class ConditionLike(Protocol):
    """A condition of any kind's status (`type` and `status`, as Kubernetes writes them)."""

    @property
    def type(self) -> str: ...

    @property
    def status(self) -> str: ...


CondT = TypeVar("CondT", bound=ConditionLike)


def true_condition(conditions: Sequence[CondT] | None, *types: str) -> CondT | None:
    """The first of a job's `conditions` of one of `types` whose status is True, in the order
    written; None when there is none."""
    return next((cond for cond in conditions or [] if cond.type in types and cond.status == "True"), None)


def model_gvk(model: type[Resource]) -> str:
    """The GVK string of a kind's model."""
    return gvk_of(f"{model.GROUP}/{model.VERSION}" if model.GROUP else model.VERSION, model.KIND)


# The job informers' index of the related objects each job names (`JobAdapter.related_of`).
RELATED_INDEX = "related"


def related_index_value(model: type[Resource], key: str) -> str:
    """One related object, as `RELATED_INDEX` holds it: its kind's GVK and its cache key."""
    return f"{model_gvk(model)}|{key}"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def owner_index_values(wl: Workload) -> list[str]:
    """`group/Kind/namespace/name` of the Workload's controller owner: how a job of any kind
    finds the Workloads it owns by its key alone (after it is gone, there is no UID to go by)."""
    return [
        f"{group_of(ref.api_version)}/{ref.kind}/{wl.namespace}/{ref.name}" for ref in wl.metadata.owner_references or [] if ref.controller
    ]


# Kueue's annotations naming the job of a Workload that is one of several (a LeaderWorkerSet's
# groups): they outlive the owner references.
JOB_OWNER_GVK_ANNOTATION = c.JOB_OWNER_GVK_ANNOTATION
JOB_OWNER_NAME_ANNOTATION = c.JOB_OWNER_NAME_ANNOTATION


COMPONENT_WORKLOAD_INDEX_ANNOTATION = "kueue.x-k8s.io/component-workload-index"


def component_index(wl: Workload) -> int | None:
    """Kueue's GetWorkloadIndex: the index of a component Workload among its job's; None when
    it is no component (or the index is not a number)."""
    raw = (wl.metadata.annotations or {}).get(COMPONENT_WORKLOAD_INDEX_ANNOTATION, "")
    return int(raw) if raw.isdigit() and component_owner_values(wl) else None


def component_owner_values(wl: Workload) -> list[str]:
    """`GVK|namespace/name` of the job a component Workload belongs to (its owner annotations)."""
    annotations = wl.metadata.annotations or {}
    gvk, name = annotations.get(JOB_OWNER_GVK_ANNOTATION), annotations.get(JOB_OWNER_NAME_ANNOTATION)
    return [f"{gvk}|{wl.namespace}/{name}"] if gvk and name else []


@dataclass(frozen=True)
class PodQuery:
    """How to list the pods of one job in its namespace: a label selector, a field selector or both."""

    label_selector: str | None = None
    field_selector: str | None = None


@dataclass(frozen=True)
class Finished:
    """How a job ended: Kueue's Finished condition takes its reason and message from here."""

    succeeded: bool
    message: str


class JobAdapter(ABC, Generic[J]):
    """One job kind. Every method is a pure function of the objects it is given."""

    framework: ClassVar[str]  # the name in the Configuration's integrations.frameworks
    model: type[J]
    multikueue: ClassVar[bool] = True  # whether MultiKueue can dispatch it to a worker
    # spec.managedBy of an object the kind's own controller runs (a webhook may replace it).
    default_managed_by: ClassVar[str] = ""
    # Where the kind keeps its managedBy (an MPIJob: spec.runPolicy.managedBy).
    managed_by_field: ClassVar[tuple[str, ...]] = ("spec", "managedBy")
    # The CLI's name for the kind (`kfed explain job/NAME`), and the label its controller puts
    # on each of its pods, valued the job's name (how `kfed logs` finds them: `pod_query`).
    cli_name: ClassVar[str]
    pod_label: ClassVar[str]
    # Kinds without a suspend field (Kueue's pod integration) set these three:
    # a finalizer the webhook puts on each object, so its end is seen before it goes (removed
    # once it or its Workload finished, or once it is being deleted);
    finalizer: ClassVar[str | None] = None
    # stopped by deleting it, after a status condition says why (Kueue's JobWithCustomStop),
    # never by suspending it: it is never started again;
    stopped_by_deletion: ClassVar[bool] = False
    # never started on a cluster that dispatches its Workload through MultiKueue: it stays
    # suspended there while a worker runs the copy (Kueue's ShouldSkipLocalExecution).
    suspended_under_multikueue: ClassVar[bool] = False
    # Whether its pod templates get back what the Workload recorded in the same write that
    # suspends it (Kueue's stop of a kind with no stop of its own). A Job (its startTime must go
    # first) and a TrainJob (its jobs must be gone) restore later, at the release.
    restores_with_suspend: ClassVar[bool] = True

    # --- naming ---------------------------------------------------------------------------------
    @property
    def api_version(self) -> str:
        return f"{self.model.GROUP}/{self.model.VERSION}" if self.model.GROUP else self.model.VERSION

    @property
    def kind(self) -> str:
        return self.model.KIND

    @property
    def gvk(self) -> str:
        return gvk_of(self.api_version, self.kind)

    def owns(self, ref: OwnerReference) -> bool:
        """Whether an owner reference names an object of this kind (any version of its group)."""
        return ref.kind == self.kind and group_of(ref.api_version) == self.model.GROUP

    def owner_index_value(self, key: str) -> str:
        """What `owner_index_values` gives the Workloads a job of this kind (`namespace/name`) owns."""
        return f"{self.model.GROUP}/{self.kind}/{key}"

    def owner_reference(self, job: J) -> OwnerReference:
        return OwnerReference(
            api_version=self.api_version,
            kind=self.kind,
            name=job.name,
            uid=job.metadata.uid or "",
            controller=True,
            block_owner_deletion=True,
        )

    def names(self, wl: Workload, name: str) -> bool:
        """Whether `KIND/NAME` in the CLI (`kfed logs`, `kfed explain`) means this Workload's job:
        its controller owner is the job of this kind called `name`."""
        return any(ref.controller and self.owns(ref) and ref.name == name for ref in wl.metadata.owner_references or [])

    def pod_query(self, wl: Workload) -> PodQuery | None:
        """The pods of the job a Workload belongs to, on whichever cluster runs it (`kfed logs`
        and the read API): those labelled `pod_label` with the job's name. None: not this kind's."""
        owner = next((ref for ref in wl.metadata.owner_references or [] if ref.controller and self.owns(ref)), None)
        return PodQuery(label_selector=f"{self.pod_label}={owner.name}") if owner is not None else None

    def cli_names(self) -> tuple[str, ...]:
        """Every name kubectl accepts for the kind: `job`, `jobs`, `job.batch`, `jobs.batch`."""
        singular, plural, group = self.kind.lower(), self.model.PLURAL, self.model.GROUP
        names = (self.cli_name, singular, plural, *((f"{singular}.{group}", f"{plural}.{group}") if group else ()))
        return tuple(dict.fromkeys(names))

    # --- the rights it needs (`kfed rbac` writes them into deploy/ and the Helm chart) -----------
    def controller_rules(self) -> list[dict[str, list[str]]]:
        """On a cluster where the kind is queued (the manager, a worker agent): watch it, suspend
        and start it (patch), and write its status (MultiKueue copies a worker's status back)."""
        group, plural = self.model.GROUP, self.model.PLURAL
        return [
            {"apiGroups": [group], "resources": [plural], "verbs": ["list", "watch", "patch"]},
            {"apiGroups": [group], "resources": [f"{plural}/status"], "verbs": ["patch"]},
        ]

    def worker_rules(self) -> list[dict[str, list[str]]]:
        """What the manager needs on a worker to run the kind there through MultiKueue: create it
        on the winner, list, watch and get it, and delete it with its copy (and in GC)."""
        if not self.multikueue:
            return []
        return [{"apiGroups": [self.model.GROUP], "resources": [self.model.PLURAL], "verbs": ["create", "delete", "get", "list", "watch"]}]

    def dashboard_rules(self) -> list[dict[str, list[str]]]:
        """The in-cluster dashboard's own identity, which acts only after the user's review
        allowed it: read the kind (the jobs pages) and delete it (the Cancel button)."""
        return [{"apiGroups": [self.model.GROUP], "resources": [self.model.PLURAL], "verbs": ["get", "list", "delete"]}]

    def reader_rules(self) -> list[dict[str, list[str]]]:
        """A user's `kfed-namespace-reader` role: read the kind in the namespace it is bound in."""
        return [{"apiGroups": [self.model.GROUP], "resources": [self.model.PLURAL], "verbs": ["get", "list"]}]

    # --- a job run as pod groups (Kueue's LeaderWorkerSet) -----------------------------------------
    # Such a job is never suspended: its controller keeps one Workload per group of its pods
    # (`component_workloads`) and makes each of its pods a member of its group's pod group
    # (`member_patch`); the pod integration starts and stops the pods with their group's
    # Workload. Its pods carry `pod_label` valued with the job's name.
    runs_as_pod_groups: ClassVar[bool] = False

    def component_workloads(self, job: J, existing: Sequence[str]) -> tuple[list[tuple[str, int]], list[str]]:
        """(the Workloads to create, as (name, group index); the names of those to delete)."""
        raise NotImplementedError(f"{self.kind} does not run as pod groups")

    def component_workload_metadata(self, job: J, name: str, index: int) -> ObjectMeta:
        """The metadata of the job's Workload for group `index`."""
        raise NotImplementedError(f"{self.kind} does not run as pod groups")

    def member_patch(self, job: J, pod: Any) -> dict[str, Any] | None:
        """The merge patch making one of its pods a member of its group's pod group; None for none."""
        raise NotImplementedError(f"{self.kind} does not run as pod groups")

    def member_of(self, pod: Any) -> str | None:
        """The key of the job of this kind a pod belongs to (its events wake the job); None: none."""
        return None

    # --- a job of several objects (Kueue's ComposableJob: a pod group) ----------------------------
    # A job is one object by default. A kind whose job may be several objects (a pod group) maps
    # each object to its job's key, composes the job from its informer, and names each object a
    # step writes (`Target`); the shell and `plan_job` ask these and nothing else.
    def job_key(self, obj: J) -> str:
        """The key of the job an object belongs to (`namespace/name`)."""
        return obj.key

    def load(self, key: str, *, get: Callable[[str], J | None], by_index: Callable[[str, str], list[J]]) -> J | None:
        """The job `key` names, from the kind's informer; None when it is gone."""
        return get(key)

    def indexes(self) -> dict[str, Callable[[Any], list[str]]]:
        """Indexes the kind's informer keeps for `load`."""
        return {}

    # --- objects of other kinds a job needs (a TrainJob's runtime) -------------------------------
    # Kueue's reconciler reads them with its client; kfed's caches keep an informer of each kind
    # an enabled adapter names here, and the shell gives every loaded job what it needs of them.
    def related_models(self) -> tuple[type[Resource], ...]:
        """The kinds besides its own the adapter reads to know a job."""
        return ()

    def related_of(self, job: J) -> list[tuple[type[Resource], str]]:
        """The objects of `related_models` the job names, as (kind's model, cache key). A job
        named one before it existed waits for it: the object's events wake the job."""
        return []

    def with_related(self, job: J, *, find: Callable[[type[Resource], str], Resource | None]) -> J:
        """The job with what it needs of other objects (`find(model, key)`, from the caches;
        None when there is none)."""
        return job

    def related_index_values(self, job: Any) -> list[str]:
        """The job informer's `RELATED_INDEX`: every object the job names."""
        return [related_index_value(model, key) for model, key in self.related_of(job)]

    def workload_key_for(self, key: str) -> str | None:
        """The Workload of the job `key`, when the kind names it by the job (a pod group's is
        the group's name); None: found by its controller owner."""
        return None

    def job_keys(self, wl: Workload) -> list[str]:
        """The jobs of this kind a Workload belongs to (to reconcile them when it changes)."""
        return [f"{wl.namespace}/{ref.name}" for ref in wl.metadata.owner_references or [] if ref.controller and self.owns(ref)]

    def parts(self, job: J) -> list[J]:
        """The objects the job is made of (MultiKueue copies each to the worker)."""
        return [job]

    def compose(self, parts: Sequence[J]) -> J | None:
        """The job from its objects as found on a worker (`parts` of one Workload); None for none."""
        return parts[0] if parts else None

    def adoption_references(self, job: J) -> list[OwnerReference]:
        """The owners a prebuilt Workload gets from the job that adopts it: the job, as controller."""
        return [self.owner_reference(job)]

    def incomplete(self, job: J) -> bool:
        """Whether the job is not whole yet (a pod group with fewer pods than its total): it
        waits, without a Workload, for the rest."""
        return False

    def workload_metadata(self, job: J) -> ObjectMeta:
        """The new Workload's name, labels and owners (Kueue's ConstructWorkload: named after
        the job and its UID, owned by it as controller, with its UID as a label), and kfed's
        worker restriction annotations, copied from the job."""
        uid = job.metadata.uid or ""
        # The job's restriction on its workers goes with its Workload, which MultiKueue dispatches.
        restriction = {k: v for k, v in (job.metadata.annotations or {}).items() if k in RESTRICTION_ANNOTATIONS}
        return ObjectMeta(
            name=workload_name(job.name, uid, kind=self.kind, group=self.model.GROUP),
            namespace=job.namespace,
            labels={c.JOB_UID_LABEL: uid},
            annotations=restriction or None,
            creation_timestamp=job.metadata.creation_timestamp,
            owner_references=[self.owner_reference(job)],
        )

    def start_patches(self, job: J, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> list[tuple[str | None, dict[str, Any]]]:
        """(object name, or None for the job itself; merge patch) for each object to start."""
        return [(None, self.start_patch(job, wl, pod_sets))]

    def stop_targets(self, job: J) -> list[J]:
        """A kind stopped by deletion: the objects to mark and delete (not yet suspended ones)."""
        return [] if self.is_suspended(job) else [job]

    def finalize_patches(self, job: J, *, deleting_only: bool = False) -> list[tuple[str | None, dict[str, Any]]]:
        """(object name, or None for the job itself; merge patch) removing the kind's
        finalizer: from every object, or (`deleting_only`) from those being deleted."""
        if deleting_only and job.metadata.deletion_timestamp is None:
            return []
        patch = self.finalize_patch(job)
        return [(None, patch)] if patch is not None else []

    # --- what it handles ------------------------------------------------------------------------
    def manages(self, job: J) -> bool:
        """Whether the reconciler handles this object at all (Kueue's JobWithSkip)."""
        return True

    def creation_patch(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """The JSON patch the defaulting webhook gives a queued object at creation, so that it
        waits for its Workload's admission (Kueue's job webhooks: `spec.suspend: true`)."""
        if (obj.get("spec") or {}).get("suspend") is True:
            return []
        return [{"op": "add", "path": "/spec/suspend", "value": True}]

    def creation_problems(self, obj: dict[str, Any]) -> list[str]:
        """Why the webhook refuses a queued object at creation (`path: reason` each, as the
        apiserver's validation says them); none by default."""
        return []

    # The operations kfed's webhook sees: a job kind's creation only (Kueue's update checks of
    # job kinds are not done yet).
    webhook_operations: ClassVar[tuple[str, ...]] = ("CREATE",)

    def webhook_namespace_selector(self) -> dict[str, Any] | None:
        """The namespaceSelector of the kind's defaulting webhook; None for every namespace."""
        return None

    def finalize_patch(self, job: J) -> dict[str, Any] | None:
        """A merge patch that removes the kind's finalizer (Kueue's Finalize); None without one."""
        if self.finalizer is None or self.finalizer not in (job.metadata.finalizers or []):
            return None
        kept = [name for name in job.metadata.finalizers or [] if name != self.finalizer]
        return {"metadata": {"resourceVersion": job.metadata.resource_version, "finalizers": kept or None}}

    def termination_status_patch(self, job: J, *, reason: str, message: str, now: datetime) -> dict[str, Any] | None:
        """For a kind stopped by deletion: the status patch that says why, written before the
        delete (Kueue's TerminationTarget condition); None for none."""
        return None

    # --- the Workload ---------------------------------------------------------------------------
    @abstractmethod
    def pod_sets(self, job: J) -> list[PodSet]:
        """The PodSets of the job's Workload (Kueue's PodSets); raises JobConversionError."""

    @abstractmethod
    def template_path(self, index: int) -> str:
        """Where the object holds PodSet `index`'s pod template, for error messages."""

    # --- running and stopping ---------------------------------------------------------------------
    @abstractmethod
    def is_suspended(self, job: J) -> bool: ...

    def suspend_patch(self, job: J) -> dict[str, Any]:
        """A merge patch that suspends the job (Kueue's Suspend)."""
        return {"spec": {"suspend": True}}

    @abstractmethod
    def start_patch(self, job: J, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        """A merge patch that unsuspends the job with each admitted PodSet's nodeSelector,
        tolerations, labels and annotations injected (Kueue's RunWithPodSetsInfo)."""

    @abstractmethod
    def restore_patch(self, job: J, wl: Workload) -> dict[str, Any] | None:
        """A merge patch giving a suspended job back the pod templates its Workload recorded
        (Kueue's RestorePodSetsInfo); None when it has them already."""

    def stop_status_patch(self, job: J) -> dict[str, Any] | None:
        """A status patch a stopped job needs before its template may change; None for none."""
        return None

    @abstractmethod
    def finished(self, job: J) -> Finished | None:
        """Whether the job finished, and how (Kueue's Finished); None while it has not."""

    @abstractmethod
    def active_count(self, job: J) -> int:
        """How many of its pods (or child jobs) run; Kueue's IsActive is `active_count > 0`."""

    def releasable(self, job: J) -> bool:
        """Whether an evicted job's quota may be given back: none of its pods runs. A kind may
        also wait for pods that are still terminating, or for a finish that is under way."""
        return self.active_count(job) == 0

    @abstractmethod
    def pods_ready(self, job: J) -> bool:
        """Whether all its pods are ready or succeeded (Kueue's PodsReady)."""

    @abstractmethod
    def managed_by(self, job: J) -> str | None: ...

    def _managed_by_holder(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The map of a raw object that holds its managedBy (`managed_by_field`), if there is one."""
        holder: Any = obj
        for key in self.managed_by_field[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        return holder if isinstance(holder, dict) else None

    def raw_managed_by(self, obj: dict[str, Any]) -> str | None:
        """The managedBy of an object as written (the webhook reads it before any model)."""
        holder = self._managed_by_holder(obj)
        value = holder.get(self.managed_by_field[-1]) if holder is not None else None
        return value if isinstance(value, str) else None

    def managed_by_patch(self, value: str) -> dict[str, Any]:
        """The JSON patch operation the webhook sets managedBy with, after `creation_patch`
        ("add" replaces a managedBy naming the kind's own controller, RFC 6902)."""
        return {"op": "add", "path": "/" + "/".join(self.managed_by_field), "value": value}

    def priority_class_of(self, job: J) -> tuple[str, str] | None:
        """A PriorityClass the job names outside its pod templates, before them (Kueue's
        JobWithPriorityClass), with where it names it; None: its pod templates decide."""
        return None

    def can_default_managed_by(self, managed_by: str | None) -> bool:
        """Kueue's CanDefaultManagedBy: a webhook may hand the job to MultiKueue only while
        its own controller (or nobody) is named."""
        return not managed_by or managed_by == self.default_managed_by

    # --- MultiKueue ------------------------------------------------------------------------------
    def remote_workload_keys(self, job: J) -> list[str]:
        """The manager Workloads (`namespace/name`) a job found on a worker was created for: the
        prebuilt Workload it names (Kueue's WorkloadKeysFor); a kind run as pod groups, one per group."""
        return prebuilt_keys(job)

    def remote_object(self, job: J, *, workload_name: str, origin: str) -> dict[str, Any]:
        """The job to create on the worker that admitted its Workload (Kueue's SyncJob, create):
        its `remote_spec`, with the origin and the prebuilt Workload's name in its metadata."""
        metadata = multikueue_remote_metadata(job, workload_name=workload_name, origin=origin)
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata, "spec": self.remote_spec(job)}

    def remote_spec(self, job: J) -> dict[str, Any]:
        """The spec a worker gets: the whole spec, its managedBy (`managed_by_field`) cleared so
        that the worker's own controller runs it (Kueue's common MultiKueue adapter)."""
        spec: dict[str, Any] = copy.deepcopy(job.to_dict().get("spec") or {})
        holder = self._managed_by_holder({"spec": spec})
        if holder is not None:
            holder.pop(self.managed_by_field[-1], None)
        return spec

    def status_update(self, local: J, remote: J) -> tuple[dict[str, Any] | None, bool]:
        """(the status to give the manager's job, or None to keep it; deferred: try again
        soon). The worker's status, whole, on every sync (Kueue's common MultiKueue adapter)."""
        status = getattr(remote, "status", None)
        return (status.to_dict() if status is not None else {}), False

    @abstractmethod
    def lost_pods_status(self, job: J) -> dict[str, Any]:
        """A status merge patch saying none of the manager job's pods runs (its worker is lost)."""

    def stopped(self, job: J) -> bool:
        """Suspended with no pod left running, and neither finished nor finishing: what a job
        handed to a worker must be there before the manager gives its quota back."""
        return self.is_suspended(job) and self.releasable(job) and self.finished(job) is None


def construct_workload(
    adapter: JobAdapter[Any],
    job: Resource,
    *,
    workload_priority_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The Workload for a queued job, as Kueue's ConstructWorkload builds it: the adapter's
    PodSets, the queue, the priority, the job's UID label, and the job as controller owner."""
    queue_name = job_queue_name(job)
    if not queue_name:
        raise JobConversionError(f"metadata.labels[{c.QUEUE_NAME_LABEL}]", f"Required value: the {adapter.kind} is not queued")
    pod_sets = adapter.pod_sets(job)
    priority, ref = resolve_priority(
        job.metadata.labels,
        pod_sets,
        template_paths=[adapter.template_path(i) for i in range(len(pod_sets))],
        job_priority_class=adapter.priority_class_of(job),
        workload_priority_classes=workload_priority_classes,
        priority_classes=priority_classes,
    )
    meta = adapter.workload_metadata(job)
    return Workload(metadata=meta, spec=WorkloadSpec(pod_sets=pod_sets, queue_name=queue_name, priority=priority, priority_class_ref=ref))
