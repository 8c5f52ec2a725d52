"""Reads a program certainly makes outside a tensor, found without running it.

The evaluator raises where a read it evaluates is out of bounds, and so does compiled
code; a gradient need not: the adjoint of ``y[i] = x[i + 1]`` inverts the index onto
``x``'s own domain, where the point ``x[5]`` of a 5-element ``x`` does not exist, and
drops it. :func:`check_reads_inside` finds, before differentiating, a read the forward
program evaluates at every point of its domain (not inside a select's branch or under a
reduction's ``where``; every enclosing axis of constant bounds) whose index is a linear
form of the axes reaching outside its dimension: the program is invalid whatever the
data. Anything it cannot decide exactly (a guarded read, a division, a bound that
depends on another axis) it leaves to the evaluator.

>>> import tegrad as tg
>>> x = tg.placeholder((5,), name="x")
>>> y = tg.compute((5,), lambda i: x[i + 1], name="y")
>>> try:
...     check_reads_inside([y])
... except tg.OutOfBoundsError as e:
...     print(str(e).split(" in dimension")[0])
stage 'y' reads 'x' (shape (5,)) at index i + 1, which reaches 5
"""
from __future__ import annotations

from tegrad.ir.errors import OutOfBoundsError
from tegrad.ir.expr import Const, Read, Reduce, Select, TupleReduce
from tegrad.ir.graph import topological_order
from tegrad.ir.mapper import children
from tegrad.ir.stages import compute_body
from tegrad.analysis.affine import to_affine


def _linear_range(index, ranges):
    """Inclusive ``(lo, hi)`` that the index takes over the box ``ranges`` when it is a
    linear form of its variables (exact: a linear form reaches its extremes at the
    corners), else None."""
    form = to_affine(index)
    if form is None:
        return None
    lo = hi = form.constant
    for atom, c in form.terms:
        if type(atom) is not str or atom not in ranges:
            return None
        a, b = ranges[atom]
        lo, hi = lo + min(c * a, c * b), hi + max(c * a, c * b)
    return lo, hi


def _constant_box(axes):
    """``{name: (lo, hi)}`` of axes with constant bounds, None when one's bounds are not
    constants or its range is empty (no point evaluates what it encloses)."""
    box = {}
    for ax in axes:
        if type(ax.lo) is not Const or type(ax.extent) is not Const or ax.extent.value <= 0:
            return None
        box[ax.name] = (ax.lo.value, ax.lo.value + ax.extent.value - 1)
    return box


def reads_outside(t):
    """``(read, dimension, (lo, hi))`` of each read of the compute stage ``t`` that every
    point of its domain evaluates and whose index ranges outside the dimension read
    (module docstring); none for another stage kind."""
    body = compute_body(t)
    box = _constant_box(t.op.axes) if body is not None else None
    if box is None:
        return []
    out, seen = [], set()
    stack = [(body, box)]
    while stack:
        e, ranges = stack.pop()
        key = (id(e), id(ranges))
        if ranges is None or key in seen:
            continue
        seen.add(key)
        kind = type(e)
        if kind is Read:
            for d, (index, extent) in enumerate(zip(e.indices, e.tensor.shape)):
                span = _linear_range(index, ranges)
                if span is not None and (span[0] < 0 or span[1] >= extent):
                    out.append((e, d, span))
                    break
        if kind is Select:
            stack.append((e.cond, ranges))  # (the branches run where it says)
            continue
        if kind in (Reduce, TupleReduce):
            box = _constant_box(e.axes)
            every = None if box is None else {**ranges, **box}
            for ax in e.axes:
                stack += [(ax.lo, ranges), (ax.extent, ranges)]
            if e.where is not None:
                stack.append((e.where, every))
            sources = e.sources if kind is TupleReduce else (e.source,)
            stack += [(s, every if e.where is None else None) for s in sources]
            if kind is Reduce and e.init is not None:
                stack.append((e.init, ranges))
            continue
        stack += [(c, ranges) for c in children(e)]
    return out


def check_reads_inside(outputs):
    """Raise :class:`~tegrad.ir.errors.OutOfBoundsError` for the first read of the
    program computing ``outputs`` that :func:`reads_outside` finds, naming the stage,
    the tensor, the index and its range."""
    for t in topological_order(list(outputs)):
        for read, d, (lo, hi) in reads_outside(t):
            extent = read.tensor.shape[d]
            raise OutOfBoundsError(
                f"stage {t.name!r} reads {read.tensor.name!r} (shape {read.tensor.shape}) "
                f"at index {read.indices[d]}, which reaches {lo if lo < 0 else hi} in "
                f"dimension {d} (valid: 0 to {extent - 1}) at points of its domain that "
                f"evaluate it: the program reads outside the tensor (tg.evaluate raises "
                f"there too), and its gradient would drop those points")


__all__ = ["check_reads_inside", "reads_outside"]
