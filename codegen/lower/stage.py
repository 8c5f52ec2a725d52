"""One stage as loop-IR statements: compute, scatter-add and scan stages.

A compute stage loops over its shape and stores its body at each point; a body that is
one reduction accumulates straight into the output element. A scatter stage fills its
output (a copy of ``init``, or zeros), then makes one pass over its domain, each target
accumulating where its condition holds (affine conditions bound the loops). A scan stage
runs one sequential loop along its scanned axis per line, carrying an accumulator.
"""
from __future__ import annotations

from tegrad import solver
from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Const, Reduce, TupleReduce, Var
from tegrad.ir.mapper import substitute
from tegrad.ir.reduction import sum as sum_reducer
from tegrad.ir.stages import StageMapper

from tegrad.codegen.loops.mapper import block, substitute_stmt
from tegrad.codegen.loops.nodes import Accumulate, Allocate, Buffer, For, If, Let, Load, Store
from tegrad.codegen.lower.expr import ExprLowering, reduction_nest, split_guard, widen
from tegrad.codegen.lower.nest import INDEX, const, domain_nest
from tegrad.analysis.affine import conjunction


def box_loops(variables, shape, body):
    """``for v in range(n)`` around ``body`` for each variable (``v = 0`` substituted for
    ``n == 1``: a stage axis of extent one is not a loop)."""
    single = {v.name: const(0) for v, n in zip(variables, shape) if n == 1}
    body = substitute_stmt(body, single)
    for v, n in reversed(list(zip(variables, shape))):
        if n != 1:
            body = For(v, const(0), const(n), body)
    return body


def box_context(variables, shape):
    """Solver constraints ``0 <= v < n``."""
    out = []
    for v, n in zip(variables, shape):
        a = solver.Affine.var(v.name)
        out += [solver.ge(a, 0), solver.lt(a, n)]
    return out


def lower_compute(t, buf, ctx):
    """Statements computing every element of ``t`` (a compute stage) into ``buf``."""
    op = t.op
    if type(op.body) is TupleReduce:
        return lower_tuple_reduction([t], [buf], ctx)
    renames = {ax.name: ctx.names.fresh(ax.name) for ax in op.axes}
    variables = [Var(renames[ax.name], INDEX) for ax in op.axes]
    context = box_context(variables, t.shape)
    indices = tuple(variables)
    body = op.body
    lowering = ExprLowering(ctx, context, renames)
    if type(body) is Reduce:
        # the evaluator's order: reduce from the identity, then combine with init
        init = None if body.init is None else widen(lowering(body.init), buf.dtype)
        start = Store(buf, indices, body.reducer.identity(buf.dtype))
        nest = reduction_nest(lowering, body, buf, indices)
        last = None if init is None else Accumulate(buf, indices, init, body.reducer)
        stmt = lowering.wrap(block([start, nest, last]))
    else:
        value = widen(lowering(body), buf.dtype)
        stmt = lowering.wrap(Store(buf, indices, value))
    return box_loops(variables, t.shape, stmt)


def lower_tuple_reduction(stages, bufs, ctx):
    """Statements computing ``stages``, components of one reduction of a tuple (bodies
    alike but for the component), into ``bufs``: one loop nest for all of them.

    Per output element: ``acc = identity``; at each point of the domain, with ``x`` the
    accumulators' values and ``y`` the sources' (each computed once, a :class:`Let`),
    ``acc_j = combine_j(x, y)`` for every component; then each stage stores its
    component. Every component is accumulated, stored or not: the combine reads them all.
    """
    t = stages[0]
    op, red = t.op, t.op.body
    renames = {ax.name: ctx.names.fresh(ax.name) for ax in op.axes}
    variables = [Var(renames[ax.name], INDEX) for ax in op.axes]
    context = box_context(variables, t.shape)
    indices = tuple(variables)
    dtypes = tuple(s.dtype for s in red.sources)
    xs, ys, bodies = red.reducer.tuple_combiner(dtypes)
    accs = [Buffer(ctx.names.fresh("acc"), (), d, "local") for d in dtypes]
    # the combiner's variables, named apart in the kernel; integer ones are int64 there
    fresh = {v.name: Var(ctx.names.fresh(v.name.lstrip("_")), v.dtype) for v in xs + ys}
    combine = [substitute(b, fresh) for b in bodies]

    def update(inner):
        values = [widen(inner(s), d) for s, d in zip(red.sources, dtypes)]
        step = ExprLowering(ctx, [], {})
        new = [widen(step(c), d) for c, d in zip(combine, dtypes)]
        stmt = step.wrap(block([Store(acc, (), v) for acc, v in zip(accs, new)]))
        bound = [(fresh[x.name], Load(acc, (), acc.dtype)) for x, acc in zip(xs, accs)]
        bound += [(fresh[y.name], v) for y, v in zip(ys, values)]
        for var, value in reversed(bound):
            if _dt.is_int(var.dtype):
                var, value = Var(var.name, INDEX), widen(value, INDEX)
            stmt = Let(var, value, stmt)
        return stmt

    lowering = ExprLowering(ctx, context, renames)
    start = [Store(acc, (), c) for acc, c in zip(accs, red.reducer.tuple_identity(dtypes))]
    nest = reduction_nest(lowering, red, None, indices, update=update)
    loads = [Load(acc, (), acc.dtype) for acc in accs]
    stores = [Store(buf, indices, widen(loads[s.op.body.index], buf.dtype))
              for s, buf in zip(stages, bufs)]
    stmt = lowering.wrap(block(start + [nest] + stores))
    for acc in reversed(accs):
        stmt = Allocate(acc, stmt)
    return box_loops(variables, t.shape, stmt)


def lower_scan(t, buf, ctx):
    """Statements computing the scan stage ``t`` into ``buf``.

    Per line: ``acc = identity; for a: out[a] = acc; acc = combine(acc, source[a])``,
    with ``a == n - 1 - r`` for a suffix scan (``r`` the loop variable), so the loop
    always runs forward. Loop-invariant: before iteration ``a``, ``acc`` holds the
    reduction of the points before ``a`` in scan order.
    """
    op = t.op
    renames = {ax.name: ctx.names.fresh(ax.name) for ax in op.axes}
    variables = [Var(renames[ax.name], INDEX) for ax in op.axes]
    context = box_context(variables, t.shape)
    indices = tuple(variables)
    acc = Buffer(ctx.names.fresh("acc"), (), buf.dtype, "local")
    lowering = ExprLowering(ctx, context, renames)
    value = widen(lowering(op.source), buf.dtype)
    step = lowering.wrap(block([Store(buf, indices, Load(acc, (), acc.dtype)),
                                Accumulate(acc, (), value, op.reducer)]))
    a, n = variables[op.axis], t.shape[op.axis]
    if op.reverse:
        r = Var(ctx.names.fresh(a.name + "_r"), INDEX)
        line = For(r, const(0), const(n), Let(a, const(n - 1) - r, step))
    else:
        line = For(a, const(0), const(n), step)
    line = Allocate(acc, block([Store(acc, (), op.reducer.identity(buf.dtype)), line]))
    others = [(v, m) for k, (v, m) in enumerate(zip(variables, t.shape)) if k != op.axis]
    return box_loops([v for v, _ in others], [m for _, m in others], line)


def copy_loops(dst, src_value, shape, names):
    """``dst[x] = src_value(x)`` for every ``x`` of ``shape``."""
    variables = [Var(names.fresh(f"i{d}"), INDEX) for d in range(len(shape))]
    return box_loops(variables, shape, Store(dst, tuple(variables), src_value(tuple(variables))))


def lower_scatter(t, buf, ctx, fill=True):
    """Statements computing the scatter stage ``t`` into ``buf``.

    Without ``fill``, ``buf`` already holds the initial values (``init`` was computed
    into it).
    """
    op = t.op
    if not fill:
        fill = None
    elif op.init is not None:
        src = ctx.buffers[id(op.init)]
        fill = copy_loops(buf, lambda idx: widen(Load(src, idx, src.dtype), buf.dtype),
                          t.shape, ctx.names)
    else:
        fill = copy_loops(buf, lambda idx: Const(0, buf.dtype), t.shape, ctx.names)
    renames = {ax.name: ctx.names.fresh(ax.name) for ax in op.axes}
    variables = [Var(renames[ax.name], INDEX) for ax in op.axes]
    shape = tuple(ax.extent.value for ax in op.axes)
    context = box_context(variables, shape)
    axes = [(v, const(0), const(n)) for v, n in zip(variables, shape)]
    statements = []
    for target in op.targets:
        affine, data = split_guard([] if target.where is None else [target.where],
                                   ExprLowering(ctx, context, renames))
        statements.append((affine, _target_body(target, data, buf, ctx, context + affine,
                                                renames)))
    first, more = statements[0], statements[1:]
    return block([fill, domain_nest(axes, first[0], [], first[1], more)])


def _target_body(target, data, buf, ctx, context, renames):
    def body():
        lowering = ExprLowering(ctx, context, renames)
        cond = lowering(conjunction(data)) if data else None
        before, lowering.stmts = lowering.stmts, []
        indices = tuple(widen(lowering(i), INDEX) for i in target.indices)
        value = widen(lowering(target.value), buf.dtype)
        lowering.check_indices(buf, indices, ctx.stage)
        update = block(lowering.stmts + [Accumulate(buf, indices, value, sum_reducer)])
        lowering.stmts = before
        return lowering.wrap(If(cond, update) if cond is not None else update)
    return body


def lower_stage(t, buf, ctx, fill=True):
    """Statements computing ``t`` into ``buf`` (see :func:`lower_scatter` for ``fill``)."""
    return _LowerStage()(t, buf, ctx, fill)


class _LowerStage(StageMapper):
    def map_placeholder(self, t, buf, ctx, fill):
        raise TypeError(f"cannot lower the stage of {t.name!r}: it is a placeholder")

    def map_compute(self, t, buf, ctx, fill):
        return lower_compute(t, buf, ctx)

    def map_scatter(self, t, buf, ctx, fill):
        return lower_scatter(t, buf, ctx, fill)

    def map_scan(self, t, buf, ctx, fill):
        return lower_scan(t, buf, ctx)
