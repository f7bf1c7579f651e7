"""`kfed simulate`: read manifests, run Kueue's scheduling offline, print the outcome."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from manager.api import constants as c
from manager.cli.files import load_paths
from manager.engine.simulate import SIMULATED_KINDS, Simulation, SimulationError, SimulationResult, Source, group_of
from manager.engine.workload import WorkloadInfo, is_finished


def add_command(commands: Any) -> None:
    parser = commands.add_parser("simulate", help="run Kueue's admission offline over manifests and show the result")
    parser.add_argument("-f", "--filename", action="append", required=True, help="file or directory of manifests (repeatable)")
    parser.add_argument("--cycles", type=int, default=None, help="run exactly N scheduling cycles (default: until nothing changes)")
    parser.add_argument(
        "--release-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="how long an evicted job takes to stop and give its quota back (a cycle is one second; default 0: within the cycle)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.cycles is not None and args.cycles < 0:
        print("--cycles: must be zero or more", file=sys.stderr)
        return 1
    if not 0 <= args.release_after < float("inf"):
        print("--release-after: must be a number of seconds, zero or more", file=sys.stderr)
        return 1
    loaded = load_paths(args.filename)
    for error in loaded.errors:
        print(error, file=sys.stderr)
    if loaded.errors:
        return 1
    sources: list[Source] = []
    for document, obj in loaded.objects:
        where = f"{document.source}[{document.index}] {document.kind}/{document.display_name}"
        if group_of(obj) not in SIMULATED_KINDS:
            print(f"{document.source}[{document.index}]: skipped {document.data.get('apiVersion')} {document.kind}", file=sys.stderr)
            continue
        sources.append(Source(where, obj))
    for document in loaded.skipped:
        print(f"{document.source}[{document.index}]: skipped {document.data.get('apiVersion')} {document.kind}", file=sys.stderr)
    try:
        simulation = Simulation(sources, release_after=args.release_after)
        for note in simulation.notes:
            print(note, file=sys.stderr)
        result = simulation.run(args.cycles)
    except SimulationError as err:
        print(err, file=sys.stderr)
        return 1
    if not result.converged:
        print(f"simulate: still changing after {result.cycles} cycles; use --cycles to stop earlier", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(result.as_list(), indent=2))
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(result.as_list(), sort_keys=False))
    else:
        sys.stdout.write(render_table(result))
    return 0


def _state(info: WorkloadInfo) -> str:
    if not info.active:
        return "Inactive"
    if info.condition_true(c.ADMITTED):
        return "Admitted"
    if info.reserved:
        return "QuotaReserved"
    if info.condition_true(c.PREEMPTED):
        return "Preempted"
    return "Pending"


def _flavors(info: WorkloadInfo) -> str:
    if info.admission is None:
        return "-"
    by_flavor: dict[str, list[str]] = {}
    for assigned in info.admission:
        for resource, flavor in sorted(assigned.flavors.items()):
            if resource not in by_flavor.setdefault(flavor, []):
                by_flavor[flavor].append(resource)
    return " ".join(f"{','.join(resources)}={flavor}" for flavor, resources in sorted(by_flavor.items())) or "-"


def _reason(info: WorkloadInfo, bypassed: tuple[str, str] | None) -> str:
    if info.reserved:
        if not info.condition_true(c.ADMITTED):
            pending = sorted(name for name, state in info.checks.items() if state != "Ready")
            return f"waiting for admission checks: {', '.join(pending)}"
        return ""
    if not info.active:
        return "spec.active is false"
    if bypassed is not None:
        return f"{bypassed[0]}: {bypassed[1]}"
    cond = info.conditions.get(c.QUOTA_RESERVED)
    if cond is None:
        return "not yet evaluated"
    return f"{cond.reason}: {cond.message}"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def render_table(result: SimulationResult) -> str:
    """The result for a person: one row per Workload, then one per ClusterQueue."""
    rows = [["NAMESPACE", "WORKLOAD", "QUEUE", "CLUSTERQUEUE", "STATE", "FLAVORS", "REASON"]]
    for info in result.infos:
        cq_name = info.admission_cq or info.cluster_queue or "-"
        rows.append(
            [
                info.namespace,
                info.name,
                info.queue_name or "-",
                cq_name,
                _state(info),
                _flavors(info),
                _reason(info, result.bypassed.get(info.key)),
            ]
        )
    for wl in result.untracked:
        state = "Finished" if is_finished(wl) else "Deleting"
        rows.append([wl.namespace, wl.name, wl.spec.queue_name or "-", "-", state, "-", ""])
    out = _table(rows) if len(rows) > 1 else "No workloads.\n"
    cq_rows = [["CLUSTERQUEUE", "COHORT", "PENDING", "RESERVING", "ADMITTED", "USAGE"]]
    for cq in result.cluster_queues:
        status = cq.status
        assert status is not None
        usage = []
        spec_quota = {
            (flavor.name, resource.name): resource.nominal_quota
            for group in cq.spec.resource_groups or []
            for flavor in group.flavors
            for resource in flavor.resources
        }
        for flavor in status.flavors_reservation or []:
            for resource in flavor.resources or []:
                total = resource.total
                nominal = spec_quota.get((flavor.name, resource.name))
                if total is None or total.nanos == 0:
                    continue
                text = f"{flavor.name}/{resource.name} {total.canonical()}/{nominal.canonical() if nominal else '0'}"
                if resource.borrowed is not None and resource.borrowed.nanos:
                    text += f" (borrowing {resource.borrowed.canonical()})"
                usage.append(text)
        cq_rows.append(
            [
                cq.name,
                cq.spec.cohort_name or "-",
                str(status.pending_workloads or 0),
                str(status.reserving_workloads or 0),
                str(status.admitted_workloads or 0),
                ", ".join(usage) or "-",
            ]
        )
    if len(cq_rows) > 1:
        out += "\n" + _table(cq_rows)
    admitted = sum(1 for info in result.infos if info.condition_true(c.ADMITTED))
    pending = sum(1 for info in result.infos if not info.reserved)
    reserved = len(result.infos) - admitted - pending
    out += f"\n{result.cycles} cycle(s): {admitted} admitted, {reserved} quota reserved, {pending} pending, "
    out += f"{result.preemptions} preemption(s)\n"
    return out
