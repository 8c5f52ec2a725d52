"""A contraction stage as a call of the gemm kernel: :func:`lower_contraction`.

A compute stage with a :func:`~tegrad.codegen.lower.product_plans.gemm_plan` becomes

- per zero-padded operand (conv2d's padding): a ``temp`` buffer of the padded shape,
  filled by a loop nest (``pad[x] = src[x - low]`` inside, ``0`` around);
- one :class:`~tegrad.codegen.loops.nodes.MatrixProduct` writing the reduced values
  (into the output buffer, or a temp of the reduction's dtype when it differs);
- for an epilogue (``dense``'s bias, any function of the reduced value and the output
  axes): a loop nest over the output, ``out[x] = epilogue(acc[x], x)``.

Zero padding multiplies the other operand by zeros where the stage's guard skips the
term: the same sum while that operand is finite, but ``0 * inf`` is NaN. So when an
operand meets padding, the call runs only if that operand is all finite (checked at run
time, one pass over it), and the stage's own loops run otherwise.

A product whose output's stride-1 axis is narrow may write a temp holding the output
transposed, copied back (:func:`~tegrad.codegen.lower.product_plans.best_gemm_plan`). A
stage whose reduction does not use some output axes (a convolution's gradients for a
head of ones) is computed once without them, then copied along them (:class:`Broadcast`).

So it computes ``out[x] = epilogue(sum_k a(x, k) * b(x, k))``, the stage's value, with
the sum in the gemm kernel's order. A stage that is no contraction as written may be
one seen with an output axis split in two (a grouped convolution's channels: the same
memory), or be one per residue class of its strided output axes (a strided
convolution's data gradient: each class computed into a temp, then copied); see
:func:`contraction_plan`.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> a = tg.placeholder((8, 3), name="a"); b = tg.placeholder((3, 5), name="b")
>>> print(format_kernel(lower_program([a, b], [tg.ops.matmul(a, b)], name="mm",
...                                   contractions=True)))
kernel mm(float32 a[8][3], float32 b[3][5], float32 matmul[8][5]) {
  matmul = gemm(a, b; batch 1, m 8, n 5, k 3; strides A (0, 3, 1), B (0, 5, 1), C (0, 5, 1));
}
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tegrad.analysis.cost import stage_cost
from tegrad.ir import reduction as _red
from tegrad.ir.expr import And, Binary, Compare, Const, IterVar, Read, Reduce, Var, select
from tegrad.ir.builders import abs as _abs
from tegrad.ir.mapper import substitute, walk
from tegrad.ir.tensor import ComputeOp, ScatterOp, compute_stage, placeholder

from tegrad.codegen.lower.product_plans import (ACC, best_gemm_plan, detect_contraction,
                                                drop_invariant_axes,
                                                drop_invariant_scatter_axes,
                                                residue_classes, split_axes)
from tegrad.codegen.loops.mapper import block
from tegrad.codegen.loops.nodes import Accumulate, If, Load, MatrixProduct, Store
from tegrad.codegen.tuning import LOOP_COST, MAX_WHOLE_EXCESS, MIN_PRODUCT_ITERATIONS
from tegrad.codegen.lower.nest import INDEX, const
from tegrad.codegen.lower.stage import box_loops, lower_compute, lower_stage


def _plan_of(t, most_flops=None):
    """``(contraction, plan)`` of the stage ``t``, or None (also when its product would
    take more than ``most_flops``)."""
    c = detect_contraction(t)
    if c is None or (most_flops is not None and c.flops > most_flops):
        return None
    plan, order = best_gemm_plan(c)
    return None if plan is None else (c, _Transposed(plan, order) if order else plan)


@dataclass(frozen=True, eq=False)
class _Transposed:
    """A plan writing the output transposed (``out.transpose(order)``), into a temp."""

    plan: object
    order: tuple


@dataclass(frozen=True, eq=False)
class Broadcast:
    """A stage computed once without the output axes it does not use (``stage``, its
    axes at positions ``kept`` of the original's), then copied along them; ``found``
    is ``stage``'s own :func:`contraction_plan` (None: its loops)."""

    stage: object
    kept: tuple
    found: object


@dataclass(frozen=True, eq=False)
class SumOfProducts:
    """A stage ``out[x] = sum_k (a1 b1 + a2 b2 + ...)`` (a weight shared by several
    products: its gradient sums one product per use) as one product per term into the
    output, the first writing it and the others adding to it (``C += A B``): ``parts``
    are ``(stage, contraction, plan)`` of each term's own stage, over the same axes. The
    same sum, each term's products summed in the kernel's order, then the terms in order.
    """

    parts: tuple


def contraction_plan(t):
    """How ``t``'s stage runs on the gemm kernel, or None: ``[(stage, splits, contraction,
    plan), ...]``, the stage itself (``splits == ()``), or each of its residue classes
    (:func:`~tegrad.codegen.lower.product_plans.residue_classes`, a strided
    convolution's data gradient) when one has a plan (the others' contraction and plan
    are None: they run as loops); or a :class:`Broadcast` when the stage's reduction
    does not use some of its output axes, or it is a scatter adding the same along some
    (computed once, then copied:
    :func:`~tegrad.codegen.lower.product_plans.drop_invariant_scatter_axes`)."""
    dropped = drop_invariant_scatter_axes(t)
    if dropped is not None:
        return Broadcast(dropped[0], dropped[1], None)
    if isinstance(t.op, ScatterOp):
        seen = scatter_as_sum(t)
        return None if seen is None else _sum_of_products(seen)
    if not _sums(t):
        return None  # every plan computes a sum of products
    dropped = drop_invariant_axes(t)
    if dropped is None:
        return _whole_plan(t)
    stage, kept = dropped
    iterations = stage_cost(stage).iterations
    if iterations < MIN_PRODUCT_ITERATIONS:
        return Broadcast(stage, kept, None)
    inner = contraction_plan(stage)
    if inner is not None:
        return Broadcast(stage, kept, inner)
    whole = _whole_plan(t)
    if whole is None or iterations * LOOP_COST < _flops(whole):
        return Broadcast(stage, kept, None)
    return whole


def scatter_as_sum(t):
    """The scatter stage ``t`` as the compute stage of the same values, when it is a
    reduction written as a scatter: no ``init``, one unguarded target whose indices are
    distinct axes of its domain spanning the output's dimensions (``dw[i, k] += value``
    over ``(b, i, k)``); the other axes, of constant bounds, become the reduction's. So
    ``scatter_as_sum(t)[x] == t[x] == sum over the other axes of value``. None otherwise.

    >>> import tegrad as tg
    >>> from tegrad.ir.tensor import ScatterTarget, scatter_stage
    >>> from tegrad.ir.expr import Const, IterVar, Var
    >>> a = tg.placeholder((4, 3), name="a")
    >>> axes = [IterVar(Var(n), Const(0, "int64"), Const(e, "int64"), "data")
    ...         for n, e in (("b", 4), ("i", 3))]
    >>> s = scatter_stage("s", (3,), axes, [ScatterTarget([Var("i")], a[Var("b"), Var("i")])])
    >>> print(tg.format(scatter_as_sum(s)).splitlines()[-1])
    s[i] = sum(a[b, i], b in [0, 4))
    """
    op = t.op
    if op.init is not None or len(op.targets) != 1 or op.targets[0].where is not None:
        return None
    target = op.targets[0]
    by_name = {ax.name: ax for ax in op.axes}
    names = [index.name if type(index) is Var else None for index in target.indices]
    if None in names or len(set(names)) != len(names) or not set(names) <= set(by_name):
        return None
    out_axes = []
    for name, extent in zip(names, t.shape):
        ax = by_name[name]
        if not (type(ax.lo) is Const and ax.lo.value == 0 and type(ax.extent) is Const
                and ax.extent.value == extent):
            return None
        out_axes.append(IterVar(ax.var, ax.lo, ax.extent, "data"))
    rest = [IterVar(ax.var, ax.lo, ax.extent, "reduce") for ax in op.axes
            if ax.name not in names]
    if not rest or any(type(ax.lo) is not Const or type(ax.extent) is not Const
                       for ax in rest):
        return None
    return compute_stage(t.name, out_axes,
                         Reduce(_red.sum, target.value, tuple(rest), None, None, t.dtype))


def _product_terms(e):
    """The terms of the sum ``e`` (a tree of ``+``), in order, without constant zeros
    (which add nothing but the sign of a zero sum)."""
    out, stack = [], [e]
    while stack:
        node = stack.pop()
        if type(node) is Binary and node.op == "add":
            stack += [node.b, node.a]
        elif not (type(node) is Const and node.value == 0):
            out.append(node)
    return out


def _sum_of_products(t):
    """A :class:`SumOfProducts` of the compute stage ``t``, or None: its body is a sum
    reduction (no guard, no ``init``) of two or more terms, each a contraction whose
    plan writes the output as it is (no epilogue, padding or transposed output) and
    pays for its call as a single product's does."""
    body = t.op.body
    if not (type(body) is Reduce and body.reducer is _red.sum and body.where is None
            and body.init is None):
        return None
    terms = _product_terms(body.source)
    if len(terms) < 2:
        return None
    parts = []
    for k, term in enumerate(terms):
        stage = compute_stage(f"{t.name}_p{k}", t.op.axes,
                              Reduce(_red.sum, term, body.axes, None, None, body.dtype))
        found = _plan_of(stage, most_flops=LOOP_COST * stage_cost(stage).iterations)
        if found is None:
            return None
        c, plan = found
        if (isinstance(plan, _Transposed) or c.epilogue is not None or c.dtype != t.dtype
                or c.guard is not None or plan.lhs_padding or plan.rhs_padding):
            return None
        parts.append((stage, c, plan))
    return SumOfProducts(tuple(parts))


def _sums(t):
    """``t`` is a compute stage whose body has a sum reduction."""
    return isinstance(t.op, ComputeOp) and any(
        type(n) is Reduce and n.reducer is _red.sum for n in walk(t.op.body))


def _flops(found):
    """The floating-point operations of the products of a :func:`contraction_plan`."""
    if isinstance(found, SumOfProducts):
        return sum(c.flops for _, c, _ in found.parts)
    return sum(c.flops for _, _, c, plan in found if plan is not None)


def runs_as_products(found):
    """Every part of the :func:`contraction_plan` ``found`` is a product (none loops)."""
    if isinstance(found, Broadcast):
        return runs_as_products(found.found)
    if isinstance(found, SumOfProducts):
        return True
    return found is not None and all(plan is not None for _, _, _, plan in found)


def _whole_plan(t):
    """:func:`contraction_plan` of ``t`` with all its output axes: the stage as one
    product, or seen with split axes, or its residue classes when they cost less (a
    strided convolution's data gradient as one product sums over every output position
    each input element's window could meet, most of them zeros)."""
    iterations = stage_cost(t).iterations
    # (a product whose bounds made constant hold mostly zeros costs more than the loops)
    found = _plan_of(t, most_flops=LOOP_COST * iterations)
    whole = None if found is None else [(t, ()) + found]
    if whole is not None and _cost(whole) <= MAX_WHOLE_EXCESS * 2 * iterations:
        return whole  # residue classes do at least the stage's own work (2 flops a term)
    if whole is None:
        summed = _sum_of_products(t)
        if summed is not None:
            return summed
        split = split_axes(t)
        found = None if split is None else _plan_of(split, most_flops=LOOP_COST * iterations)
        if found is not None and found[0].epilogue is None and found[0].dtype == t.dtype:
            # the same memory, seen with the split axes: the product writes it directly
            return [(split, ()) + found]
    parts = residue_classes(t)
    if not parts:
        return whole
    out = [(part.stage, part.splits) + (_plan_of(part.stage) or (None, None))
           for part in parts]
    if not any(plan is not None for _, _, _, plan in out):
        return whole
    if whole is not None and _cost(whole) <= MAX_WHOLE_EXCESS * _cost(out):
        return whole
    return out


def _cost(found):
    """The work of a :func:`contraction_plan`'s parts in floating-point operations of the
    gemm kernel: a product's own, :data:`LOOP_COST` per iteration of a part's loops."""
    return sum(c.flops if plan is not None else LOOP_COST * stage_cost(stage).iterations
               for stage, _, c, plan in found)


def lower_contraction(t, buf, ctx, found, new_temp, padded=None):
    """Statements computing the contraction stage ``t`` into ``buf`` with its plan.

    ``found`` is :func:`contraction_plan`'s result; ``new_temp(base, shape, dtype)``
    returns a fresh ``temp`` buffer of the kernel; ``padded`` (a dict the caller keeps
    for the kernel) remembers the zero-padded copies made and the non-finite counts of
    the operands checked, for later stages to reuse. A
    residue class is computed into a temp, then copied to its elements of ``buf``
    (``axis == step * q + residue``).
    """
    padded = {} if padded is None else padded
    if isinstance(found, Broadcast):
        return _lower_broadcast(t, buf, ctx, found, new_temp, padded)
    if isinstance(found, SumOfProducts):
        return _lower_sum_of_products(buf, ctx, found, new_temp, padded)
    if len(found) == 1 and not found[0][1]:
        return _lower_plan(found[0][0], buf, ctx, found[0][2:], new_temp, padded, t)
    stmts = []
    for stage, splits, c, plan in found:
        part = new_temp(stage.name, stage.shape, buf.dtype)
        stmts.append(lower_compute(stage, part, ctx) if plan is None else
                     _lower_plan(stage, part, ctx, (c, plan), new_temp, padded, stage))
        variables = [Var(ctx.names.fresh(f"q{d}"), INDEX) for d in range(len(stage.shape))]
        target = list(variables)
        for k, step, residue in splits:
            target[k] = variables[k] * step + const(residue) if residue else \
                variables[k] * step
        stmts.append(box_loops(variables, stage.shape,
                               Store(buf, tuple(target), Load(part, tuple(variables)))))
    return block(stmts)


def _lower_sum_of_products(buf, ctx, found, new_temp, padded):
    """The first term's product written into ``buf``, each other term's added to it."""
    stmts = []
    for k, (stage, c, plan) in enumerate(found.parts):
        if k:
            plan = replace(plan, spec=replace(plan.spec, accumulate=True))
        stmts.append(_lower_plan(stage, buf, ctx, (c, plan), new_temp, padded, stage))
    return block(stmts)


def _lower_broadcast(t, buf, ctx, found, new_temp, padded):
    """``once[x[kept]]`` computed into a temp, then ``buf[x] = once[x[kept]]``."""
    stage = found.stage
    once = new_temp(stage.name, stage.shape, buf.dtype)
    inner = lower_stage(stage, once, ctx) if found.found is None else \
        lower_contraction(stage, once, ctx, found.found, new_temp, padded)
    variables = [Var(ctx.names.fresh(f"b{d}"), INDEX) for d in range(len(t.shape))]
    copy = Store(buf, tuple(variables), Load(once, tuple(variables[k] for k in found.kept)))
    return block([inner, box_loops(variables, t.shape, copy)])


def _lower_plan(t, buf, ctx, found, new_temp, padded, stage):
    """The call computing ``t`` (``stage``, seen with split axes or not) into ``buf``;
    ``stage``'s loops where an operand meeting zero padding is not all finite."""
    c, plan = found
    order = None
    if isinstance(plan, _Transposed):
        plan, order = plan.plan, plan.order
    stmts = []
    operands = []
    sides = ((plan.lhs, plan.lhs_padding), (plan.rhs, plan.rhs_padding))
    # operands multiplied by padding zeros (ones are finite)
    checked = [ctx.buffers[id(other)] for (_, padding), (other, _) in zip(sides, sides[::-1])
               if padding and other is not c.ones]
    for tensor, padding in sides:
        if tensor is c.ones:
            operands.append(_ones(tensor, padding, stmts, ctx, new_temp, padded))
            continue
        src = ctx.buffers[id(tensor)]
        if padding and (src, padding) in padded:
            src = padded[src, padding]
        elif padding:
            shape = tuple(d + lo + hi for d, (lo, hi) in zip(tensor.shape, padding))
            copy = new_temp(f"{src.name}_padded", shape, src.dtype)
            stmts.append(_pad_loops(copy, src, padding, ctx))
            padded[src, padding] = copy
            src = copy
        operands.append(src)
    # The epilogue reads each reduced value once, where it writes its result.
    if order is not None:
        # (no epilogue: see best_gemm_plan) the product's columns are an axis before the
        # last; buf[x] = acc[x[order]]
        acc = new_temp(f"{buf.name}_t", tuple(t.shape[k] for k in order), c.dtype)
        variables = [Var(ctx.names.fresh(f"t{d}"), INDEX) for d in range(len(t.shape))]
        copy = box_loops(variables, t.shape, Store(
            buf, regrouped(variables, t.shape, buf.shape),
            Load(acc, tuple(variables[k] for k in order), c.dtype)))
        call = [MatrixProduct(plan.spec, acc, operands[0], operands[1], 0,
                              plan.lhs_offset, plan.rhs_offset), copy]
    else:
        acc = buf if buf.dtype == c.dtype else new_temp(f"{buf.name}_acc", t.shape,
                                                        c.dtype)
        call = [MatrixProduct(plan.spec, acc, operands[0], operands[1], 0,
                              plan.lhs_offset, plan.rhs_offset)]
        if c.epilogue is not None or acc is not buf:
            call.append(_epilogue(t, c, acc, buf, ctx))
    if not checked:
        return block(stmts + call)
    return block(stmts + [_if_all_finite(checked, block(call), lower_compute(stage, buf, ctx),
                                         ctx, new_temp, padded)])


def regrouped(variables, seen_shape, shape):
    """The indices into ``shape`` of the element at ``variables`` of the same row-major
    memory seen as ``seen_shape``, which splits each axis of ``shape`` into consecutive
    axes (:func:`~tegrad.codegen.lower.product_plans.split_axes`: ``(n,)`` seen as
    ``(n // d, d)``). Preserved: the flat offset, ``sum_k v_k * stride_k``.

    >>> from tegrad.codegen.loops.printer import format_expr
    >>> v = [Var(n, INDEX) for n in "abc"]
    >>> [format_expr(e) for e in regrouped(v, (2, 3, 4), (6, 4))]
    ['a * 3 + b', 'c']
    """
    out, k = [], 0
    for extent in shape:
        index, size = None, 1
        # (axes of extent one are their own group: a split never makes one)
        while k < len(seen_shape) and (size < extent or (extent == 1 and index is None)):
            index = variables[k] if index is None else index * seen_shape[k] + variables[k]
            size *= seen_shape[k]
            k += 1
        if size != extent:
            raise ValueError(f"shape {tuple(seen_shape)} does not split {tuple(shape)}")
        out.append(index)
    if k != len(seen_shape):
        raise ValueError(f"shape {tuple(seen_shape)} does not split {tuple(shape)}")
    return tuple(out)


def _if_all_finite(buffers, then, otherwise, ctx, new_temp, cache):
    """``then`` if every element of ``buffers`` is finite, else ``otherwise``.

    A scalar temp counts the elements of a buffer that are not (``abs(x) < inf`` is false
    for inf and NaN), computed where the first product needing it runs and kept in
    ``cache`` for the later ones (a buffer a product reads is final: stages run in
    topological order, and a buffer a scatter accumulates into in place is read by
    nothing else).
    """
    stmts, cond = [], None
    for b in buffers:
        key = ("non-finite count", b)
        if key not in cache:
            flag = cache[key] = new_temp(f"{b.name}_nonfinite", (), b.dtype)
            variables = [Var(ctx.names.fresh(f"f{d}"), INDEX) for d in range(len(b.shape))]
            x = Load(b, tuple(variables), b.dtype)
            bad = select(Compare("lt", _abs(x), Const(float("inf"), b.dtype)),
                         Const(0, b.dtype), Const(1, b.dtype))
            stmts += [Store(flag, (), Const(0, b.dtype)),
                      box_loops(variables, b.shape, Accumulate(flag, (), bad, _red.sum))]
        term = Compare("eq", Load(cache[key], (), b.dtype), Const(0, b.dtype))
        cond = term if cond is None else And(cond, term)
    return block(stmts + [If(cond, then, otherwise, likely=True)])


def _ones(tensor, padding, stmts, ctx, new_temp, padded):
    """A temp of ones of ``tensor``'s shape, with zeros around it by ``padding`` (made
    once per kernel; its fill appended to ``stmts``)."""
    key = ("ones", tensor.shape, tensor.dtype, padding)
    if key not in padded:
        shape = tuple(d + lo + hi for d, (lo, hi) in zip(tensor.shape, padding)) \
            if padding else tensor.shape
        buf = padded[key] = new_temp("ones", shape, tensor.dtype)
        variables = [Var(ctx.names.fresh(f"o{d}"), INDEX) for d in range(len(shape))]
        one = Store(buf, tuple(variables), Const(1, buf.dtype))
        cond = None
        for v, (lo, hi), extent in zip(variables, padding or (), shape):
            for term in ([Compare("ge", v, const(lo))] if lo else []) + \
                    ([Compare("lt", v, const(extent - hi))] if hi else []):
                cond = term if cond is None else And(cond, term)
        body = one if cond is None else If(cond, one, Store(buf, tuple(variables),
                                                             Const(0, buf.dtype)))
        stmts.append(box_loops(variables, shape, body))
    return padded[key]


def _pad_loops(padded, src, padding, ctx):
    """``padded[x] = src[x - low]`` where that is inside ``src``, else 0."""
    variables = [Var(ctx.names.fresh(f"p{d}"), INDEX) for d in range(len(padded.shape))]
    inside, shifted = [], []
    for v, (lo, _), size, extent in zip(variables, padding, src.shape, padded.shape):
        shifted.append(v - const(lo) if lo else v)
        if lo:
            inside.append(Compare("ge", v, const(lo)))
        if lo + size < extent:
            inside.append(Compare("lt", v, const(lo + size)))
    value = Store(padded, tuple(variables), Load(src, tuple(shifted), src.dtype))
    zero = Store(padded, tuple(variables), Const(0, padded.dtype))
    cond = None
    for term in inside:
        cond = term if cond is None else And(cond, term)
    body = value if cond is None else If(cond, value, zero)
    return box_loops(variables, padded.shape, body)


def _epilogue(t, c, acc, buf, ctx):
    """``buf[x] = epilogue(acc[x])`` (the stage's body with its reduction read from
    ``acc``), lowered like any compute stage."""
    op = t.op
    reduced = placeholder(t.shape, dtype=c.dtype, name=acc.name)
    body = Var(ACC, c.dtype) if c.epilogue is None else c.epilogue
    body = substitute(body, {ACC: Read(reduced, tuple(ax.var for ax in op.axes), c.dtype)})
    stage = compute_stage(t.name, op.axes, body)
    ctx.buffers[id(reduced)] = acc
    try:
        return lower_compute(stage, buf, ctx)
    finally:
        del ctx.buffers[id(reduced)]


__all__ = ["contraction_plan", "lower_contraction"]
