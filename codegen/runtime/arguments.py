"""Checks and conversions of the arrays a compiled function is called with.

An argument must be an array of its placeholder's shape and dtype. A C-contiguous, aligned
numpy array is used in place; any other array of the right dtype is copied; an array of
another dtype, a Python list or a scalar is converted as :func:`tegrad.evaluate` converts
its feeds, only when every value converts exactly. An ``out`` array must
be a writeable, aligned, C-contiguous numpy array of the output's shape and dtype; that
it overlaps no argument and no other ``out`` array is checked by the compiled code.

>>> import numpy as np
>>> spec = ArraySpec("x", (2,), "float32")
>>> spec.argument([1, 2]).dtype
dtype('float32')
"""
from __future__ import annotations

import numpy as np

from tegrad.ir.errors import DTypeError, FeedError, ShapeError, TegradError
from tegrad.reference.evaluator import feed_array


class ArraySpec:
    """The shape and dtype an argument or output of a compiled function must have."""

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)

    def describe(self):
        return f"{self.name!r} (shape {self.shape}, {self.dtype})"

    def argument(self, value):
        """``value`` as a C-contiguous aligned array of this spec (copied when needed).

        An array of another dtype, a list or a number is converted by the rule of
        :func:`tegrad.evaluate` (:func:`tegrad.reference.evaluator.feed_array`): only when
        every value converts back to itself, so int64 labels feed an int32 input but 2.5
        does not, and the error names the input.
        """
        if not (type(value) is np.ndarray and value.dtype == self.dtype):
            value = feed_array(self, value)
        if value.shape != self.shape:
            raise ShapeError(f"argument {self.describe()} was given an array of shape "
                             f"{value.shape}")
        flags = value.flags
        if flags.c_contiguous and flags.aligned:
            return value
        return np.array(value, order="C", copy=True)

    def out(self, value):
        """Check that ``value`` can receive this output in place."""
        if not isinstance(value, np.ndarray):
            raise TegradError(f"out array for {self.describe()} must be a numpy array, got "
                              f"{type(value).__name__}")
        if value.dtype != self.dtype:
            raise DTypeError(f"out array for {self.describe()} has dtype {value.dtype}")
        if value.shape != self.shape:
            raise ShapeError(f"out array for {self.describe()} has shape {value.shape}")
        flags = value.flags
        if not (flags.c_contiguous and flags.aligned):
            raise TegradError(f"out array for {self.describe()} must be C-contiguous and "
                              f"aligned")
        if not flags.writeable:
            raise TegradError(f"out array for {self.describe()} is not writeable")
        return value


def check_count(in_specs, got, what="arguments"):
    if got != len(in_specs):
        names = ", ".join(s.name for s in in_specs)
        raise FeedError(f"the compiled function takes {len(in_specs)} {what} ({names}), "
                        f"got {got}")


def by_name(in_specs, arrays, named):
    """The arguments in input order, from positional ``arrays`` followed by ``named``
    ones (keyed by their placeholders' names).

    >>> specs = [ArraySpec("x", (2,), np.dtype("float32")),
    ...          ArraySpec("w", (2,), np.dtype("float32"))]
    >>> by_name(specs, (1,), {"w": 2})
    (1, 2)
    """
    order = [s.name for s in in_specs]
    if len(arrays) > len(order):
        check_count(in_specs, len(arrays) + len(named))
    if len(set(order)) != len(order):
        raise FeedError("the compiled function's inputs share names "
                        f"({', '.join(order)}): pass its arguments by position")
    given = dict(zip(order, arrays))
    for name, a in named.items():
        if name not in order:
            raise FeedError(f"the compiled function has no input named {name!r} (its inputs: "
                            f"{', '.join(order)})")
        if name in given:
            raise FeedError(f"the input {name!r} is given twice, by position and by name")
        given[name] = a
    missing = [n for n in order if n not in given]
    if missing:
        raise FeedError(f"the compiled function's input(s) {', '.join(map(repr, missing))} "
                        f"are not given (its inputs: {', '.join(order)})")
    return tuple(given[n] for n in order)


__all__ = ["ArraySpec", "by_name", "check_count"]
