"""Labels, annotations, condition types and reasons, spelled exactly as Kueue spells them."""

from __future__ import annotations

GROUP = "kueue.x-k8s.io"
STORAGE_VERSION = "v1beta2"
SERVED_VERSIONS = ("v1beta2", "v1beta1")
CONFIG_GROUP = "config.kueue.x-k8s.io"

# Labels and annotations.
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
QUEUE_NAME_ANNOTATION = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
PREBUILT_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/prebuilt-workload-name"
# What Kueue puts on the pods of an admitted Job (its pod template, while admitted).
PODSET_LABEL = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
MULTIKUEUE_WORKER_POD_LABEL = "kueue.x-k8s.io/multikueue-worker-workload-pod"
LABEL_VALUE_MAX_LENGTH = 63
MULTIKUEUE_ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# Kueue's annotations naming the job of a Workload that is one of several (a LeaderWorkerSet's groups).
JOB_OWNER_GVK_ANNOTATION = "kueue.x-k8s.io/job-owner-gvk"
JOB_OWNER_NAME_ANNOTATION = "kueue.x-k8s.io/job-owner-name"
MULTIKUEUE_CONTROLLER_NAME = "kueue.x-k8s.io/multikueue"
PROVISIONING_CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
MULTIKUEUE_SECRET_KEY = "kubeconfig"
DEFAULT_MULTIKUEUE_ORIGIN = "multikueue"
DISPATCHER_ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
DISPATCHER_INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
# kfed's own: one copy, to the worker where the Workload fits now (manager/multikueue/rules/capacity.py).
DISPATCHER_CAPACITY_AWARE = "kfed.dev/multikueue-dispatcher-capacity-aware"
# The dispatchers by the short name the benchmarks' --dispatcher takes.
DISPATCHERS_BY_SHORT_NAME = {
    "all-at-once": DISPATCHER_ALL_AT_ONCE,
    "incremental": DISPATCHER_INCREMENTAL,
    "capacity-aware": DISPATCHER_CAPACITY_AWARE,
}

# Workload condition types.
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"
FINISHED = "Finished"
# True while the Workload needs to preempt but a preemption gate of its spec is closed (Kueue's
# reason PreemptionGated); the MultiKueue manager opens its own gate on one worker at a time.
BLOCKED_ON_PREEMPTION_GATES = "BlockedOnPreemptionGates"
REASON_PREEMPTION_GATED = "PreemptionGated"
MULTIKUEUE_PREEMPTION_GATE = "kueue.x-k8s.io/multikueue"

# ClusterQueue, LocalQueue, AdmissionCheck and MultiKueueCluster condition type.
ACTIVE = "Active"

# Reserved resource name: users may not request it; a group covering it counts pods.
PODS_RESOURCE = "pods"

# Limits Kueue's API enforces.
MAX_RESOURCE_GROUPS = 16
MAX_FLAVORS_PER_GROUP = 16
MAX_RESOURCES_PER_GROUP = 16
MAX_MULTIKUEUE_CLUSTERS = 20
MAX_POD_SETS = 18
