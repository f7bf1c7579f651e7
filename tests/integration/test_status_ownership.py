"""Conditions that another field manager applies to a Workload survive kfed's own writes, and
that manager keeps applying them without conflicts (Kueue's CRD merges `status.conditions` by
`type`; Kueue's performance runner applies a `Finished` condition this way)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from tests.harness import Provider, eventually
from tests.integration.controllers import ControllerProcess, crd_cluster, running_manager
from tests.integration.test_controllers import PARKED, job_manifest, make_queues, workload_of
from tests.integration.test_deploy import kubectl

FOREIGN = "example.com/Audited"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "own", jobs=True)


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    with running_manager(cluster, tmp_path_factory.mktemp("ownership-manager")) as process:
        yield process


def apply_condition(cluster: LocalCluster, namespace: str, name: str, message: str) -> None:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "status": {
            "conditions": [
                {"type": FOREIGN, "status": "True", "reason": "Audited", "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        },
    }
    # No --force-conflicts: a conflict with kfed's field manager fails the test.
    result = kubectl(
        cluster, "apply", "--server-side", "--subresource=status", "--field-manager=audit-bot", "-f", "-", stdin=yaml.safe_dump(body)
    )
    assert result.returncode == 0, result.stderr


async def test_a_condition_applied_by_another_manager_survives_kfeds_writes(
    cluster: LocalCluster, manager: ControllerProcess, kube: KubeClient
) -> None:
    suffix = uuid.uuid4().hex[:6]
    ns, cq = f"own-{suffix}", f"own-cq-{suffix}"
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=f"parked-{suffix}", node_labels=PARKED)
    await kube.create(Job, job_manifest("train", ns))

    async def admitted() -> kueue.Workload | None:
        wl = await workload_of(kube, await kube.get(Job, "train", namespace=ns))
        conditions = wl.status.conditions if wl is not None and wl.status else None
        return wl if any(cond.type == c.ADMITTED and cond.status == "True" for cond in conditions or []) else None

    wl = await eventually(admitted, timeout=60, what="the Job's Workload admitted")
    apply_condition(cluster, ns, wl.name, "first look")
    # kfed writes the Workload's conditions again: the stopped queue evicts it.
    await kube.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "HoldAndDrain"}})

    async def evicted_with_foreign_kept() -> dict[str, str] | None:
        current = await kube.get(kueue.Workload, wl.name, namespace=ns)
        conditions = {cond.type: str(cond.status) for cond in (current.status.conditions if current.status else None) or []}
        return conditions if conditions.get(c.EVICTED) == "True" and conditions.get(c.QUOTA_RESERVED) == "False" else None

    conditions = await eventually(evicted_with_foreign_kept, timeout=60, what="kfed's eviction written")
    assert conditions.get(FOREIGN) == "True", conditions
    # The other manager still owns its entry alone: it applies again without a conflict.
    apply_condition(cluster, ns, wl.name, "second look")
    current = await kube.get(kueue.Workload, wl.name, namespace=ns)
    foreign = [cond for cond in (current.status.conditions if current.status else None) or [] if cond.type == FOREIGN]
    assert [cond.message for cond in foreign] == ["second look"]
    assert any(cond.type == c.EVICTED and cond.status == "True" for cond in current.status.conditions or [])  # type: ignore[union-attr]
