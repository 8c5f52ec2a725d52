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


__all__ = ["StageMapper", "compute_body", "is_placeholder", "output_axis_names", "stage_exprs"]
