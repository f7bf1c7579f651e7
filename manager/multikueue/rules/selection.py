"""Which workers may run a Workload: the MultiKueueConfig's clusters, narrowed by a label selector
on the MultiKueueClusters (the config's `kfed.dev/cluster-selector` annotation, as Kueue's open
proposal for a cluster selector asks, kubernetes-sigs/kueue#8156) and by the job's own
restriction (`engine/worker_restriction.py`: its `kfed.dev/allowed-workers` and
`kfed.dev/worker-selector` annotations, #14540), copied onto its Workload. One rule for every
dispatcher, the never-fits refusal and `kfed explain`. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from manager.api import kueue
from manager.api.meta import LabelSelector
from manager.engine.selectors import selector_matches
from manager.engine.worker_restriction import ALLOWED_WORKERS_ANNOTATION, Restriction, SelectionError, job_restriction, parse_selector

CLUSTER_SELECTOR_ANNOTATION = "kfed.dev/cluster-selector"  # on a MultiKueueConfig


@dataclass(frozen=True)
class Selection:
    """The workers a Workload may go to, in the config's order, and why each other one may not."""

    allowed: list[str]
    excluded: dict[str, str] = field(default_factory=dict)


def select_workers(
    config_clusters: Sequence[str],
    cluster_labels: Mapping[str, Mapping[str, str]],
    *,
    config_selector: str | None,
    restriction: Restriction,
) -> Selection:
    """The config's clusters that match its cluster selector and the job's restriction. A
    config selector that cannot be read excludes every cluster (the AdmissionCheck says why)."""
    allowed: list[str] = []
    excluded: dict[str, str] = {}
    config_match: LabelSelector | None = None
    config_error = ""
    if config_selector is not None:
        try:
            config_match = parse_selector(config_selector, where=f"MultiKueueConfig: metadata.annotations[{CLUSTER_SELECTOR_ANNOTATION}]")
        except SelectionError as err:
            config_error = str(err)
    for name in config_clusters:
        labels = cluster_labels.get(name, {})
        if config_error:
            excluded[name] = config_error
        elif config_match is not None and not selector_matches(config_match, labels):
            excluded[name] = f"excluded by the MultiKueueConfig's cluster selector {config_selector}"
        elif restriction.workers is not None and name not in restriction.workers:
            excluded[name] = f"excluded by the job's {ALLOWED_WORKERS_ANNOTATION}"
        elif restriction.selector is not None and not selector_matches(restriction.selector, labels):
            excluded[name] = f"excluded by the job's selector {restriction.selector_text}"
        else:
            allowed.append(name)
    return Selection(allowed, excluded)


def refusal(selection: Selection) -> str | None:
    """Why no worker may run it, worker by worker, when none may; None when one may."""
    if selection.allowed or not selection.excluded:
        return None
    return "no worker can ever admit it: " + "; ".join(f"{name}: {why}" for name, why in selection.excluded.items())


def for_workload(
    wl: kueue.Workload, config: kueue.MultiKueueConfig | None, clusters: Callable[[str], kueue.MultiKueueCluster | None]
) -> Selection:
    """The workers of `config` the Workload may go to: its restriction annotations against the
    MultiKueueClusters' labels (`clusters` finds one by name) and the config's cluster selector.
    A restriction that cannot be read (a Workload made without the webhook) excludes every
    worker with its one-line error."""
    names = list(config.spec.clusters) if config is not None else []
    annotations = (config.metadata.annotations or {}) if config is not None else {}
    labels = {name: dict(found.metadata.labels or {}) for name in names if (found := clusters(name)) is not None}
    try:
        restriction = job_restriction(wl.metadata.annotations, what=f"Workload {wl.key}")
    except SelectionError as err:
        return Selection([], {name: str(err) for name in names})
    return select_workers(names, labels, config_selector=annotations.get(CLUSTER_SELECTOR_ANNOTATION), restriction=restriction)
