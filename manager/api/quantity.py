"""Kubernetes `resource.Quantity`, parsed and formatted exactly as apimachinery does.

Every value is held as an integer count of nano-units, which is exact: Kubernetes itself
rounds any finer precision up to 1n when it parses a quantity. CPU is then read in
milli-units (`milli`) and memory in bytes (`value`), both rounded up as `MilliValue()` and
`Value()` do, so the engine does integer arithmetic only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

NANO = 10**9
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT = {v: k for k, v in _BINARY_SUFFIXES.items()}
_NUMBER = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?")

# The pattern the apiserver's OpenAPI schema uses for quantities (int-or-string).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


class QuantityError(ValueError):
    """A string that Kubernetes would not accept as a quantity."""


def _ceil_div(numerator: int, denominator: int) -> int:
    # Kubernetes rounds away from zero when it drops precision (inf.RoundUp).
    quotient, remainder = divmod(abs(numerator), denominator)
    if remainder:
        quotient += 1
    return quotient if numerator >= 0 else -quotient


def _parse(text: str) -> tuple[int, Format]:
    """Return (nano-units, format) for a quantity string, or raise QuantityError."""
    if not text:
        raise QuantityError("quantities must match the regular expression " + QUANTITY_PATTERN)
    match = _NUMBER.match(text)
    assert match is not None  # the pattern matches the empty prefix at least
    sign, whole, fraction = match.group(1), match.group(2), match.group(3) or ""
    if not whole and not fraction:
        raise QuantityError("quantities must match the regular expression " + QUANTITY_PATTERN)
    suffix = text[match.end() :]
    digits = int((whole or "0") + fraction)
    scale = -len(fraction)  # value = digits * 10**scale * multiplier
    fmt: Format
    if suffix in _BINARY_SUFFIXES:
        fmt = "BinarySI"
        numerator, denominator = digits * (2 ** _BINARY_SUFFIXES[suffix]), 1
    elif suffix in _DECIMAL_SUFFIXES:
        fmt = "DecimalSI"
        scale += _DECIMAL_SUFFIXES[suffix]
        numerator, denominator = digits, 1
    elif suffix[:1] in ("e", "E") and re.fullmatch(r"[eE][+-]?\d+", suffix):
        fmt = "DecimalExponent"
        scale += int(suffix[1:])
        numerator, denominator = digits, 1
    else:
        raise QuantityError("unable to parse quantity's suffix")
    if fmt == "BinarySI":
        numerator *= NANO
        if scale < 0:
            denominator = 10**-scale
    else:
        scale += 9  # into nano-units
        if scale >= 0:
            numerator *= 10**scale
        else:
            denominator = 10**-scale
    nanos = _ceil_div(numerator, denominator)
    return (-nanos if sign == "-" else nanos), fmt


def _format(nanos: int, fmt: Format) -> str:
    """The canonical string Kubernetes prints for a value in a format (`Quantity.String()`)."""
    if nanos == 0:
        return "0"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)
    if fmt == "BinarySI":
        # Same as apimachinery: small or fractional binary quantities print as DecimalSI.
        if magnitude < 1024 * NANO or magnitude % NANO:
            fmt = "DecimalSI"
        else:
            amount, exponent = magnitude // NANO, 0
            while amount % 1024 == 0 and exponent < 60:
                amount //= 1024
                exponent += 10
            return f"{sign}{amount}{_BINARY_BY_EXPONENT.get(exponent, '')}"
    mantissa, exponent = magnitude, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    if fmt == "DecimalSI" and exponent in _DECIMAL_BY_EXPONENT:
        suffix = _DECIMAL_BY_EXPONENT[exponent]
    else:
        suffix = "" if exponent == 0 else f"e{exponent}"
    return f"{sign}{mantissa}{suffix}"


@dataclass(frozen=True, eq=False)
class Quantity:
    """An exact quantity that remembers how it was written, so manifests round-trip unchanged.

    Equality and ordering compare values only: `1Gi == 1024Mi`.
    """

    nanos: int
    format: Format = "DecimalSI"
    original: str | int | float | None = None

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        if isinstance(text, bool):
            raise QuantityError("quantities must be numbers or strings")
        raw = text if isinstance(text, str) else repr(text)
        if isinstance(text, float) and not text.is_integer():
            raw = repr(text)
        nanos, fmt = _parse(raw.strip() if isinstance(text, str) else raw)
        return cls(nanos=nanos, format=fmt, original=text)

    @classmethod
    def from_milli(cls, milli: int, fmt: Format = "DecimalSI") -> Quantity:
        return cls(nanos=milli * 10**6, format=fmt)

    @classmethod
    def from_value(cls, value: int, fmt: Format = "DecimalSI") -> Quantity:
        return cls(nanos=value * NANO, format=fmt)

    @property
    def milli(self) -> int:
        """Value in milli-units, rounded up like `MilliValue()`."""
        return _ceil_div(self.nanos, 10**6)

    @property
    def value(self) -> int:
        """Value in whole units, rounded up like `Value()`."""
        return _ceil_div(self.nanos, NANO)

    def canonical(self) -> str:
        return _format(self.nanos, self.format)

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r})"

    def to_wire(self) -> str | int:
        """What is written back: the original text when there was one, else the canonical form."""
        if isinstance(self.original, (str, int)) and not isinstance(self.original, bool):
            return self.original
        return self.canonical()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.nanos == other.nanos

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __lt__(self, other: Quantity) -> bool:
        return self.nanos < other.nanos

    def __le__(self, other: Quantity) -> bool:
        return self.nanos <= other.nanos

    def __gt__(self, other: Quantity) -> bool:
        return self.nanos > other.nanos

    def __ge__(self, other: Quantity) -> bool:
        return self.nanos >= other.nanos

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        def validate(value: Any) -> Quantity:
            if isinstance(value, Quantity):
                return value
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                try:
                    return cls.parse(value)
                except QuantityError:
                    raise ValueError(f'invalid quantity "{value}"') from None
            raise ValueError(f"invalid quantity {value!r}: must be a number or a string")

        return core_schema.no_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(lambda q: q.to_wire()),
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
