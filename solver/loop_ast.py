"""Loops that visit exactly the integer points of a domain (isl's AST builder).

Given variables in loop order, the parameters (values fixed outside the loops), one or
more statements each with its constraints over them, and the known facts about the
parameters, :func:`build_loops` returns a small tree: :class:`Loop` (``for var in
range(lower, upper, step)``), :class:`Guard` (a condition on outer values), :class:`Seq`
and :class:`Point` (statement ``k`` runs with each variable equal to an expression;
a variable fixed by the constraints gets no loop, only its value there).

Expressions in the tree are nested tuples: ``("int", v)``, ``("var", name)``, and
``(op, *operands)`` for op in ``add sub mul neg floordiv mod min max select eq le lt
ge gt and or`` (``floordiv``/``mod`` round toward minus infinity, as Python's).

>>> from tegrad.solver.constraint import ge, lt, eq
>>> from tegrad.solver.affine import Affine
>>> k, i = Affine.var("k"), Affine.var("i")
>>> tree = build_loops(["k"], ["i"], [[ge(k, 0), lt(k, 8), eq((k - i) % 2, 0)]],
...                    [ge(i, 0), lt(i, 4)])
>>> print(format_tree(tree))
for k in range((-((i + 1) % 2)) + 1, 8, 2):
  S0(k)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import islpy as isl

from .isl_bridge import IslSystem

__all__ = ["Loop", "Guard", "Seq", "Point", "build_loops", "build_disjoint_loops",
           "format_tree"]

_SET = isl.dim_type.set
_PARAM = isl.dim_type.param


@dataclass(frozen=True)
class Loop:
    """``for var in range(lower, upper, step): body``."""

    var: str
    lower: tuple
    upper: tuple
    step: int
    body: object


@dataclass(frozen=True)
class Guard:
    """``if cond: then`` (else ``otherwise`` when not None)."""

    cond: tuple
    then: object
    otherwise: object = None


@dataclass(frozen=True)
class Seq:
    """Nodes run in order."""

    items: tuple


@dataclass(frozen=True)
class Point:
    """Statement ``statement`` at the point where variable ``d`` equals ``values[d]``."""

    statement: int
    values: tuple


def _basic_set(variables, parameters, constraints):
    """The constraints as an isl set over exactly ``variables`` and ``parameters``."""
    system = IslSystem(variables, parameters, constraints)
    bset = system.basic_set(constraints)
    n_set_atoms = bset.dim(_SET) - len(variables)
    n_param_atoms = bset.dim(_PARAM) - len(parameters)
    if n_set_atoms:
        bset = bset.project_out(_SET, len(variables), n_set_atoms)
    if n_param_atoms:
        bset = bset.project_out(_PARAM, len(parameters), n_param_atoms)
    return isl.Set.from_basic_set(bset)


def build_loops(variables: Sequence[str], parameters: Sequence[str], statements,
                context=()):
    """Loops over the union of the statements' domains (see the module docstring).

    ``statements`` is a list of constraint lists over ``variables`` and ``parameters``;
    ``context`` lists constraints over the parameters known to hold.
    """
    variables, parameters = list(variables), list(parameters)
    domains = [_basic_set(variables, parameters, list(c)) for c in statements]
    return _loops(variables, parameters, domains, context)


def build_disjoint_loops(variables: Sequence[str], parameters: Sequence[str], statements,
                         context=()):
    """``(tree, pieces)``: loops visiting each point of the union of the statements'
    domains once, running there every statement whose domain holds it.

    The union is split into disjoint pieces, each with the set of statements active on
    all of its points; :class:`Point` ``k`` of the tree runs the statements
    ``pieces[k]`` (in the given order). Invariant: for every point ``p`` of the union,
    ``{s : p in domain(s)} == pieces[k]`` for the one piece ``k`` holding ``p``.

    >>> from tegrad.solver.constraint import ge, lt
    >>> from tegrad.solver.affine import Affine
    >>> k = Affine.var("k")
    >>> tree, pieces = build_disjoint_loops(["k"], [], [[ge(k, 0), lt(k, 3)],
    ...                                                 [ge(k, 2), lt(k, 5)]])
    >>> print(format_tree(tree)); pieces
    for k in range(0, 2):
      S0(k)
    S1(2)
    for k in range(3, 5):
      S2(k)
    [(0,), (0, 1), (1,)]
    """
    variables, parameters = list(variables), list(parameters)
    refined = []  # (isl set, statements active on it), disjoint
    for k, constraints in enumerate(statements):
        dom = _basic_set(variables, parameters, list(constraints))
        rest, out = dom, []
        for piece, active in refined:
            both = piece.intersect(dom).coalesce()
            alone = piece.subtract(dom).coalesce()
            rest = rest.subtract(piece)
            out += [(s, a) for s, a in ((both, active + (k,)), (alone, active))
                    if not s.is_empty()]
        rest = rest.coalesce()
        if not rest.is_empty():
            out.append((rest, (k,)))
        refined = out
    # one statement per convex part (a fixed variable is then fixed on all of it)
    parts = [(isl.Set.from_basic_set(b), active) for piece, active in refined
             for b in piece.make_disjoint().get_basic_sets()]
    parts.sort(key=lambda p: p[1])
    if not parts:
        return Seq(()), []
    tree = _loops(variables, parameters, [s for s, _ in parts], context)
    return tree, [a for _, a in parts]


def _loops(variables, parameters, domains, context):
    """The tree of loops over the isl sets ``domains`` (statement ``k`` on ``domains[k]``)."""
    schedule = None
    named = []
    for k, dom in enumerate(domains):
        dom = dom.set_tuple_name(f"S{k}")
        named.append(dom)
        m = isl.Map.identity(dom.get_space().map_from_set()).intersect_domain(dom)
        m = isl.UnionMap.from_map(m.reset_tuple_id(isl.dim_type.out))
        schedule = m if schedule is None else schedule.union(m)
    try:
        ctx = _basic_set([], parameters, list(context)).params()
        node = isl.AstBuild.from_context(ctx).node_from_schedule_map(schedule)
    except isl.Error as err:
        raise ValueError(f"isl could not build loops: {err}") from None
    fixed = {}
    tree = _node(node, {f"c{d}": v for d, v in enumerate(variables)}, frozenset(), fixed)
    for k, names in fixed.items():
        for d, v in enumerate(variables):
            # single-valued where the context holds (the loops run only there)
            if v in names and not _single_valued(named[k].intersect_params(ctx), d):
                # isl's AST builder can take a variable with several values for a fixed
                # one (seen with islpy 2026.2); such loops would skip points
                raise ValueError(f"isl fixed {v!r}, which has several values")
    return tree


def _single_valued(dom, d):
    """Variable ``d`` of ``dom`` has one value for given parameters and earlier variables."""
    n = dom.dim(_SET)
    s = dom.project_out(_SET, d + 1, n - d - 1)
    m = isl.Map.from_range(s).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, d)
    return m.is_single_valued()


def _node(n, names, loops, fixed):
    """The tree of the isl AST ``n``; ``fixed[k]`` collects the variables statement ``k``
    gets a value for without a loop over them (``loops``: the loops around ``n``)."""
    t = n.get_type()
    if t == isl.ast_node_type.for_:
        var = names[n.for_get_iterator().get_id().get_name()]
        lower = _expr(n.for_get_init(), names)
        if n.for_is_degenerate():
            body = _node(n.for_get_body(), names, loops, fixed)
            return Loop(var, lower, _plus_one(lower), 1, body)
        body = _node(n.for_get_body(), names, loops | {var}, fixed)
        return Loop(var, lower, _upper(n.for_get_cond(), var, names), _int(n.for_get_inc()),
                    body)
    if t == isl.ast_node_type.if_:
        otherwise = (_node(n.if_get_else_node(), names, loops, fixed)
                     if n.if_has_else_node() else None)
        return Guard(_expr(n.if_get_cond(), names),
                     _node(n.if_get_then_node(), names, loops, fixed), otherwise)
    if t == isl.ast_node_type.block:
        children = n.block_get_children()
        return Seq(tuple(_node(children.get_at(i), names, loops, fixed)
                         for i in range(children.n_ast_node())))
    if t == isl.ast_node_type.user:
        call = n.user_get_expr()
        statement = int(call.get_op_arg(0).get_id().get_name()[1:])
        values = tuple(_expr(call.get_op_arg(j), names) for j in range(1, call.get_op_n_arg()))
        fixed.setdefault(statement, set()).update(set(names.values()) - loops)
        return Point(statement, values)
    if t == isl.ast_node_type.mark:
        return _node(n.mark_get_node(), names, loops, fixed)
    raise ValueError(f"unexpected isl AST node {t}")


def _upper(cond, var, names):
    """The exclusive upper bound of ``var`` from a loop condition ``var <= x`` or ``var < x``."""
    op = _expr(cond, names)
    if op[0] in ("le", "lt") and op[1] == ("var", var):
        return _plus_one(op[2]) if op[0] == "le" else op[2]
    if op[0] in ("ge", "gt") and op[2] == ("var", var):
        return _plus_one(op[1]) if op[0] == "ge" else op[1]
    raise ValueError(f"unexpected loop condition {cond.to_C_str()}")


def _plus_one(e):
    return ("int", e[1] + 1) if e[0] == "int" else ("add", e, ("int", 1))


def _int(e):
    return int(e.get_val().to_str())


_OPS = {
    "add": "add", "sub": "sub", "mul": "mul", "minus": "neg", "div": "floordiv",
    "fdiv_q": "floordiv", "pdiv_q": "floordiv", "pdiv_r": "mod", "zdiv_r": "mod",
    "min": "min", "max": "max", "select": "select", "cond": "select", "eq": "eq",
    "le": "le", "lt": "lt", "ge": "ge", "gt": "gt", "and_": "and", "and_then": "and",
    "or_": "or", "or_else": "or",
}


def _expr(e, names):
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return ("int", _int(e))
    if t == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        return ("var", names.get(name, name))
    kind = str(e.get_op_type()).rsplit(".", 1)[-1]
    try:
        op = _OPS[kind]
    except KeyError:
        raise ValueError(f"unexpected isl AST operation {kind}") from None
    args = tuple(_expr(e.get_op_arg(j), names) for j in range(e.get_op_n_arg()))
    return (op,) + args


def format_expr(e):
    """Readable text of a tree expression."""
    op = e[0]
    if op == "int":
        return str(e[1])
    if op == "var":
        return e[1]
    if op == "neg":
        return f"-{_operand(e[1])}"
    symbols = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "eq": "==",
               "le": "<=", "lt": "<", "ge": ">=", "gt": ">", "and": "and", "or": "or"}
    if op in symbols:
        return f" {symbols[op]} ".join(_operand(a) for a in e[1:])
    return f"{op}({', '.join(format_expr(a) for a in e[1:])})"


def _operand(e):
    return format_expr(e) if e[0] in ("int", "var") or e[0] in ("min", "max") \
        else f"({format_expr(e)})"


def format_tree(node, depth=0):
    """Readable text of a loop tree."""
    pad = "  " * depth
    if isinstance(node, Loop):
        step = f", {node.step}" if node.step != 1 else ""
        head = (f"{pad}for {node.var} in range({format_expr(node.lower)}, "
                f"{format_expr(node.upper)}{step}):")
        return head + "\n" + format_tree(node.body, depth + 1)
    if isinstance(node, Guard):
        text = f"{pad}if {format_expr(node.cond)}:\n" + format_tree(node.then, depth + 1)
        if node.otherwise is not None:
            text += f"\n{pad}else:\n" + format_tree(node.otherwise, depth + 1)
        return text
    if isinstance(node, Seq):
        return "\n".join(format_tree(c, depth) for c in node.items)
    return f"{pad}S{node.statement}({', '.join(format_expr(v) for v in node.values)})"
