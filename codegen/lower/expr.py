"""Lowering of one stage expression to a loop-IR expression and the statements before it.

Reads become loads of the tensors' buffers; axis variables become int64 loop variables
(index arithmetic then runs in int64, as the reference evaluator's ``arange`` indices
do; a sub-expression without variables keeps its dtype); each reduction becomes a
shape-() accumulator computed by a loop nest before the statement that uses it, under
the conditions of the selects around it (affine ones restrict its domain, others guard
it). A read whose index depends on loaded data, a read whose index is not proved
inside its dimension where it is evaluated (over the loops' bounds and the affine part
of its guard: a program that reads outside a tensor raises, as the evaluator does), and
an integer ``//``/``%`` by a non-constant, is preceded by a :class:`Check` (under the
same conditions).
"""
from __future__ import annotations

import functools
from types import GeneratorType

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import TegradError
from tegrad.ir.expr import (And, Binary, Call, Cast, Compare, Const, Neg, Not, Or, Select, Var,
                             may_divide_by_zero)
from tegrad.ir.mapper import IdentityMapper, fresh_name
from tegrad.ir.printer import axis_end
from tegrad.analysis.affine import conjunction, conjuncts
from tegrad.solver.isl_bridge import is_implied

from tegrad.codegen.loops.mapper import block, clamped_range, to_affine, to_constraint, walk_expr
from tegrad.codegen.loops.nodes import Accumulate, Allocate, Buffer, Check, If, Load, Store
from tegrad.codegen.lower.nest import INDEX, bound_constraints, const, domain_nest


def widen(e, dtype):
    """``e`` as ``dtype`` (a constant is retyped, anything else cast)."""
    if e.dtype == dtype:
        return e
    if type(e) is Const:
        return Const(e.value, dtype)
    return Cast(e, dtype)


def _unify(a, b):
    """Integer operands of different widths meet at int64 (loop variables are int64)."""
    if a.dtype != b.dtype and _dt.is_int(a.dtype) and _dt.is_int(b.dtype):
        return widen(a, INDEX), widen(b, INDEX)
    return a, b


class Names:
    """Fresh names for accumulators within one kernel."""

    def __init__(self, taken=()):
        self.taken = set(taken)
        self.counters = {}

    def fresh(self, base):
        name = fresh_name(base, self.taken, self.counters)
        self.taken.add(name)
        return name


class StageContext:
    """What lowering a stage needs: tensor -> buffer, fresh names, the stage's name, and
    the loop variables whose bounds depend on data (indices using them are checked),
    each with the name of the buffer its bounds read."""

    def __init__(self, buffers, names, stage):
        self.buffers, self.names, self.stage = buffers, names, stage
        self.data_vars = {}


class ExprLowering(IdentityMapper):
    """Maps a stage expression to a loop-IR expression; collects the statements before it.

    ``context`` lists solver constraints known at this point (the enclosing loops);
    ``guard`` the conditions under which the expression is evaluated. The lowerings are
    generators (see :func:`tegrad.ir.mapper.run`): any depth lowers without recursion.
    """

    def __init__(self, ctx, context, renames, guard=()):
        self.ctx, self.context, self.guard = ctx, list(context), list(guard)
        self.stmts, self.allocs = [], []
        # Lowered nodes, so that a node shared within the expression (a DAG whose tree
        # may be exponentially larger, as a gradient's often is) is lowered once per
        # renames and guard: under the same renames and the very same guard a node
        # lowers to the same expression, and the statements it needs (checks,
        # reductions) were already added before this expression's statement. Keys:
        # (renames version, guard id, node id); the guard id names the chain of
        # conditions pushed so far, so a lookup is O(1) at any depth of selects.
        self._memo = {}  # key -> (node kept alive, its lowering)
        self._versions = {}  # renames' contents -> version
        self._chains = {}  # (guard id, condition key) -> guard id
        self._kept = []  # conditions whose ids key ``_chains``
        self._guard_ids = [0] * (len(self.guard) + 1)
        for n, cond in enumerate(self.guard):  # a given guard: its own chain
            self._guard_ids[n + 1] = self._chain(self._guard_ids[n], cond)
        self.renames = renames

    @property
    def renames(self):
        """Stage or reduce axis name -> loop variable name."""
        return self._renames

    @renames.setter
    def renames(self, renames):
        # by content: reduction_nest sets a dict, changes it and sets it again
        self._renames = renames
        self._version = self._versions.setdefault(tuple(renames.items()), len(self._versions))

    # -- helpers ---------------------------------------------------------------------
    def _chain(self, parent, cond):
        # a negation by what it negates: the lowering builds a new Not for each select
        key = (parent, ("not", id(cond.a)) if type(cond) is Not else id(cond))
        found = self._chains.get(key)
        if found is None:
            found = self._chains[key] = len(self._chains) + 1
            self._kept.append(cond)
        return found

    def visit(self, e, *args):
        """The lowering of ``e``: remembered (see ``__init__``), else a generator."""
        key = (self._version, self._guard_ids[-1], id(e))
        hit = self._memo.get(key)
        if hit is not None and hit[0] is e:
            return hit[1]
        return self._lowered(e, key, args)

    def _lowered(self, e, key, args):
        out = super().visit(e, *args)
        if type(out) is GeneratorType:
            out = yield from out
        self._memo[key] = (e, out)
        return out

    def _guarded(self, cond):
        """``cond`` needed only where the guard holds: ``!guard || cond``."""
        if not self.guard:
            return cond
        return Or(Not(conjunction(self.guard)), cond)

    def _under(self, cond, e):
        self.guard.append(cond)
        self._guard_ids.append(self._chain(self._guard_ids[-1], cond))
        try:
            return (yield self.visit(e))
        finally:
            self.guard.pop()
            self._guard_ids.pop()

    def wrap(self, stmt):
        """``stmt`` after the collected statements, inside the accumulators' allocations."""
        out = block(self.stmts + [stmt])
        for buf in reversed(self.allocs):
            out = Allocate(buf, out)
        return out

    # -- expressions -----------------------------------------------------------------
    def map_var(self, e, *args):
        return Var(self.renames.get(e.name, e.name), INDEX) if _dt.is_int(e.dtype) else e

    def _operands(self, e):
        a = yield self.visit(e.a)
        b = yield self.visit(e.b)
        return _unify(a, b)

    def map_binary(self, e, *args):
        a, b = yield from self._operands(e)
        out = Binary(e.op, a, b, a.dtype)
        if may_divide_by_zero(out):
            self.stmts.append(Check(self._guarded(Compare("ne", b, Const(0, b.dtype))),
                                    "division_by_zero", self.data_source(b) or self.ctx.stage,
                                    stage=self.ctx.stage))
        return out

    def map_neg(self, e, *args):
        a = yield self.visit(e.a)
        return Neg(a, a.dtype)

    def map_compare(self, e, *args):
        a, b = yield from self._operands(e)
        return Compare(e.op, a, b)

    def map_and(self, e, *args):
        a = yield self.visit(e.a)
        return And(a, (yield from self._under(a, e.b)))

    def map_or(self, e, *args):
        a = yield self.visit(e.a)
        return Or(a, (yield from self._under(Not(a), e.b)))

    def map_select(self, e, *args):
        c = yield self.visit(e.cond)
        t = yield from self._under(c, e.true_value)
        f = yield from self._under(Not(c), e.false_value)
        t, f = _unify(t, f)
        return Select(c, t, f, t.dtype)

    def map_cast(self, e, *args):
        return widen((yield self.visit(e.a)), e.dtype)

    def map_call(self, e, *args):
        new = []
        for a in e.args:
            new.append((yield self.visit(a)))
        if len(new) == 2:
            new = list(_unify(*new))
        return Call(e.name, tuple(new), new[0].dtype)

    def map_read(self, e, *args):
        indices = []
        for i in e.indices:
            indices.append(widen((yield self.visit(i)), INDEX))
        indices = tuple(indices)
        buf = self.ctx.buffers[id(e.tensor)]
        self.check_indices(buf, indices, e.tensor.name)
        return Load(buf, indices, buf.dtype)

    def data_source(self, e):
        """The name of the first buffer whose values ``e`` uses (a load, or a loop
        variable whose bounds are loaded), or None."""
        for n in walk_expr(e):
            if type(n) is Load:
                return n.buffer.name
            if type(n) is Var and n.name in self.ctx.data_vars:
                return self.ctx.data_vars[n.name]
        return None

    def check_indices(self, buf, indices, name):
        """Checks ``0 <= index < extent`` for every index that depends on loaded data (the
        check names the tensor whose values were used as the index, then ``name``, the
        tensor indexed, and the stage), and for every other index not proved inside its
        dimension where the read is evaluated (the check names ``name``)."""
        conds, source, unproved = [], None, []
        for idx, extent in zip(indices, buf.shape):
            found = clamped_range(idx, self._box)
            if found is not None and found[0] >= 0 and found[1] < extent:
                continue  # inside over the loops' box, whatever values it loads
            inside = And(Compare("ge", idx, const(0)), Compare("lt", idx, const(extent)))
            found = self.data_source(idx)
            if found is not None:
                source = source or found
                conds.append(inside)
            elif not self._implied_inside(idx, extent):
                unproved.append(inside)
        if conds:
            self.stmts.append(Check(self._guarded(conjunction(conds)), "index_out_of_range",
                                    source, indexed=name, stage=self.ctx.stage))
        if unproved:
            self.stmts.append(Check(self._guarded(conjunction(unproved)),
                                    "index_out_of_range", name, indexed=name,
                                    stage=self.ctx.stage))

    @functools.cached_property
    def _box(self):
        """The ranges of the loop variables from the context's one-variable bounds."""
        return _variable_box(self.context)

    def _implied_inside(self, idx, extent):
        """``0 <= idx < extent`` follows (exactly) from the context and the affine part
        of the guard."""
        aff = to_affine(idx)
        if aff is None:
            return False
        known = self.context + split_guard(self.guard)[0]
        names = sorted(set(aff.variables()).union(*(c.variables() for c in known)))
        return (is_implied(names, (), known, aff)
                and is_implied(names, (), known, extent - 1 - aff))

    def map_reduce(self, e, *args):
        # the evaluator's order: reduce from the identity, then combine with init
        acc = Buffer(self.ctx.names.fresh("acc"), (), e.dtype, "local")
        init = None if e.init is None else widen((yield self.visit(e.init)), e.dtype)
        affine, data = split_guard(self.guard)
        nest = reduction_nest(self, e, acc, (), affine)
        stmt = block([Store(acc, (), e.reducer.identity(e.dtype)), nest])
        if data:
            # a data condition is tested only where the conditions outside it hold (they
            # may keep its loads in bounds), in their order; later affine ones restrict
            # the nest's domain
            parts = [p for c in self.guard for p in conjuncts(c)]
            last = max(k for k, p in enumerate(parts) if to_constraint(p) is None)
            for part in reversed(parts[:last + 1]):
                stmt = If(part, stmt)
        self.stmts.append(stmt)
        self.allocs.append(acc)
        result = Load(acc, (), e.dtype)
        return result if init is None else e.reducer.combine(init, result)

    def map_tuple_reduce(self, e, *args):
        raise TegradError(f"stage {self.ctx.stage!r}: a component of the reduction of a "
                          f"tuple ({e.reducer.name!r}) inside an expression; it is lowered "
                          f"only as the whole body of a stage")


def _variable_box(constraints):
    """``{name: (lo, hi)}`` from the constraints on one variable with coefficient +-1."""
    box = {}
    for c in constraints:
        terms = c.expr.as_dict()
        if len(terms) != 1:
            continue
        (name, coeff), = terms.items()
        if type(name) is not str or coeff not in (1, -1):
            continue
        lo, hi = box.get(name, (None, None))
        # coeff * v + k >= 0 (or == 0)
        k = c.expr.constant
        if coeff == 1 or c.is_equality:
            lo = -k * coeff if lo is None else max(lo, -k * coeff)
        if coeff == -1 or c.is_equality:
            hi = k * -coeff if hi is None else min(hi, k * -coeff)
        box[name] = (lo, hi)
    return {n: b for n, b in box.items() if None not in b}


def split_guard(conds, rename=None):
    """``(solver constraints, other conditions)`` of a list of conditions.

    ``rename`` maps an affine condition's variables to their loop variables first.
    """
    affine, data = [], []
    for c in conds:
        for part in conjuncts(c):
            if to_constraint(part) is None:
                data.append(part)
            else:
                affine.append(to_constraint(rename(part) if rename is not None else part))
    return affine, data


def reduction_nest(outer, red, buf, indices, guards=(), update=None):
    """Loops over the domain of ``red`` accumulating its source into ``buf[indices]``
    (or, with ``update``, running ``update(lowering)`` at each point: the statement
    folding the point into the accumulators, built with the point's lowering).

    The domain's bounds, the affine part of ``where`` and the constraints ``guards`` on
    outer values (under which the reduction is needed) become loops; the rest of
    ``where`` is tested at each point. ``outer`` is the lowering of the expression
    around the reduction: its context (what is known of outer values), its loop names,
    and its statements, which receive what the bounds need computed first.
    """
    ctx, context, renames = outer.ctx, outer.context, dict(outer.renames)
    axes, saved = [], outer.renames
    for ax in red.axes:
        before = len(outer.stmts)
        outer.renames = renames  # later bounds may use earlier axes
        try:
            lo, end = widen(outer(ax.lo), INDEX), widen(outer(axis_end(ax)), INDEX)
        finally:
            outer.renames = saved
        earlier = {v.name for v, _, _ in axes}
        if len(outer.stmts) > before and any(
                type(n) is Var and n.name in earlier for e in (lo, end) for n in walk_expr(e)):
            raise TegradError(f"stage {ctx.stage!r}: the bounds of the reduce axis "
                              f"{ax.name!r} need a reduction or a check that depends on "
                              f"another reduce axis; not supported")
        renames[ax.name] = ctx.names.fresh(ax.name)
        axes.append((Var(renames[ax.name], INDEX), lo, end))
        source = outer.data_source(lo) or outer.data_source(end)
        if source is not None:
            ctx.data_vars[renames[ax.name]] = source
    where_affine, where_data = split_guard([] if red.where is None else [red.where],
                                           ExprLowering(ctx, context, renames))
    conditions = list(guards) + where_affine
    inner_context = list(context) + conditions
    for v, lo, end in axes:
        inner_context += bound_constraints(v, lo, end) or []

    def accumulate(inner):
        return Accumulate(buf, indices, widen(inner(red.source), buf.dtype), red.reducer)

    update = update or accumulate

    def body():
        inner = ExprLowering(ctx, inner_context, renames)
        if not where_data:
            return inner.wrap(update(inner))
        cond = inner(conjunction(where_data))
        before, inner.stmts = inner.stmts, []
        step = update(inner)
        guarded = If(cond, block(inner.stmts + [step]))
        inner.stmts = before
        return inner.wrap(guarded)

    return domain_nest(axes, conditions, context, body)
