"""The checks every config makes of its own fields, each a one-line ``ValueError`` that names the
field, the value and what is allowed.

Configs call them from ``__post_init__``; a nested part may give its ``prefix`` (``"rl."``) so
that the message names the field as the command line and config files do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def is_int(value: Any) -> bool:
    """An int (numpy's too) that is not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float (numpy's too) that is not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and math.isfinite(value)


def check_int(name: str, value: Any, low: int = 1, *, optional: bool = False, note: str = "") -> None:
    """``value`` must be an int ``>= low`` (or None when ``optional``)."""
    if value is None and optional:
        return
    if not is_int(value) or value < low:
        raise ValueError(f"{name}={value!r} must be an int >= {low}{_or_none(optional)}{_note(note)}")


def positive_ints(config: Any, names: Iterable[str], prefix: str = "") -> None:
    """Each of ``config``'s fields ``names`` must be an int >= 1."""
    for name in names:
        check_int(prefix + name, getattr(config, name))


def check_range(name: str, value: Any, low: float, high: float, *, integer: bool = True, optional: bool = False,
                low_open: bool = False, high_open: bool = False, note: str = "") -> None:
    """``value`` must lie in [``low``, ``high``] (``low_open``/``high_open``: excluding that end),
    an int where ``integer`` (or None when ``optional``)."""
    if value is None and optional:
        return
    kind_ok = is_int(value) if integer else is_number(value)
    inside = kind_ok and (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
    if not inside:
        span = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        kind = "an int" if integer else "a number"
        raise ValueError(f"{name}={value!r} must be {kind} in {span}{_or_none(optional)}{_note(note)}")


def check_number(name: str, value: Any, low: float = 0.0, *, strict: bool = False, optional: bool = False,
                 note: str = "") -> None:
    """``value`` must be a finite number ``>= low`` (``> low`` when ``strict``; or None when ``optional``)."""
    if value is None and optional:
        return
    if not is_number(value) or value < low or (strict and value == low):
        raise ValueError(f"{name}={value!r} must be a finite number {'>' if strict else '>='} {low:g}"
                         f"{_or_none(optional)}{_note(note)}")


def check_choice(name: str, value: Any, allowed: Iterable[Any], *, optional: bool = False) -> None:
    """``value`` must be one of ``allowed`` (or None when ``optional``)."""
    allowed = tuple(allowed)
    if (value is None and optional) or value in allowed:
        return
    raise ValueError(f"{name}={value!r}; allowed: {', '.join(str(a) for a in allowed)}{_or_none(optional)}")


def _or_none(optional: bool) -> str:
    return " (or None)" if optional else ""


def _note(note: str) -> str:
    return f" ({note})" if note else ""
