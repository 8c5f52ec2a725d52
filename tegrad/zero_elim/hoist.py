"""Loop-invariant reductions become stages of their own.

A reduction inside a stage that depends on only some of the stage's axes is computed
once per value of those axes instead of once per output point: ``dx[i, j] = ... /
sum(e[i, r], r)`` reads ``dx_r0[i]``, a new stage ``dx_r0[i] = sum(e[i, r], r)``.
Only reductions whose reads are provably in bounds over the whole range of those axes
are moved (a reduction in an untaken select branch may read out of bounds).

>>> import tegrad as tg
>>> x = tg.placeholder((3, 4), name="x")
>>> r = tg.reduce_axis((0, 4), name="r")
>>> t = tg.compute((3, 4), lambda i, j: x[i, j] / tg.sum(x[i, r], axis=r), name="t")
>>> body, stages = hoist_invariant_reductions(t.op.name, t.op.axes, t.op.body)
>>> str(body), tg.format(stages[0]).splitlines()[-1]
('x[i, j] / t_r0[i]', 't_r0[i] = sum(x[i, r], r in [0, 4))')
"""
from __future__ import annotations

from tegrad.ir.expr import Read, Reduce, Select, structural_equal
from tegrad.ir.mapper import IdentityMapper, children, free_var_names, walk
from tegrad.ir.tensor import compute_stage
from tegrad.analysis.affine import conjuncts, to_constraint
from tegrad.analysis.intervals import axis_range, indices_inside


def _maximal_reductions(body):
    """Reductions of ``body`` not nested in another one nor under an affine guard.

    A reduction in a select branch taken only where an index condition holds runs at
    those points only; computed as a stage of its own it would run everywhere.
    """
    out, stack = [], [body]
    while stack:
        e = stack.pop()
        if type(e) is Reduce:
            out.append(e)
            continue
        if type(e) is Select and any(to_constraint(c) is not None for c in conjuncts(e.cond)):
            stack.append(e.cond)
            continue
        stack.extend(children(e))
    return out


def _reads_in_bounds(red, ranges):
    ranges = dict(ranges)
    for node in walk(red):
        if type(node) is Reduce:
            for ax in node.axes:
                r = axis_range(ax, ranges)
                if r is None:
                    return False
                old = ranges.get(ax.name)
                ranges[ax.name] = r if old is None else (min(old[0], r[0]), max(old[1], r[1]))
    return all(indices_inside(node.indices, node.tensor.shape, ranges)
               for node in walk(red) if type(node) is Read)


class _Replace(IdentityMapper):
    def __init__(self, table):
        self.table = table

    def map_reduce(self, e, *args):
        for red, read in self.table:
            if red is e or structural_equal(red, e):
                return read
        return super().map_reduce(e)


def hoist_invariant_reductions(name, axes, body):
    """``(body, new stages)``: reductions over fewer than all axes read from new stages."""
    axis_names = [ax.name for ax in axes]
    ranges = {ax.name: (ax.lo.value, ax.lo.value + ax.extent.value - 1) for ax in axes}
    table, stages = [], []
    for red in _maximal_reductions(body):
        used = free_var_names(red)
        if len(used) >= len(axis_names) or any(structural_equal(red, r) for r, _ in table):
            continue
        if not _reads_in_bounds(red, ranges):
            continue
        kept = tuple(ax for ax in axes if ax.name in used)
        stage_name = f"{name}_r{len(stages)}"
        shape = tuple(ax.extent.value for ax in kept)
        stage = compute_stage(stage_name, kept, red)
        stages.append(stage)
        table.append((red, Read(stage, tuple(ax.var for ax in kept), red.dtype)))
    if not table:
        return body, []
    return _Replace(table)(body), stages
