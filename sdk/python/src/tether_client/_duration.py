"""Durations as the SDK takes them: seconds (an ``int`` or ``float``) or a
``datetime.timedelta``, sent to the server as whole milliseconds."""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Optional, Union

Duration = Union[float, timedelta]
"""A duration: seconds (``int`` or ``float``) or a ``timedelta``."""


def _check(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise TypeError(f"{name} must be seconds (int or float) or a timedelta, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, not {value!r}")
    negative = value < timedelta(0) if isinstance(value, timedelta) else value < 0
    if negative:
        raise ValueError(f"{name} must not be negative, got {value!r}")


def seconds(value: Duration, name: str) -> float:
    """``value`` in seconds; ``ValueError`` when it is negative or not finite."""
    _check(value, name)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def to_ms(value: Duration, name: str) -> int:
    """``value`` as the server takes durations: whole milliseconds, rounded
    half up from the exact value given (``0.0015`` is 2 ms, not a float's
    1.4999...). ``ValueError`` when it is negative or not finite."""
    _check(value, name)
    if isinstance(value, timedelta):
        micros = value // timedelta(microseconds=1)
        return (micros + 500) // 1000
    if isinstance(value, int):
        return value * 1000
    # repr() is the shortest text that reads back as the float: the value
    # the caller wrote, which Decimal scales without binary rounding.
    return int((Decimal(repr(value)) * 1000).to_integral_value(ROUND_HALF_UP))


def opt_ms(value: Optional[Duration], name: str) -> Optional[int]:
    """:func:`to_ms`, or None for None (a field left out)."""
    return None if value is None else to_ms(value, name)
