"""Kueue's quota formulas on the tree, with the worked examples from the docs."""

from __future__ import annotations

from manager.engine.quota import Quota, QuotaNode, lowest_fitting_subtree_height, recompute_tree

CPU = ("default", "cpu")


def tree(*children: tuple[str, int, int | None, int | None], parent_quota: int = 0) -> tuple[QuotaNode, dict[str, QuotaNode]]:
    """A flat cohort of ClusterQueues given as (name, nominal, borrowingLimit, lendingLimit), in cores."""
    root = QuotaNode("cohort", is_cohort=True, quota={CPU: Quota(parent_quota * 1000)} if parent_quota else {})
    nodes = {}
    for name, nominal, borrowing, lending in children:
        node = QuotaNode(
            name,
            is_cohort=False,
            quota={
                CPU: Quota(nominal * 1000, None if borrowing is None else borrowing * 1000, None if lending is None else lending * 1000)
            },
        )
        node.parent = root
        root.children.append(node)
        nodes[name] = node
    recompute_tree(root)
    return root, nodes


def test_borrowing_example_team_a_can_use_both_nominal_quotas_21() -> None:
    root, q = tree(("team-a", 9, None, None), ("team-b", 12, None, None))
    assert root.subtree[CPU] == 21000
    assert q["team-a"].potential_available(CPU) == 21000
    assert q["team-a"].available(CPU) == 21000


def test_borrowing_limit_of_1_caps_team_a_at_10() -> None:
    _, q = tree(("team-a", 9, 1, None), ("team-b", 12, None, None))
    assert q["team-a"].potential_available(CPU) == 10000
    assert q["team-b"].potential_available(CPU) == 21000
    q["team-a"].add_usage(CPU, 9000)
    assert q["team-a"].available(CPU) == 1000
    assert q["team-b"].available(CPU) == 12000


def test_lending_limit_of_1_lets_team_a_reach_10_and_keeps_11_for_team_b() -> None:
    root, q = tree(("team-a", 9, None, None), ("team-b", 12, None, 1))
    assert q["team-b"].local_quota(CPU) == 11000
    assert root.subtree[CPU] == 10000
    assert q["team-a"].potential_available(CPU) == 10000
    assert q["team-b"].potential_available(CPU) == 21000
    q["team-b"].add_usage(CPU, 11000)
    assert root.usage.get(CPU, 0) == 0, "usage within the guaranteed part does not reach the cohort"
    assert q["team-a"].available(CPU) == 10000
    q["team-b"].add_usage(CPU, 1000)
    assert q["team-a"].available(CPU) == 9000


def test_hierarchical_lending_limit_bounds_what_a_borrower_sees() -> None:
    root = QuotaNode("root", is_cohort=True)
    child = QuotaNode("child", is_cohort=True)
    child.parent = root
    root.children.append(child)
    lender = QuotaNode("lender", is_cohort=False, quota={CPU: Quota(10000, None, 3000)})
    borrower = QuotaNode("borrower", is_cohort=False, quota={CPU: Quota(5000, 10000, None)})
    for node in (lender, borrower):
        node.parent = child
        child.children.append(node)
    recompute_tree(root, {"borrower": {CPU: 5000}})
    assert child.subtree[CPU] == 8000
    assert borrower.potential_available(CPU) == 8000
    assert borrower.available(CPU) == 3000
    assert lender.available(CPU) == 10000


def test_flat_cohort_with_lending_limits() -> None:
    _, q = tree(("lend-a", 3, None, 2), ("lend-b", 2, None, 2))
    assert q["lend-a"].potential_available(CPU) == 5000
    assert q["lend-b"].potential_available(CPU) == 4000
    q["lend-b"].add_usage(CPU, 2000)
    assert q["lend-b"].available(CPU) == 2000
    assert q["lend-a"].available(CPU) == 3000


def test_cohort_quota_is_extra_capacity_for_every_member() -> None:
    _, q = tree(("a", 2, None, None), ("b", 2, None, None), parent_quota=12)
    assert q["a"].potential_available(CPU) == 16000


def test_standalone_queue_ignores_the_cohort_formulas() -> None:
    node = QuotaNode("solo", is_cohort=False, quota={CPU: Quota(4000)})
    recompute_tree(node)
    node.add_usage(CPU, 1000)
    assert node.available(CPU) == 3000
    assert node.potential_available(CPU) == 4000
    assert lowest_fitting_subtree_height(node, CPU, 10_000) == (0, False)


def test_borrowing_level_is_the_height_of_the_lowest_subtree_that_fits() -> None:
    _, q = tree(("a", 2, None, None), ("b", 8, None, None))
    assert lowest_fitting_subtree_height(q["a"], CPU, 2000) == (0, True)
    assert lowest_fitting_subtree_height(q["a"], CPU, 5000) == (1, False)


def test_incremental_usage_matches_recomputing_from_scratch() -> None:
    root, q = tree(("a", 4, None, 1), ("b", 6, 2, 3), ("c", 2, None, None))
    q["a"].add_usage(CPU, 5000)
    q["b"].add_usage(CPU, 7000)
    q["c"].add_usage(CPU, 1000)
    q["b"].remove_usage(CPU, 4000)
    incremental = dict(root.usage)
    recompute_tree(root, {name: dict(node.usage) for name, node in q.items()})
    assert root.usage == incremental
