"""Readable text for expressions and tensor programs, one stage per line.

>>> import tegrad as tg
>>> A = tg.placeholder((4, 8), name="A")
>>> k = tg.reduce_axis((0, 8), name="k")
>>> S = tg.compute((4,), lambda i: tg.sum(A[i, k], axis=k), name="S")
>>> print(tg.format(S))
A = placeholder((4, 8), float32)
S[i] = sum(A[i, k], k in [0, 8))
"""
from __future__ import annotations

import math

from tegrad.ir.expr import TEXT, Binary, Const, IterVar, Var, fold_bound
from tegrad.ir.graph import topological_order
from tegrad.ir.mapper import CombineMapper, bottom_up, walk
from tegrad.ir.stages import StageMapper

_BINARY_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//",
                  "floormod": "%"}
_BINARY_PREC = {"add": 5, "sub": 5, "mul": 6, "div": 6, "floordiv": 6, "floormod": 6}
_COMPARE_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
#: the precedence of an atom (never parenthesised)
ATOM = 9


def _const_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


def _paren(result, min_prec):
    text, prec = result
    return ("(", text, ")") if prec < min_prec else text


def _join(fragments, sep):
    out = []
    for k, f in enumerate(fragments):
        if k:
            out.append(sep)
        out.append(f)
    return tuple(out)


def _flatten(text):
    """The string of a text fragment: a string or a nested tuple of fragments."""
    out, stack = [], [text]
    while stack:
        f = stack.pop()
        if type(f) is str:
            out.append(f)
        else:
            stack.extend(reversed(f))
    return "".join(out)


class ExprText(CombineMapper):
    """``(text, precedence)`` of an expression, built bottom-up without recursion.

    Texts are nested tuples of strings (joined once, by :meth:`text`), so a deep
    expression prints in linear time. ``names`` maps ``id(tensor)`` to the name printed
    for its reads (unique names).
    """

    def __init__(self, names=None):
        self.names = names or {}

    def tensor_name(self, t):
        return self.names.get(id(t), t.name)

    def text(self, e):
        """The text of ``e``; one whose tree is larger than :data:`TREE_LIMIT` nodes (an
        expression reusing its sub-expressions) names its shared sub-expressions
        (:meth:`abbreviated`)."""
        if _tree_size(e, self.children_of) > TREE_LIMIT:
            return self.abbreviated(e)
        return _flatten(self(e)[0])

    def abbreviated(self, e):
        """``let $1 = ..., $2 = ... in ...``: the text of ``e`` with each sub-expression
        it reaches along more than one path (but variables and constants) written once,
        named ``$n``, and its name written for it elsewhere. A name stands for its text,
        as if written out in its place (a reduce axis it uses is the one around that
        place). The text is as long as the distinct nodes of ``e``, however large its
        tree.

        >>> from tegrad.ir.expr import Var
        >>> e = Var("i") * 2
        >>> ExprText().abbreviated((e + 1) * (e + 1) + e)
        'let $1 = i * 2 in ($1 + 1) * ($1 + 1) + $1'
        """
        uses = {}
        for node in walk(e, self.children_of):
            for c in self.children_of(node):
                uses[id(c)] = uses.get(id(c), 0) + 1
        bindings = []

        def combine(node, kids):
            out = self.method_for(type(node), node)(node, *kids)
            if uses.get(id(node), 0) < 2 or type(node) in (Const, Var):
                return out
            name = f"${len(bindings) + 1}"
            bindings.append((name, " = ", out[0]))
            return name, ATOM
        body = bottom_up(e, self.children_of, combine)[0]
        if not bindings:
            return _flatten(body)
        return _flatten(("let ", _join(bindings, ", "), " in ", body))

    def map_const(self, e):
        text = _const_text(e.value)
        return text, (7 if text.startswith("-") else ATOM)

    def map_var(self, e):
        return e.name, ATOM

    def map_binary(self, e, a, b):
        if e.op in ("min", "max"):
            return (e.op, "(", a[0], ", ", b[0], ")"), ATOM
        op = e.op
        if op in ("add", "sub") and type(e.b) is Const and e.b.value < 0:
            # x + -c prints as x - c
            op = "sub" if op == "add" else "add"
            b = self.map_const(Const(-e.b.value, e.b.dtype))
        prec = _BINARY_PREC[op]
        # left-associative: the right operand needs parentheses at equal precedence
        return (_paren(a, prec), f" {_BINARY_SYMBOL[op]} ", _paren(b, prec + 1)), prec

    def map_neg(self, e, a):
        return ("-", _paren(a, 7)), 7

    def map_compare(self, e, a, b):
        return (_paren(a, 5), f" {_COMPARE_SYMBOL[e.op]} ", _paren(b, 5)), 4

    def map_and(self, e, a, b):
        return (_paren(a, 2), " && ", _paren(b, 2)), 2

    def map_or(self, e, a, b):
        return (_paren(a, 1), " || ", _paren(b, 1)), 1

    def map_not(self, e, a):
        return ("!", _paren(a, 8)), 8

    def map_select(self, e, c, t, f):
        return (_paren(c, 4), " ? ", _paren(t, 1), " : ", _paren(f, 0)), 0

    def map_cast(self, e, a):
        return (e.dtype, "(", a[0], ")"), ATOM

    def map_call(self, e, *args):
        return (e.name, "(", _join([a[0] for a in args], ", "), ")"), ATOM

    def map_read(self, e, *indices):
        return (self.tensor_name(e.tensor), "[", _join([i[0] for i in indices], ", "), "]"), \
            ATOM

    def map_reduce(self, e, source, *rest):
        parts = [source[0]] + [self.axis(ax) for ax in e.axes]
        n = 2 * len(e.axes)
        if e.where is not None:
            parts.append(("where ", rest[n][0]))
            n += 1
        if e.init is not None:
            parts.append(("init ", rest[n][0]))
        return (e.reducer.name, "(", _join(parts, ", "), ")"), ATOM

    def map_tuple_reduce(self, e, *kids):
        n = len(e.sources)
        parts = [("(", _join([k[0] for k in kids[:n]], ", "), ",)" if n == 1 else ")")]
        parts += [self.axis(ax) for ax in e.axes]
        if e.where is not None:
            parts.append(("where ", kids[n + 2 * len(e.axes)][0]))
        return (e.reducer.name, "(", _join(parts, ", "), ")[", str(e.index), "]"), ATOM

    def axis(self, ax):
        """``k in [lo, end)``."""
        return f"{ax.name} in [{self.text(ax.lo)}, {self.text(axis_end(ax))})"


#: an expression whose tree has more nodes than this prints with its shared
#: sub-expressions named: written out, its text would be as large as its tree
TREE_LIMIT = 10_000


def _tree_size(e, children_of):
    """The number of nodes of ``e`` as a tree (a node once per path reaching it), or
    ``TREE_LIMIT + 1`` when larger; in time linear in the distinct nodes."""
    return bottom_up(e, children_of,
                     lambda node, kids: min(TREE_LIMIT + 1, 1 + sum(kids)))


def axis_end(ax):
    """The exclusive end of an axis, read back from ``lo + extent`` where possible."""
    ext = ax.extent
    if type(ext) is Binary and ext.op == "sub" and bool(ext.b == ax.lo):
        return ext.a
    return fold_bound(ax.lo + ax.extent)


def format_expr(e):
    """The text of one expression: ``A[i, k]*B[k, j]``."""
    if isinstance(e, IterVar):
        return repr(e)
    return ExprText().text(e)


def _unique_names(tensors):
    names, used = {}, set()
    for t in tensors:
        name, n = t.name, 1
        while name in used:
            name = f"{t.name}_{n}"
            n += 1
        used.add(name)
        names[id(t)] = name
    return names


class _StageText(StageMapper):
    def __init__(self, printer):
        self.p = printer

    def map_placeholder(self, t):
        return f"{self.p.tensor_name(t)} = placeholder({t.shape}, {t.dtype})"

    def map_compute(self, t):
        p, op = self.p, t.op
        name = p.tensor_name(t)
        lhs = f"{name}[{', '.join(ax.name for ax in op.axes)}]" if op.axes else name
        return f"{lhs} = {p.text(op.body)}"

    def map_scatter(self, t):
        p, op = self.p, t.op
        name = p.tensor_name(t)
        domain = ", ".join(p.axis(ax) for ax in op.axes)
        start = p.tensor_name(op.init) if op.init is not None else "0"
        updates = [f"{name}[{', '.join(p.text(i) for i in tg.indices)}] += {p.text(tg.value)}"
                   for tg in op.targets]
        if len(op.targets) == 1:
            where = op.targets[0].where
            cond = f" where {p.text(where)}" if where is not None else ""
            return f"{updates[0]} for {domain}{cond}  (from {start}, shape {t.shape})"
        updates = [u + (f" if {p.text(tg.where)}" if tg.where is not None else "")
                   for u, tg in zip(updates, op.targets)]
        return f"{'; '.join(updates)} for {domain}  (from {start}, shape {t.shape})"

    def map_scan(self, t):
        p, op = self.p, t.op
        lhs = f"{p.tensor_name(t)}[{', '.join(ax.name for ax in op.axes)}]"
        kind = "suffix" if op.reverse else "prefix"
        return (f"{lhs} = exclusive {kind} {op.reducer.name}({p.text(op.source)}) along "
                f"{op.axes[op.axis].name}")


def format_stage(t, printer=None):
    """One line defining tensor ``t`` in terms of its inputs."""
    return _StageText(printer or ExprText())(t)


def stage_lines(outputs, shown=None):
    """The lines of :func:`format_tensor` (names made unique over the whole program) of
    the stages for which ``shown(tensor)`` holds (every stage when None)."""
    order = topological_order(outputs)
    printer = ExprText(_unique_names(order))
    return [format_stage(t, printer) for t in order if shown is None or shown(t)]


def format_tensor(outputs):
    """Every stage the outputs depend on, one per line, inputs first (``tg.format``)."""
    return "\n".join(stage_lines(outputs))


TEXT.update(expr=format_expr, tensor=format_tensor)
