"""Deployment (apps/v1; Kueue's pkg/controller/jobs/deployment): queued pod by pod.

Kueue keeps no Workload of a Deployment and runs no reconciler for it. Its webhook marks the
pod template of a queued Deployment (the queue, the WorkloadPriorityClass, the managed label and
`kueue.x-k8s.io/pod-suspending-parent: deployment`), and the pod integration, which enabling
`deployment` enables for such pods, queues every pod its ReplicaSets make as a single Pod: one
Workload each, gated until admitted, deleted when preempted (the ReplicaSet makes a new one,
which waits gated). Through MultiKueue each pod runs on a worker as any Pod does, so one
Deployment's pods may run on several workers (as under Kueue: its issue #5734 is open).
"""

from __future__ import annotations

from manager.api.apps import Deployment
from manager.engine.integrations.pod import PodTemplateParent


class DeploymentParent(PodTemplateParent):
    framework = "deployment"
    model = Deployment
