"""The cost model: exact counts of the work a program's stages do.

``iterations`` counts integer points iterated: every output point of every stage, plus
every point of every reduction domain reached (bounds, and the affine part of ``where``
and of enclosing selects, which loops generated from the domain do not visit; a
data-dependent condition is tested inside the loop, so its points count). ``flops``
counts floating-point operations (arithmetic, intrinsic calls, reduction combines) at
those points; ``memory`` counts the elements of the intermediate stages (every computed
stage except the requested tensors themselves).

The counts are computed exactly by evaluating counting expressions with the reference
evaluator, so non-rectangular domains are counted point by point.

>>> import tegrad as tg
>>> A = tg.placeholder((8, 4), name="A")
>>> B = tg.placeholder((4, 6), name="B")
>>> k = tg.reduce_axis((0, 4), name="k")
>>> C = tg.compute((8, 6), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> c = cost(C)
>>> c.iterations, c.flops, c.memory
(240, 384, 0)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import And, Binary, Call, Const, Neg, Or, Reduce, Select
from tegrad.ir.graph import tensor_list, topological_order
from tegrad.ir.mapper import children
from tegrad.ir.tensor import ComputeOp, PlaceholderOp, ScanOp, ScatterOp
from tegrad.analysis.affine import conjunction, conjuncts, to_constraint


@dataclass(frozen=True)
class Cost:
    """Exact work counts; see the module docstring."""

    iterations: int
    flops: int
    memory: int

    def __add__(self, other):
        return Cost(self.iterations + other.iterations, self.flops + other.flops,
                    self.memory + other.memory)

    def __str__(self):
        return f"iterations={self.iterations}, flops={self.flops}, memory={self.memory}"


def _affine_part(cond):
    """The conjuncts of ``cond`` over integers only (data-dependent ones dropped)."""
    if cond is None:
        return None
    kept = [c for c in conjuncts(cond) if to_constraint(c) is not None]
    return conjunction(kept) if kept else None


def local_flops(e):
    """Float operations of ``e`` outside its reductions, and the reductions reached."""
    count, reductions = 0, []
    stack = [(e, None)]
    while stack:
        node, guard = stack.pop()
        t = type(node)
        if t is Reduce:
            reductions.append((node, guard))
            continue
        if _dt.is_float(node.dtype) and t in (Binary, Neg, Call):
            count += 1
        if t is Select:
            stack.append((node.cond, guard))
            affine = _affine_part(node.cond)
            t_guard = affine if guard is None else (guard if affine is None else
                                                     And(guard, affine))
            stack.append((node.true_value, t_guard))
            stack.append((node.false_value, guard))
            continue
        for c in children(node):
            stack.append((c, guard))
    return count, reductions


def _counting_exprs(e):
    """``(points, flops)`` expressions: work done below one evaluation of ``e``."""
    flops, reductions = local_flops(e)
    points_total, flops_total = Const(0, "int64"), Const(flops, "int64")
    for red, guard in reductions:
        inner_points, inner_flops = _counting_exprs(red.source)
        one = Const(1, "int64")
        where = _affine_part(red.where)
        per_point = Binary("add", one, inner_points, "int64")
        flops_point = Binary("add", one, inner_flops, "int64")
        points = Reduce(_sum(), per_point, red.axes, where, None, "int64")
        fl = Reduce(_sum(), flops_point, red.axes, where, None, "int64")
        if guard is not None:
            points = Select(guard, points, Const(0, "int64"), "int64")
            fl = Select(guard, fl, Const(0, "int64"), "int64")
        points_total = Binary("add", points_total, points, "int64")
        flops_total = Binary("add", flops_total, fl, "int64")
    return points_total, flops_total


def _sum():
    from tegrad.ir.reduction import sum as sum_reducer
    return sum_reducer


def _count_over(axes, shape, exprs):
    """Sum each expression over the index space of ``axes``."""
    from tegrad.reference.evaluator import _StageEvaluator, _Scope, _index_arrays
    ev = _StageEvaluator({})
    ndim = len(shape)
    scope = _Scope(_index_arrays(axes, ndim), ndim, None)
    out = []
    for e in exprs:
        value = np.broadcast_to(ev(e, scope), shape)
        out.append(int(value.sum(dtype=np.int64)))
    return out


def stage_cost(t):
    """The iterations and flops of the stage of ``t`` alone."""
    op = t.op
    if isinstance(op, ComputeOp):
        points, flops = _counting_exprs(op.body)
        extra_points, extra_flops = _count_over(op.axes, t.shape, [points, flops])
        size = t.size
        return Cost(size + extra_points, extra_flops, 0)
    if isinstance(op, ScatterOp):
        # one pass over the domain; a point counts when some target's affine condition
        # holds there, and each target costs its value and an accumulation where it does
        one, zero = Const(1, "int64"), Const(0, "int64")
        guards = [_affine_part(target.where) for target in op.targets]
        if any(g is None for g in guards):
            pts = one
        else:
            any_guard = guards[0]
            for g in guards[1:]:
                any_guard = Or(any_guard, g)
            pts = Select(any_guard, one, zero, "int64")
        counts = [pts]
        for target, guard in zip(op.targets, guards):
            inner_points, inner_flops = _counting_exprs(target.value)
            per = Binary("add", one, inner_flops, "int64")
            counts.append(per if guard is None else Select(guard, per, zero, "int64"))
            counts.append(inner_points if guard is None else
                          Select(guard, inner_points, zero, "int64"))
        domain = tuple(ax.extent.value for ax in op.axes)
        values = _count_over(op.axes, domain, counts)
        points = values[0] + sum(values[2::2])
        return Cost(points, sum(values[1::2]), 0)
    if isinstance(op, ScanOp):
        # n points per scan line of n elements: one combine and the source at each
        points, flops = _counting_exprs(op.source)
        extra_points, extra_flops = _count_over(op.axes, t.shape, [points, flops])
        return Cost(t.size + extra_points, t.size + extra_flops, 0)
    return Cost(0, 0, 0)


def cost(tensors):
    """Exact counts for all stages needed to compute ``tensors`` (see module docstring)."""
    outputs = tensor_list(tensors)
    wanted = {id(t) for t in outputs}
    total = Cost(0, 0, 0)
    for t in topological_order(outputs):
        if isinstance(t.op, PlaceholderOp):
            continue
        c = stage_cost(t)
        memory = 0 if id(t) in wanted else t.size
        total = total + Cost(c.iterations, c.flops, memory)
    return total

