"""The eviction lifecycle of one run, from a watch of its Workloads: where two managers' states
part although each decision is the same (issue #44).

`Trace` records, in the order the apiserver served them, each Workload's evictions (Evicted turns
True, with the preemptor's UID from Kueue's `Preempted` message), releases (QuotaReserved turns
False after an eviction) and admissions (QuotaReserved turns True), each with its ClusterQueue.
`summarize` turns that into the figures `compare_kueue.py` prints for every system of a run:

- evictions, and the waves they came in: evictions in one cohort, each under 100 ms after the
  one before (the count of waves, and the largest);
- the median time from an eviction to its preemptor's admission;
- evictions issued while a victim of another preemptor in the same cohort was still unreleased
  (Kueue's brakes: the sticky preemptor and a later preemptor's count of victims under way keep
  these few);
- preemptors admitted before their last victim was released or finished (the preemptor fit
  in quota something else gave back, or the manager counted the victim's quota as free early).
"""

from __future__ import annotations

import asyncio
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import find_condition, is_condition_true
from manager.kube.client import KubeClient
from manager.kube.informer import Informer

WAVE_GAP = 0.1  # seconds: evictions in one cohort closer than this are one wave
_PREEMPTOR_UID = re.compile(r"\(UID: ([^,)]+)")


@dataclass(frozen=True)
class Transition:
    at: float  # seconds since the trace started
    kind: str  # "evicted", "released", "admitted" or "finished"
    key: str  # namespace/name
    uid: str
    cluster_queue: str
    preemptor_uid: str = ""  # for an eviction by preemption


@dataclass
class Trace:
    """An informer handler (`on_workload`) that keeps every transition of the watched Workloads."""

    start: float = field(default_factory=time.monotonic)
    transitions: list[Transition] = field(default_factory=list)
    _cluster_queue: dict[str, str] = field(default_factory=dict)  # a Workload's last ClusterQueue

    def on_workload(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        if new is None:
            return
        at = time.monotonic() - self.start
        was = old.status.conditions if old is not None and old.status else None
        now = new.status.conditions if new.status else None
        admission = new.status.admission if new.status else None
        if admission is not None:
            self._cluster_queue[new.key] = admission.cluster_queue
        cq = self._cluster_queue.get(new.key, "")
        uid = new.metadata.uid or ""
        if is_condition_true(now, c.EVICTED) and not is_condition_true(was, c.EVICTED):
            preempted = find_condition(now, c.PREEMPTED)
            found = _PREEMPTOR_UID.search(preempted.message or "") if preempted is not None and preempted.status == "True" else None
            self.transitions.append(Transition(at, "evicted", new.key, uid, cq, found.group(1) if found else ""))
        released = is_condition_true(was, c.QUOTA_RESERVED) and not is_condition_true(now, c.QUOTA_RESERVED)
        if released and is_condition_true(now, c.EVICTED):
            self.transitions.append(Transition(at, "released", new.key, uid, cq))
        if is_condition_true(now, c.QUOTA_RESERVED) and not is_condition_true(was, c.QUOTA_RESERVED):
            self.transitions.append(Transition(at, "admitted", new.key, uid, cq))
        if is_condition_true(now, c.FINISHED) and not is_condition_true(was, c.FINISHED):
            # A victim that finished before its release (its runner wrote Finished first) gives
            # its quota back with its end.
            self.transitions.append(Transition(at, "finished", new.key, uid, cq))


@dataclass(frozen=True)
class Lifecycle:
    evictions: int
    waves: int
    largest_wave: int
    eviction_to_admission_median: float | None  # seconds
    evictions_while_another_victim_held: int
    preemptors: int
    preemptors_admitted_before_their_last_release: int

    def rows(self) -> list[tuple[str, str]]:
        median = self.eviction_to_admission_median
        return [
            ("evictions", str(self.evictions)),
            (f"eviction waves (one cohort, under {WAVE_GAP * 1000:.0f} ms apart): count; largest", f"{self.waves}; {self.largest_wave}"),
            ("from an eviction to its preemptor's admission, median (s)", "-" if median is None else f"{median:.2f}"),
            ("evictions while another preemptor's victim in the cohort was unreleased", str(self.evictions_while_another_victim_held)),
            (
                "preemptors admitted before their last victim was released",
                f"{self.preemptors_admitted_before_their_last_release} of {self.preemptors}",
            ),
        ]


def summarize(transitions: list[Transition], cohort_of: Callable[[str], str]) -> Lifecycle:
    """The lifecycle figures of a run; `cohort_of` names a ClusterQueue's cohort (or itself)."""
    evictions = [t for t in transitions if t.kind == "evicted"]
    waves: list[int] = []
    last_in_cohort: dict[str, float] = {}
    for t in evictions:
        cohort = cohort_of(t.cluster_queue)
        previous = last_in_cohort.get(cohort)
        if previous is not None and t.at - previous < WAVE_GAP:
            waves[-1] += 1
        else:
            waves.append(1)
        last_in_cohort[cohort] = t.at
    # Held victims: key -> (cohort, preemptor) from each eviction to its release.
    held: dict[str, tuple[str, str]] = {}
    while_held = 0
    victims_of: dict[str, list[Transition]] = {}
    releases: dict[str, list[float]] = {}
    admissions: dict[str, list[float]] = {}
    for t in transitions:
        if t.kind == "evicted":
            cohort = cohort_of(t.cluster_queue)
            if any(other_cohort == cohort and preemptor != t.preemptor_uid for other_cohort, preemptor in held.values()):
                while_held += 1
            held[t.key] = (cohort, t.preemptor_uid)
            if t.preemptor_uid:
                victims_of.setdefault(t.preemptor_uid, []).append(t)
        elif t.kind in ("released", "finished"):
            held.pop(t.key, None)
            releases.setdefault(t.key, []).append(t.at)
        else:
            admissions.setdefault(t.uid, []).append(t.at)
    waits: list[float] = []
    early = 0
    for preemptor, victims in victims_of.items():
        first = min(v.at for v in victims)
        admitted = next((at for at in admissions.get(preemptor, []) if at >= first), None)
        if admitted is None:
            continue
        waits.append(admitted - first)
        last_release = max((next((r for r in releases.get(v.key, []) if r >= v.at), float("inf")) for v in victims), default=0.0)
        if admitted < last_release:
            early += 1
    return Lifecycle(
        evictions=len(evictions),
        waves=len(waves),
        largest_wave=max(waves, default=0),
        eviction_to_admission_median=statistics.median(waits) if waits else None,
        evictions_while_another_victim_held=while_held,
        preemptors=len(waits),
        preemptors_admitted_before_their_last_release=early,
    )


class WatchedTrace:
    """A `Trace` fed by a watch of every Workload of a cluster, run in a thread of its own with its
    own event loop, for a run that a blocking caller drives (Kueue's runner is a subprocess)."""

    def __init__(self, kubeconfig: dict[str, Any]) -> None:
        self.kubeconfig = kubeconfig
        self.trace = Trace()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._watch()), name="lifecycle-trace", daemon=True)

    def start(self) -> Trace:
        self._thread.start()
        if not self._ready.wait(timeout=60):
            raise RuntimeError("the lifecycle trace's watch did not sync within 60 s")
        return self.trace

    def stop(self) -> None:
        """End the watch (again: nothing)."""
        if self._thread.is_alive() and self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(timeout=30)

    def __enter__(self) -> Trace:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _watch(self) -> None:
        self._loop, self._stopped = asyncio.get_running_loop(), asyncio.Event()
        client = await KubeClient.from_kubeconfig(self.kubeconfig, name="lifecycle-trace", qps=50, burst=100)
        informer: Informer[kueue.Workload] = Informer(client, kueue.Workload)
        informer.add_handler(self.trace.on_workload)
        task = asyncio.create_task(informer.run())
        try:
            await informer.synced.wait()
            self.trace.start = time.monotonic()
            self._ready.set()
            await self._stopped.wait()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()


def cohorts(cluster_queues: list[dict[str, Any]]) -> Callable[[str], str]:
    """`summarize`'s `cohort_of` from the ClusterQueues of a run (as the apiserver lists them)."""
    by_name = {cq["metadata"]["name"]: cq.get("spec", {}).get("cohortName") or cq["metadata"]["name"] for cq in cluster_queues}
    return lambda name: by_name.get(name, name)
