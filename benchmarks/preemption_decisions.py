"""Every preemption decision of one `compare_kueue.py --decision-logs` run, and the state each
was taken in, for kfed and for Kueue side by side.

kfed's engine logs each decision itself (DEBUG record "preemption decision": the preemptor, the
victims, and the usage of every ClusterQueue of its cohort at that point of the cycle). Kueue
logs at zap level 3 each eviction it issues ("Preempted": target, preemptor, reason, both
paths) and at level 2 each Workload update and each assumption in its cache; the usage of each
ClusterQueue when it preempted is rebuilt from those (a Workload holds quota from its
assumption until an update shows it finished or its reservation gone), with each Workload's
size read from its class (the runner names Workloads `<class>-...`).

    python benchmarks/preemption_decisions.py /tmp/kfed-compare-XXXX   # the directory compare_kueue.py printed

Prints, per system: the decisions (a decision is a preemptor and the victims it evicted in one
go), the new evictions by the preemptor's class, the reasons, the number of victims, and how
full the preemptor's ClusterQueue and its cohort were; then the first decisions of each with
their state. `--csv DIR` writes every decision to DIR/<system>.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import admission

SIZES = {cls: cpu * 1000 for cls, cpu, *_ in admission.CLASSES}  # milli-cpu, by class
NOMINAL = admission.NOMINAL * 1000
COHORT_NOMINAL = NOMINAL * admission.QUEUES_PER_COHORT


@dataclass
class Decision:
    """One preemptor's evictions issued at one moment, and the state then."""

    at: float  # seconds since the system's first logged event
    preemptor: str
    cluster_queue: str
    victims: list[tuple[str, str, str]]  # (workload, its ClusterQueue, reason)
    ongoing: int = 0  # victims already being evicted (no new eviction)
    cq_usage: int | None = None  # milli-cpu, the preemptor's ClusterQueue
    cohort_usage: int | None = None  # milli-cpu, its cohort
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def preemptor_class(self) -> str:
        return workload_class(self.preemptor)

    @property
    def reasons(self) -> str:
        return "+".join(sorted({reason for *_, reason in self.victims})) or "-"


def workload_class(key: str) -> str:
    return key.rsplit("/", 1)[-1].split("-", 1)[0]


def size(key: str) -> int:
    return SIZES.get(workload_class(key), 0)


def parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# --- kfed ---------------------------------------------------------------------------------------


def kfed_decisions(log: Path) -> list[Decision]:
    out: list[Decision] = []
    start: float | None = None
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        at = parse_time(record["ts"])
        start = at if start is None else start
        if record.get("msg") != "preemption decision":
            continue
        usage = {cq: values.get("default/cpu", sum(values.values())) for cq, values in record.get("usage", {}).items()}
        victims = [(v["key"], v["cluster_queue"], v["reason"]) for v in record["victims"] if not v["ongoing"]]
        ongoing = sum(1 for v in record["victims"] if v["ongoing"])
        out.append(
            Decision(
                at=at - start,
                preemptor=record["preemptor"],
                cluster_queue=record["cluster_queue"],
                victims=victims,
                ongoing=ongoing,
                cq_usage=usage.get(record["cluster_queue"]),
                cohort_usage=sum(usage.values()),
                usage=usage,
            )
        )
    return out


# --- Kueue --------------------------------------------------------------------------------------


def zap_records(log: Path) -> Iterator[dict[str, Any]]:
    """zap's JSON lines (cmd/kueue) or its development console lines (minimalkueue: time,
    level, logger, caller, message, then the fields as one JSON object), as dicts."""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
            continue
        parts = line.split("\t")
        if len(parts) < 4:
            continue
        fields: dict[str, Any] = {}
        if parts[-1].startswith("{"):
            try:
                fields = json.loads(parts[-1])
            except json.JSONDecodeError:
                fields = {}
            parts = parts[:-1]
        fields["ts"] = parts[0]
        fields["msg"] = parts[-1]
        yield fields


def ref(value: Any) -> str:
    """klog's object reference, as zap writes it (an object, or "namespace/name")."""
    if isinstance(value, dict):
        namespace, name = value.get("namespace", ""), value.get("name", "")
        return f"{namespace}/{name}" if namespace else name
    return str(value or "")


def zap_time(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    return parse_time(str(value))


def kueue_decisions(log: Path) -> list[Decision]:
    holding: dict[str, tuple[str, int]] = {}  # workload -> (ClusterQueue, milli-cpu): Kueue's cache
    cohort_of: dict[str, str] = {}
    decisions: dict[tuple[str, float], Decision] = {}
    start: float | None = None
    for record in zap_records(log):
        at = zap_time(record.get("ts", 0))
        start = at if start is None else start
        msg = record.get("msg", "")
        if msg == "Workload assumed in the cache":
            key, cq = ref(record.get("workload")), ref(record.get("clusterQueue"))
            holding[key] = (cq, size(key))
            if record.get("rootCohort"):
                cohort_of[cq] = ref(record["rootCohort"])
        elif msg == "Workload update event":
            key = ref(record.get("workload"))
            if record.get("status") == "finished" or "prevClusterQueue" in record:
                holding.pop(key, None)
            elif record.get("clusterQueue") and key not in holding:
                holding[key] = (ref(record["clusterQueue"]), size(key))
        elif msg in ("Preempted", "Preemption ongoing", "Preemption already issued, waiting for observation"):
            preemptor = ref(record.get("preemptingWorkload"))
            cq = ref(record.get("clusterQueue"))
            if record.get("rootCohort"):
                cohort_of[cq] = ref(record["rootCohort"])
            cohort = cohort_of.get(cq, "")
            decision = decisions.get((preemptor, round(at, 1)))
            if decision is None:
                usage = {q: 0 for q, c in cohort_of.items() if c == cohort}
                for held_cq, amount in holding.values():
                    if cohort_of.get(held_cq) == cohort:
                        usage[held_cq] = usage.get(held_cq, 0) + amount
                decision = decisions[(preemptor, round(at, 1))] = Decision(
                    at=at - start,
                    preemptor=preemptor,
                    cluster_queue=cq,
                    victims=[],
                    cq_usage=usage.get(cq, 0),
                    cohort_usage=sum(usage.values()),
                    usage=usage,
                )
            if msg == "Preempted":
                target = ref(record.get("targetWorkload"))
                decision.victims.append((target, ref(record.get("targetClusterQueue")), str(record.get("reason", ""))))
            else:
                decision.ongoing += 1
    return sorted(decisions.values(), key=lambda d: d.at)


# --- the report -----------------------------------------------------------------------------------


def fill(usage: int | None, whole: int) -> str:
    if usage is None:
        return "?"
    share = usage / whole
    for bound in (0.5, 0.75, 0.9, 1.0):
        if share < bound:
            return f"<{bound:.0%}"
    return f">={share:.0%}" if share > 1 else "100%"


# What each manager logs when a head needs preemption and finds no victim (it waits for quota).
KFED_DECLINED = "preemption without candidates"
KUEUE_DECLINED = "Workload requires preemption, but there are no candidate workloads allowed for preemption"


def declined(log: Path) -> Counter[str]:
    """Heads that needed preemption and found no candidate, by class, from either manager's log
    (kfed's DEBUG record, Kueue's V(2) line)."""
    found: Counter[str] = Counter()
    for record in zap_records(log):
        msg = record.get("msg")
        if msg == KFED_DECLINED:
            found[workload_class(str(record.get("preemptor", "")))] += 1
        elif msg == KUEUE_DECLINED:
            found[workload_class(ref(record.get("workload")))] += 1
    return found


def summary(system: str, decisions: list[Decision], no_candidates: Counter[str]) -> None:
    issuing = [d for d in decisions if d.victims]
    evictions = sum(len(d.victims) for d in issuing)
    reusing = len(decisions) - len(issuing)
    print(f"\n## {system}: {len(issuing)} decisions issuing {evictions} evictions ({reusing} only re-using ongoing ones)")
    print(f"heads needing preemption with no candidate, by class: {dict(no_candidates)} ({sum(no_candidates.values())} in all)")
    by_class: Counter[str] = Counter()
    victims_by_class: Counter[str] = Counter()
    shapes: Counter[str] = Counter()
    states: Counter[str] = Counter()
    for d in issuing:
        by_class[d.preemptor_class] += len(d.victims)
        for victim, _, _ in d.victims:
            victims_by_class[f"{d.preemptor_class} -> {workload_class(victim)}"] += 1
        shapes[f"{d.preemptor_class:<6} {d.reasons:<42} {len(d.victims):>3} victim(s)"] += 1
        cq_fill, cohort_fill = fill(d.cq_usage, NOMINAL), fill(d.cohort_usage, COHORT_NOMINAL)
        states[f"{d.preemptor_class:<6} cq {cq_fill:>6} of nominal, cohort {cohort_fill:>6}"] += 1
    print("evictions by preemptor class:", dict(by_class))
    print("evictions, preemptor class -> victim class:", dict(victims_by_class))
    print("decisions by preemptor, reason and number of victims:")
    for shape, n in shapes.most_common():
        print(f"  {n:>5}  {shape}")
    print("decisions by preemptor, and how full its ClusterQueue and its cohort were:")
    for state, n in sorted(states.items()):
        print(f"  {n:>5}  {state}")
    first = issuing[:12]
    print("first decisions (s, preemptor, its ClusterQueue's usage, the cohort's, victims):")
    for d in first:
        victims = ", ".join(f"{v.rsplit('/', 1)[-1]}@{cq}({reason})" for v, cq, reason in d.victims)
        print(f"  {d.at:7.2f}  {d.preemptor} cq={d.cq_usage} cohort={d.cohort_usage}: {victims}")


def write_csv(path: Path, decisions: list[Decision]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["at", "preemptor", "class", "cluster_queue", "cq_usage", "cohort_usage", "victims", "ongoing", "reasons", "usage"])
        for d in decisions:
            victims = " ".join(f"{v}@{cq}" for v, cq, _ in d.victims)
            usage = json.dumps(d.usage, sort_keys=True)
            row = [f"{d.at:.3f}", d.preemptor, d.preemptor_class, d.cluster_queue, d.cq_usage, d.cohort_usage, victims, d.ongoing]
            writer.writerow([*row, d.reasons, usage])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the directory compare_kueue.py printed (files: ...)")
    parser.add_argument("--csv", type=Path, help="write each system's decisions to this directory")
    args = parser.parse_args()
    logs = {
        "Kueue (minimalkueue)": (args.run / "kueue-baseline" / "minimalkueue.log", kueue_decisions),
        "Kueue (full manager)": (args.run / "kueue-full-baseline" / "kueue" / "kueue.log", kueue_decisions),
        "kfed (Kueue's runner)": (args.run / "kfed-by-kueue-runner" / "manager.log", kfed_decisions),
    }
    for system, (log, parse) in logs.items():
        if not log.exists():
            continue
        decisions = parse(log)
        summary(system, decisions, declined(log))
        if args.csv is not None:
            args.csv.mkdir(parents=True, exist_ok=True)
            write_csv(args.csv / f"{system.split()[0].lower()}-{log.parent.name}.csv", decisions)


if __name__ == "__main__":
    main()
