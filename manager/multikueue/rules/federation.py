"""The federation's shared rules, one home each: which MultiKueueConfig an AdmissionCheck names,
and which MultiKueue check (and so which config) a Workload goes through. Every controller and
the read API ask these instead of reading the references themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from manager.api import constants as c
from manager.api import kueue
from manager.engine.workload import AdmissionChecks, check_states, multikueue_check_name


def config_name(check: kueue.AdmissionCheck | None) -> str | None:
    """The MultiKueueConfig `check`'s parameters name, by Kueue's rule (ConfigForAdmissionCheck:
    a non-empty name, group kueue.x-k8s.io and kind MultiKueueConfig); None when they name none."""
    params = check.spec.parameters if check is not None else None
    if params is None or not params.name or params.api_group != c.GROUP or params.kind != kueue.MultiKueueConfig.KIND:
        return None
    return params.name


def config_of_check(
    check_name: str | None,
    checks: Callable[[str], kueue.AdmissionCheck | None],
    configs: Callable[[str], kueue.MultiKueueConfig | None],
) -> kueue.MultiKueueConfig | None:
    """The MultiKueueConfig the AdmissionCheck `check_name` names, found with `checks` and
    `configs` (lookups by name); None when the check, its reference or the config is missing."""
    name = config_name(checks(check_name)) if check_name else None
    return configs(name) if name else None


def workload_check(wl: kueue.Workload, cluster_queue: kueue.ClusterQueue | None, checks: AdmissionChecks) -> str | None:
    """The MultiKueue check a Workload goes through: one of its check states, else (before it
    has any) one its ClusterQueue names, as the check will be."""
    named: Iterable[str] = [*check_states(wl), *(cluster_queue.admission_check_names if cluster_queue is not None else [])]
    return multikueue_check_name(named, checks)
