"""Properties that must hold for any input: quota limits, reclaim, reversibility, order independence."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manager.engine.quota import Quota, QuotaNode, recompute_tree
from tests.unit.scenario import cluster_queue, flavor, local_queue, run, workload

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
