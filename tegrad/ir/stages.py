"""Dispatch on the kind of a tensor's stage: placeholder, compute, scatter-add or scan.

A :class:`StageMapper` calls ``map_placeholder``, ``map_compute``, ``map_scatter`` or
``map_scan`` with the tensor; passes over programs subclass it instead of testing ``t.op``'s class.

>>> import tegrad as tg
>>> class Kind(StageMapper):
...     def map_placeholder(self, t): return "input"
...     def map_compute(self, t): return "compute"
...     def map_scatter(self, t): return "scatter"
...     def map_scan(self, t): return "scan"
>>> x = tg.placeholder((2,), name="x")
>>> Kind()(x), Kind()(tg.compute((2,), lambda i: x[i] * 2.0))
('input', 'compute')
"""
from __future__ import annotations

from tegrad.ir.expr import TupleReduce
from tegrad.ir.mapper import Dispatcher
from tegrad.ir.tensor import ComputeOp, PlaceholderOp, ScanOp, ScatterOp


class StageMapper(Dispatcher):
    """Dispatch ``self(t, *args)`` to ``self.map_<stage kind>(t, *args)``."""

    _method_names = {PlaceholderOp: "map_placeholder", ComputeOp: "map_compute",
                     ScatterOp: "map_scatter", ScanOp: "map_scan"}

    def __call__(self, t, *args):
        return self.method_for(type(t.op), t)(t, *args)


def is_placeholder(t):
    """Whether ``t`` is an input of the program (fed, not computed)."""
    return type(t.op) is PlaceholderOp


def compute_body(t):
    """The body of the compute stage of ``t``; None for the other stage kinds."""
    return t.op.body if type(t.op) is ComputeOp else None


def tuple_group(t):
    """For a stage computing a component of a reduction of a tuple, a key shared by the
    stages computing the components of the same reduction over the same domain (one
    loop nest computes them all); None for any other stage.

    >>> import tegrad as tg
    >>> x = tg.placeholder((3, 4), name="x")
    >>> k = tg.reduce_axis((0, 4), name="k")
    >>> pair = tg.comm_reducer(lambda a, b: (a[0] + b[0], a[1] * b[1]),
    ...                        lambda t0, t1: (0.0, 1.0), name="sum_prod")
    >>> s, p = tg.compute((3,), lambda i: pair((x[i, k], x[i, k]), axis=k))
    >>> tuple_group(s) == tuple_group(p), tuple_group(x)
    (True, None)
    """
    body = compute_body(t)
    if type(body) is not TupleReduce:
        return None
    return (t.shape, tuple(ax.name for ax in t.op.axes), body.component(0))


def output_axis_names(t):
    """The names of the axes of ``t``'s stage that index its output (None for a scatter or
    a placeholder, whose output has no named axes)."""
    return [ax.name for ax in t.op.axes] if type(t.op) is ComputeOp else None


def stage_exprs(t):
    """The expressions of the stage of ``t``: a compute's body; each scatter target's; a
    scan's source."""
    return _StageExprs()(t)


class _StageExprs(StageMapper):
    def map_placeholder(self, t):
        return []

    def map_compute(self, t):
        return [t.op.body]

    def map_scatter(self, t):
        return t.op.exprs()

    def map_scan(self, t):
        return [t.op.source]


__all__ = ["StageMapper", "compute_body", "is_placeholder", "output_axis_names", "stage_exprs",
           "tuple_group"]
