"""The scenario of `admission.py`, replayed through the manager's admission state alone: no
apiserver, no processes, a virtual clock. For finding work that grows with the backlog, and for
checking that an engine change keeps behaviour: it prints a digest of every status write (the
workload, the status written and its Events, in order), which such a change must not alter,
and each class's average wait from creation to first admission (the scheduling rules' own
share of the time to admission, without the apiserver's).

Each step takes the arrivals and finishes due within 10 ms of virtual time, runs scheduling
cycles until one changes nothing, flushes, and applies every write at once as the apiserver and
the watch would (the stored object gets the status and a new resourceVersion); ClusterQueue and
LocalQueue status is computed every 0.5 s, as the controller does. Admission takes no virtual
time, so the backlog is the one the quota alone makes (smaller than on a real, slower run).

    PYTHONPATH=. .venv/bin/python benchmarks/admission_replay.py --scale 1.0 [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import heapq
import json
import pstats
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import admission

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import is_condition_true
from manager.controllers.admission import STATUS_INTERVAL
from manager.engine.state import AdmissionState

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
STEP = 0.01  # seconds of virtual time gathered into one round


class Replay:
    def __init__(self, scale: float) -> None:
        self.state = AdmissionState()
        self.stored: dict[str, kueue.Workload] = {}
        self.runtime: dict[str, float] = {}
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.version = 0
        self.finishing: set[str] = set()
        self.arrived: dict[str, float] = {}
        self.waited: dict[str, list[float]] = {}  # class -> each Workload's first wait for admission
        self.digest = hashlib.sha256()
        self.writes = self.rounds = self.finished = 0
        self.ticks: set[float] = set()
        for model, obj in admission.objects():
            parsed = model.model_validate(obj)
            if isinstance(parsed, kueue.ResourceFlavor):
                self.state.upsert_flavor(parsed)
            elif isinstance(parsed, kueue.ClusterQueue):
                self.state.upsert_cluster_queue(parsed)
            elif isinstance(parsed, kueue.LocalQueue):
                self.state.upsert_local_queue(parsed)
                self.state.upsert_namespace(parsed.namespace, {})
        for co in range(admission.COHORTS):
            for q in range(admission.QUEUES_PER_COHORT):
                cq = f"cq-{co}-{q}"
                for cls, cpu, count, interval, runtime, priority in admission.CLASSES:
                    for i in range(round(count * scale)):
                        self.runtime[f"{cq}/{cls}-{i}"] = runtime
                        self._at(i * interval, "create", (cq, f"{cls}-{i}", cpu, priority))
        self.total = len(self.runtime)

    def _at(self, when: float, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, payload))

    def _store(self, data: dict[str, Any]) -> kueue.Workload:
        self.version += 1
        data["metadata"]["resourceVersion"] = str(self.version)
        wl = kueue.Workload.model_validate(data)
        self.stored[wl.key] = wl
        return wl

    def run(self) -> float:
        last_status = -STATUS_INTERVAL
        now_s = 0.0
        while self.events:
            now_s = self.events[0][0]
            now = EPOCH + timedelta(seconds=now_s)
            while self.events and self.events[0][0] <= now_s + STEP:
                _, _, kind, payload = heapq.heappop(self.events)
                if kind == "create":
                    self._create(payload, now)
                elif kind == "finish":
                    self._finish(payload, now)
            self.rounds += 1
            self.state.rebuild_if_needed(now)
            for _ in range(200):  # the controller's CYCLES_PER_ROUND
                if not self.state.cycle(now).changed:
                    break
            for write in self.state.flush(now):
                self._apply(write, now_s, now)
            due = self.state.scheduler.next_requeue_at()
            if due is not None and (due - EPOCH).total_seconds() not in self.ticks:
                # A batched requeue of inadmissible workloads falls due then: the controller
                # wakes for it, so the replay runs a round then too.
                self.ticks.add((due - EPOCH).total_seconds())
                self._at((due - EPOCH).total_seconds(), "tick", None)
            if now_s - last_status >= STATUS_INTERVAL:
                last_status = now_s
                for name in list(self.state.cache.cluster_queues):
                    self.state.cluster_queue_status(name, now)
                self.state.local_queue_statuses(now)
        return now_s

    def _create(self, payload: tuple[str, str, int, int], now: datetime) -> None:
        cq, name, cpu, priority = payload
        self.arrived[f"{cq}/{name}"] = (now - EPOCH).total_seconds()
        data = admission.workload(name, cq, cpu, priority)
        data["metadata"] |= {"uid": f"uid-{cq}-{name}", "creationTimestamp": now.isoformat()}
        self.state.upsert_workload(self._store(data), now)

    def _finish(self, key: str, now: datetime) -> None:
        wl = self.stored[key]
        conditions = wl.status.conditions if wl.status else None
        if is_condition_true(conditions, c.EVICTED) or not is_condition_true(conditions, c.ADMITTED):
            self.finishing.discard(key)
            return  # preempted while running: it runs again when readmitted
        data = wl.to_dict()
        finished = {"type": c.FINISHED, "status": "True", "reason": "Succeeded", "message": "done", "lastTransitionTime": now.isoformat()}
        data["status"].setdefault("conditions", []).append(finished)
        self.state.upsert_workload(self._store(data), now)
        del self.stored[key]
        self.finished += 1

    def _apply(self, write: Any, now_s: float, now: datetime) -> None:
        self.writes += 1
        self.digest.update(json.dumps([write.key, write.status.to_dict(), [e.reason for e in write.events]], sort_keys=True).encode())
        current = self.stored.get(write.key)
        if current is None:
            return
        data = current.to_dict()
        body = write.status.to_dict()
        status = dict(data.get("status") or {}) | body
        for name in ("admission", "resourceRequests", "clusterName", "nominatedClusterNames"):
            if name not in body:
                status.pop(name, None)
        data["status"] = status
        stored = self._store(data)
        self.state.write_succeeded(write, stored)
        self.state.upsert_workload(stored, now)
        conditions = stored.status.conditions if stored.status else None
        if is_condition_true(conditions, c.ADMITTED) and not is_condition_true(conditions, c.EVICTED) and write.key not in self.finishing:
            self.finishing.add(write.key)
            self._at(now_s + self.runtime[write.key], "finish", write.key)
            arrived = self.arrived.pop(write.key, None)
            if arrived is not None:
                cls = write.key.partition("/")[2].rpartition("-")[0]
                self.waited.setdefault(cls, []).append(now_s - arrived)
        elif is_condition_true(conditions, c.EVICTED):
            self.finishing.discard(write.key)


def main(args: argparse.Namespace) -> None:
    replay = Replay(args.scale)
    profiler = cProfile.Profile() if args.profile else None
    started = time.process_time()
    if profiler is not None:
        profiler.enable()
    virtual = replay.run()
    if profiler is not None:
        profiler.disable()
    cpu = time.process_time() - started
    print(f"workloads        {replay.total} (scale {args.scale:g}), {replay.finished} finished in {virtual:.1f} s of virtual time")
    print(f"rounds, writes   {replay.rounds}, {replay.writes}")
    print(f"CPU              {cpu:.1f} s, {1000 * cpu / replay.total:.2f} ms per Workload (the replay's own object handling included)")
    print(f"writes digest    {replay.digest.hexdigest()[:16]}")
    waits = ", ".join(f"{cls} {sum(w) / len(w):.2f} s" for cls, w in sorted(replay.waited.items(), key=lambda item: -len(item[1])))
    print(f"avg first wait   {waits} (virtual time, from creation to the first admission)")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--profile", action="store_true", help="cProfile the replay, sorted by cumulative time")
    main(parser.parse_args())
