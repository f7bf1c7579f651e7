"""JobSet (sigs.k8s.io/jobset) on local clusters, for `kfed dev up --integrations jobset`.

Every cluster gets the JobSet CRD, applied server-side (it is far larger than the annotation a
client-side apply keeps). A worker also runs the JobSet controller, built by hack/jobset/build.sh,
as an administrator runs it without cert-manager or a Service in front of it: with the worker's
admin kubeconfig, its internal certificate management off (it would wait for a Secret and a
Service that do not exist), a serving certificate for 127.0.0.1 that the harness issues, its
webhooks registered by URL, and its own health and metrics ports (its default :8081 is kfed's).
The manager runs no JobSet controller: there JobSets are MultiKueue's to dispatch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from manager.api.jobset import JOBSET_NAME_LABEL
from manager.dev import controllers
from manager.dev.local import Component, LocalCluster

CRD_FILE = Path("crds") / "jobset.x-k8s.io_jobsets.yaml"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"


def _webhooks_called(cluster: LocalCluster) -> bool:
    """JobSet's defaulting webhook turns on DNS hostnames (the CRD has no such default): a dry
    run shows when the apiserver calls it, so no JobSet created afterwards misses it."""
    pod = {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "busybox"}]}
    probe = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "jobset-webhook-probe", "namespace": "default"},
        "spec": {"replicatedJobs": [{"name": "probe", "template": {"spec": {"template": {"spec": pod}}}}]},
    }
    status, body = cluster.request("POST", JOBSETS.format(namespace="default") + "?dryRun=All", probe)
    return status == 201 and body["spec"].get("network", {}).get("enableDNSHostnames") is True


JOBSET = controllers.WebhookedKind(
    name="jobset",
    shown="JobSet",
    binary="jobset-controller",
    config_api_version="config.jobset.x-k8s.io/v1alpha1",
    configuration_names={
        "MutatingWebhookConfiguration": "jobset-mutating-webhook-configuration",
        "ValidatingWebhookConfiguration": "jobset-validating-webhook-configuration",
    },
    pod_selector={"matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]},
    webhooks_called=_webhooks_called,
    metrics_read_certificates=True,  # its metrics server reads the webhook's pair
)
COMPONENT = JOBSET.binary
configuration = JOBSET.configuration
webhook_configurations = JOBSET.webhook_configurations


def crd(bin_dir: Path) -> dict[str, Any]:
    return controllers.load_crds(bin_dir, [CRD_FILE])[0]


def install_crd(cluster: LocalCluster, bin_dir: Path) -> None:
    controllers.install_crds(cluster, bin_dir, [CRD_FILE])


def start_controller(cluster: LocalCluster, bin_dir: Path) -> Component:
    return controllers.WebhookedController(JOBSET, cluster, bin_dir).start()
