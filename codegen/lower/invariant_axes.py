"""Stages computed once without the output axes their values do not depend on, then
copied along them.

The gradients of a convolution for a head of ones are the same for every image or every
output channel (:func:`drop_invariant_axes`); the gradient of ``take`` for such a head
adds ones along whole rows (:func:`drop_invariant_scatter_axes`). Each function gives the
smaller stage and the output dimensions it keeps: the stage's values are the original's,
``tensor[x] == stage[x[kept]]``.
"""
from __future__ import annotations

from tegrad.ir.expr import Const, Reduce, Var
from tegrad.ir.mapper import free_var_names, walk
from tegrad.ir.tensor import (ComputeOp, ScatterOp, ScatterTarget, compute_stage,
                               scatter_stage)


def drop_invariant_axes(tensor):
    """``(stage, kept)``: the compute stage ``tensor`` without the output axes of extent
    above one that its body does not use, and the positions of the axes it keeps; None
    when there is no such axis or no reduction to save.

    The gradient of a convolution for a head of ones is the same for every image (data
    gradient) or every output channel (weight gradient): computed once over the other
    axes, then copied, it costs that axis's extent less. The identity preserved:
    ``tensor[x] == stage[x[kept]]`` for every ``x``.

    >>> import tegrad as tg
    >>> w = tg.placeholder((3, 4), name="w"); k = tg.reduce_axis((0, 3), name="k")
    >>> t = tg.compute((5, 4), lambda i, j: tg.sum(w[k, j], axis=k))
    >>> s, kept = drop_invariant_axes(t); s.shape, kept
    ((4,), (1,))
    """
    op = tensor.op
    if not isinstance(op, ComputeOp) or not any(type(n) is Reduce for n in walk(op.body)):
        return None
    used = free_var_names(op.body)
    kept = tuple(k for k, ax in enumerate(op.axes)
                 if ax.name in used or ax.extent.value == 1)
    if len(kept) == len(op.axes):
        return None
    return compute_stage(f"{tensor.name}_once", [op.axes[k] for k in kept], op.body), kept


def drop_invariant_scatter_axes(tensor):
    """``(stage, kept)``: the scatter stage ``tensor`` without the axes that only run
    along an output dimension of their own, and the positions of the output dimensions
    it keeps; None when there is no such axis.

    An axis ``a`` of the scatter's domain qualifies when every target writes at index
    ``a`` in one dimension ``d`` (the same for all, of the axis's extent), uses ``a``
    nowhere else, and the stage has no ``init``: every line along ``d`` then receives
    the same sums. The gradient of ``take`` for a head of ones adds ``1.0`` along whole
    rows (``dx[idx[i], j] += 1.0``): it counts each row's takes once, then copies the
    count along the row. The identity preserved: ``tensor[x] == stage[x[kept]]``.

    >>> import tegrad as tg
    >>> x = tg.placeholder((5, 3), name="x")
    >>> idx = tg.placeholder((4,), dtype="int64", name="idx")
    >>> dx = tg.differentiate(tg.ops.take(x, idx, axis=0), [x]).result[0]
    >>> s, kept = drop_invariant_scatter_axes(dx); s.shape, kept
    ((5,), (0,))
    """
    op = tensor.op
    if not isinstance(op, ScatterOp) or op.init is not None:
        return None
    dropped = {}  # axis position -> output dimension
    for k, ax in enumerate(op.axes):
        dims = set()
        for target in op.targets:
            at = [d for d, index in enumerate(target.indices)
                  if type(index) is Var and index.name == ax.name]
            others = [e for d, e in enumerate(target.exprs()) if d not in at]
            if len(at) != 1 or any(ax.name in free_var_names(e) for e in others):
                break
            dims.add(at[0])
        else:
            d = dims.pop() if len(dims) == 1 else None
            if d is not None and tensor.shape[d] == ax.extent.value and \
                    type(ax.lo) is Const and ax.lo.value == 0 and d not in dropped.values():
                dropped[k] = d
    if not dropped:
        return None
    lost = set(dropped.values())
    kept = tuple(d for d in range(len(tensor.shape)) if d not in lost)
    targets = [ScatterTarget([target.indices[d] for d in kept], target.value, target.where)
               for target in op.targets]
    axes = [ax for k, ax in enumerate(op.axes) if k not in dropped]
    return scatter_stage(f"{tensor.name}_once", [tensor.shape[d] for d in kept], axes,
                         targets), kept
