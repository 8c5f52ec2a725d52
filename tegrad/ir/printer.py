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

from tegrad.ir.expr import (And, Binary, Call, Cast, Compare, Const, IterVar, Neg, Not, Or, Read,
                            Reduce, Select, Var, simplify_bound)

_BINARY_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//",
                  "floormod": "%"}
_BINARY_PREC = {"add": 5, "sub": 5, "mul": 6, "div": 6, "floordiv": 6, "floormod": 6}
_COMPARE_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_ATOM = 9


def _const_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


class _Printer:
    def __init__(self, names=None):
        self.names = names or {}

    def tensor_name(self, t):
        return self.names.get(id(t), t.name)

    def __call__(self, e):
        return self.text(e)[0]

    def paren(self, e, min_prec):
        text, prec = self.text(e)
        return f"({text})" if prec < min_prec else text

    def text(self, e):
        """``(text, precedence)`` of ``e``."""
        t = type(e)
        if t is Const:
            text = _const_text(e.value)
            return text, (7 if text.startswith("-") else _ATOM)
        if t is Var:
            return e.name, _ATOM
        if t is Binary:
            if e.op in ("min", "max"):
                return f"{e.op}({self(e.a)}, {self(e.b)})", _ATOM
            if e.op in ("add", "sub") and type(e.b) is Const and e.b.value < 0:
                # x + -c prints as x - c
                flipped = "sub" if e.op == "add" else "add"
                return self.text(Binary(flipped, e.a, Const(-e.b.value, e.b.dtype), e.dtype))
            prec = _BINARY_PREC[e.op]
            # left-associative: the right operand needs parentheses at equal precedence
            left = self.paren(e.a, prec)
            right = self.paren(e.b, prec + 1)
            sep = f" {_BINARY_SYMBOL[e.op]} "
            return f"{left}{sep}{right}", prec
        if t is Neg:
            return f"-{self.paren(e.a, 7)}", 7
        if t is Compare:
            return f"{self.paren(e.a, 5)} {_COMPARE_SYMBOL[e.op]} {self.paren(e.b, 5)}", 4
        if t is And:
            return f"{self.paren(e.a, 2)} && {self.paren(e.b, 2)}", 2
        if t is Or:
            return f"{self.paren(e.a, 1)} || {self.paren(e.b, 1)}", 1
        if t is Not:
            return f"!{self.paren(e.a, 8)}", 8
        if t is Select:
            return (f"{self.paren(e.cond, 4)} ? {self.paren(e.true_value, 1)} : "
                    f"{self.paren(e.false_value, 0)}", 0)
        if t is Cast:
            return f"{e.dtype}({self(e.a)})", _ATOM
        if t is Call:
            return f"{e.name}({', '.join(self(a) for a in e.args)})", _ATOM
        if t is Read:
            return f"{self.tensor_name(e.tensor)}[{', '.join(self(i) for i in e.indices)}]", _ATOM
        if t is Reduce:
            parts = [self(e.source)] + [self.axis(ax) for ax in e.axes]
            if e.where is not None:
                parts.append(f"where {self(e.where)}")
            if e.init is not None:
                parts.append(f"init {self(e.init)}")
            return f"{e.reducer.name}({', '.join(parts)})", _ATOM
        raise TypeError(f"cannot print {e!r}")

    def axis(self, ax):
        return f"{ax.name} in [{self(ax.lo)}, {self(axis_end(ax))})"


def axis_end(ax):
    """The exclusive end of an axis, read back from ``lo + extent`` where possible."""
    ext = ax.extent
    if type(ext) is Binary and ext.op == "sub" and bool(ext.b == ax.lo):
        return ext.a
    return simplify_bound(ax.lo + ax.extent)


def format_expr(e):
    """The text of one expression: ``A[i, k]*B[k, j]``."""
    if isinstance(e, IterVar):
        return repr(e)
    return _Printer()(e)


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


def format_stage(t, printer=None):
    """One line defining tensor ``t`` in terms of its inputs."""
    from tegrad.ir.tensor import ComputeOp, PlaceholderOp, ScanOp, ScatterOp
    p = printer or _Printer()
    name = p.tensor_name(t)
    op = t.op
    if isinstance(op, PlaceholderOp):
        return f"{name} = placeholder({t.shape}, {t.dtype})"
    if isinstance(op, ComputeOp):
        lhs = f"{name}[{', '.join(ax.name for ax in op.axes)}]" if op.axes else name
        return f"{lhs} = {p(op.body)}"
    if isinstance(op, ScatterOp):
        domain = ", ".join(p.axis(ax) for ax in op.axes)
        start = p.tensor_name(op.init) if op.init is not None else "0"
        updates = [f"{name}[{', '.join(p(i) for i in tg.indices)}] += {p(tg.value)}"
                   for tg in op.targets]
        if len(op.targets) == 1:
            where = op.targets[0].where
            cond = f" where {p(where)}" if where is not None else ""
            return f"{updates[0]} for {domain}{cond}  (from {start}, shape {t.shape})"
        updates = [u + (f" if {p(tg.where)}" if tg.where is not None else "")
                   for u, tg in zip(updates, op.targets)]
        return f"{'; '.join(updates)} for {domain}  (from {start}, shape {t.shape})"
    if isinstance(op, ScanOp):
        lhs = f"{name}[{', '.join(ax.name for ax in op.axes)}]"
        kind = "suffix" if op.reverse else "prefix"
        return (f"{lhs} = exclusive {kind} {op.reducer.name}({p(op.source)}) along "
                f"{op.axes[op.axis].name}")
    return f"{name} = <{type(op).__name__}>"


def format_tensor(outputs):
    """Every stage the outputs depend on, one per line, inputs first (``tg.format``)."""
    from tegrad.ir.graph import topological_order
    order = topological_order(outputs)
    printer = _Printer(_unique_names(order))
    return "\n".join(format_stage(t, printer) for t in order)
