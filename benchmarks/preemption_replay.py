"""Ask upstream Kueue to decide in the states where kfed preempted, and compare the decisions.

A `compare_kueue.py --decision-logs` run leaves kfed's manager log with one DEBUG record per
preemption decision ("preemption decision"): the preemptor, its victims, and every Workload that
held quota in the preemptor's cohort at that point of the cycle (its ClusterQueue, priority,
size, reservation time, and whether its eviction was under way). This script rebuilds each such
state, one fresh cohort per decision, on one harness apiserver that runs Kueue's full manager
(the pinned build of `hack/kueue/build.sh`, webhooks off, as `compare_kueue.py` runs it):

- the cohort's ClusterQueues with the specs kfed's engine had (in a cohort of their own; a
  hierarchy of Cohorts is not rebuilt, and such decisions are left out), and a LocalQueue each;
- each Workload that held quota, created and then given the same reservation through its status
  (QuotaReserved and Admitted; Evicted too where an eviction was under way), with reservation
  times one second apart in kfed's candidate order (Kueue orders candidates by them, then by
  UID; the apiserver keeps whole seconds, and the replayed UIDs are new);
- all of that for every decision before Kueue starts (queued with Kueue watching, a Workload
  would be admitted by Kueue before its replayed reservation is written); Kueue then loads the
  reservations as after a restart;
- once Kueue counts all of them, each preemptor in turn, queued in its LocalQueue, and deleted
  once Kueue has decided.

Kueue then decides. What it decided is read back from the objects: the Workloads it marked
`Preempted` (new evictions) and the preemptor's `QuotaReserved` message ("Pending the preemption
of N workload(s)", which counts victims already being evicted too). kfed's engine is given the
same state in the same process (the simulator's `AdmissionState`, one cycle), so a difference in
how the state was rebuilt shows as a difference from kfed's logged decision, not from Kueue's.

Victims are compared by class: (their ClusterQueue, priority, size, reason).

Decisions taken after another preemptor of the same cohort in the same cycle are left out (their
state holds that preemptor's charge, which is no Workload), and counted.

    .venv/bin/python benchmarks/compare_kueue.py --parts baseline --scale 0.1 \\
        --systems kfed-by-kueue-runner --decision-logs        # prints its directory
    .venv/bin/python benchmarks/preemption_replay.py /tmp/kfed-compare-XXXX [--limit 40]

Needs KFED_KUEUE_BIN (`bash hack/kueue/build.sh`) and the control plane (`hack/kube/build.sh`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))


from manager.api import constants as c  # noqa: E402
from manager.cli.files import load_paths  # noqa: E402
from manager.dev import federation  # noqa: E402
from manager.dev.local import LocalCluster, LocalProvider, wait_for, wait_ready  # noqa: E402
from manager.engine.simulate import Simulation, Source  # noqa: E402
from tests.kueue_upstream import UpstreamKueue  # noqa: E402

NAMESPACE = "replay"
FLAVOR = "rf"  # the flavor Kueue's runner creates (generator.defaultResourceFlavorName)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PENDING_PREEMPTION = re.compile(r"Pending the preemption of (\d+) workload")
API = f"/apis/{c.GROUP}/v1beta2"
REPLAYED = "replayed: an eviction under way when kfed decided"

VictimClass = tuple[str, int, str, str]  # ClusterQueue, priority, usage, reason


@dataclass
class Held:
    key: str
    cluster_queue: str
    priority: int
    usage: dict[str, int]
    reserved_at: datetime
    evicted: bool
    uid: str = ""


@dataclass
class Decision:
    index: int
    preemptor: str
    cluster_queue: str
    priority: int
    requests: dict[str, int]
    victims: list[dict[str, Any]]
    held: list[Held]
    usage: dict[str, dict[str, int]]
    cohort: str = ""
    cluster_queues: dict[str, dict[str, Any]] = field(default_factory=dict)

    def nested(self) -> bool:
        """A queue under a Cohort below the root: hierarchical cohorts are not rebuilt here."""
        return any(spec.get("cohortName") != self.cohort for spec in self.cluster_queues.values())

    def charged_by_another_preemptor(self) -> bool:
        """A queue's logged usage above the sum of its Workloads': an earlier preemptor's charge."""
        sums: dict[str, Counter[str]] = {cq: Counter() for cq in self.usage}
        for held in self.held:
            sums.setdefault(held.cluster_queue, Counter()).update(held.usage)
        return any(dict(+sums.get(cq, Counter())) != {k: v for k, v in values.items() if v} for cq, values in self.usage.items())

    def victim_classes(self, *, new_only: bool) -> Counter[VictimClass]:
        by_key = {held.key: held for held in self.held}
        out: Counter[VictimClass] = Counter()
        for victim in self.victims:
            if new_only and victim["ongoing"]:
                continue
            held = by_key[victim["key"]]
            out[(victim["cluster_queue"], held.priority, usage_text(held.usage), victim["reason"])] += 1
        return out


@dataclass
class Outcome:
    victims: Counter[VictimClass] = field(default_factory=Counter)
    pending: int | None = None  # N of "Pending the preemption of N workload(s)"
    message: str = ""


def usage_text(usage: dict[str, int]) -> str:
    return ",".join(f"{k.split('/', 1)[-1]}={v}" for k, v in sorted(usage.items()))


def read_decisions(log: Path) -> list[Decision]:
    out: list[Decision] = []
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{") or '"preemption decision"' not in line:
            continue
        record = json.loads(line)
        if record.get("msg") != "preemption decision" or "cluster_queues" not in record:
            continue
        held = [
            Held(
                key=w["key"],
                cluster_queue=w["cluster_queue"],
                priority=w["priority"],
                usage=w["usage"],
                reserved_at=datetime.fromisoformat(w["reserved_at"]),
                evicted=w["evicted"],
                uid=w.get("uid", ""),
            )
            for w in record["admitted"]
            if w["reserved_at"]
        ]
        out.append(
            Decision(
                index=len(out),
                preemptor=record["preemptor"],
                cluster_queue=record["cluster_queue"],
                priority=record["priority"],
                requests=record["requests"],
                victims=record["victims"],
                held=held,
                usage=record["usage"],
                cohort=record.get("cohort", ""),
                cluster_queues=record["cluster_queues"],
            )
        )
    return out


# --- the state as objects, for Kueue and for kfed's engine --------------------------------------------


def cq_name(decision: Decision, name: str) -> str:
    return f"r{decision.index}-{name}"


def quantity(resource: str, value: int) -> str:
    return f"{value}m" if resource == "cpu" else str(value)


def workload(name: str, queue: str, priority: int, usage: dict[str, int], labels: dict[str, str]) -> dict[str, Any]:
    requests = {key.split("/", 1)[1]: quantity(key.split("/", 1)[1], value) for key, value in usage.items()}
    return {
        "apiVersion": f"{c.GROUP}/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "pause", "resources": {"requests": requests}}],
                        }
                    },
                }
            ],
        },
    }


def reservation(cluster_queue: str, held: Held, at: datetime) -> dict[str, Any]:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "replayed", "lastTransitionTime": stamp},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "replayed", "lastTransitionTime": stamp},
    ]
    if held.evicted:
        conditions.append({"type": "Evicted", "status": "True", "reason": "Preempted", "message": REPLAYED, "lastTransitionTime": stamp})
    resources = {key.split("/", 1)[1]: quantity(key.split("/", 1)[1], value) for key, value in held.usage.items()}
    return {
        "admission": {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {"name": "main", "count": 1, "flavors": {r: FLAVOR for r in resources}, "resourceUsage": resources},
            ],
        },
        "conditions": conditions,
    }


def state_objects(decision: Decision) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], dict[str, Any]]], dict[str, Any]]:
    """The cohort's queues, the Workloads holding quota with their status, and the preemptor."""
    cohort = f"replay-{decision.index}"
    label = {"kfed.dev/replay": str(decision.index)}
    queues: list[dict[str, Any]] = []
    for name in sorted(decision.usage):
        replayed = cq_name(decision, name)
        # The queue as kfed's engine had it, in a cohort of its own.
        spec = {**decision.cluster_queues[name], "cohortName": cohort}
        queues.append(
            {"apiVersion": f"{c.GROUP}/v1beta2", "kind": "ClusterQueue", "metadata": {"name": replayed, "labels": label}, "spec": spec}
        )
        queues.append(
            {
                "apiVersion": f"{c.GROUP}/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": replayed, "namespace": NAMESPACE, "labels": label},
                "spec": {"clusterQueue": replayed},
            }
        )
    # Reservation times one second apart, in kfed's candidate order: the newest first, and of
    # equal times the smaller UID first (Kueue's CandidatesOrdering ends the same way), so the
    # replayed Workloads, whose UIDs are new, keep the order by their times alone.
    ranked = sorted(sorted(decision.held, key=lambda h: h.uid, reverse=True), key=lambda h: h.reserved_at)
    second = {held.key: EPOCH + timedelta(seconds=i) for i, held in enumerate(ranked)}
    held_objects = []
    for j, held in enumerate(sorted(decision.held, key=lambda h: h.key)):
        replayed = cq_name(decision, held.cluster_queue)
        obj = workload(f"r{decision.index}-w{j}", replayed, held.priority, held.usage, {**label, "kfed.dev/class": class_of(held)})
        held_objects.append((obj, reservation(replayed, held, second[held.key])))
    preemptor = workload(
        f"r{decision.index}-preemptor", cq_name(decision, decision.cluster_queue), decision.priority, decision.requests, label
    )
    return queues, held_objects, preemptor


def class_of(held: Held) -> str:
    return f"{held.priority}.{held.usage.get(f'{FLAVOR}/cpu', 0)}"


# --- kfed's engine, in-process ------------------------------------------------------------------------


def kfed_in_state(decision: Decision, directory: Path) -> Outcome:
    queues, held, preemptor = state_objects(decision)
    documents: list[dict[str, Any]] = [{"apiVersion": f"{c.GROUP}/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}}]
    documents += queues
    for obj, status in held:
        documents.append({**obj, "metadata": {**obj["metadata"], "creationTimestamp": "2025-12-31T00:00:00Z"}, "status": status})
    documents.append({**preemptor, "metadata": {**preemptor["metadata"], "creationTimestamp": "2025-12-31T00:00:01Z"}})
    path = directory / f"state-{decision.index}.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    loaded = load_paths([str(path)])
    if loaded.errors:
        raise SystemExit(f"{path}: {loaded.errors[0]}")
    simulation = Simulation([Source(str(path), obj) for _, obj in loaded.objects], release_after=None)
    by_name = {obj["metadata"]["name"]: obj for obj, _ in held}
    step = simulation.step()
    outcome = Outcome()
    for preemption in step.preemptions:
        obj = by_name[preemption.victim.name]
        cq = preemption.victim_cq.name.split("-", 1)[1]
        outcome.victims[(cq, obj["spec"]["priority"], victim_usage(obj), preemption.reason)] += 1
    info = simulation.state.infos[f"{NAMESPACE}/{preemptor['metadata']['name']}"]
    result = simulation.result()
    written = next(wl for wl in result.workloads if wl.name == info.name)
    reserved = next((cond for cond in written.status.conditions or [] if cond.type == c.QUOTA_RESERVED), None) if written.status else None
    outcome.message = reserved.message if reserved is not None else ""
    found = PENDING_PREEMPTION.search(outcome.message)
    outcome.pending = int(found.group(1)) if found else None
    return outcome


def victim_usage(obj: dict[str, Any]) -> str:
    requests = obj["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
    return ",".join(f"{r}={int(v[:-1]) if v.endswith('m') else int(v)}" for r, v in sorted(requests.items()))


# --- Kueue, on a real apiserver -----------------------------------------------------------------------


def post(cluster: LocalCluster, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    status, body = cluster.request("POST", path, obj, timeout=30)
    if status != 201:
        raise SystemExit(f"POST {path} {obj['metadata']['name']}: {status} {body}")
    assert isinstance(body, dict)
    return body


def create_state(cluster: LocalCluster, decision: Decision) -> None:
    """The cohort's queues and Workloads, created while Kueue is not running: a Workload queued
    with Kueue watching would be admitted by it before its replayed reservation is written."""
    queues, held, _ = state_objects(decision)
    for obj in queues:
        federation.create(cluster, obj)
    for obj, status in held:
        post(cluster, f"{API}/namespaces/{NAMESPACE}/workloads", obj)
        code, body = cluster.request(
            "PATCH",
            f"{API}/namespaces/{NAMESPACE}/workloads/{obj['metadata']['name']}/status",
            {"status": status},
            content_type="application/merge-patch+json",
            timeout=30,
        )
        if code != 200:
            raise SystemExit(f"status of {obj['metadata']['name']}: {code} {body}")


def counted_by_kueue(cluster: LocalCluster, decision: Decision) -> bool:
    expected = Counter(cq_name(decision, h.cluster_queue) for h in decision.held)
    for name in decision.usage:
        replayed = cq_name(decision, name)
        code, body = cluster.request("GET", f"{API}/clusterqueues/{replayed}")
        if code != 200 or (body.get("status") or {}).get("reservingWorkloads", 0) != expected.get(replayed, 0):
            return False
    return True


def kueue_in_state(cluster: LocalCluster, decision: Decision, timeout: float) -> Outcome:
    """Queue the preemptor into the state Kueue has counted, and read what Kueue decided."""
    _, _, preemptor = state_objects(decision)
    base = API
    post(cluster, f"{base}/namespaces/{NAMESPACE}/workloads", preemptor)
    name = preemptor["metadata"]["name"]
    outcome = Outcome()

    def decided() -> bool:
        code, body = cluster.request("GET", f"{base}/namespaces/{NAMESPACE}/workloads/{name}")
        conditions = {cond["type"]: cond for cond in (body.get("status") or {}).get("conditions") or []} if code == 200 else {}
        reserved = conditions.get("QuotaReserved")
        if reserved is None:
            return False
        outcome.message = reserved["message"]
        return True

    wait_for(decided, timeout=timeout, what=f"Kueue deciding on the preemptor of replay {decision.index}", interval=0.05)
    found = PENDING_PREEMPTION.search(outcome.message)
    outcome.pending = int(found.group(1)) if found else None
    _, body = cluster.request("GET", f"{base}/namespaces/{NAMESPACE}/workloads?labelSelector=kfed.dev/replay%3D{decision.index}")
    for item in body["items"]:
        conditions = {cond["type"]: cond for cond in (item.get("status") or {}).get("conditions") or []}
        preempted = conditions.get("Preempted")
        if preempted is None or preempted["status"] != "True":
            continue
        cq = item["status"]["admission"]["clusterQueue"].split("-", 1)[1]
        outcome.victims[(cq, item["spec"]["priority"], victim_usage(item), preempted["reason"])] += 1
    # Out of Kueue's heaps: a preemptor whose victims never give their quota back would be
    # re-decided in every cycle for the rest of the run.
    cluster.request("DELETE", f"{base}/namespaces/{NAMESPACE}/workloads/{name}")
    return outcome


# --- the run -------------------------------------------------------------------------------------------


def select(decisions: list[Decision], limit: int) -> tuple[list[Decision], int]:
    usable = [d for d in decisions if not d.charged_by_another_preemptor() and not d.nested()]
    skipped = len(decisions) - len(usable)
    if len(usable) > limit:
        step = len(usable) / limit
        usable = [usable[int(i * step)] for i in range(limit)]
    return usable, skipped


def show(counts: Counter[VictimClass]) -> str:
    return "; ".join(f"{n}x {cq} p{prio} {usage} {reason}" for (cq, prio, usage, reason), n in sorted(counts.items())) or "none"


@dataclass
class Replayed:
    decision: Decision
    kfed: Outcome  # kfed's engine in the rebuilt state
    kueue: Outcome  # upstream Kueue in the rebuilt state

    @property
    def logged(self) -> Counter[VictimClass]:
        return self.decision.victim_classes(new_only=True)

    def same(self, outcome: Outcome) -> bool:
        """The logged decision: the same new victims by class, and the same count pending."""
        return outcome.victims == self.logged and outcome.pending == len(self.decision.victims)


def replay(cluster: LocalCluster, bin_dir: Path, directory: Path, decisions: list[Decision], timeout: float) -> list[Replayed]:
    """Every decision's state on `cluster` (a fresh one), then Kueue started and asked in each."""
    kueue = UpstreamKueue(
        cluster, directory / "kueue", bin_dir, webhooks=False, log_level="error", feature_gates={"DisableWaitForPodsReady": True}
    )
    process = kueue.process = kueue.prepare()  # its CRDs, not started yet
    try:
        federation.create(cluster, {"apiVersion": f"{c.GROUP}/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
        federation.create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        for decision in decisions:
            create_state(cluster, decision)
        process.start()
        wait_ready(process, kueue.health_port, what="upstream Kueue", timeout=90)
        wait_for(
            lambda: all(counted_by_kueue(cluster, d) for d in decisions),
            timeout=timeout * 5,
            what="Kueue counting every replayed reservation",
            interval=1,
        )
        return [Replayed(d, kfed_in_state(d, directory), kueue_in_state(cluster, d, timeout)) for d in decisions]
    finally:
        kueue.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the directory compare_kueue.py --decision-logs printed, or kfed's manager.log")
    parser.add_argument("--limit", type=int, default=40, help="decisions to replay, spread over the run")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    logs = [args.run] if args.run.is_file() else sorted(args.run.rglob("manager.log"))
    if not logs:
        raise SystemExit(f"{args.run}: no manager.log (run compare_kueue.py with --decision-logs and kfed-by-kueue-runner)")
    decisions = read_decisions(logs[0])
    if not decisions:
        raise SystemExit(f"{logs[0]}: no preemption decision with its Workloads (kfed at debug, this version or later)")
    chosen, skipped = select(decisions, args.limit)
    print(
        f"{logs[0]}: {len(decisions)} decisions; {skipped} left out (taken after another preemptor's charge in the "
        "same cycle, or in a hierarchy of Cohorts)"
    )
    print(f"replaying {len(chosen)}")
    bin_dir = Path(os.environ.get("KFED_KUEUE_BIN", ""))
    if not (bin_dir / "kueue").is_file():
        raise SystemExit("KFED_KUEUE_BIN: export KFED_KUEUE_BIN=$(bash hack/kueue/build.sh)")
    base = Path(tempfile.mkdtemp(prefix="kfed-replay-"))
    provider = LocalProvider(base)
    try:
        (cluster,) = provider.create(["replay"])
        started = time.monotonic()
        results = replay(cluster, bin_dir, base, chosen, args.timeout)
        elapsed = time.monotonic() - started
    finally:
        provider.delete_all()
    for result in results:
        decision = result.decision
        ongoing = sum(1 for v in decision.victims if v["ongoing"])
        held = Counter(class_of(h) for h in decision.held)
        print(
            f"[{decision.index}] {decision.preemptor} (p{decision.priority}, {usage_text(decision.requests)}) in "
            f"{decision.cluster_queue}, {len(decision.held)} Workloads held ({dict(held)}), {ongoing} evictions under way"
        )
        print(f"    kfed logged:      {show(result.logged)}; pending {len(decision.victims)}")
        mark = "" if result.same(result.kfed) else "   <-- differs"
        print(f"    kfed, replayed:   {show(result.kfed.victims)}; pending {result.kfed.pending}{mark}")
        print(
            f"    Kueue, replayed:  {show(result.kueue.victims)}; pending {result.kueue.pending}"
            f"{'' if result.same(result.kueue) else '   <-- differs: ' + result.kueue.message}"
        )
    print(
        f"\n{len(results)} decisions replayed in {elapsed:.0f} s: kfed's engine took its logged decision in "
        f"{sum(r.same(r.kfed) for r in results)}, Kueue v{kueue_version(bin_dir)} took the same decision in "
        f"{sum(r.same(r.kueue) for r in results)}"
    )


def kueue_version(bin_dir: Path) -> str:
    return bin_dir.name.rsplit("-v", 1)[-1] if "-v" in bin_dir.name else "?"


if __name__ == "__main__":
    main()
