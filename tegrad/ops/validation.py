"""Argument checks shared by the operator library (messages name what is wrong).

>>> normalize_axis(-1, 4)
3
>>> check_int(3, "stride", minimum=1)
3
"""
from __future__ import annotations

import numbers

import numpy as np

from tegrad.ir.errors import ShapeError, TegradError


def is_integer(value):
    """True for a Python or numpy integer that is not a bool."""
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool)


def is_number(value):
    """True for a Python or numpy real number or bool (an operand, not a tensor)."""
    return isinstance(value, (numbers.Real, np.number, np.bool_))


def check_int(value, what, *, minimum=None):
    """``value`` must be an integer (at least ``minimum``); returns it as an int."""
    if not is_integer(value):
        raise TegradError(f"{what} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        kind = {0: "non-negative", 1: "positive"}.get(minimum, f"at least {minimum}")
        raise TegradError(f"{what} must be {kind}, got {value}")
    return value


def normalize_axis(axis, ndim, what="axis", *, owner=None):
    """``axis`` in ``[-ndim, ndim)`` as a non-negative position.

    ``owner`` describes the tensor in the message (default: its number of dimensions).
    """
    if not is_integer(axis):
        raise TegradError(f"{what} must be an integer, got {axis!r}")
    if not -ndim <= axis < ndim:
        owner = owner or f"a tensor of {ndim} dimension(s)"
        raise ShapeError(f"{what} {axis} is out of range for {owner} (valid: {-ndim} to "
                         f"{ndim - 1})")
    return int(axis) % ndim
