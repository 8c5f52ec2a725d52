"""A contraction's matrix-product plan: one :class:`GemmSpec` of the gemm kernel.

:func:`gemm_plan` maps a :class:`~tegrad.codegen.lower.contraction_operands.Contraction`
onto the kernel's batched product: the output's stride-1 axis is the kernel's column
axis, axes whose strides merge become one strided axis, the others offset tables.
:func:`best_gemm_plan` may see the output transposed instead, and refuses products too
small for the micro-kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tegrad.codegen.tuning import MAX_TABLE_ROWS, MIN_PRODUCT_OUTPUTS, TRANSPOSE_GAIN, WIDE_COLUMNS
from tegrad.codegen.kernels.gemm import GemmSpec
from tegrad.codegen.lower.contraction_operands import Contraction, row_major_strides


@dataclass(frozen=True, eq=False)
class GemmPlan:
    """A contraction as one :class:`GemmSpec`: call the kernel with ``lhs`` at element
    ``lhs_offset`` and ``rhs`` at ``rhs_offset`` (``swapped``: the contraction's second
    operand is the kernel's ``A``, since the output's stride-1 axis is an ``m`` axis)."""

    spec: GemmSpec
    lhs: object
    rhs: object
    lhs_offset: int
    rhs_offset: int
    swapped: bool
    #: zeros around each dimension of ``lhs``/``rhs`` (empty: none): the kernel reads
    #: a zero-padded copy, at ``lhs_offset``/``rhs_offset`` from its start
    lhs_padding: tuple = ()
    rhs_padding: tuple = ()


def _merge(axes, extents, stride_maps, order_by):
    """``(extent, [stride per map])`` of the axes taken as one row-major axis, or None.

    Axes are ordered by ``order_by``'s strides (descending); axes merge when for every map
    ``stride[outer] == stride[inner] * extent[inner]``.
    """
    if not axes:
        return 1, [0] * len(stride_maps)
    axes = sorted(axes, key=lambda v: -abs(order_by.get(v, 0)))
    for outer, inner in zip(axes, axes[1:]):
        for strides in stride_maps:
            if strides.get(outer, 0) != strides.get(inner, 0) * extents[inner]:
                return None
    extent = 1
    for v in axes:
        extent *= extents[v]
    return extent, [strides.get(axes[-1], 0) for strides in stride_maps]


def _contiguous_run(axes, extents, out):
    """The axes of ``axes`` that, with the last (stride-1) one, make one row-major run of
    the output (``out[outer] == out[inner] * extent[inner]``), outermost first."""
    axes = sorted(axes, key=lambda v: -abs(out.get(v, 0)))
    if not axes or out.get(axes[-1]) != 1:
        return axes[-1:]
    run = [axes[-1]]
    for outer in reversed(axes[:-1]):
        if out[outer] != out[run[0]] * extents[run[0]]:
            break
        run.insert(0, outer)
    return run


def _table(axes, extents, stride_maps, order_by):
    """Offset rows ``(sum(i_v * s[v]) for s in stride_maps)`` for every index of ``axes``
    (row-major, axes ordered by ``order_by``'s strides, descending), or None if too many."""
    axes = sorted(axes, key=lambda v: -abs(order_by.get(v, 0)))
    if math.prod(extents[v] for v in axes) > MAX_TABLE_ROWS:
        return None
    rows = np.zeros((1, len(stride_maps)), dtype=np.int64)
    for v in axes:
        steps = np.array([s.get(v, 0) for s in stride_maps], dtype=np.int64)
        rows = (rows[:, None, :] + np.arange(extents[v], dtype=np.int64)[None, :, None]
                * steps).reshape(-1, len(stride_maps))
    return tuple(map(tuple, rows.tolist()))


def best_gemm_plan(c):
    """``(plan, order)``: :func:`gemm_plan` of ``c``, or of ``c`` with its output seen
    transposed so that the longest ``m`` or ``n`` axis is its stride-1 axis, when that
    makes each call :data:`TRANSPOSE_GAIN` times larger and ``c``'s own plan has fewer
    than :data:`WIDE_COLUMNS` columns (``order``: the output axes'
    positions in the transposed array, row-major, None when not transposed: the plan
    then writes ``out.transpose(order)``). ``(None, None)`` when there is no plan, or
    when its calls have fewer than :data:`MIN_PRODUCT_OUTPUTS` outputs, one row or one
    column.

    >>> import tegrad as tg
    >>> from tegrad.codegen.lower.product_plans import detect_contraction
    >>> h = tg.placeholder((9, 64, 2), name="h"); x = tg.placeholder((9, 32), name="x")
    >>> k = tg.reduce_axis((0, 9), name="k")
    >>> t = tg.compute((64, 32, 2), lambda f, c, r: tg.sum(h[k, f, r] * x[k, c], axis=k))
    >>> plan, order = best_gemm_plan(detect_contraction(t))
    >>> (plan.spec.batch, plan.spec.m, plan.spec.n), order
    ((1, 32, 128), (1, 2, 0))
    """
    plan, order = _best_gemm_plan(c)
    if plan is None or plan.spec.m * plan.spec.n < MIN_PRODUCT_OUTPUTS or \
            min(plan.spec.m, plan.spec.n) == 1:
        return None, None
    return plan, order


def _best_gemm_plan(c):
    plan = gemm_plan(c)
    if c.epilogue is not None or c.output.dtype != c.dtype or len(c.out_strides) < 2 or (
            plan is not None and plan.spec.n >= WIDE_COLUMNS):
        return plan, None
    names = list(c.out_strides)
    longest = max(c.m_axes + c.n_axes, key=lambda v: c.extents[v], default=None)
    if longest is None or longest == names[-1]:
        return plan, None
    order = tuple(k for k, v in enumerate(names) if v != longest) + (names.index(longest),)
    shape = [c.extents[names[k]] for k in order]
    out = dict(zip((names[k] for k in order), row_major_strides(shape)))
    turned = gemm_plan(Contraction(c.output, c.a, c.b, c.m_axes, c.n_axes, c.batch_axes,
                                   c.k_axes, c.extents, c.lows, out, c.dtype, c.guard,
                                   c.epilogue, c.ones))
    if turned is None:
        return plan, None
    if plan is not None and turned.spec.m * turned.spec.n < \
            TRANSPOSE_GAIN * plan.spec.m * plan.spec.n:
        return plan, None
    return turned, order


def gemm_plan(c):
    """The :class:`GemmPlan` of contraction ``c``, or None when it has a guard, casts, a
    dtype the micro-kernel lacks, or a batch axis as the output's stride-1 axis.

    The output's stride-1 axis is the kernel's column axis ``n`` (the other ``n`` axes
    join it when their strides merge into one, else they become batch axes); the ``m``
    axes merge likewise, or the longest is ``m`` and the others are batch axes. Batch
    and reduction axes that do not merge are given by offset tables.
    """
    if c.guard is not None and not (c.a.padding or c.b.padding):
        return None
    if c.a.has_cast or c.b.has_cast:
        return None
    if c.dtype not in ("float32", "float64") or c.a.tensor.dtype != c.dtype \
            or c.b.tensor.dtype != c.dtype:
        return None
    a, b, m_axes, n_axes = c.a, c.b, c.m_axes, c.n_axes
    out, ext = c.out_strides, c.extents
    innermost = list(out)[-1] if out else None  # the last axis: stride 1, row-major
    swapped = innermost in m_axes
    if swapped:
        a, b, m_axes, n_axes = b, a, n_axes, m_axes
    elif innermost is not None and innermost not in n_axes:
        return None
    batch_axes = list(c.batch_axes)
    # the n axes that are one run of C's columns with its stride-1 axis; the others are
    # batch axes; B reads the run with one stride, or through a column offset table
    n_group = _contiguous_run(n_axes, ext, out)
    batch_axes += [v for v in n_axes if v not in n_group]
    n_merged = _merge(n_group, ext, [b.strides, out], out)
    n_offsets = None
    if n_merged is None:
        rows = _table(n_group, ext, [b.strides], out)
        if rows is None:
            batch_axes += [v for v in n_group if v != innermost]
            n_merged = _merge((innermost,), ext, [b.strides, out], out)
        else:
            n_offsets = tuple(r[0] for r in rows)
            n_merged = (len(rows), [0, 1])
    m_merged = _merge(m_axes, ext, [a.strides, out], out)
    if m_merged is None:
        longest = max(m_axes, key=lambda v: ext[v])
        batch_axes += [v for v in m_axes if v != longest]
        m_merged = _merge((longest,), ext, [a.strides, out], out)
    (n, (bn, cn)), (m, (am, cm)) = n_merged, m_merged
    if n > 1 and cn != 1:
        return None
    maps = [a.strides, b.strides, out]
    batch_merged = _merge(batch_axes, ext, maps, out)
    batch_offsets = None
    if batch_merged is None:
        batch_offsets = _table(batch_axes, ext, maps, out)
        if batch_offsets is None:
            return None
        batch_merged = (len(batch_offsets), [0, 0, 0])
    k_merged = _merge(c.k_axes, ext, [a.strides, b.strides], a.strides)
    k_offsets = None
    if k_merged is None:
        k_offsets = _table(c.k_axes, ext, [a.strides, b.strides], a.strides)
        if k_offsets is None:
            return None
        k_merged = (len(k_offsets), [0, 0])
    (batch, (ap, bp, cp)), (k, (ak, bk)) = batch_merged, k_merged
    spec = GemmSpec(c.dtype, batch, m, n, k, (ap, am, ak), (bp, bk, bn), (cp, cm, 1),
                    k_offsets=k_offsets, batch_offsets=batch_offsets, n_offsets=n_offsets)
    return GemmPlan(spec, a.tensor, b.tensor, a.offset, b.offset, swapped, a.padding,
                    b.padding)
