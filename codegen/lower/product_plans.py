"""Detection of contractions from a stage's access pattern, and their matrix-product plan.

A stage is a *contraction* when its body is (up to an epilogue of the output's axes, see
below) a ``sum`` reduction, over rectangular axes, of a product of two reads, possibly
under casts, whose indices are affine (no ``//`` or ``%``) in the stage's axes, or (for a
reduction without a guard) whose row-major element offset is, every index staying inside
its dimension: a reshape's unravelled index ``x[n, k // 676, (k // 26) % 26, k % 26]``
is element ``6760 n + k``. Each axis
then has a role, read off the element strides of the two reads (a read's stride for an
axis is the sum over its index dimensions of the axis's coefficient times that
dimension's row-major stride):

- ``m``: an output axis read by the first operand only;
- ``n``: an output axis read by the second operand only;
- ``batch``: an output axis read by both;
- ``k``: a reduce axis read by both.

So ``dense``, ``matmul``, a batched matmul, a transposed operand and a user's own
einsum-like stage are recognised alike, whatever they are called. Refused (``None``):
other reducers, a reduce axis read by one operand only, an output axis read by neither,
non-affine or data-dependent indices, reads that can leave their tensor (unless the
reduction has a ``where`` guard), non-constant reduction bounds, anything but a product
of two reads.

The reduction's ``where`` condition is kept as :attr:`Contraction.guard`; when it only
says that one operand's read is inside its tensor (conv2d's padding), that operand is
described over its zero-padded array (:attr:`Operand.padding`), which the plan reads;
an expression around the reduction that uses only the output's axes (``dense``'s bias)
is kept as :attr:`Contraction.epilogue`, with the reduced value as the variable
:data:`ACC`. :func:`gemm_plan` maps a guard-free contraction onto one
:class:`gemm.GemmSpec` (axes that do not merge into one strided axis become offset
tables).

This module detects contractions (:func:`detect_contraction`) and is where lowering
finds what plans their products, each in a module of its own:

- :mod:`.contraction_operands`: the :class:`Contraction` and :class:`Operand` records,
  the operands read off a product's two reads;
- :mod:`.reduction_bounds`: reductions over bounds that depend on the output's axes
  rewritten over constant ranges (:func:`constant_bounds`), a sum of one read as a
  product with ones (:func:`times_ones`);
- :mod:`.invariant_axes`: stages computed once without the output axes they do not use
  (:func:`drop_invariant_axes`, :func:`drop_invariant_scatter_axes`);
- :mod:`.divided_axes`: stages whose output axes appear under ``//`` or ``%``, split into
  affine ones (:func:`residue_classes`, :func:`split_axes`);
- :mod:`.gemm_plans`: a contraction's plan as one gemm (:func:`gemm_plan`,
  :func:`best_gemm_plan`).

>>> import tegrad as tg
>>> a = tg.placeholder((8, 3), name="a"); b = tg.placeholder((3, 5), name="b")
>>> c = detect_contraction(tg.ops.matmul(a, b))
>>> c.m_axes, c.n_axes, c.k_axes
(('ax0',), ('ax1',), ('rk',))
>>> c.a.strides
{'ax0': 3, 'rk': 1}
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir import reduction as _red
from tegrad.ir.expr import Const, Reduce, Var
from tegrad.ir.mapper import IdentityMapper, free_var_names, walk
from tegrad.ir.tensor import ComputeOp

from tegrad.codegen.tuning import MIN_PRODUCT_OUTPUTS
from tegrad.codegen.lower.contraction_operands import (Contraction, Operand, flat_range,
                                                       guard_padding, index_ranges,
                                                       product_factors, read_operand,
                                                       row_major_strides)
from tegrad.codegen.lower.divided_axes import ResidueClass, residue_classes, split_axes
from tegrad.codegen.lower.gemm_plans import GemmPlan, best_gemm_plan, gemm_plan
from tegrad.codegen.lower.invariant_axes import (drop_invariant_axes,
                                                 drop_invariant_scatter_axes)
from tegrad.codegen.lower.reduction_bounds import constant_bounds, times_ones

__all__ = ["ACC", "MIN_PRODUCT_OUTPUTS", "Contraction", "GemmPlan", "Operand",
           "ResidueClass", "best_gemm_plan", "constant_bounds", "detect_contraction",
           "drop_invariant_axes", "drop_invariant_scatter_axes", "gemm_plan",
           "residue_classes", "row_major_strides", "split_axes", "times_ones"]

#: the name of the reduced value in :attr:`Contraction.epilogue`
ACC = "_contraction_acc"


def detect_contraction(tensor):
    """The :class:`Contraction` that ``tensor``'s stage computes, or None."""
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return None
    reduce_, epilogue = _split_epilogue(op.body, [ax.name for ax in op.axes])
    if reduce_ is None or reduce_.reducer is not _red.sum or reduce_.init is not None:
        return None
    if not _dt.is_float(reduce_.dtype):
        return None
    extents, lows = {}, {}
    for ax in op.axes:
        extents[ax.name], lows[ax.name] = ax.extent.value, 0
    ones = None
    if product_factors(reduce_.source) is None:
        # the ones read by the reduction variables alone, else by what bounds them, else
        # by both
        for with_bounds in (False, True, "both"):
            times, ones = times_ones(reduce_, extents, with_bounds=with_bounds)
            if times is None:
                return None
            boxed = constant_bounds(times, extents)
            if boxed is not None:
                reduce_ = boxed
                break
        else:
            return None
    if not all(type(ax.lo) is Const and type(ax.extent) is Const for ax in reduce_.axes):
        reduce_ = constant_bounds(reduce_, extents)
        if reduce_ is None:
            return None
    for ax in reduce_.axes:
        if ax.extent.value < 1:
            return None
        extents[ax.name], lows[ax.name] = ax.extent.value, ax.lo.value
    factors = product_factors(reduce_.source)
    if factors is None:
        return None
    guard = reduce_.where
    if type(guard) is Const and guard.value is True:
        guard = None
    ranges = [index_ranges(read, extents, lows) for read, _ in factors]
    # Without a guard, an operand may be read through its row-major offset alone.
    flat = [rng is None and guard is None for rng in ranges]
    ranges = [flat_range(read, extents, lows) if f else rng
              for (read, _), rng, f in zip(factors, ranges, flat)]
    if None in ranges:
        return None
    paddings = [None, None]
    if guard is not None:
        found = guard_padding(guard, [read for read, _ in factors], ranges)
        if found is not None:
            which, pads = found
            paddings[which] = pads
    operands = []
    for (read, dtype), rng, pads, f in zip(factors, ranges, paddings, flat):
        # Under a guard (conv2d's padding) a read may leave its tensor where it fails.
        operand = read_operand(read, dtype, rng, lows, pads, guarded=guard is not None,
                               flat=f)
        if operand is None:
            return None
        operands.append(operand)
    a, b = operands
    data = [ax.name for ax in op.axes]
    roles = {"m": [], "n": [], "batch": [], "k": []}
    for name in data:
        in_a, in_b = a.strides.get(name, 0) != 0, b.strides.get(name, 0) != 0
        if not (in_a or in_b):
            return None
        roles["batch" if in_a and in_b else "m" if in_a else "n"].append(name)
    for ax in reduce_.axes:
        # (an axis of one value may have stride 0: its strides can cancel)
        if extents[ax.name] > 1 and (a.strides.get(ax.name, 0) == 0
                                     or b.strides.get(ax.name, 0) == 0):
            return None
        roles["k"].append(ax.name)
    out_strides = dict(zip(data, row_major_strides(tensor.shape)))
    return Contraction(tensor, a, b, tuple(roles["m"]), tuple(roles["n"]),
                       tuple(roles["batch"]), tuple(roles["k"]), extents, lows, out_strides,
                       reduce_.dtype, guard, epilogue, ones)


class _ReplaceReduce(IdentityMapper):
    def __init__(self, target, var):
        self.target, self.var = target, var

    def map_reduce(self, e, *args):
        return self.var if e == self.target else e


def _split_epilogue(body, data_axes):
    """``(reduce, epilogue)``: the body's one reduction and the body around it (None when
    the body is the reduction), or ``(None, None)``."""
    if type(body) is Reduce:
        return body, None
    reductions = {node for node in walk(body) if type(node) is Reduce}  # structural
    if len(reductions) != 1:
        return None, None
    target = reductions.pop()
    epilogue = _ReplaceReduce(target, Var(ACC, target.dtype))(body)
    if not free_var_names(epilogue) <= set(data_axes) | {ACC}:
        return None, None
    return target, epilogue
