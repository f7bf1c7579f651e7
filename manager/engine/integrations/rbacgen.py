"""The job kinds' rights in kfed's manifests, derived from the registered adapters.

Each manifest that grants rights on job kinds holds them between two marker comments;
`kfed rbac` writes there what every adapter of the registry declares (`controller_rules` on a
cluster where jobs are queued, `worker_rules` for the manager's identity on a worker), and
`kfed rbac --check` (in CI) fails when a committed manifest says otherwise. Adding a kind thus
adds its rights everywhere from its adapter alone: the controllers', the manager's on a worker,
the in-cluster dashboard's (read and cancel each kind), and the users' `kfed-namespace-reader`. Pure text in, text out: the CLI reads and
writes the files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from manager.engine.integrations.adapter import JobAdapter

BEGIN = "# Job kinds, generated from the adapters by `kfed rbac` (do not edit down to the end marker)"
END = "# End of the job kinds"
CONTROLLER = "controller"  # the manager's and a worker agent's own cluster
WORKER = "worker"  # the manager's identity on a worker (MultiKueue)
DASHBOARD = "dashboard"  # the in-cluster dashboard's identity: read and cancel every kind
READER = "reader"  # the users' kfed-namespace-reader: read every kind

# Each manifest, and whose rights it holds.
TARGETS: tuple[tuple[str, str], ...] = (
    ("deploy/manager/rbac.yaml", CONTROLLER),
    ("deploy/worker-agent/rbac.yaml", CONTROLLER),
    ("deploy/helm/kfed/templates/rbac.yaml", CONTROLLER),
    ("deploy/multikueue-worker-access/rbac.yaml", WORKER),
    ("deploy/helm/kfed/templates/multikueue-worker-access.yaml", WORKER),
    ("deploy/dashboard/dashboard.yaml", DASHBOARD),
    ("deploy/helm/kfed/templates/dashboard.yaml", DASHBOARD),
    ("deploy/manager/user-roles.yaml", READER),
    ("deploy/helm/kfed/templates/user-roles.yaml", READER),
)


class MarkersMissingError(ValueError):
    """A manifest without the two marker lines: the message names the file."""


def rules(adapters: Sequence[JobAdapter[Any]], side: str) -> list[tuple[JobAdapter[Any], list[dict[str, list[str]]]]]:
    """Each adapter with the rules it needs on `side` (adapters needing none are left out)."""
    found = [(adapter, side_rules(adapter, side)) for adapter in adapters]
    return [(adapter, kind_rules) for adapter, kind_rules in found if kind_rules]


def side_rules(adapter: JobAdapter[Any], side: str) -> list[dict[str, list[str]]]:
    """The rules one adapter declares for `side` (a ValueError names an unknown side)."""
    if side == CONTROLLER:
        return adapter.controller_rules()
    if side == WORKER:
        return adapter.worker_rules()
    if side == DASHBOARD:
        return adapter.dashboard_rules()
    if side == READER:
        return adapter.reader_rules()
    raise ValueError(f"unknown RBAC side {side!r}")


def _flow(values: Sequence[str]) -> str:
    return "[" + ", ".join(value or '""' for value in values) + "]"


def render(adapters: Sequence[JobAdapter[Any]], side: str, *, indent: str) -> list[str]:
    """The rule lines, in the manifests' flow style, one comment line per kind."""
    lines: list[str] = []
    for adapter, kind_rules in rules(adapters, side):
        lines.append(f"{indent}# {adapter.kind} ({adapter.api_version}), when integrations.frameworks enables {adapter.framework}")
        for rule in kind_rules:
            lines.append(f"{indent}- apiGroups: {_flow(rule['apiGroups'])}")
            lines.append(f"{indent}  resources: {_flow(rule['resources'])}")
            lines.append(f"{indent}  verbs: {_flow(rule['verbs'])}")
    return lines


def regenerate(text: str, adapters: Sequence[JobAdapter[Any]], side: str, *, where: str) -> str:
    """`text` with the lines between its markers replaced by the adapters' rules, indented as
    the BEGIN marker is."""
    lines = text.split("\n")
    begin = next((i for i, line in enumerate(lines) if line.strip() == BEGIN), None)
    end = next((i for i, line in enumerate(lines) if line.strip() == END and begin is not None and i > begin), None)
    if begin is None or end is None:
        raise MarkersMissingError(f"{where}: the lines {BEGIN!r} and {END!r} must enclose the job kinds' rules")
    indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
    return "\n".join([*lines[: begin + 1], *render(adapters, side, indent=indent), *lines[end:]])


def drift(texts: Mapping[str, str], adapters: Sequence[JobAdapter[Any]]) -> list[str]:
    """One line per target whose committed text differs from what the adapters say."""
    problems = []
    for path, side in TARGETS:
        if regenerate(texts[path], adapters, side, where=path) != texts[path]:
            problems.append(f"{path}: the job kinds' rules differ from what the adapters declare")
    return problems
