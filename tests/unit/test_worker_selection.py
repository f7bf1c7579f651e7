"""Choosing workers: kubectl's selector syntax read into a LabelSelector, a MultiKueueConfig's
cluster selector and a job's allowed workers and worker selector narrowing the config's
clusters, each excluded worker with its reason, and the refusal when none is left."""

from __future__ import annotations

import pytest

from manager.api import constants as c
from manager.api.core import Job
from manager.controllers.webhooks import default_job
from manager.engine import worker_restriction as wr
from manager.engine.integrations.adapter import construct_workload
from manager.engine.integrations.registry import BATCH_JOB
from manager.engine.selectors import selector_matches
from manager.multikueue.rules import selection as sel

pytestmark = pytest.mark.unit

LABELS = {
    "worker1": {"region": "eu", "gpu": "a100"},
    "worker2": {"region": "us", "gpu": "h100", "spot": "true"},
    "worker3": {"region": "eu"},
}
CLUSTERS = ["worker1", "worker2", "worker3"]


@pytest.mark.parametrize(
    ("text", "matching"),
    [
        ("region=eu", ["worker1", "worker3"]),
        ("region==eu,gpu", ["worker1"]),
        ("region!=eu", ["worker2"]),
        ("gpu in (a100, h100)", ["worker1", "worker2"]),
        ("gpu notin (a100)", ["worker2", "worker3"]),
        ("!spot", ["worker1", "worker3"]),
        ("example.com/tier=gold", []),
    ],
)
def test_kubectls_selector_syntax(text: str, matching: list[str]) -> None:
    selector = wr.parse_selector(text, where="here")
    assert [name for name in CLUSTERS if selector_matches(selector, LABELS[name])] == matching


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({wr.WORKER_SELECTOR_ANNOTATION: "region=eu,=x"}, '"=x": expected key=value, key!=value'),
        ({wr.WORKER_SELECTOR_ANNOTATION: "gpu in (a100,)"}, '"gpu in (a100,)": expected key in (a,b) with label values'),
        ({wr.WORKER_SELECTOR_ANNOTATION: " "}, "empty selector"),
        ({wr.ALLOWED_WORKERS_ANNOTATION: "worker1,,worker2"}, '"": expected a comma-separated list of MultiKueueCluster names'),
        ({wr.ALLOWED_WORKERS_ANNOTATION: "Worker_1"}, '"Worker_1": expected a comma-separated list'),
    ],
)
def test_a_restriction_that_cannot_be_read_is_one_line_naming_the_job_and_the_annotation(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(wr.SelectionError) as err:
        wr.job_restriction(annotations, what="Job team-a/train")
    text = str(err.value)
    key = next(iter(annotations))
    assert text.startswith(f"Job team-a/train: metadata.annotations[{key}]: ") and message in text and "\n" not in text, text


def test_no_restriction_and_no_config_selector_keep_every_worker() -> None:
    found = sel.select_workers(CLUSTERS, LABELS, config_selector=None, restriction=wr.job_restriction({}, what="Job a/b"))
    assert found == sel.Selection(CLUSTERS, {})
    assert sel.refusal(found) is None


def test_the_config_selector_then_the_jobs_list_then_its_selector_each_say_why_a_worker_is_excluded() -> None:
    restriction = wr.job_restriction(
        {wr.ALLOWED_WORKERS_ANNOTATION: "worker1,worker3", wr.WORKER_SELECTOR_ANNOTATION: "gpu"}, what="Job a/b"
    )
    found = sel.select_workers(CLUSTERS, LABELS, config_selector="spot notin (true)", restriction=restriction)
    assert found.allowed == ["worker1"]
    assert found.excluded == {
        "worker2": "excluded by the MultiKueueConfig's cluster selector spot notin (true)",
        "worker3": "excluded by the job's selector gpu",
    }


def test_a_job_no_allowed_worker_could_run_is_refused_worker_by_worker() -> None:
    restriction = wr.job_restriction({wr.ALLOWED_WORKERS_ANNOTATION: "worker9"}, what="Job a/b")
    found = sel.select_workers(["worker1", "worker2"], LABELS, config_selector=None, restriction=restriction)
    assert sel.refusal(found) == (
        "no worker can ever admit it: worker1: excluded by the job's kfed.dev/allowed-workers; "
        "worker2: excluded by the job's kfed.dev/allowed-workers"
    )


def test_a_config_selector_that_cannot_be_read_excludes_every_worker_with_its_error() -> None:
    found = sel.select_workers(["worker1"], LABELS, config_selector="region in eu", restriction=wr.Restriction())
    assert found.allowed == []
    assert found.excluded["worker1"].startswith("MultiKueueConfig: metadata.annotations[kfed.dev/cluster-selector]: ")


def test_the_jobs_restriction_goes_with_its_workload_and_nothing_else_of_its_annotations() -> None:
    job = Job.model_validate(
        {
            "metadata": {
                "name": "j",
                "namespace": "ns",
                "uid": "u",
                "labels": {c.QUEUE_NAME_LABEL: "q"},
                "annotations": {wr.WORKER_SELECTOR_ANNOTATION: "region=eu", wr.ALLOWED_WORKERS_ANNOTATION: "worker1", "note": "x"},
            },
            "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
        }
    )
    wl = construct_workload(BATCH_JOB, job, workload_priority_classes={}, priority_classes={})
    assert wl.metadata.annotations == {wr.WORKER_SELECTOR_ANNOTATION: "region=eu", wr.ALLOWED_WORKERS_ANNOTATION: "worker1"}


def test_the_webhook_refuses_a_job_whose_restriction_cannot_be_read_in_one_line() -> None:
    job = {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "labels": {c.QUEUE_NAME_LABEL: "q"},
            "annotations": {wr.WORKER_SELECTOR_ANNOTATION: "a=b,("},
        },
        "spec": {},
    }
    review = {"request": {"uid": "u1", "operation": "CREATE", "object": job}}
    answer = default_job(review, uses_multikueue=lambda ns, q: True)["response"]
    assert answer["allowed"] is False
    assert answer["status"]["message"] == (
        'Job "j" is invalid: metadata.annotations[kfed.dev/worker-selector]: "(": '
        "expected key=value, key!=value, key in (a,b), key notin (a,b), key or !key"
    )
