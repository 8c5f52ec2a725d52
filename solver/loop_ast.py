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
    if len(statements) == 1:
        box = _constant_box(variables, statements[0])
        if box is not None:
            return _box_loops(variables, box)
    domains = [_basic_set(variables, parameters, list(c)) for c in statements]
    return _loops(variables, parameters, domains, context)


def _constant_box(variables, constraints):
    """``[(lo, hi)]`` per variable when ``constraints`` are only constant bounds
    ``lo <= v < hi`` of single variables (each bounded both ways), else None."""
    lower, upper = {}, {}
    for con in constraints:
        terms = con.expr.terms
        if con.is_equality or len(terms) != 1:
            return None
        (name, coef), = terms
        c = con.expr.constant
        if type(name) is not str or name not in variables:
            return None
        if coef == 1:  # v + c >= 0: v >= -c
            lower[name] = max(lower.get(name, -c), -c)
        elif coef == -1:  # c - v >= 0: v < c + 1
            upper[name] = min(upper.get(name, c + 1), c + 1)
        else:
            return None
    if len(lower) != len(variables) or len(upper) != len(variables):
        return None
    return [(lower[v], upper[v]) for v in variables]


def _box_loops(variables, box):
    """The tree isl builds over a box (see :func:`_constant_box`), without isl: the
    points of a box are the product of its ranges, so nested loops over the ranges of
    more than one value visit each once (a range of one value is the point's constant;
    an empty range, no statement at all)."""
    if any(hi <= lo for lo, hi in box):
        return Seq(())
    values = tuple(("var", v) if hi - lo > 1 else ("int", lo)
                   for v, (lo, hi) in zip(variables, box))
    tree = Point(0, values)
    for v, (lo, hi) in reversed(list(zip(variables, box))):
        if hi - lo > 1:
            tree = Loop(v, ("int", lo), ("int", hi), 1, tree)
    return tree


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
    tree = _node(node, {f"c{d}": v for d, v in enumerate(variables)})
    _check_visits(tree, parameters, named, ctx)
    return tree


def _check_visits(tree, parameters, domains, ctx):
    """Raise ValueError unless ``tree`` visits exactly the points of each domain.

    isl's AST builder has produced trees that miss points (islpy 2026.2: a variable taken
    for fixed that has two values; a window ``lo <= 20 t <= lo + 3`` moving with two
    parameters, where whole rows of the parameters were dropped): the tree is therefore
    read back as sets and compared with the domains, where the context holds. Callers
    fall back to loops that test the conditions at each point.
    """
    pieces = {}
    _visits(tree, [], [], pieces)
    head = f"[{', '.join(parameters)}] -> "
    for k, dom in enumerate(domains):
        want = dom.intersect_params(ctx)
        got = None
        for loop_vars, conds in pieces.get(k, ()):
            outs = [f"_o{d}" for d in range(dom.dim(_SET))]
            body = " and ".join(conds(outs)) or "true"
            if loop_vars:
                body = f"exists ({', '.join(loop_vars)} : {body})"
            try:
                piece = isl.Set(f"{head}{{ S{k}[{', '.join(outs)}] : {body} }}")
            except isl.Error:
                raise ValueError("isl's loops could not be read back as a set") from None
            piece = piece.align_params(want.get_space()).intersect_params(ctx)
            if got is not None and not got.intersect(piece).is_empty():
                raise ValueError(f"isl's loops visit points of S{k} twice")
            got = piece if got is None else got.union(piece)
        if got is None:
            if not want.is_empty():
                raise ValueError(f"isl's loops never visit S{k}")
            continue
        if not got.is_equal(want.align_params(got.get_space())):
            raise ValueError(f"isl's loops do not visit exactly the points of S{k}")


def _visits(node, loop_vars, conds, pieces):
    """Collect, per statement, ``(loop variables, conditions(outputs))`` of each place the
    tree runs it (the conditions in isl's syntax, loop variables existential)."""
    if isinstance(node, Loop):
        v = ("var", node.var)
        here = [_isl_cond(("ge", v, node.lower)), _isl_cond(("lt", v, node.upper))]
        if node.step != 1:
            here.append(_isl_cond(("eq", ("mod", ("sub", v, node.lower), ("int", node.step)),
                                   ("int", 0))))
        _visits(node.body, loop_vars + [node.var], conds + here, pieces)
    elif isinstance(node, Guard):
        _visits(node.then, loop_vars, conds + [_isl_cond(node.cond)], pieces)
        if node.otherwise is not None:
            _visits(node.otherwise, loop_vars, conds + [_isl_cond(node.cond, negate=True)],
                    pieces)
    elif isinstance(node, Seq):
        for item in node.items:
            _visits(item, loop_vars, conds, pieces)
    else:
        def point_conds(outs, conds=tuple(conds), values=node.values):
            return list(conds) + [_isl_cond(("eq", ("var", o), v))
                                  for o, v in zip(outs, values)]
        pieces.setdefault(node.statement, []).append((list(loop_vars), point_conds))


_NEGATED = {"eq": None, "le": "gt", "lt": "ge", "ge": "lt", "gt": "le"}
_ISL_OPS = {"add": "+", "sub": "-", "mul": "*"}


def _isl_cond(e, negate=False):
    """A tree condition in isl's syntax (negated with ``negate``)."""
    op = e[0]
    if op in ("and", "or"):
        joint = {"and": " and ", "or": " or "}[op if not negate else
                                              ("or" if op == "and" else "and")]
        return "(" + joint.join(_isl_cond(a, negate) for a in e[1:]) + ")"
    if op not in _NEGATED:
        raise ValueError(f"loop tree condition {op!r}")
    # each operand is a set of (guards, value) alternatives whose guards partition the
    # space, so the comparison is the disjunction over pairs, and its negation too
    cases = []
    for ga, a in _isl_values(e[1]):
        for gb, b in _isl_values(e[2]):
            if negate and op == "eq":
                cmp = f"({a} < {b} or {a} > {b})"
            else:
                sym = {"eq": "=", "le": "<=", "lt": "<", "ge": ">=", "gt": ">"}[
                    _NEGATED[op] if negate else op]
                cmp = f"{a} {sym} {b}"
            cases.append("(" + " and ".join(ga + gb + [cmp]) + ")")
    return "(" + " or ".join(cases) + ")"


def _isl_values(e):
    """``[(guards, value)]``: the select-free values of a tree expression in isl's syntax,
    each where its guards hold (the guards of the list partition the space)."""
    op = e[0]
    if op == "int":
        return [([], str(e[1]))]  # isl reads "-2 * n" but not "(-2) * n"
    if op == "var":
        return [([], e[1])]
    if op == "select":
        cond = e[1]
        return ([([_isl_cond(cond)] + g, v) for g, v in _isl_values(e[2])]
                + [([_isl_cond(cond, negate=True)] + g, v) for g, v in _isl_values(e[3])])
    if op == "neg":
        return [(g, f"(-{v})") for g, v in _isl_values(e[1])]
    out = [([], None)]
    for arg in e[1:]:
        out = [(g + ga, [*(vs or []), va]) for g, vs in out for ga, va in _isl_values(arg)]
    if op in _ISL_OPS:
        return [(g, "(" + f" {_ISL_OPS[op]} ".join(vs) + ")") for g, vs in out]
    if op in ("min", "max"):
        return [(g, f"{op}({', '.join(vs)})") for g, vs in out]
    if op in ("floordiv", "mod"):
        if e[2][0] != "int" or e[2][1] <= 0:
            raise ValueError("loop tree division by a non-constant")
        form = "floor({0}/{1})" if op == "floordiv" else "({0} mod {1})"
        return [(g, form.format(*vs)) for g, vs in out]
    raise ValueError(f"loop tree operation {op!r}")


def _node(n, names):
    """The tree of the isl AST ``n``."""
    t = n.get_type()
    if t == isl.ast_node_type.for_:
        var = names[n.for_get_iterator().get_id().get_name()]
        lower = _expr(n.for_get_init(), names)
        body = _node(n.for_get_body(), names)
        if n.for_is_degenerate():
            return Loop(var, lower, _plus_one(lower), 1, body)
        return Loop(var, lower, _upper(n.for_get_cond(), var, names), _int(n.for_get_inc()),
                    body)
    if t == isl.ast_node_type.if_:
        otherwise = (_node(n.if_get_else_node(), names)
                     if n.if_has_else_node() else None)
        return Guard(_expr(n.if_get_cond(), names),
                     _node(n.if_get_then_node(), names), otherwise)
    if t == isl.ast_node_type.block:
        children = n.block_get_children()
        return Seq(tuple(_node(children.get_at(i), names)
                         for i in range(children.n_ast_node())))
    if t == isl.ast_node_type.user:
        call = n.user_get_expr()
        statement = int(call.get_op_arg(0).get_id().get_name()[1:])
        values = tuple(_expr(call.get_op_arg(j), names) for j in range(1, call.get_op_n_arg()))
        return Point(statement, values)
    if t == isl.ast_node_type.mark:
        return _node(n.mark_get_node(), names)
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
