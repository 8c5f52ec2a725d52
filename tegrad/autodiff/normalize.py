"""Normalising the forward program: every reduction becomes the whole body of a stage.

A float reduction that is not the whole body of its compute is moved into a new compute
stage ``<name>_red<n>`` indexed by the reduction's free variables (the compute's axes and
enclosing reduce axes it uses, in that order), and replaced by a read of that stage (one
stage for structurally equal reductions)::

    S[i] = exp(sum(A[i, k], k)) * 2      becomes     S_red0[i] = sum(A[i, k], k in [0, 8))
                                                      S[i] = exp(S_red0[i]) * 2

so that the max/min/prod rules read the stage's value ``Y[y]`` instead of recomputing
the reduction. Stages that only read rebuilt stages are rebuilt to read the new ones;
stages with nothing to change are kept as they are (same tensor objects).

A reduction over a single point (every axis of constant extent one: a 1x1 pooling window,
an axis of extent one) is first replaced by its one value, ``init (+) (where ? source :
identity)`` at that point, so that its gradient needs no statistics of the reduction.

A reduction is left in place (and its rules recompute it) when hoisting could evaluate
it where the original program does not: inside a select branch, the right operand of
``&``/``|``, or the source of a reduction with ``where`` or with bounds that depend on
other variables; also when one of its free variables has a non-constant range. A
reduction under an intrinsic with a zero derivative (``stop_gradient``, ``floor``, ...)
is left in place as well: no rule reads its value, and a stage of its own would only
add a pass (``m[i] = stop_gradient(max_k x[i, k])`` stays one stage).

>>> import tegrad as tg
>>> A = tg.placeholder((2, 3), name="A")
>>> k = tg.reduce_axis((0, 3), name="k")
>>> S = tg.compute((2,), lambda i: tg.exp(tg.sum(A[i, k], axis=k)), name="S")
>>> (S2,), stages = normalize([S])
>>> print(tg.format(S2).splitlines()[-1])
S[i] = exp(S_red0[i])
"""
from __future__ import annotations

import itertools
from types import GeneratorType

from tegrad.ir.expr import And, Const, Or, Read, Reduce, Select, TupleReduce, Var, binary, select
from tegrad.ir.graph import topological_order
from tegrad.ir.rewrite import map_stage, retarget_ids
from tegrad.ir.mapper import IdentityMapper, free_var_names, run, substitute
from tegrad.ir.stages import StageMapper
from tegrad.autodiff.algebra import differentiable
from tegrad.autodiff.intrinsic_rules import has_zero_derivative
from tegrad.autodiff.names import make_compute


def _const_int(e):
    return e.value if isinstance(e, Const) else None


class _Hoister(IdentityMapper):
    """Replaces hoistable non-root reductions by reads of new stages.

    The extra argument is ``(ranges, conditional)``: ``ranges`` maps each variable in
    scope to ``(lo, extent)`` (None when not constant), in scope order. The methods are
    generators (see :func:`tegrad.ir.mapper.run`): any depth maps without recursion.
    """

    def __init__(self, base_name, counter):
        self.base_name = base_name
        self.counter = counter
        self.hoisted = {}  # reduction (structurally) -> read of its stage
        # a node's result per context, so a node shared within the body (a gradient
        # reuses its sub-expressions: a DAG whose tree may be exponentially larger) is
        # mapped once per context; the context is known by its ranges dict (one per
        # reduction scope, never changed once made) and its flag
        self._memo = {}  # (id(ranges), conditional, id(node)) -> (node, ranges, result)

    def visit(self, e, ctx):
        key = (id(ctx[0]), ctx[1], id(e))
        hit = self._memo.get(key)
        if hit is not None and hit[0] is e and hit[1] is ctx[0]:
            return hit[2]
        return self._remembered(e, ctx, key)

    def _remembered(self, e, ctx, key):
        out = IdentityMapper.visit(self, e, ctx)
        if type(out) is GeneratorType:
            out = yield from out
        self._memo[key] = (e, ctx[0], out)
        return out

    def map_select(self, e, ctx):
        ranges, _ = ctx
        cond = yield self.visit(e.cond, ctx)
        t = yield self.visit(e.true_value, (ranges, True))
        f = yield self.visit(e.false_value, (ranges, True))
        if cond is e.cond and t is e.true_value and f is e.false_value:
            return e
        return Select(cond, t, f, e.dtype)

    def _logical(self, e, ctx, cls):
        a = yield self.visit(e.a, ctx)
        b = yield self.visit(e.b, (ctx[0], True))
        return e if (a is e.a and b is e.b) else cls(a, b)

    def map_and(self, e, ctx):
        return (yield from self._logical(e, ctx, And))

    def map_or(self, e, ctx):
        return (yield from self._logical(e, ctx, Or))

    def map_call(self, e, ctx):
        if has_zero_derivative(e):
            # no derivative flows into its arguments, so no rule reads a stage hoisted
            # from them: a softmax's stop_gradient(max_k x) stays one stage
            return e
        return (yield from self._rebuilt(e, (ctx,)))

    def map_reduce(self, e, ctx):
        ranges, conditional = ctx
        if not conditional and differentiable(e.dtype):
            free = free_var_names(e)
            if all(ranges.get(v) is not None for v in free):
                names = [v for v in ranges if v in free]
                key = (e, tuple((v, ranges[v]) for v in names))
                if key not in self.hoisted:
                    self.hoisted[key] = self._hoist(e, names, ranges)
                return self.hoisted[key]
        return (yield from self.reduce_children(e, ctx))

    def reduce_children(self, e, ctx):
        """Hoist inside ``e`` (kept in place): its axes' bounds, source, where and init
        (a generator: see :func:`tegrad.ir.mapper.run`)."""
        ranges, conditional = ctx
        inner = dict(ranges)
        ragged = False
        for ax in e.axes:
            lo, extent = _const_int(ax.lo), _const_int(ax.extent)
            ragged = ragged or lo is None or extent is None
            inner[ax.name] = None if ragged else (lo, extent)
        inner_ctx = (inner, conditional or ragged or e.where is not None)
        source = yield self.visit(e.source, inner_ctx)
        where = None if e.where is None else (yield self.visit(e.where, inner_ctx))
        init = None if e.init is None else (yield self.visit(e.init, ctx))
        if source is e.source and where is e.where and init is e.init:
            return e
        return Reduce(e.reducer, source, e.axes, where, init, e.dtype)

    def _hoist(self, e, names, ranges):
        name = f"{self.base_name}_red{next(self.counter)}"
        shifts = {v: ranges[v][0] for v in names if ranges[v][0] != 0}
        shape = tuple(ranges[v][1] for v in names)
        if shifts:
            body = substitute(e, {v: binary("add", Var(v), shifts[v]) for v in shifts})
        else:
            body = e
        stage = make_compute(name, shape, names, lambda *vs: hoist_body(name, names, shape, body))
        indices = tuple(binary("sub", Var(v), shifts[v]) if v in shifts else Var(v)
                        for v in names)
        return Read(stage, indices, stage.dtype)


class _SinglePoints(IdentityMapper):
    """Replaces reductions over one point by their value (see the module docstring)."""

    def finish(self, e, out):
        if type(out) is not Reduce or not all(type(ax.extent) is Const and ax.extent.value == 1
                                              for ax in out.axes):
            return out
        e = out
        at = {}
        for ax in e.axes:
            at[ax.name] = substitute(ax.lo, at) if at else ax.lo
        value = substitute(e.source, at)
        if e.where is not None:
            value = select(substitute(e.where, at), value, e.reducer.identity(e.dtype))
        return value if e.init is None else e.reducer.combine(e.init, value)


def hoist_body(name, axis_names, shape, body, counter=None):
    """``body`` with every hoistable reduction that is not the whole body moved out."""
    counter = counter if counter is not None else itertools.count()
    if type(body) is TupleReduce:
        return body  # its rules read the stages of its components (nothing to hoist)
    body = _SinglePoints()(body)
    h = _Hoister(name, counter)
    ctx = ({n: (0, d) for n, d in zip(axis_names, shape)}, False)
    if type(body) is Reduce:
        return run(h.reduce_children(body, ctx))
    return h(body, ctx)


def normalize(outputs):
    """Normalise the program of ``outputs``; returns ``(new outputs, {id(old): new})``."""
    mapping = {}
    stage = _NormalizeStage(mapping)
    for t in topological_order(outputs):
        new = stage(t)
        if new is not t:
            mapping[id(t)] = new
    return [mapping.get(id(t), t) for t in outputs], mapping


class _NormalizeStage(StageMapper):
    def __init__(self, mapping):
        self.mapping = mapping

    def map_placeholder(self, t):
        return t

    def map_compute(self, t):
        return _normalize_compute(t, self.mapping)

    def map_scatter(self, t):
        return _retarget_inputs(t, self.mapping)

    map_scan = map_scatter


def _normalize_compute(t, mapping):
    names = [ax.name for ax in t.op.axes]
    t = retarget_ids(t, mapping)
    return map_stage(t, lambda body: hoist_body(t.name, names, t.shape, body))


def _retarget_inputs(t, mapping):
    return retarget_ids(t, mapping)


__all__ = ["normalize", "hoist_body"]
