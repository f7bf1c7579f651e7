"""Kubeflow Trainer v2 (github.com/kubeflow/trainer/v2) on local clusters, for `kfed dev up
--integrations trainjob`.

Every cluster gets the TrainJob, TrainingRuntime and ClusterTrainingRuntime CRDs, applied
server-side, and the release's `torch-distributed` ClusterTrainingRuntime: Kueue builds a
TrainJob's PodSets from the runtime it names, on the manager as on a worker, so the runtime
must be on both. A TrainJob makes a JobSet, so its catalog entry brings JobSet's CRD and
controller too (`manager.dev.jobset`).

A worker also runs the Trainer's controller manager, built by hack/trainer/build.sh, as an
administrator runs it without a Service in front of it (as JobSet's and LWS's,
`manager.dev.controllers`): with the worker's admin kubeconfig, its own health, metrics and
webhook ports on loopback, no leader election, a serving certificate for 127.0.0.1 that the
harness issues, and its webhooks (the TrainJob defaulter, and the TrainJob, TrainingRuntime
and ClusterTrainingRuntime validators) registered by URL.

Why no patch to the controller: the issue that asked for this kind said the Trainer always
manages its own certificates (it would wait for a Secret in `kubeflow-system`, inject a CA
into its webhook configurations for a Service, and read the pair from a hard-coded
/tmp/k8s-webhook-server/serving-certs). That was true of v2.0.x. Since v2.1 it is a field of
its Configuration, `certManagement.enable`, and v2.2.1 with it false starts at once and
serves whatever pair is in controller-runtime's default directory,
`$TMPDIR/k8s-webhook-server/serving-certs` (it has no certDir setting): so the harness gives
each process its own TMPDIR under its cluster's directory, and writes the pair there.
Its Configuration is decoded strictly, so it is written here (`configuration`): the fields
kfed writes for JobSet's and LWS's controllers (`webhook.certDir`, `internalCertManagement`)
would be refused.

The manager runs no Trainer: v2.2.1's controller does not read `spec.managedBy` (it would
run the manager's TrainJobs, which MultiKueue hands to a worker), and there TrainJobs are
MultiKueue's to dispatch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from manager.dev import controllers, federation
from manager.dev.local import Component, LocalCluster

CRD_FILES = tuple(
    Path("crds") / f"trainer.kubeflow.org_{plural}.yaml" for plural in ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
)
RUNTIME_FILE = Path("runtimes") / "torch_distributed.yaml"
RUNTIME = "torch-distributed"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs"


def configuration(*, health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """The Trainer's Configuration (config.trainer.kubeflow.org/v1alpha1): everything on
    loopback, metrics in plain HTTP, no leader election (none is configured: one process, and
    it would need a namespace), and its certificate management off (the pair is in `cert_dir`,
    its TMPDIR's, which the file cannot name)."""
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "secureServing": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port},
        "certManagement": {"enable": False},
    }


def _webhooks_called(cluster: LocalCluster) -> bool:
    """The Trainer's TrainJob defaulter stamps the time of each runtime patch, and its validator
    looks the runtime up: a dry run against the runtime `install_crds` applied shows when the
    apiserver calls both, so no TrainJob created afterwards misses them."""
    probe = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "trainer-webhook-probe", "namespace": "default"},
        "spec": {"runtimeRef": {"name": RUNTIME}, "suspend": True, "runtimePatches": [{"manager": "kfed.dev/probe"}]},
    }
    status, body = cluster.request("POST", TRAINJOBS.format(namespace="default") + "?dryRun=All", probe)
    return status == 201 and bool((body["spec"].get("runtimePatches") or [{}])[0].get("time"))


TRAINER = controllers.WebhookedKind(
    name="trainer",
    shown="Kubeflow Trainer",
    binary="trainer-controller-manager",
    config_api_version="config.trainer.kubeflow.org/v1alpha1",
    configuration_names={
        "MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org",
        "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org",
    },
    pod_selector={},  # it has no Pod webhook
    webhooks_called=_webhooks_called,
    write_configuration=configuration,
    certs_in_tmpdir=True,
)
COMPONENT = TRAINER.binary


def crds(bin_dir: Path) -> list[dict[str, Any]]:
    return controllers.load_crds(bin_dir, CRD_FILES)


def runtime(bin_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((bin_dir / RUNTIME_FILE).read_text())
    return loaded


def install_crds(cluster: LocalCluster, bin_dir: Path) -> None:
    """Its CRDs, then the `torch-distributed` runtime (before any Trainer webhook is registered
    on the cluster: the release's runtime needs no validating)."""
    controllers.install_crds(cluster, bin_dir, CRD_FILES)
    federation.apply(cluster, runtime(bin_dir))


def start_controller(cluster: LocalCluster, bin_dir: Path) -> Component:
    return controllers.WebhookedController(TRAINER, cluster, bin_dir).start()
