"""Quantities as the engine counts them: integers in Kueue's units.

CPU is counted in milli-cores and every other resource in whole units (bytes for memory), the
same as Kueue's `resources.ResourceValue`. Messages format amounts back the way Kueue's
ResourceFormatter does: cpu as a decimal milli quantity, memory and storage in binary units.
"""

from __future__ import annotations

from manager.api.quantity import Quantity

FlavorResource = tuple[str, str]
"""(flavor, resource): the unit of quota accounting."""

CPU = "cpu"
_BINARY_RESOURCES = ("memory", "ephemeral-storage")


def amount(resource: str, quantity: Quantity) -> int:
    """A quantity of `resource` in engine units (milli-cpu, bytes, counts)."""
    return quantity.milli if resource == CPU else quantity.value


def to_quantity(resource: str, value: int) -> Quantity:
    """An engine amount as a Kubernetes quantity, formatted as Kueue prints it."""
    if resource == CPU:
        return Quantity.from_milli(value)
    if resource in _BINARY_RESOURCES or resource.startswith("hugepages-"):
        return Quantity.from_value(value, "BinarySI")
    return Quantity.from_value(value)


def format_amount(resource: str, value: int) -> str:
    return to_quantity(resource, value).canonical()
