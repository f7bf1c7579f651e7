"""A job's restriction on the workers that may run it, read from its annotations
(`kfed.dev/allowed-workers`, a list of MultiKueueCluster names, and `kfed.dev/worker-selector`, a
label selector on them), and kubectl's selector syntax. Pure; the webhook refuses a job whose
restriction cannot be read, and MultiKueue (`multikueue/selection.py`) applies it.

A selector is written as kubectl's `-l` is: `region=eu,tier!=spot,gpu in (a100,h100),!legacy`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from manager.api.meta import LabelSelector, LabelSelectorRequirement

ALLOWED_WORKERS_ANNOTATION = "kfed.dev/allowed-workers"  # on a job: worker1,worker2
WORKER_SELECTOR_ANNOTATION = "kfed.dev/worker-selector"  # on a job: a label selector on MultiKueueClusters
JOB_ANNOTATIONS = (ALLOWED_WORKERS_ANNOTATION, WORKER_SELECTOR_ANNOTATION)

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*({_NAME})\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQUALITY = re.compile(rf"^\s*({_NAME})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_NAME})\s*$")
_WORKER = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class SelectionError(ValueError):
    """A selector or worker list that cannot be read; the message names the annotation."""


def _split(text: str) -> list[str]:
    """Requirements split at commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def parse_selector(text: str, *, where: str) -> LabelSelector:
    """kubectl's selector syntax as a LabelSelector; a requirement that cannot be read is a
    SelectionError naming `where` and the requirement."""
    labels: dict[str, str] = {}
    expressions: list[LabelSelectorRequirement] = []
    if not text.strip():
        raise SelectionError(f"{where}: empty selector")
    for part in _split(text):
        if found := _SET.match(part):
            values = [v.strip() for v in found.group(3).split(",")]
            if not all(values) or not all(re.fullmatch(_VALUE, v) for v in values):
                raise SelectionError(f'{where}: "{part.strip()}": expected key in (a,b) with label values')
            operator = "In" if found.group(2) == "in" else "NotIn"
            expressions.append(LabelSelectorRequirement(key=found.group(1), operator=operator, values=values))
        elif found := _EQUALITY.match(part):
            key, op, value = found.group(1), found.group(2), found.group(3)
            if op == "!=":
                expressions.append(LabelSelectorRequirement(key=key, operator="NotIn", values=[value]))
            else:
                labels[key] = value
        elif found := _EXISTS.match(part):
            operator = "DoesNotExist" if found.group(1) else "Exists"
            expressions.append(LabelSelectorRequirement(key=found.group(2), operator=operator))
        else:
            raise SelectionError(f'{where}: "{part.strip()}": expected key=value, key!=value, key in (a,b), key notin (a,b), key or !key')
    return LabelSelector(match_labels=labels or None, match_expressions=expressions or None)


def parse_workers(text: str, *, where: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    bad = next((name for name in names if not _WORKER.match(name)), None)
    if bad is not None:
        raise SelectionError(f'{where}: "{bad}": expected a comma-separated list of MultiKueueCluster names')
    return names


@dataclass(frozen=True)
class Restriction:
    """A job's restriction, read from its annotations; empty: every worker of the config."""

    workers: tuple[str, ...] | None = None
    selector: LabelSelector | None = None
    selector_text: str = ""

    @property
    def empty(self) -> bool:
        return self.workers is None and self.selector is None


def job_restriction(annotations: Mapping[str, str] | None, *, what: str) -> Restriction:
    """The restriction a job's (or its Workload's) annotations ask for; SelectionError names
    `what` (`Job team-a/train`) and the annotation when one cannot be read."""
    found = annotations or {}
    workers = selector = None
    text = found.get(WORKER_SELECTOR_ANNOTATION)
    if ALLOWED_WORKERS_ANNOTATION in found:
        workers = tuple(
            parse_workers(found[ALLOWED_WORKERS_ANNOTATION], where=f"{what}: metadata.annotations[{ALLOWED_WORKERS_ANNOTATION}]")
        )
    if text is not None:
        selector = parse_selector(text, where=f"{what}: metadata.annotations[{WORKER_SELECTOR_ANNOTATION}]")
    return Restriction(workers, selector, text or "")
