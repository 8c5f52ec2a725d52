"""The structural key of a program: equal for programs built the same way.

Tensors are numbered in the order a walk from the outputs discovers them (placeholders by
their position among the inputs), and each stage contributes its structure (name, shape,
dtype, axes, expressions with reads naming tensors by number). Rebuilding a model with
fresh tensor objects therefore gives the same key; user-defined reducers compare by
identity. The walk also finds placeholders that are not among the inputs.

Expressions are numbered too: the key holds one flat entry per distinct sub-expression,
naming its operands by number (equal sub-expressions share a number), so an expression
of any depth gives a key that hashes and compares without recursion.

>>> import tegrad as tg
>>> def program():
...     x = tg.placeholder((3,), name="x")
...     return [x], [tg.compute((3,), lambda i: x[i] * 2, name="y")]
>>> program_key(*program()) == program_key(*program())
True
"""
from __future__ import annotations

import gc

from tegrad.ir import expr as _ex
from tegrad.ir.errors import FeedError
from tegrad.ir.expr import _node_values
from tegrad.ir.mapper import bottom_up
from tegrad.ir.reduction import BUILTIN_REDUCERS
from tegrad.ir.stages import StageMapper, is_placeholder

_ATOMS = (str, int, float, bool, type(None))


class _KeyBuilder:
    def __init__(self, inputs):
        self.refs = {id(t): ("input", k) for k, t in enumerate(inputs)}
        self.pending = []
        self.memo = {}
        #: entry -> its number; the entries, in order
        self.numbers, self.entries = {}, []
        self.stage = _StageKey(self)

    def tensor(self, t):
        ref = self.refs.get(id(t))
        if ref is None:
            if is_placeholder(t):
                raise FeedError(f"build: the outputs depend on the placeholder {t.name!r}, "
                                f"which is not among the inputs")
            ref = ("stage", len(self.pending))
            self.refs[id(t)] = ref
            self.pending.append(t)
        return ref

    def expr(self, e):
        """The key of the expression ``e``: its sub-expressions' keys are built first,
        children before parents on an explicit stack, so each rule finds them memoised."""
        hit = self.memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        return bottom_up(e, _sub_nodes, lambda node, _: self._node_key(node), whole=self._known)

    def _known(self, e):
        hit = self.memo.get(id(e))
        return hit is not None and hit[0] is e

    def _node_key(self, e):
        key = id(e)
        hit = self.memo.get(key)
        if hit is not None and hit[0] is e:
            return hit[1]
        t = type(e)
        rule = _EXPR_KEYS.get(t)
        if rule is not None:
            out = rule(self, e)
        else:
            out = (t.__name__,) + tuple(map(self.value, e.children_values()))
        number = self.numbers.get(out)
        if number is None:
            number = self.numbers[out] = len(self.entries)
            self.entries.append(out)
        ref = ("expr", number)
        self.memo[key] = (e, ref)
        return ref

    def reducer(self, r):
        return r.name if BUILTIN_REDUCERS.get(r.name) is r else r  # a user's: by identity

    def value(self, v):
        if isinstance(v, _ex.Node):
            return self.expr(v)
        if isinstance(v, tuple):
            return tuple(map(self.value, v))
        if isinstance(v, _ATOMS):
            return v
        return self.reducer(v)


def _sub_nodes(e):
    return [v for v in _node_values(e) if isinstance(v, _ex.Node)]


class _StageKey(StageMapper):
    """The key of one stage: its head (name, shape, dtype) and its structure."""

    def __init__(self, builder):
        self.b = builder

    def map_placeholder(self, t):
        return (t.name, t.shape, t.dtype, "placeholder", id(t.op))

    def map_compute(self, t):
        b, op = self.b, t.op
        return (t.name, t.shape, t.dtype, "compute", b.value(op.axes), b.expr(op.body))

    def map_scatter(self, t):
        b, op = self.b, t.op
        targets = tuple((b.value(tg.indices), b.expr(tg.value), b.value(tg.where))
                        for tg in op.targets)
        init = None if op.init is None else b.tensor(op.init)
        return (t.name, t.shape, t.dtype, "scatter", b.value(op.axes), targets, init)

    def map_scan(self, t):
        b, op = self.b, t.op
        return (t.name, t.shape, t.dtype, "scan", b.value(op.axes), op.axis,
                b.reducer(op.reducer), b.expr(op.source), op.reverse)


def _key_rules():
    """Keys of the common expression kinds, field by field (the generic rule walks
    ``children_values``, several times slower)."""
    x = _ex

    def exprs(b, es):
        return tuple(map(b.expr, es))

    return {
        x.Var: lambda b, e: ("Var", e.name, e.dtype),
        # repr keeps -0.0 apart from 0.0 (and NaN equal to itself)
        x.Const: lambda b, e: ("Const", repr(e.value), e.dtype, e.weak),
        x.Read: lambda b, e: ("Read", b.tensor(e.tensor), e.dtype, exprs(b, e.indices)),
        x.Binary: lambda b, e: (e.op, b.expr(e.a), b.expr(e.b), e.dtype),
        x.Compare: lambda b, e: ("Compare", e.op, b.expr(e.a), b.expr(e.b)),
        x.Neg: lambda b, e: ("Neg", b.expr(e.a), e.dtype),
        x.Not: lambda b, e: ("Not", b.expr(e.a)),
        x.And: lambda b, e: ("And", b.expr(e.a), b.expr(e.b)),
        x.Or: lambda b, e: ("Or", b.expr(e.a), b.expr(e.b)),
        x.Select: lambda b, e: ("Select", b.expr(e.cond), b.expr(e.true_value),
                                b.expr(e.false_value), e.dtype),
        x.Cast: lambda b, e: ("Cast", b.expr(e.a), e.dtype),
        x.Call: lambda b, e: ("Call", e.name, exprs(b, e.args), e.dtype),
        x.IterVar: lambda b, e: ("IterVar", b.expr(e.var), b.expr(e.lo), b.expr(e.extent),
                                 e.kind),
        x.Reduce: lambda b, e: ("Reduce", b.reducer(e.reducer), b.expr(e.source),
                                exprs(b, e.axes), None if e.where is None else b.expr(e.where),
                                None if e.init is None else b.expr(e.init), e.dtype),
    }


_EXPR_KEYS = _key_rules()


def program_key(inputs, outputs):
    """A hashable key of the program computing ``outputs`` from ``inputs`` (raises
    ``FeedError`` for a placeholder the outputs need that is not an input)."""
    builder = _KeyBuilder(inputs)
    # the key is thousands of small tuples: a cyclic collection triggered midway would
    # cost ten times the walk (none of them can be part of a cycle)
    collecting = gc.isenabled()
    gc.disable()
    try:
        out_refs = tuple(builder.tensor(t) for t in outputs)
        stages = []
        while len(stages) < len(builder.pending):
            stages.append(builder.stage(builder.pending[len(stages)]))
    finally:
        if collecting:
            gc.enable()
    return (tuple(stages), out_refs, tuple(builder.entries))


__all__ = ["program_key"]
