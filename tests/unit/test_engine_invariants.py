"""Properties that must hold for any input: quota limits, reclaim, reversibility, order independence."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manager.engine.cache import ClusterQueueInfo
from manager.engine.preemption import Preemptor, Target
from manager.engine.quota import Quota, QuotaNode, recompute_tree
from manager.engine.simulate import Simulation
from manager.engine.units import FlavorResource
from tests.unit.scenario import cluster_queue, flavor, local_queue, run, sources, workload

F = flavor("default-flavor")
CPU = ("default-flavor", "cpu")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

queue_specs = st.lists(
    st.tuples(
        st.integers(0, 6),  # nominal
        st.one_of(st.none(), st.integers(0, 6)),  # borrowingLimit
        st.one_of(st.none(), st.integers(0, 6)),  # lendingLimit
    ),
    min_size=1,
    max_size=4,
)
workload_specs = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(0, 2)), min_size=1, max_size=14)


def scenario(queues: list[tuple[int, int | None, int | None]], wls: list[tuple[int, int, int]], **cq_kw: Any) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [F]
    n = len(queues)
    for i, (nominal, borrowing, lending) in enumerate(queues):
        lending = None if lending is None else min(lending, nominal)
        objs.append(cluster_queue(f"cq{i}", {"default-flavor": {"cpu": (nominal, borrowing, lending)}}, cohort="co", **cq_kw))
        objs.append(local_queue(f"q{i}", f"cq{i}"))
    for j, (queue, cpu, priority) in enumerate(wls):
        objs.append(workload(f"w{j:02d}", f"q{queue % n}", {"cpu": str(cpu)}, priority=priority, created=j))
    return objs


@SETTINGS
@given(queues=queue_specs, wls=workload_specs, preempt=st.booleans())
def test_usage_never_exceeds_what_the_limits_allow(
    queues: list[tuple[int, int | None, int | None]], wls: list[tuple[int, int, int]], preempt: bool
) -> None:
    preemption = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"} if preempt else None
    # A fixed number of cycles: some random preemption setups never settle (as in Kueue), and
    # the limits must hold at every step anyway.
    outcome = run(scenario(queues, wls, preemption=preemption), cycles=30)
    cache = outcome.simulation.cache
    for cq in cache.cluster_queues.values():
        node = cq.node
        assert node.raw_available(CPU) >= 0, f"{cq.name} is over-admitted"
        quota = node.quota[CPU]
        if quota.borrowing_limit is not None:
            assert node.usage.get(CPU, 0) <= quota.nominal + quota.borrowing_limit
        assert node.usage.get(CPU, 0) == sum(w.usage.get(CPU, 0) for w in cq.workloads.values())
    root = cache.cohorts["co"]
    assert root.usage.get(CPU, 0) <= root.subtree.get(CPU, 0)


@SETTINGS
@given(queues=queue_specs, borrowers=workload_specs, demand=st.lists(st.integers(1, 3), min_size=1, max_size=4))
def test_a_queue_can_always_reclaim_its_guaranteed_quota(
    queues: list[tuple[int, int | None, int | None]], borrowers: list[tuple[int, int, int]], demand: list[int]
) -> None:
    objs = scenario(queues, borrowers)
    nominal = 6
    objs.append(cluster_queue("reclaimer", {"default-flavor": {"cpu": nominal}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}))
    objs.append(local_queue("mine", "reclaimer"))
    # The others first fill the cohort, borrowing the reclaimer's idle quota ...
    first = run(objs, cycles=30)
    running = [w for w in first.result.workloads if w.status and w.status.admission]
    # ... then the reclaimer asks for at most its nominal quota.
    total = 0
    asks = []
    for i, cpu in enumerate(demand):
        if total + cpu > nominal:
            break
        total += cpu
        asks.append(workload(f"mine{i}", "mine", {"cpu": str(cpu)}, created=1000 + i))
    later = [o for o in objs if o.get("kind") != "Workload"] + [w.to_dict() for w in running] + asks
    outcome = run(later, cycles=30)
    assert {f"mine{i}" for i in range(len(asks))} <= set(outcome.admitted())


@SETTINGS
@given(
    queues=queue_specs, ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 8000)), min_size=1, max_size=12), seed=st.integers(0, 1000)
)
def test_admitting_then_releasing_restores_the_tree_exactly(
    queues: list[tuple[int, int | None, int | None]], ops: list[tuple[int, int]], seed: int
) -> None:
    root = QuotaNode("co", is_cohort=True)
    leaves = []
    for i, (nominal, borrowing, lending) in enumerate(queues):
        lending = None if lending is None else min(lending, nominal)
        leaf = QuotaNode(
            f"cq{i}",
            is_cohort=False,
            quota={
                CPU: Quota(nominal * 1000, None if borrowing is None else borrowing * 1000, None if lending is None else lending * 1000)
            },
        )
        leaf.parent = root
        root.children.append(leaf)
        leaves.append(leaf)
    recompute_tree(root)
    before = [dict(n.usage) for n in [root, *leaves]]
    for queue, value in ops:
        leaves[queue % len(leaves)].add_usage(CPU, value)
    order = list(ops)
    random.Random(seed).shuffle(order)
    for queue, value in order:
        leaves[queue % len(leaves)].remove_usage(CPU, value)
    after = [{k: v for k, v in n.usage.items() if v} for n in [root, *leaves]]
    assert after == [{k: v for k, v in b.items() if v} for b in before]


@SETTINGS
@given(queues=queue_specs, wls=workload_specs, seed=st.integers(0, 10_000), fair=st.booleans())
def test_result_does_not_depend_on_document_order(
    queues: list[tuple[int, int | None, int | None]], wls: list[tuple[int, int, int]], seed: int, fair: bool
) -> None:
    objs = scenario(queues, wls, preemption={"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"})
    shuffled = list(objs)
    random.Random(seed).shuffle(shuffled)
    config: dict[str, Any] | None = {"fairSharing": {}} if fair else None
    assert run(objs, config=config, cycles=30).result.as_list() == run(shuffled, config=config, cycles=30).result.as_list()


class _KueueWalk(Preemptor):
    """Kueue's classic walk with none of kfed's shortcuts: every candidate removed in order,
    fill-back one by one. The shortcuts must give exactly its victims."""

    def _skip_others(self, *args: Any, **kwargs: Any) -> bool | None:
        return False

    def _classical_run(
        self,
        cq: ClusterQueueInfo,
        frs: set[FlavorResource],
        requests: dict[FlavorResource, int],
        allow_borrowing: bool,
        groups: tuple[Any, Any, Any],
        barred: Any = None,
    ) -> list[Target]:
        # Every group read, even the one whose candidates the run rejects one by one.
        return super()._classical_run(cq, frs, requests, allow_borrowing, groups, None)

    def _fill_back(
        self, cq: ClusterQueueInfo, requests: dict[FlavorResource, int], targets: list[Target], allow_borrowing: bool
    ) -> list[Target]:
        self._fill_back_range(cq, requests, targets, allow_borrowing, len(targets) - 2, 0)
        return targets


def _outcome(objs: list[dict[str, Any]], preemptor: type[Preemptor], config: dict[str, Any] | None) -> dict[str, Any]:
    if config is not None:
        objs = [{"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **config}, *objs]
    simulation = Simulation(sources(objs))
    simulation.scheduler.preemptor_class = preemptor
    return simulation.run(12).as_list()


running_specs = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(-2, 2)), min_size=1, max_size=14)
pending_specs = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(0, 5)), min_size=1, max_size=6)
policies = st.tuples(
    st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
    st.sampled_from(["LowerPriority", "Any"]),
    st.one_of(st.none(), st.integers(-1, 3)),
)
policy_lists = st.lists(policies, min_size=4, max_size=4)


@SETTINGS
@given(queues=queue_specs, pols=policy_lists, running=running_specs, pending=pending_specs, fair=st.booleans())
def test_preemption_shortcuts_pick_the_victims_of_kueues_full_walk(
    queues: list[tuple[int, int | None, int | None]],
    pols: list[tuple[str, str, int | None]],
    running: list[tuple[int, int, int]],
    pending: list[tuple[int, int, int]],
    fair: bool,
) -> None:
    objs: list[dict[str, Any]] = [F]
    n = len(queues)
    for i, ((nominal, borrowing, lending), (within, reclaim, threshold)) in enumerate(zip(queues, pols, strict=False)):
        lending = None if lending is None else min(lending, nominal)
        preemption: dict[str, Any] = {"withinClusterQueue": within, "reclaimWithinCohort": reclaim}
        if threshold is not None:
            preemption["borrowWithinCohort"] = {"policy": "LowerPriority", "maxPriorityThreshold": threshold}
        objs.append(cluster_queue(f"cq{i}", {"default-flavor": {"cpu": (nominal, borrowing, lending)}}, cohort="co", preemption=preemption))
        objs.append(local_queue(f"q{i}", f"cq{i}"))
    for j, (queue, cpu, priority) in enumerate(running):
        admitted = (f"cq{queue % n}", {"cpu": "default-flavor"})
        objs.append(workload(f"r{j:02d}", f"q{queue % n}", {"cpu": str(cpu)}, priority=priority, created=j, admitted=admitted))
    for j, (queue, cpu, priority) in enumerate(pending):
        objs.append(workload(f"p{j:02d}", f"q{queue % n}", {"cpu": str(cpu)}, priority=priority, created=100 + j))
    config: dict[str, Any] | None = {"fairSharing": {}} if fair else None
    assert _outcome(objs, Preemptor, config) == _outcome(objs, _KueueWalk, config)


# A preemptor in a queue over its nominal quota (cq0 borrows) with borrowWithinCohort unset
# (Never): in the run that allows borrowing, other queues' borrowed workloads are
# WithoutBorrowing candidates that Kueue's walk rejects one by one, so kfed does not read them.
# Three queues of 4 cpu nominal (borrowingLimit 8) share 12; the victims must be the full
# walk's. (running workloads as (queue, cpu, priority), the preemptor's (cpu, priority)) -> victims.
BARRED_CASES: dict[str, tuple[list[tuple[int, int, int]], tuple[int, int], set[str]]] = {
    "own_lower_priority_victim_while_others_borrow": ([(0, 4, 0), (0, 2, 2), (1, 6, 0)], (4, 1), {"r00"}),
    "no_own_victim_others_borrowing_is_no_candidates": ([(0, 4, 2), (0, 2, 2), (1, 6, 0)], (4, 1), set()),
    "under_nominal_reclaims_the_newest_borrower": ([(0, 2, 0), (1, 6, 0), (1, 4, 0)], (2, 1), {"r02"}),
}


def test_borrowing_run_skips_candidates_it_would_reject() -> None:
    for name, (running, (cpu, priority), victims) in BARRED_CASES.items():
        objs: list[dict[str, Any]] = [F]
        for i in range(3):
            preemption = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
            objs.append(cluster_queue(f"cq{i}", {"default-flavor": {"cpu": (4, 8, None)}}, cohort="co", preemption=preemption))
            objs.append(local_queue(f"q{i}", f"cq{i}"))
        for j, (queue, run_cpu, run_priority) in enumerate(running):
            admitted = (f"cq{queue}", {"cpu": "default-flavor"})
            objs.append(workload(f"r{j:02d}", f"q{queue}", {"cpu": str(run_cpu)}, priority=run_priority, created=j, admitted=admitted))
        objs.append(workload("p00", "q0", {"cpu": str(cpu)}, priority=priority, created=100))
        simulation = Simulation(sources(objs))
        outcome = simulation.step()
        assert {p.victim.name for p in outcome.preemptions} == victims, name
        assert _outcome(objs, Preemptor, None) == _outcome(objs, _KueueWalk, None), name
