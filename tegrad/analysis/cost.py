"""The cost model: exact counts of the work a program's stages do.

``iterations`` counts integer points iterated, as the lowering to loops
(:mod:`tegrad.codegen.lower`) visits them: every output point of every stage, plus every
point of every reduction domain reached. A reduction's loops run where the conditions
around it hold (a select's branch under its condition or its negation, the right operand
of ``&&`` or ``||`` under the left one or its negation, the source of a reduction under
its ``where``), over its bounds and the affine conjuncts of its own ``where``; its other
conditions are tested at each of those points, so they count. A scatter stage visits each
point where some target's affine condition holds once. Conditions on loop variables are
exact (``!=``, ``%``, negations); a condition that reads data counts as true, so a
reduction under one is counted as if it ran (its loops run only where the data says:
there the count is an upper bound). ``flops`` counts floating-point operations
(arithmetic, intrinsic calls, reduction combines) at those points; ``memory`` counts
the elements of the intermediate stages (every computed stage except the requested
tensors themselves).

Every reduction reached is a union of integer domains (the stage's axes, the axes of the
reductions around it and its own, under the conditions that guard it); the solver counts
its points in closed form, so the size of a stage does not matter.

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

import itertools
from dataclasses import dataclass

from tegrad import solver
from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import TegradError
from tegrad.ir.expr import REDUCTIONS, And, Binary, Compare, Const, Not, Or, TupleReduce
from tegrad.ir.graph import as_tensor_list, topological_order
from tegrad.ir.mapper import Mapper, bottom_up, children
from tegrad.ir.printer import axis_end
from tegrad.ir.stages import StageMapper, is_placeholder, tuple_group
from tegrad.analysis.affine import conjuncts, to_affine, to_constraint


class CountError(TegradError):
    """A stage's points cannot be counted exactly (a loop bound that is not affine)."""


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


def affine_conditions(cond):
    """The solver constraints of the affine conjuncts of ``cond`` (others dropped)."""
    if cond is None:
        return ()
    return tuple(con for con in map(to_constraint, conjuncts(cond)) if con is not None)


#: more alternatives than this in a condition's disjunctive form: counted as true
MAX_ALTERNATIVES = 64


def condition_alternatives(conds):
    """The conjunction of ``conds`` as alternatives (a union of conjunctions of solver
    constraints, ``[()]`` for true, ``[]`` for false).

    Conditions on loop variables only are exact (negations, ``!=``, ``||`` included);
    a comparison that reads data, or is not affine, counts as true: the loops run
    where it might hold.

    >>> import tegrad as tg
    >>> i = tg.Var("i", "int32")
    >>> len(condition_alternatives([tg.any(i < 2, i > 5)]))
    2
    """
    out = [()]
    for c in conds:
        out = _and_alternatives(out, _alternatives(c, False))
    return out


def _and_alternatives(a, b):
    out = [x + y for x in a for y in b]
    return out if len(out) <= MAX_ALTERNATIVES else [()]


def _alternatives(cond, negate):
    t = type(cond)
    if t is Not:
        return _alternatives(cond.a, not negate)
    if t in (And, Or):
        a, b = _alternatives(cond.a, negate), _alternatives(cond.b, negate)
        if (t is And) != negate:
            return _and_alternatives(a, b)
        out = a + b
        return out if len(out) <= MAX_ALTERNATIVES else [()]
    if t is Const and cond.dtype == "bool":
        return [()] if bool(cond.value) != negate else []
    if t is Compare:
        con = to_constraint(Not(cond) if negate else cond)
        if con is not None:
            return [(con,)]
        op = {"eq": "ne", "ne": "eq"}.get(cond.op) if negate else cond.op
        if op == "ne" and _dt.is_int(cond.a.dtype):
            lhs, rhs = to_affine(cond.a), to_affine(cond.b)
            if lhs is not None and rhs is not None:
                return [(solver.lt(lhs, rhs),), (solver.gt(lhs, rhs),)]
    return [()]


class _LocalWork(Mapper):
    """Per node: ``(float operations there, [(child, conditions under which it is
    evaluated)])``, or None for a reduction (its work is counted over its own domain).

    The conditions are those of the lowering: a select's branches under its condition
    and its negation, the right operand of ``&&`` (``||``) under the left (its negation);
    each is ``(condition, negated)``.
    """

    def _operation(self, e):
        return (1 if _dt.is_float(e.dtype) else 0), [(c, ()) for c in children(e)]

    def _free(self, e):
        return 0, [(c, ()) for c in children(e)]

    map_binary = map_neg = map_call = _operation
    map_const = map_var = map_compare = map_not = map_cast = map_read = _free

    def map_select(self, e):
        return 0, [(e.cond, ()), (e.true_value, ((e.cond, False),)),
                   (e.false_value, ((e.cond, True),))]

    def map_and(self, e):
        return 0, [(e.a, ()), (e.b, ((e.a, False),))]

    def map_or(self, e):
        return 0, [(e.a, ()), (e.b, ((e.a, True),))]

    def map_reduce(self, e):
        return None

    map_tuple_reduce = map_reduce


_LOCAL_WORK = _LocalWork()


def local_flops(e):
    """Float operations of ``e`` outside its reductions, and the reductions reached.

    Counted as if ``e`` were the tree it stands for: a node reached along several paths
    counts once per path. Each reduction comes as ``(reduction, conditions, times)``:
    the conditions (expressions) of the selects, ``&&`` and ``||`` around it under
    which it is evaluated, and the number of paths reaching it under them.

    The paths are counted, not followed: each node is visited once per distinct set
    of conditions above it (a condition met twice on a path counts once) (once, where no reduction is below it), in an order that
    visits every node after all the nodes above it, and passes its number of paths on
    to its children; so an expression that reuses its sub-expressions (a tree
    exponentially larger) costs time in its distinct nodes.

    >>> import tegrad as tg
    >>> x = tg.placeholder((4,), name="x")
    >>> e = x[0] * 2.0
    >>> local_flops(e * e + e)[0]
    5
    """
    order, reduces = [], {}

    def combine(node, kids):  # post-order: every node after those below it
        order.append(node)
        found = type(node) in REDUCTIONS or any(kids)
        reduces[id(node)] = found
        return found
    bottom_up(e, children, combine, whole=lambda node: type(node) in REDUCTIONS)
    # per node, {condition key: [conditions, paths]}; a node with no reduction below
    # has one entry, whatever the conditions (they change nothing there)
    # a key is the set of conditions (structurally: a condition built again at each
    # level of an expression is one condition), a guard the same in order of arrival
    states = {id(e): {frozenset(): [(), 1]}}
    count, reductions = 0, []
    for node in reversed(order):  # every node after all those above it
        here = states.pop(id(node))
        work = _LOCAL_WORK(node)
        if work is None:
            for guard, paths in here.values():
                reductions.append((node, tuple(Not(c) if negated else c
                                               for c, negated in guard), paths))
            continue
        flops, below = work
        count += flops * sum(paths for _, paths in here.values())
        for child, extra in below:
            into = states.setdefault(id(child), {})
            for key, (guard, paths) in here.items():
                if not reduces[id(child)]:
                    key, guard = frozenset(), ()
                elif extra and extra[0] not in key:
                    key, guard = key | {extra[0]}, guard + extra
                entry = into.setdefault(key, [guard, 0])
                entry[1] += paths
    return count, reductions


class _Space:
    """Variables ``(name, lo, end)`` of nested loops and the constraints on them."""

    def __init__(self, variables=(), alternatives=((),)):
        self.variables = tuple(variables)
        #: the space is the union of these conjunctions of constraints
        self.alternatives = tuple(alternatives)

    def nested(self, axes, conditions, stage):
        """The space of ``axes`` iterated inside this one, where one of the alternatives
        ``conditions`` (tuples of constraints) holds."""
        variables = list(self.variables)
        alternatives = [tuple(alt) + tuple(c) for alt in self.alternatives
                        for c in conditions]
        for ax in axes:
            lo_parts = _bound_parts(ax.lo, "max", ax, stage)
            end_parts = _bound_parts(axis_end(ax), "min", ax, stage)
            if len(lo_parts) == len(end_parts) == 1 and lo_parts[0][0] != "or" \
                    and end_parts[0][0] != "or":
                variables.append((ax.name, lo_parts[0][1], end_parts[0][1]))
                continue
            variables.append((ax.name, None, None))
            v = solver.Affine.var(ax.name)
            lower = _dnf([solver.ge(v, a) for _, a in lo_parts], lo_parts)
            upper = _dnf([solver.lt(v, a) for _, a in end_parts], end_parts)
            alternatives = [alt + lo + up for alt, lo, up
                            in itertools.product(alternatives, lower, upper)]
        return _Space(variables, alternatives)

    def count(self):
        known = {name for name, _, _ in self.variables}
        domains = []
        for alt in self.alternatives:
            conds = [c for c in alt if c.variables() <= known]
            domains.append(solver.Domain(self.variables, conds))
        return solver.count_union(domains)


def _dnf(constraints, parts):
    """Bound constraints as alternatives: all of them, or any one of them."""
    if parts[0][0] == "or":
        return [(c,) for c in constraints]
    return [tuple(constraints)]


def _bound_parts(e, same, ax, stage):
    """``[(kind, affine)]``: the bound ``e`` as the ``same`` ("max" for a lower bound,
    "min" for an end) of affine parts (kind "and"), or as the other extreme of them
    (kind "or"); a constant added to an extreme is distributed over its operands."""
    aff = to_affine(e)
    if aff is not None:
        return [("and", aff)]
    if type(e) is Binary and e.op in ("min", "max"):
        kind = "and" if e.op == same else "or"
        parts = _bound_parts(e.a, same, ax, stage) + _bound_parts(e.b, same, ax, stage)
        if all(k == "and" for k, _ in parts):
            return [(kind, a) for _, a in parts]
    if type(e) is Binary and e.op in ("add", "sub"):
        shift = to_affine(e.b)
        if shift is not None:
            parts = _bound_parts(e.a, same, ax, stage)
            return [(k, a + shift if e.op == "add" else a - shift) for k, a in parts]
    raise CountError(f"cost of {stage!r}: the bound {e} of the axis {ax.name!r} is not "
                     f"affine, so its points cannot be counted")


def _reduction_work(e, space, stage):
    """``(points, flops)`` of the reductions reached from ``e`` evaluated over ``space``.

    As lowered: a reduction's loops run where the conditions around it hold, over its
    bounds and the affine conjuncts of its ``where`` (the others are tested at each of
    those points); its source is evaluated where all of ``where`` holds, its ``init``
    around the loops. A reduction reached along several paths counts once per path.
    """
    points = flops = 0
    source_flops = {}  # id(source) -> (source, its local flops)
    stack = [(e, space, (), 1)]
    while stack:
        expr, outer, around, times = stack.pop()
        for red, guard, paths in local_flops(expr)[1]:
            guard, paths = around + guard, paths * times
            affine = affine_conditions(red.where)
            inner = outer.nested(red.axes, _and_alternatives(
                condition_alternatives(guard), [affine]), stage)
            n = inner.count()
            points += n * paths
            sources = red.sources if type(red) is TupleReduce else (red.source,)
            for source in sources:
                known = source_flops.get(id(source))
                if known is None:
                    known = source_flops[id(source)] = (source, local_flops(source)[0])
                flops += n * paths * known[1]
            flops += n * paths * _combine_flops(red)
            if type(red) is not TupleReduce and red.init is not None:
                stack.append((red.init, outer, guard, paths))
            if red.where is not None:
                stack.append((red.where, inner, (), paths))
                source = inner.nested((), condition_alternatives([red.where]), stage)
            else:
                source = inner
            stack.extend((s, source, (), paths) for s in sources)
    return points, flops


def _combine_flops(red):
    """Float operations of folding one point into a reduction: one (an add, a max), or
    those of the combine of a reduction of tuples (every component updated)."""
    if type(red) is not TupleReduce:
        return 1
    _, _, bodies = red.reducer.tuple_combiner(tuple(s.dtype for s in red.sources))
    return sum(local_flops(b)[0] for b in bodies)


def _stage_space(t):
    return _Space().nested(t.op.axes, [()], t.name)


def _pointwise_cost(t, e, combine_flops):
    """The cost of evaluating ``e`` at every point of ``t``'s stage, plus
    ``combine_flops`` at each."""
    points, flops = _reduction_work(e, _stage_space(t), t.name)
    return Cost(t.size + points, flops + t.size * (local_flops(e)[0] + combine_flops), 0)


class _StageCost(StageMapper):
    def map_placeholder(self, t):
        return Cost(0, 0, 0)

    def map_compute(self, t):
        return _pointwise_cost(t, t.op.body, 0)

    def map_scan(self, t):
        # n points per scan line of n elements: the source and one combine at each
        return _pointwise_cost(t, t.op.source, 1)

    def map_scatter(self, t):
        # each point where some target's affine condition holds is visited once; each
        # target costs its value and an accumulation where its whole condition holds
        space = _stage_space(t)
        guards = [affine_conditions(target.where) for target in t.op.targets]
        if any(not g for g in guards):
            points = space.count()
        else:
            points = _Space(space.variables, guards).count()
        flops = 0
        for target, guard in zip(t.op.targets, guards):
            where = space.nested((), [guard], t.name)
            if target.where is not None:
                where_points, where_flops = _reduction_work(target.where, where, t.name)
                points, flops = points + where_points, flops + where_flops
                where = space.nested((), condition_alternatives([target.where]), t.name)
            inner_points, inner_flops = _reduction_work(target.value, where, t.name)
            points += inner_points
            flops += inner_flops + where.count() * (1 + local_flops(target.value)[0])
        return Cost(points, flops, 0)


def stage_cost(t):
    """The iterations and flops of the stage of ``t`` alone."""
    return _StageCost()(t)


def cost(tensors):
    """Exact counts for all stages needed to compute ``tensors`` (see module docstring)."""
    outputs = as_tensor_list(tensors)
    wanted = {id(t) for t in outputs}
    total = Cost(0, 0, 0)
    groups = set()  # the stages of one reduction of a tuple are computed in one nest
    for t in topological_order(outputs):
        group = tuple_group(t)
        c = Cost(0, 0, 0) if group in groups else stage_cost(t)
        if group is not None:
            groups.add(group)
        memory = 0 if id(t) in wanted or is_placeholder(t) else t.size
        total = total + Cost(c.iterations, c.flops, memory)
    return total
