"""Mappers over the loop IR: expressions with loads, and statements.

:class:`ExprMapper` is tegrad's :class:`~tegrad.ir.mapper.IdentityMapper` that also knows
:class:`~codegen.loops.nodes.Load`; :class:`StmtMapper` rebuilds statements bottom-up
(returning the very same node where nothing changed) and applies an expression mapper
to every expression in them, so a pass is a pair of mapper subclasses.

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Buffer, For, Load, Store
>>> A, B = Buffer("A", (4,), "float32", "input"), Buffer("B", (4,), "float32", "output")
>>> i = Var("i", "int64")
>>> s = For(i, Const(0, "int64"), Const(4, "int64"), Store(B, (i,), Load(A, (i,))))
>>> StmtMapper()(s) is s
True
>>> [type(n).__name__ for n in walk_stmts(s)]
['For', 'Store']
"""
from __future__ import annotations

import math

from tegrad.analysis.affine import AffineForm
from tegrad.analysis.affine import to_constraint as _to_constraint
from tegrad.analysis.intervals import RangeForm
from tegrad.ir.expr import Var
from tegrad.ir.mapper import ChildrenMapper, Dispatcher, IdentityMapper, Substitutor

from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Check, For, If, Let, Load,
                                        MatrixProduct, Store)


class LoadChildren(ChildrenMapper):
    """The direct sub-expressions of a node, a load's indices included."""

    _method_names = {Load: "map_load"}

    def map_load(self, e):
        return e.indices


LOAD_CHILDREN = LoadChildren()


class _LoadAffineForm(AffineForm):
    _method_names = {Load: "map_load"}
    children_of = LOAD_CHILDREN

    def map_load(self, e, *indices):
        return None  # a value read from memory is not an affine form of the loop variables


def to_affine(e):
    """The :class:`solver.Affine` equal to the integer expression ``e`` of the loop IR, or
    None (not quasi-affine: a load, a float, a division by a variable).

    >>> from tegrad.ir.expr import Var
    >>> from tegrad.codegen.loops.nodes import Buffer, Load
    >>> i, L = Var("i", "int64"), Buffer("L", (4,), "int64", "input")
    >>> str(to_affine(i * 2 + 1)), to_affine(Load(L, (i,)) + i)
    ('2*i + 1', None)
    """
    return _LoadAffineForm()(e)


def to_constraint(c):
    """The solver constraint of the integer comparison ``c`` of the loop IR, or None (a
    side reads memory or is not quasi-affine).

    >>> from tegrad.ir.expr import Var
    >>> from tegrad.codegen.loops.nodes import Buffer, Load
    >>> i, L = Var("i", "int64"), Buffer("L", (4,), "int64", "input")
    >>> str(to_constraint(i < 3)), to_constraint(Load(L, (i,)) < 3)
    ('i <= 2', None)
    """
    return _to_constraint(c, affine=to_affine)


class _ClampedRange(RangeForm):
    _method_names = {Load: "map_load"}
    children_of = LOAD_CHILDREN

    def map_load(self, e, *indices):
        return -math.inf, math.inf  # any value at all


def clamped_range(e, ranges):
    """Inclusive ``(lo, hi)`` of the integer expression ``e`` of the loop IR over
    ``ranges`` (name -> ``(lo, hi)``) when every value it loads may be anything: finite
    only where ``min``/``max`` clamp it (``take``'s indices); None, or a bound that is
    not a finite number, when it is not bounded.

    >>> from tegrad.ir.expr import Binary, Const, Var
    >>> from tegrad.codegen.loops.nodes import Buffer, Load
    >>> i, L = Var("i", "int64"), Buffer("L", (4,), "int64", "input")
    >>> low = Binary("max", Load(L, (i,)), Const(0, "int64"), "int64")
    >>> clamped_range(Binary("min", low, Const(9, "int64"), "int64"), {"i": (0, 3)})
    (0, 9)
    """
    return _ClampedRange(ranges)(e)


class ExprMapper(IdentityMapper):
    """Identity mapper over tegrad expressions and loads."""

    _method_names = {Load: "map_load"}

    def map_load(self, e, *args):
        new = tuple(self(i, *args) for i in e.indices)
        if all(x is y for x, y in zip(new, e.indices)):
            return e
        return Load(e.buffer, new, e.dtype)


class ExprSubstitutor(Substitutor, ExprMapper):
    """Replace free variables (by name) in expressions that may contain loads."""


def substitute_expr(e, mapping):
    """``e`` with the variables named in ``mapping`` (name -> expression) replaced."""
    return ExprSubstitutor(mapping)(e) if mapping else e


def expr_children(e):
    """The direct sub-expressions of ``e`` (a load's indices included)."""
    return LOAD_CHILDREN(e)


def walk_expr(e):
    """Every node of ``e`` (loads and their indices included), pre-order; a node shared
    within ``e`` once (an expression that reuses its sub-expressions is a DAG whose
    tree may be exponentially larger)."""
    seen = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(expr_children(node)))


def loads(e):
    """The loads in ``e``, outermost first."""
    return [n for n in walk_expr(e) if type(n) is Load]


def distinct_exprs(stmt):
    """Every expression node held by the statements of ``stmt`` (loads' indices
    included), each once however often the statements share it."""
    seen = set()
    for node in walk_stmts(stmt):
        stack = list(stmt_exprs(node))
        while stack:
            e = stack.pop()
            if id(e) not in seen:
                seen.add(id(e))
                yield e
                stack.extend(expr_children(e))


def buffers_of(stmt):
    """``(used, allocated)``: the buffers ``stmt`` reads or writes, in the order of their
    first use (a matrix product's three included), and the buffers it allocates."""
    used, allocated = {}, set()
    for node in walk_stmts(stmt):
        t = type(node)
        if t is Allocate:
            allocated.add(node.buffer)
        elif t in (Store, Accumulate):
            used.setdefault(node.buffer, None)
        elif t is MatrixProduct:
            for b in (node.c, node.a, node.b):
                used.setdefault(b, None)
    for e in distinct_exprs(stmt):
        if type(e) is Load:
            used.setdefault(e.buffer, None)
    return list(used), allocated


class StmtMapper(Dispatcher):
    """Rebuild statements bottom-up; ``expr`` maps every expression (identity by default).

    Override ``map_<node>`` methods for a pass; each returns a statement (or None for a
    removed one, inside a block). Dispatch goes through ``_method_names``, as for
    expression mappers.
    """

    _method_names = {For: "map_for", Block: "map_block", If: "map_if", Store: "map_store",
                     Accumulate: "map_accumulate", Let: "map_let", Allocate: "map_allocate",
                     Check: "map_check", MatrixProduct: "map_matrix_product"}

    def __init__(self, expr=None):
        self.expr = expr if expr is not None else (lambda e: e)

    def __call__(self, s):
        return self.method_for(type(s), s)(s)

    def map_for(self, s):
        begin, end, body = self.expr(s.begin), self.expr(s.end), self(s.body)
        if begin is s.begin and end is s.end and body is s.body:
            return s
        return For(s.var, begin, end, body, s.kind, s.step)

    def map_block(self, s):
        stmts = tuple(x for x in (self(c) for c in s.stmts) if x is not None)
        if len(stmts) == len(s.stmts) and all(a is b for a, b in zip(stmts, s.stmts)):
            return s
        return Block(stmts)

    def map_if(self, s):
        cond, then = self.expr(s.cond), self(s.then)
        otherwise = None if s.otherwise is None else self(s.otherwise)
        if cond is s.cond and then is s.then and otherwise is s.otherwise:
            return s
        return If(cond, then, otherwise, s.likely)

    def map_store(self, s):
        indices, value = tuple(self.expr(i) for i in s.indices), self.expr(s.value)
        if value is s.value and all(a is b for a, b in zip(indices, s.indices)):
            return s
        return Store(s.buffer, indices, value, s.stage)

    def map_accumulate(self, s):
        indices, value = tuple(self.expr(i) for i in s.indices), self.expr(s.value)
        if value is s.value and all(a is b for a, b in zip(indices, s.indices)):
            return s
        return Accumulate(s.buffer, indices, value, s.reducer, s.stage)

    def map_let(self, s):
        value, body = self.expr(s.value), self(s.body)
        if value is s.value and body is s.body:
            return s
        return Let(s.var, value, body, s.stage)

    def map_allocate(self, s):
        body = self(s.body)
        return s if body is s.body else Allocate(s.buffer, body)

    def map_check(self, s):
        cond = self.expr(s.cond)
        return s if cond is s.cond else Check(cond, s.error, s.tensor, s.indexed, s.stage)


    def map_matrix_product(self, s):
        return s  # no expressions: buffers, offsets and the spec are constants


def substitute_stmt(s, mapping):
    """``s`` with the variables named in ``mapping`` replaced in every expression.

    Loop and let variables of ``s`` must not be among the replaced names.
    """
    if not mapping:
        return s
    sub = ExprSubstitutor({(k.name if isinstance(k, Var) else k): v for k, v in mapping.items()})
    return StmtMapper(sub)(s)


def stmt_children(s):
    """The statements directly inside ``s``."""
    t = type(s)
    if t is Block:
        return s.stmts
    if t in (For, Let, Allocate):
        return (s.body,)
    if t is If:
        return (s.then,) if s.otherwise is None else (s.then, s.otherwise)
    return ()


def walk_stmts(s):
    """Every statement of ``s``, pre-order."""
    stack = [s]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(stmt_children(node)))


def stmt_exprs(s):
    """The expressions directly held by the statement ``s`` (not by its children)."""
    t = type(s)
    if t is For:
        return (s.begin, s.end)
    if t is If or t is Check:
        return (s.cond,)
    if t in (Store, Accumulate):
        return tuple(s.indices) + (s.value,)
    if t is Let:
        return (s.value,)
    return ()


def free_variables(s):
    """Names of the variables ``s`` uses outside the loops and lets that bind them."""
    out = set()
    stack = [(s, frozenset())]
    while stack:
        node, bound = stack.pop()
        for e in stmt_exprs(node):
            out |= {n.name for n in walk_expr(e) if type(n) is Var} - bound
        inner = bound | {node.var.name} if type(node) in (For, Let) else bound
        stack.extend((c, inner) for c in stmt_children(node))
    return out


def bound_names(s):
    """Variables bound inside ``s`` (its loops and lets) and buffers it allocates."""
    names, local = set(), set()
    for n in walk_stmts(s):
        if type(n) in (For, Let):
            names.add(n.var.name)
        elif type(n) is Allocate:
            local.add(n.buffer)
    return names, local


def names_in(kernel):
    """Every loop, let and buffer name of ``kernel`` (fresh names avoid them)."""
    bound, local = bound_names(kernel.body)
    return {b.name for b in kernel.args + kernel.temps + tuple(local)} | bound


def block(stmts):
    """A block of ``stmts`` (nested blocks flattened); one statement stands alone."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        flat.extend(s.stmts if type(s) is Block else (s,))
    return flat[0] if len(flat) == 1 else Block(tuple(flat))
