"""The admission state's write bookkeeping (pure): which Workload status writes bring the
cluster in line with the engine (`flush`), and what the engine does with each write's
outcome. A write that succeeded is taken as written; one that lost a race undoes what the
engine assumed, and the engine starts again from the newer of the cluster's copy and its own.
A watch event older than our own later write is never taken (it would undo that write), and
the Admitted condition the MultiKueue check wrote is taken as written where the engine agrees.

`AdmissionState` (`manager.engine.state`) keeps the workloads; this is the part of it that
speaks to the controller's writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from manager.api import constants as c
from manager.api.kueue import Workload, WorkloadStatus
from manager.api.meta import find_condition, is_condition_true, newest_copy, older_resource_version
from manager.engine.status import EventRecord, same_status, status_events, status_view, workload_status
from manager.engine.workload import DEACTIVATION_TARGET, WorkloadInfo, conditions_of, from_condition


@dataclass
class StatusWrite:
    """A status patch for one Workload, with the resourceVersion it was computed from."""

    key: str
    namespace: str
    name: str
    resource_version: str
    status: WorkloadStatus
    admits: bool = False
    events: list[EventRecord] = field(default_factory=list)  # to emit once the write succeeds
    # It takes or gives back quota, or starts or stops work (see `moves_quota`): it goes before
    # the writes that only say why a workload still waits.
    moves_quota: bool = False
    # The preemptor's ClusterQueue, for a write that evicts this workload to make room for it.
    preempting_cq: str = ""


# Conditions whose turning True starts or stops work: the job starts on Admitted, the
# eviction and deactivation follow from the others.
_TURNS_WORK = (c.ADMITTED, c.EVICTED, DEACTIVATION_TARGET)


def moves_quota(current: WorkloadStatus, desired: WorkloadStatus) -> bool:
    """Whether a status write takes or gives back quota, or starts or stops work: it then goes
    before the writes that only say why a workload still waits."""
    if (current.admission is None) != (desired.admission is None):
        return True
    return any(is_condition_true(desired.conditions, kind) and not is_condition_true(current.conditions, kind) for kind in _TURNS_WORK)


def older_than_held(held: WorkloadInfo | None, wl: Workload) -> bool:
    """Whether a watch event is older than the copy the engine holds (our own later write, whose
    answer came first): taking it would undo that write here (a reservation given back, then
    handed out twice). After an etcd restore resource versions go back; Kubernetes asks every
    controller to be restarted then, and this one starts from what the cluster says."""
    return (
        held is not None
        and held.obj.metadata.uid == wl.metadata.uid
        and older_resource_version(wl.metadata.resource_version, held.obj.metadata.resource_version)
    )


def take_pending_condition_as_written(info: WorkloadInfo) -> None:
    """A pending workload's `QuotaReserved=False` as another writer left it (the job's owner
    giving the quota back after an eviction writes its own reason): Kueue's scheduler writes
    that condition only when the workload fails as a head, never to undo another writer's, so
    the engine takes it until its own next attempt says something new."""
    written = find_condition(conditions_of(info.obj), c.QUOTA_RESERVED)
    mine = info.conditions.get(c.QUOTA_RESERVED)
    if written is None or written.status != "False" or mine is None or mine.status != "False":
        return
    if (mine.reason, mine.message) != (written.reason, written.message):
        info.conditions[c.QUOTA_RESERVED] = from_condition(written, default_time=info.created)


def take_admitted_as_written(info: WorkloadInfo) -> None:
    """The MultiKueue check writes `Admitted` with its `Ready`, by the engine's own rule
    (`admitted_condition`): where the engine now says the same, it takes the condition as
    written, its time included (waitForPodsReady counts from it)."""
    mine = info.conditions.get(c.ADMITTED)
    written = find_condition(conditions_of(info.obj), c.ADMITTED)
    if mine is None or written is None or written.last_transition_time is None:
        return
    # Not one left from an earlier admission (an eviction leaves Admitted True until its
    # release is written, and the engine may have reserved again in memory by then). The
    # API keeps whole seconds.
    if info.reserved_at is not None and written.last_transition_time < info.reserved_at.replace(microsecond=0):
        return
    if (written.status, written.reason, written.message) == (mine.status, mine.reason, mine.message):
        info.conditions[c.ADMITTED] = from_condition(written, default_time=mine.last_transition_time)


class WriteBookkeeping:
    """The writes of `AdmissionState`: built from its workloads, their outcomes taken back."""

    # Kept by AdmissionState: its workloads, those to flush, and those admitted by a write still
    # in flight (the engine assumes its own decisions, Kueue's "assume").
    infos: dict[str, WorkloadInfo]
    dirty: set[str]
    assumed: set[str]

    def upsert_workload(self, wl: Workload, now: datetime) -> None:
        raise NotImplementedError

    def _remove(self, key: str, now: datetime) -> None:
        raise NotImplementedError

    def redo(self, key: str) -> None:
        """Flush this workload again (its write was held back behind one still in flight), even
        though its engine view has not changed since."""
        info = self.infos.get(key)
        if info is not None:
            info.flushed_view = None
        self.dirty.add(key)

    def write_succeeded(self, write: StatusWrite, stored: Workload) -> None:
        info = self.infos.get(write.key)
        if info is None:
            return
        info.obj = newest_copy(stored, info.obj) or stored  # a newer event may have come first
        info.check_resets.clear()
        info.reset_nomination = False
        info.close_preemption_gates = False
        info.requeue_state_write = None
        if write.admits:
            self.assumed.discard(write.key)

    def held_copy(self, key: str) -> Workload | None:
        """The newest copy of a Workload this state knows (from a watch event or our own write)."""
        info = self.infos.get(key)
        return info.obj if info is not None else None

    def write_failed(self, write: StatusWrite, now: datetime, latest: Workload | None) -> None:
        """The write lost a race (or the object is gone, `latest` None): forget what we assumed
        (its quota goes back and parked workloads get another try), then start again from the
        newer of `latest` and the copy held, never from an older one."""
        held = self.held_copy(write.key)
        self._remove(write.key, now)
        if latest is not None:
            self.upsert_workload(newest_copy(latest, held) or latest, now)

    def flush(self, now: datetime) -> list[StatusWrite]:
        """Status writes (and their Events) for every workload whose engine view differs from the cluster's."""
        out = []
        for key in sorted(self.dirty):
            info = self.infos.get(key)
            if info is None:
                continue
            # Most dirty workloads are heads that failed again the same way; building their
            # status only to find it unchanged was the manager's largest cost with many pending.
            view = status_view(info)
            if info.flushed_view is not None and info.flushed_view[0] is view[0] and info.flushed_view[1:] == view[1:]:
                continue
            info.flushed_view = view
            desired = workload_status(info, now=now)
            current = info.obj.status or WorkloadStatus()
            if same_status(current, desired):
                continue
            admits = key in self.assumed
            events = status_events(info, current, desired, now=now)
            rv = info.obj.metadata.resource_version or ""
            out.append(
                StatusWrite(
                    key,
                    info.namespace,
                    info.name,
                    rv,
                    desired,
                    admits=admits,
                    events=events,
                    moves_quota=admits or moves_quota(current, desired),
                    preempting_cq=info.preempted_by,
                )
            )
        self.dirty.clear()
        return out
