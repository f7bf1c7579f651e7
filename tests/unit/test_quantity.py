from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from manager.api.quantity import Quantity, QuantityError

# (input, canonical form as kubectl prints it, milli-units, whole units rounded up)
KNOWN = [
    ("1.5Gi", "1536Mi", 1610612736000, 1610612736),
    ("0.5Gi", "512Mi", 536870912000, 536870912),
    ("1Ki", "1Ki", 1024000, 1024),
    ("2048", "2048", 2048000, 2048),
    ("0.5Ki", "512", 512000, 512),
    ("1.1Ki", "1126400m", 1126400, 1127),
    ("0.1", "100m", 100, 1),
    ("500m", "500m", 500, 1),
    ("1.5", "1500m", 1500, 2),
    ("1000", "1k", 1000000, 1000),
    ("1500", "1500", 1500000, 1500),
    ("1200000", "1200k", 1200000000, 1200000),
    ("1e3", "1e3", 1000000, 1000),
    ("1E3", "1e3", 1000000, 1000),
    ("12e6", "12e6", 12000000000, 12000000),
    ("0.0001", "100u", 1, 1),
    ("0.0000000001", "1n", 1, 1),  # finer than nano rounds up, as Kubernetes does
    ("-1", "-1", -1000, -1),
    ("+1", "1", 1000, 1),
    (".5", "500m", 500, 1),
    ("5.", "5", 5000, 5),
    ("36Gi", "36Gi", 38654705664000, 38654705664),
    ("1E", "1E", 10**21, 10**18),
    ("0", "0", 0, 0),
]


@pytest.mark.parametrize(("text", "canonical", "milli", "value"), KNOWN)
def test_quantity_parses_and_prints_like_kubernetes(text: str, canonical: str, milli: int, value: int) -> None:
    quantity = Quantity.parse(text)
    assert quantity.canonical() == canonical
    assert quantity.milli == milli
    assert quantity.value == value


@pytest.mark.parametrize("text", ["", "9x", "1K", "abc", "1e", "1.2.3", "--1", "1ki", "Gi", "1 Gi"])
def test_quantity_rejects_what_kubernetes_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        Quantity.parse(text)


def test_integer_yaml_values_are_quantities() -> None:
    assert Quantity.parse(9).milli == 9000
    assert Quantity.parse(9).to_wire() == 9


def test_equal_values_in_different_units_are_equal() -> None:
    assert Quantity.parse("1Gi") == Quantity.parse("1024Mi")
    assert Quantity.parse("1") == Quantity.parse("1000m")
    assert Quantity.parse("1k") < Quantity.parse("1Ki")


suffixes = st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "n", "u"])


@given(st.integers(min_value=0, max_value=10**12), suffixes)
def test_canonical_form_parses_back_to_the_same_value(number: int, suffix: str) -> None:
    quantity = Quantity.parse(f"{number}{suffix}")
    again = Quantity.parse(quantity.canonical())
    assert again == quantity
    assert again.canonical() == quantity.canonical()


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_milli_values_round_trip_exactly(milli: int) -> None:
    quantity = Quantity.from_milli(milli)
    assert Quantity.parse(quantity.canonical()).milli == milli


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=0, max_value=10**9))
def test_sum_of_quantities_is_exact_in_milli_units(a: int, b: int) -> None:
    total = Quantity.from_milli(a).nanos + Quantity.from_milli(b).nanos
    assert Quantity(nanos=total).milli == a + b
