"""LeaderWorkerSet (sigs.k8s.io/lws) on local clusters, for `kfed dev up --integrations lws`.

Every cluster gets the LeaderWorkerSet CRD, applied server-side, and each worker runs the LWS
controller, built by hack/lws/build.sh, as an administrator runs it without cert-manager or a Service in
front of it (as JobSet's, `manager.dev.jobset`): with the cluster's admin kubeconfig, its
internal certificate management off, a serving certificate for 127.0.0.1 that the harness
issues, its webhooks registered by URL (its Pod webhooks only for LWS pods, as its release's
kustomize patches narrow them), and its own health and metrics ports.

As for JobSet, the manager runs no LWS controller. Kueue's manager does (a LeaderWorkerSet has
no managedBy: its controller there makes gated pods, and MultiKueue copies the set to a worker);
kfed's manager keeps the set's Workloads itself and copies the set to the one worker its groups
went to, where it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from manager.api.lws import SET_NAME_LABEL
from manager.dev import controllers
from manager.dev.local import Component, LocalCluster

CRD_FILE = Path("crds") / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_PATH = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"


def _webhooks_called(cluster: LocalCluster) -> bool:
    """LWS's defaulting webhook sets the subdomain policy (the CRD has no such default): a dry
    run shows when the apiserver calls it, so no LeaderWorkerSet created afterwards misses it."""
    pod = {"containers": [{"name": "probe", "image": "busybox"}]}
    probe = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws-webhook-probe", "namespace": "default"},
        "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": pod}}},
    }
    status, body = cluster.request("POST", LWS_PATH.format(namespace="default") + "?dryRun=All", probe)
    return status == 201 and (body["spec"].get("networkConfig") or {}).get("subdomainPolicy") == "Shared"


LWS = controllers.WebhookedKind(
    name="lws",
    shown="LeaderWorkerSet",
    binary="lws-controller",
    config_api_version="config.lws.x-k8s.io/v1alpha1",
    configuration_names={
        "MutatingWebhookConfiguration": "lws-mutating-webhook-configuration",
        "ValidatingWebhookConfiguration": "lws-validating-webhook-configuration",
    },
    pod_selector={"matchExpressions": [{"key": SET_NAME_LABEL, "operator": "Exists"}]},
    webhooks_called=_webhooks_called,
)
COMPONENT = LWS.binary
configuration = LWS.configuration
webhook_configurations = LWS.webhook_configurations


def crd(bin_dir: Path) -> dict[str, Any]:
    return controllers.load_crds(bin_dir, [CRD_FILE])[0]


def install_crd(cluster: LocalCluster, bin_dir: Path) -> None:
    controllers.install_crds(cluster, bin_dir, [CRD_FILE])


def start_controller(cluster: LocalCluster, bin_dir: Path) -> Component:
    return controllers.WebhookedController(LWS, cluster, bin_dir).start()
