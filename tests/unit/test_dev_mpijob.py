"""`kfed dev up --integrations mpijob`: the name kfed takes for MPIJobs and how the MPI Operator
runs on a local worker (pure pieces)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from manager.api.config import Configuration
from manager.dev import federation, mpijob
from manager.dev.local import ClusterError


@pytest.mark.parametrize("text", ["mpijob", "kubeflow.org/mpijob", "job, mpijob ,kubeflow.org/mpijob"])
def test_mpijobs_are_named_by_the_short_name_or_kueues_framework_name(text: str) -> None:
    assert federation.parse_integrations(text) == ("mpijob",)
    config = federation.kfed_configuration(("mpijob",))
    assert config["integrations"]["frameworks"] == ["batch/job", "kubeflow.org/mpijob"]
    assert Configuration.model_validate(config).effective_frameworks == ["batch/job", "kubeflow.org/mpijob"]


def test_the_operator_runs_with_the_workers_kubeconfig_its_own_health_port_and_its_lease_in_kube_system() -> None:
    argv = mpijob.command(Path("/bin-dir"), kubeconfig=Path("/w1/admin.kubeconfig"), health_port=4242)
    # KUBECONFIG wins over the operator's --kubeConfig flag, so it is set to the same file: a
    # KUBECONFIG in the developer's environment must not send the operator to another cluster.
    assert argv[:4] == ["env", "KUBECONFIG=/w1/admin.kubeconfig", "KFED_MPI_OPERATOR_HEALTH_ADDR=127.0.0.1:4242", "/bin-dir/mpi-operator"]
    assert "--kubeConfig=/w1/admin.kubeconfig" in argv
    assert "--lock-namespace=kube-system" in argv
    assert not any(arg.startswith("--gang-scheduling") for arg in argv)  # no PodGroups: Kueue does the gang admission


def test_a_file_that_is_no_crd_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "kubeflow.org_mpijobs.yaml").write_text(yaml.safe_dump({"kind": "ConfigMap"}))
    with pytest.raises(ClusterError, match=r"kubeflow\.org_mpijobs\.yaml holds no CustomResourceDefinition$"):
        mpijob.crd(tmp_path)
