"""The dispatch state of one manager Workload, and the dispatch rules that read and advance it
(pure): when copies may be nominated at all, the Incremental dispatcher's next nomination,
the capacity-aware dispatcher's placement, and MultiKueue's refusal of a Workload no worker
could ever admit. `plan_workload` calls them and returns the state they leave; the shell
keeps one `DispatchState` per Workload, stores what each plan returns, and records the
outcome of its own writes (a copy made, a problem met) in it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from manager.api.kueue import Workload
from manager.engine.requests import RequestError
from manager.engine.units import FlavorResource
from manager.engine.workload import WorkloadInfo, admission_check_state, has_quota_reservation, is_evicted
from manager.multikueue.rules.capacity import Choice, Fit, WorkerQuotas, choose_worker, fit_on, total_requests, workload_info

INCREMENTAL_ROUND = timedelta(minutes=5)
# A Workload whose nominated worker's time is up is looked at again no sooner than this.
MIN_DUE = 0.1

Usages = Sequence[tuple[str, Mapping[FlavorResource, int]]]  # (a worker's ClusterQueue, usage on its flavors)


@dataclass(frozen=True)
class InFlight:
    """A copy sent to a worker that has not reserved quota for it yet: its usage counts against
    that worker for the placement of the others (the worker's ClusterQueue status does not)."""

    worker: str
    cluster_queue: str  # the worker's ClusterQueue that would admit it
    usage: Mapping[FlavorResource, int]


@dataclass(frozen=True)
class DispatchState:
    """What the MultiKueue controller remembers of one Workload between passes (kfed's; Kueue
    keeps only the Incremental dispatcher's round, in that dispatcher)."""

    round_started: datetime | None = None  # Incremental: when the nomination last widened
    # Capacity-aware: when the current nomination was made, the workers tried in this round,
    # the copy sent and not yet admitted, and whether it fits nowhere now (waits for room).
    nominated_at: datetime | None = None
    tried: frozenset[str] = frozenset()
    in_flight: InFlight | None = None
    waiting: bool = False
    dispatched_at: datetime | None = None  # the first copy made (dispatch-to-admission latency)
    problems: Mapping[str, str] = field(default_factory=dict)  # per worker: why no copy could be made there
    blocked: Mapping[str, str] = field(default_factory=dict)  # per worker: a Job not ours holds the name

    def with_problem(self, worker: str, problem: str | None) -> DispatchState:
        """A copy could not be made on `worker` (why), or was made (None)."""
        problems = {name: text for name, text in self.problems.items() if name != worker}
        if problem is not None:
            problems[worker] = problem
        return dataclasses.replace(self, problems=problems)

    def with_blocked(self, worker: str, message: str) -> DispatchState:
        return dataclasses.replace(self, blocked={**self.blocked, worker: message})

    def round_began(self, now: datetime) -> DispatchState:
        """The Incremental dispatcher's wider nomination was written."""
        return dataclasses.replace(self, round_started=now)

    def dispatched(self, now: datetime) -> DispatchState:
        return self if self.dispatched_at is not None else dataclasses.replace(self, dispatched_at=now)

    def admitted(self) -> DispatchState:
        return dataclasses.replace(self, dispatched_at=None)

    def without_placement(self) -> DispatchState:
        return dataclasses.replace(self, nominated_at=None, tried=frozenset(), in_flight=None, waiting=False)


FORGOTTEN = DispatchState()


class Workers(Protocol):
    """What the dispatch rules read of the check's workers, asked only when a rule needs it
    (reading every copy a worker holds costs)."""

    def quotas(self, worker: str) -> WorkerQuotas | None:
        """The worker's queues as last seen; None: they cannot be read."""

    def in_flight(self, worker: str) -> Usages:
        """The usage of the other Workloads' copies sent there and not reserved yet."""

    def reserved(self, worker: str) -> Usages:
        """The usage of our other copies the worker reserved quota for (from their admission)."""

    def never_fits(self, info: WorkloadInfo) -> str | None:
        """`capacity.never_fits` over the check's workers (the shell remembers the answer per
        Workload shape until a worker's queue specs or connection change)."""


class _NoWorkers:
    """Workers nothing is known of: no queues, no copies, no refusal."""

    def quotas(self, worker: str) -> WorkerQuotas | None:
        return None

    def in_flight(self, worker: str) -> Usages:
        return ()

    def reserved(self, worker: str) -> Usages:
        return ()

    def never_fits(self, info: WorkloadInfo) -> str | None:
        return None


NO_WORKERS: Workers = _NoWorkers()


def _other_checks_ready(wl: Workload, name: str) -> bool:
    return all(check.state == "Ready" for check in (wl.status.admission_checks if wl.status else None) or [] if check.name != name)


def awaiting_dispatch(wl: Workload, check_name: str) -> bool:
    """Whether copies may be nominated for the Workload now: it holds quota on the manager, its
    MultiKueue check is Pending with no winner recorded, no eviction is in progress, and every
    other check is Ready. The planner's nomination and every dispatch rule share this gate."""
    check = admission_check_state(wl, check_name)
    status = wl.status
    return (
        check is not None
        and check.state == "Pending"
        and has_quota_reservation(wl)
        and not (status and status.cluster_name)
        and not is_evicted(wl)
        and _other_checks_ready(wl, check_name)
    )


def _nominated(wl: Workload) -> list[str]:
    return list(wl.status.nominated_cluster_names or []) if wl.status else []


# --- the Incremental dispatcher --------------------------------------------------------------------
def incremental_nomination(
    *, config_clusters: Sequence[str], nominated: Sequence[str], step: int, round_started: datetime | None, now: datetime
) -> list[str] | None:
    """Kueue's Incremental dispatcher: every round (5 minutes) the next `step` clusters, in the
    MultiKueueConfig's order, join the nomination; it never shrinks. None: nothing to change."""
    if nominated and round_started is not None and now - round_started < INCREMENTAL_ROUND:
        return None
    remaining = [name for name in config_clusters if name not in nominated]
    if not remaining:
        return None
    return [*nominated, *remaining[: max(step, 1)]]


def widen_incrementally(
    local: Workload, *, check_name: str, state: DispatchState, config_clusters: Sequence[str], step: int, now: datetime
) -> tuple[list[str] | None, DispatchState]:
    """Kueue's Incremental dispatcher (its own controller there) for a Workload waiting for a
    winner: the wider nomination to write now, or None. Its round ends once the check leaves
    Pending, the quota goes or a winner is recorded. A new round begins only once the wider
    nomination is written (`DispatchState.round_began`): a write lost to a race widens again
    on the next pass, not a round later."""
    check = admission_check_state(local, check_name)
    status = local.status
    if check is None or check.state != "Pending" or not has_quota_reservation(local) or (status and status.cluster_name):
        return None, dataclasses.replace(state, round_started=None)
    wider = incremental_nomination(
        config_clusters=config_clusters, nominated=_nominated(local), step=step, round_started=state.round_started, now=now
    )
    return wider, state


# --- the refusal -----------------------------------------------------------------------------------
def never_fits_refusal(local: Workload, *, check_name: str, workers: Workers) -> str | None:
    """Why no worker could ever admit a Workload waiting for dispatch (it reserved quota before
    the refusal applied: the workers' queues were unknown then, or shrank since), or None; the
    planner then gives that quota back. A Workload whose requests cannot be read is not refused
    here (the placement says why)."""
    if not awaiting_dispatch(local, check_name):
        return None
    try:
        info = workload_info(local)
    except RequestError:
        return None
    return workers.never_fits(info)


# --- the capacity-aware dispatcher -----------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """A worker the capacity-aware dispatcher may send a new copy to: connected, its admission
    agent running, no Job not ours in the way."""

    name: str
    copy: Workload | None  # our copy there, if any


def place(
    local: Workload,
    *,
    check_name: str,
    state: DispatchState,
    candidates: Sequence[Candidate],
    workers: Workers,
    now: datetime,
    admission_timeout: timedelta,
) -> tuple[Choice | None, DispatchState]:
    """kfed's capacity-aware dispatcher: the nomination for a Workload waiting to be
    dispatched, or None to keep the current one. A nominated worker has `admission_timeout` to
    admit the copy; then the next worker where it fits now is tried (the most free capacity
    left, then by name), every such worker once per round. A Workload that fits nowhere now
    waits for room (`waiting`); its copy's usage no longer counts against any worker."""
    if not awaiting_dispatch(local, check_name):
        # The planner's own gate: nothing is placed, or counted against a worker, until it opens.
        return None, state.without_placement()
    current = _nominated(local)
    accepting = sorted(candidate.name for candidate in candidates)
    if current and state.nominated_at is None:
        return None, dataclasses.replace(state, nominated_at=now)  # nominated before this process started: its time runs from now
    if current and set(current) <= set(accepting):
        copy = next(candidate.copy for candidate in candidates if candidate.name == current[0])
        # A copy the worker reserved quota for is kept: its admission may wait on the worker's
        # own checks (a ProvisioningRequest), and moving it would only restart that.
        reserved = copy is not None and has_quota_reservation(copy)
        if reserved or (state.nominated_at is not None and now - state.nominated_at < admission_timeout):
            return None, state
    try:
        info = workload_info(local)
    except RequestError as err:
        return Choice(None, message=f"cannot read the workload's requests: {err}"), state
    fits = {}
    for name in accepting:
        quotas = workers.quotas(name)
        # A worker whose queues cannot be read may still be tried, after those that fit.
        if quotas is None:
            fits[name] = Fit(True, True, free_after=-1.0)
        else:
            fits[name] = fit_on(info, quotas, in_flight=workers.in_flight(name), reserved=workers.reserved(name))
        if name in current and not fits[name].now:
            # The copy there may itself be what the worker reports as used.
            fits[name] = dataclasses.replace(fits[name], now=fits[name].ever)
    tried = state.tried | set(current)
    needs = total_requests(info)
    choice = choose_worker(fits, needs=needs, skip=tried)
    if choice.worker is None and any(fit.now for fit in fits.values()):
        tried = frozenset()  # every worker where it fits was tried: a new round
        choice = choose_worker(fits, needs=needs)
    if choice.worker is None:
        return choice, dataclasses.replace(state, nominated_at=None, tried=tried, in_flight=None, waiting=True)
    fit = fits[choice.worker]
    sent = InFlight(choice.worker, fit.cluster_queue, fit.usage)
    return choice, dataclasses.replace(state, nominated_at=now, tried=tried, in_flight=sent, waiting=False)


def look_again_in(state: DispatchState, *, now: datetime, admission_timeout: timedelta) -> float | None:
    """Seconds until the capacity-aware dispatcher looks at the Workload again: when its
    nominated worker's time is up, or soon while it waits for room; None: no such wait."""
    if state.nominated_at is None and not state.waiting:
        return None
    return max(((state.nominated_at or now) + admission_timeout - now).total_seconds(), MIN_DUE)
