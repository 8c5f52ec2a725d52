"""Stages whose output axes appear under ``//`` or ``%``, rewritten as stages whose
indices are affine.

A strided convolution's data gradient reads ``i2 // 2``: split by residue class of its
output axes (:func:`residue_classes`), each class is an affine stage, a contraction of
its own. A grouped convolution's output channel ``ff`` appears as ``ff // (O/G)``:
split in two axes, the group and the channel in it (:func:`split_axes`), the stage is one
contraction over the same memory.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from tegrad.analysis.affine import to_affine
from tegrad.ir.expr import Binary, Const, IterVar, Var
from tegrad.ir.mapper import free_var_names, substitute, walk
from tegrad.ir.tensor import ComputeOp, compute_stage

from tegrad.codegen.tuning import MAX_RESIDUE_CLASSES
from tegrad.codegen.lower.index_forms import CanonicalIndices, ExactDivisions


@dataclass(frozen=True, eq=False)
class ResidueClass:
    """One part of a stage split by output residues: ``stage`` computes the elements of
    the original output at ``axis == step * q + residue`` (``q`` the part's axis, same
    name and position) for each ``(position, step, residue)`` of ``splits``."""

    stage: object
    splits: tuple


def residue_classes(tensor):
    """The compute stage ``tensor`` split into the residue classes of its output axes
    that appear under ``// s`` or ``% s``, or None (no such axis, or too many classes).

    A strided convolution's data gradient reads its output gradient at ``i2 // 2``; at
    ``i2 == 2 * q + p`` that is ``q`` (``(2*q + p) // 2 == q + p // 2`` for a constant
    ``p``), so each class is an affine stage, a contraction of its own. The identity
    preserved: ``part[..., q, ...] == tensor[..., step * q + residue, ...]``.

    >>> import tegrad as tg
    >>> a = tg.placeholder((4,), name="a")
    >>> t = tg.compute((5,), lambda i: a[i // 2] * 2.0, name="t")
    >>> [(str(c.stage.op.body), c.stage.shape) for c in residue_classes(t)]
    [('a[i] * 2.0', (3,)), ('a[i] * 2.0', (2,))]
    """
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return None
    names = {ax.name: k for k, ax in enumerate(op.axes)}
    steps = {}
    for node in walk(op.body):
        if type(node) is not Binary or node.op not in ("floordiv", "floormod") \
                or type(node.b) is not Const or not isinstance(node.b.value, int) \
                or node.b.value < 2:
            continue
        aff = to_affine(node.a)
        if aff is None or not aff.is_linear:
            continue
        for name, coeff in aff.as_dict().items():
            if name in names and coeff % node.b.value:
                steps[name] = math.lcm(steps.get(name, 1), node.b.value)
    if not steps or math.prod(steps.values()) > MAX_RESIDUE_CLASSES:
        return None
    parts = []
    for residues in itertools.product(*(range(s) for s in steps.values())):
        mapping, axes, splits = {}, list(op.axes), []
        for (name, step), residue in zip(steps.items(), residues):
            k = names[name]
            ax = op.axes[k]
            extent = -(-(ax.extent.value - residue) // step)
            if extent < 1:
                break
            mapping[name] = ax.var * step + residue
            axes[k] = IterVar(ax.var, Const(0, ax.lo.dtype), Const(extent, ax.extent.dtype),
                              ax.kind)
            splits.append((k, step, residue))
        else:
            body = CanonicalIndices()(ExactDivisions()(substitute(op.body, mapping)))
            label = "_".join(str(r) for r in residues)
            parts.append(ResidueClass(compute_stage(f"{tensor.name}_r{label}", axes, body),
                                      tuple(splits)))
    return parts


def split_axes(tensor):
    """The compute stage ``tensor`` with each output axis ``v`` that appears as ``v // d``
    (``d`` dividing its extent) split in two, ``v == d * v_g + v`` (``v_g`` before
    ``v``, ``v`` now of extent ``d``), or None when there is none. The output's memory
    is the same, read in row-major order (a grouped convolution's output channel ``ff``
    is its group ``ff // (O/G)`` and the channel in it). The identity preserved:
    ``split[..., g, f, ...] == tensor[..., d * g + f, ...]``.

    >>> import tegrad as tg
    >>> a = tg.placeholder((2,), name="a")
    >>> t = tg.compute((6,), lambda i: a[i // 3] * 2.0, name="t")
    >>> s = split_axes(t); str(s.op.body), s.shape
    ('a[i_g] * 2.0', (2, 3))
    """
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return None
    extents = {ax.name: ax.extent.value for ax in op.axes}
    divisors = {}
    for node in walk(op.body):
        if type(node) is Binary and node.op == "floordiv" and type(node.b) is Const \
                and type(node.a) is Var and node.a.name in extents:
            d, extent = node.b.value, extents[node.a.name]
            if isinstance(d, int) and 1 < d < extent and extent % d == 0:
                if divisors.setdefault(node.a.name, d) != d:
                    return None
    if not divisors:
        return None
    taken = {ax.name for ax in op.axes} | free_var_names(op.body)
    axes, mapping, small = [], {}, {}
    for ax in op.axes:
        d = divisors.get(ax.name)
        if d is None:
            axes.append(ax)
            continue
        g_name = ax.name + "_g"
        if g_name in taken:
            return None
        g = Var(g_name, ax.var.dtype)
        axes += [IterVar(g, Const(0, ax.lo.dtype), Const(extents[ax.name] // d,
                                                         ax.extent.dtype), ax.kind),
                 IterVar(ax.var, Const(0, ax.lo.dtype), Const(d, ax.extent.dtype), ax.kind)]
        mapping[ax.name] = g * d + ax.var
        small[ax.name] = d
    body = ExactDivisions(small)(substitute(op.body, mapping))
    return compute_stage(tensor.name, axes, body)
