"""Argument types shared by every netio command line: whole numbers and real numbers
within bounds, and comma-separated lists of whole numbers.

Each factory returns an ``argparse`` ``type=`` callable whose error names the text it
was given and the bound it broke, in one line; argparse adds the option's name and
exits with the usage code.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _bounds_text(minimum: float | None, maximum: float | None, maximum_open: bool) -> str:
    if maximum is None:
        return f">= {_number_text(minimum)}" if minimum is not None else "a number"
    upper = ")" if maximum_open else "]"
    lower = "(-inf" if minimum is None else f"[{_number_text(minimum)}"
    return f"in {lower}, {_number_text(maximum)}{upper}"


def whole_number(minimum: int | None = 0, maximum: int | None = None,
                 unit: str = "") -> Callable[[str], int]:
    """A decimal integer in [minimum, maximum] (either bound may be None)."""
    suffix = f" {unit}" if unit else ""
    of_unit = f" of {unit}" if unit else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number{of_unit}") from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            bounds = _bounds_text(minimum, maximum, maximum_open=False)
            raise argparse.ArgumentTypeError(f"{value}{suffix}: must be {bounds}")
        return value

    return parse


def real_number(minimum: float | None = 0.0, maximum: float | None = None, *,
                minimum_open: bool = False, maximum_open: bool = False,
                unit: str = "") -> Callable[[str], float]:
    """A finite float within the bounds; ``*_open`` excludes that bound itself."""
    suffix = f" {unit}" if unit else ""
    of_unit = f" of {unit}" if unit else ""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number{of_unit}") from None
        below = minimum is not None and (value <= minimum if minimum_open else value < minimum)
        above = maximum is not None and (value >= maximum if maximum_open else value > maximum)
        if not math.isfinite(value) or below or above:
            if minimum_open and maximum is None and minimum is not None:
                bounds = f"> {_number_text(minimum)}"
            else:
                bounds = _bounds_text(minimum, maximum, maximum_open)
            raise argparse.ArgumentTypeError(f"{text}{suffix}: must be a finite number {bounds}")
        return value

    return parse


def whole_numbers(minimum: int = 1) -> Callable[[str], list[int]]:
    """A comma-separated, non-empty list of integers, each >= minimum ("1,8,64")."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a comma-separated list of whole numbers") from None
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: need one or more numbers >= {minimum}")
        return values

    return parse
