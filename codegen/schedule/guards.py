"""Guards that bound a loop become the loop's bounds.

``for x in [b, e): if (c1 && c2 ...) body``, where each condition on ``x`` is a
comparison ``x + rest < k`` (or ``-x + rest < k``, the other comparisons and ``>= max(p,
q)`` / ``< min(p, q)`` splitting into such ones) with ``rest`` free of ``x``, becomes
``if (conditions free of x) for x in [max(b, ...), min(e, ...)): body``: the same values
of ``x`` run the body, so the loop runs without a test per iteration (and vectorises
over a padded border).

>>> from tegrad.ir.expr import Var, Const, Compare
>>> from tegrad.codegen.loops.nodes import Buffer, For, If, Load, Store
>>> from tegrad.codegen.loops.printer import format_stmt
>>> i, X = Var("i", "int64"), Buffer("X", (8,), "float64", "input")
>>> Y = Buffer("Y", (8,), "float64", "output")
>>> loop = For(i, Const(0, "int64"), Const(8, "int64"),
...            If(Compare("ge", i, Const(1, "int64")), Store(Y, (i,), Load(X, (i - 1,)))))
>>> print(format_stmt(guards_to_bounds(loop)))
for (i = 1; i < 8; i++) {
  Y[i] = X[i - 1];
}
"""
from __future__ import annotations

from tegrad import solver
from tegrad.analysis.affine import from_affine
from tegrad.analysis.simplify import simplify
from tegrad.ir.expr import And, Binary, Compare, Const

from tegrad.codegen.loops.mapper import to_affine, walk_stmts
from tegrad.codegen.loops.nodes import For, If
from tegrad.codegen.schedule.common import NotingMapper, run_noting, uses_var

INDEX = "int64"

#: ``a op max(p, q)`` (or ``min``) that is ``a op p && a op q``
_SPLITS_RIGHT = {("ge", "max"), ("gt", "max"), ("le", "min"), ("lt", "min")}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def _extremum(e):
    """``(op, terms)`` when ``e`` is ``max``/``min`` of ``terms`` (plus a constant)."""
    if type(e) is Binary and e.op in ("max", "min"):
        return e.op, [e.a, e.b]
    if type(e) is Binary and e.op in ("add", "sub") and type(e.b) is Const:
        inner = _extremum(e.a)
        if inner is not None:
            return inner[0], [Binary(e.op, t, e.b, INDEX) for t in inner[1]]
    return None


def _atoms(cond):
    """``cond`` as a list of conditions all of which must hold."""
    if type(cond) is And:
        return _atoms(cond.a) + _atoms(cond.b)
    if type(cond) is Compare and cond.op in _FLIP:
        right = _extremum(cond.b)
        if right is not None and (cond.op, right[0]) in _SPLITS_RIGHT:
            return [a for t in right[1] for a in _atoms(Compare(cond.op, cond.a, t))]
        left = _extremum(cond.a)
        if left is not None and (_FLIP[cond.op], left[0]) in _SPLITS_RIGHT:
            return [a for t in left[1] for a in _atoms(Compare(cond.op, t, cond.b))]
    return [cond]


def _bound(atom, name):
    """``("end", e)`` for ``x < e``, ``("begin", b)`` for ``x >= b``, or None."""
    if type(atom) is not Compare or atom.op not in _FLIP:
        return None
    diff = to_affine(Binary("sub", atom.a, atom.b, INDEX))
    if diff is None:
        return None
    c = dict(diff.terms).get(name, 0)
    if abs(c) != 1 or any(type(a) is not str and name in a.variables() for a, _ in diff.terms):
        return None
    rest = diff - solver.Affine({name: c})
    sign, k = {"lt": (1, 0), "le": (1, 1), "gt": (-1, 0), "ge": (-1, 1)}[atom.op]
    c, rest = c * sign, rest * sign  # now c * x + rest < k
    if c == 1:
        return "end", from_affine(solver.Affine({}, k) - rest)
    return "begin", from_affine(rest - solver.Affine({}, k - 1))


def _guarded_body(loop):
    conds, body = [], loop.body
    while type(body) is If and body.otherwise is None:
        conds.append(body.cond)
        body = body.then
    return conds, body


def guards_to_bounds(loop):
    """``loop`` with its guards on its variable as bounds (module doc), or ``loop``."""
    if type(loop) is not For or loop.step != 1 or loop.kind == "unrolled":
        return loop  # an unrolled loop keeps its constant trip count
    conds, body = _guarded_body(loop)
    name = loop.var.name
    atoms = [a for c in conds for a in _atoms(c)]
    outer, begins, ends = [], [loop.begin], [loop.end]
    for atom in atoms:
        if not uses_var(atom, name):
            outer.append(atom)
            continue
        found = _bound(atom, name)
        if found is None:
            return loop
        (begins if found[0] == "begin" else ends).append(found[1])
    if len(begins) + len(ends) == 2:
        return loop
    begin, end = begins[0], ends[0]
    for b in begins[1:]:
        begin = Binary("max", begin, b, INDEX)
    for e in ends[1:]:
        end = Binary("min", end, e, INDEX)
    begin, end = simplify(begin), simplify(end)
    constant = type(begin) is Const and type(end) is Const
    kind = loop.kind if constant or loop.kind in ("serial", "parallel") else "serial"
    out = For(loop.var, begin, end, body, kind, loop.step)
    for atom in reversed(outer):
        out = If(atom, out)
    return out


class _Bounds(NotingMapper):
    def map_for(self, s):
        s = super().map_for(s)
        if not self.allowed(s.var.name) or any(type(m) is For for m in walk_stmts(s.body)):
            return s
        new = guards_to_bounds(s)
        if new is not s:
            self.changed.append(s.var.name)
        return new


def innermost_guards_to_bounds(s, *, changed=None, only=None):
    """``s`` with :func:`guards_to_bounds` applied to its innermost loops (those named in
    ``only`` when given; their names appended to the list ``changed`` when given)."""
    return run_noting(_Bounds(only), s, changed)


__all__ = ["guards_to_bounds", "innermost_guards_to_bounds"]
