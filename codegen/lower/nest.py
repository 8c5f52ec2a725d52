"""Loop nests over integer domains: isl's loops, turned into loop-IR statements.

A domain is a list of variables in loop order with bounds (expressions of outer values)
and affine conditions. :func:`domain_nest` asks :func:`tegrad.solver.loop_ast.build_loops`
for loops that visit exactly its points (bounds that depend on outer loops, strides from
divisibility conditions, variables fixed by equalities become a :class:`Let`), so no
condition the domain states is tested per iteration. Bounds that are not affine (they
read data) fall back to plain loops with the conditions tested inside.

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.solver.constraint import eq
>>> from tegrad.solver.affine import Affine
>>> from tegrad.codegen.loops.nodes import Buffer, Store
>>> from tegrad.codegen.loops.printer import format_stmt
>>> B = Buffer("B", (8,), "float64", "output")
>>> k = Var("k", "int64")
>>> s = domain_nest([(k, Const(0, "int64"), Const(8, "int64"))],
...                 [eq(Affine.var("k") % 4, 1)], [], lambda: Store(B, (k,), Const(1.0, "float64")))
>>> print(format_stmt(s))
for (k = 1; k < 8; k += 4) {
  B[k] = 1.0;
}
"""
from __future__ import annotations

from tegrad import solver
from tegrad.solver import loop_ast
from tegrad.ir.expr import And, Binary, Compare, Const, Neg, Or, Select, Var, structural_equal
from tegrad.analysis.affine import conjunction, from_constraint

from tegrad.codegen.loops.mapper import block, substitute_stmt, to_affine
from tegrad.codegen.loops.nodes import Block, For, If, Let

INDEX = "int64"


def const(v):
    return Const(int(v), INDEX)


def _terms(e, op):
    """The operands of a chain of ``op`` (min or max) as a list."""
    if type(e) is Binary and e.op == op:
        return _terms(e.a, op) + _terms(e.b, op)
    return [e]


def bound_constraints(var, lo, end):
    """Constraints ``lo <= var < end`` (``max``/``min`` chains split), or None."""
    out = []
    v = solver.Affine.var(var.name)
    for e in _terms(lo, "max"):
        a = to_affine(e)
        if a is None:
            return None
        out.append(solver.ge(v, a))
    for e in _terms(end, "min"):
        a = to_affine(e)
        if a is None:
            return None
        out.append(solver.lt(v, a))
    return out


def tree_expr(e):
    """The int64 (or bool) expression of a :mod:`solver.loop_ast` tree expression."""
    op = e[0]
    if op == "int":
        return const(e[1])
    if op == "var":
        return Var(e[1], INDEX)
    args = [tree_expr(a) for a in e[1:]]
    if op == "neg":
        return Neg(args[0], INDEX)
    if op in ("add", "sub", "mul", "floordiv", "min", "max"):
        out = args[0]
        for a in args[1:]:
            out = Binary(op, out, a, INDEX)
        return out
    if op == "mod":
        return Binary("floormod", args[0], args[1], INDEX)
    if op in ("eq", "le", "lt", "ge", "gt"):
        return Compare(op, args[0], args[1])
    if op in ("and", "or"):
        out = args[0]
        for a in args[1:]:
            out = And(out, a) if op == "and" else Or(out, a)
        return out
    if op == "select":
        return Select(args[0], args[1], args[2], args[1].dtype)
    raise ValueError(f"unknown loop tree operation {op!r}")


def _stmt(node, bodies, variables, lets, loops=frozenset()):
    """The loop IR of tree ``node``; ``loops``: the variables of the loops around it."""
    if isinstance(node, loop_ast.Loop):
        var = Var(node.var, INDEX)
        lower, upper = tree_expr(node.lower), tree_expr(node.upper)
        body = _stmt(node.body, bodies, variables, lets, loops | {node.var})
        if _single_trip(node):
            return Let(var, lower, body)
        return For(var, lower, upper, body, "serial", node.step)
    if isinstance(node, loop_ast.Guard):
        otherwise = (None if node.otherwise is None
                     else _stmt(node.otherwise, bodies, variables, lets, loops))
        return If(tree_expr(node.cond), _stmt(node.then, bodies, variables, lets, loops),
                  otherwise)
    if isinstance(node, loop_ast.Seq):
        return block(merge_lets([_stmt(c, bodies, variables, lets, loops)
                                 for c in node.items]))
    return fixed_point(bodies[node.statement], {
        name: tree_expr(value) for name, value in zip(variables, node.values)
        if value != ("var", name)}, lets, loops)


def merge_lets(stmts):
    """Adjacent lets of one variable to one value as one let around both bodies.

    ``let v = e in A; let v = e in B`` == ``let v = e in (A; B)`` (the bodies do not
    assign ``v``): statements isl places at the same point share their fixed value, and
    the point is visited once.
    """
    out = []
    for s in stmts:
        prev = out[-1] if out else None
        if (type(s) is Let and type(prev) is Let and prev.var.name == s.var.name
                and structural_equal(prev.value, s.value)):
            body = block(merge_lets(_statements(prev.body) + _statements(s.body)))
            out[-1] = Let(prev.var, prev.value, body)
        else:
            out.append(s)
    return out


def _statements(s):
    return list(s.stmts) if type(s) is Block else [s]


def fixed_point(body, values, lets, loops=()):
    """``body()`` where some variables have one value each: lets, or values substituted.

    With ``lets`` every fixed variable is a :class:`Let` (a reduction's single-trip
    loop, one point of its domain); otherwise constants are substituted. A variable of
    an enclosing loop (``loops``: isl's unrolled points, ``i = c + 1`` for the loop
    ``c`` named ``i``) is always substituted, all at once: a let would shadow the loop,
    and the other values, written in terms of the loop, would see the new value.
    """
    inline = {n: v for n, v in values.items()
              if n in loops or (not lets and type(v) is Const)}
    stmt = substitute_stmt(body(), inline)
    for name, value in reversed(list(values.items())):
        if name not in inline:
            stmt = Let(Var(name, INDEX), value, stmt)
    return stmt


def _single_trip(node):
    lo, up = node.lower, node.upper
    if lo[0] == "int" and up[0] == "int":
        return up[1] - lo[1] == 1
    return up == ("add", lo, ("int", 1))


def domain_nest(axes, conditions, context, body, more=(), lets=True):
    """Loops over ``axes`` (``(var, lo, end)``) where the solver ``conditions`` hold.

    ``context`` lists solver constraints known to hold on the outer values; ``body()``
    builds the statement run at each point. ``more`` adds statements over the same
    axes: ``(conditions, body)`` pairs, each run where its own conditions hold; each
    point of the union of their domains is visited once, running the statements that
    hold there (in order). A variable with a single value is a :class:`Let` (with
    ``lets``; else a constant value is substituted).
    """
    statements = [(list(conditions), body)] + [(list(c), b) for c, b in more]
    names = [v.name for v, _, _ in axes]
    bounds = []
    for v, lo, end in axes:
        b = bound_constraints(v, lo, end)
        if b is None:
            return _plain_nest(axes, statements)
        bounds += b
    systems = [bounds + conds for conds, _ in statements]
    free = set()
    for system in systems:
        for c in system:
            free |= c.variables()
    params = sorted(free - set(names))
    ctx = [c for c in context if c.variables() <= set(params)]
    try:
        if len(systems) == 1:
            tree = loop_ast.build_loops(names, params, systems, ctx)
            bodies = [body]
        else:
            tree, pieces = loop_ast.build_disjoint_loops(names, params, systems, ctx)
            bodies = [_piece_body([statements[k][1] for k in active]) for active in pieces]
    except ValueError:  # an AST isl builds that the tree does not express
        return _plain_nest(axes, statements)
    return _stmt(tree, bodies, names, lets)


def _piece_body(bodies):
    return lambda: block([b() for b in bodies])


def _plain_nest(axes, statements):
    """Loops straight from the bounds, conditions tested at each point; those of one
    statement alone that name none of the loops' variables (``i * 3 % 2 == 0`` of an
    outer ``i``) tested once, around the loops: they hold at every point or at none."""
    names = {v.name for v, _, _ in axes}
    outside = []
    if len(statements) == 1:
        conds, body = statements[0]
        outside = [c for c in conds if not c.variables() & names]
        statements = [([c for c in conds if c.variables() & names], body)]
    parts = []
    for conds, body in statements:
        stmt = body()
        if conds:
            stmt = If(conjunction([from_constraint(c, INDEX) for c in conds]), stmt)
        parts.append(stmt)
    stmt = block(parts)
    for v, lo, end in reversed(axes):
        stmt = For(v, lo, end, stmt)
    if outside:
        stmt = If(conjunction([from_constraint(c, INDEX) for c in outside]), stmt)
    return stmt

