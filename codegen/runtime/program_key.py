"""The structural key of a program: equal for programs built the same way.

Placeholders are identified by their position among the inputs, every other tensor by its
stage's structure (names, shapes, dtypes, expressions), so rebuilding a model with fresh
tensor objects gives the same key. User-defined reducers compare by identity.

>>> import tegrad as tg
>>> def program():
...     x = tg.placeholder((3,), name="x")
...     return [x], [tg.compute((3,), lambda i: x[i] * 2, name="y")]
>>> program_key(*program()) == program_key(*program())
True
"""
from __future__ import annotations

from tegrad.ir import expr as _ex
from tegrad.ir.graph import topological_order
from tegrad.ir.reduction import BUILTIN_REDUCERS
from tegrad.ir.tensor import ComputeOp, PlaceholderOp, ScatterOp


class _KeyBuilder:
    def __init__(self, inputs):
        self.tensor_ids = {id(t): ("input", k) for k, t in enumerate(inputs)}
        self.memo = {}

    def expr(self, e):
        key = id(e)
        hit = self.memo.get(key)
        if hit is not None and hit[0] is e:
            return hit[1]
        t = type(e)
        if t is _ex.Read:
            out = ("Read", self.tensor_ids[id(e.tensor)], e.dtype,
                   tuple(self.expr(i) for i in e.indices))
        elif t is _ex.Const:
            # repr keeps -0.0 apart from 0.0 (and NaN equal to itself)
            out = ("Const", repr(e.value), e.dtype, e.weak)
        elif t is _ex.Var:
            out = ("Var", e.name, e.dtype)
        elif isinstance(e, _ex.Node):
            out = (t.__name__,) + tuple(self.value(v) for v in e.children_values())
        else:
            out = self.value(e)
        self.memo[key] = (e, out)
        return out

    def value(self, v):
        if isinstance(v, _ex.Node):
            return self.expr(v)
        if isinstance(v, tuple):
            return tuple(self.value(x) for x in v)
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        name = getattr(v, "name", None)
        if BUILTIN_REDUCERS.get(name) is v:
            return ("reducer", name)
        return v  # a user's reducer: by identity

    def stage(self, t, position):
        op = t.op
        head = (t.name, t.shape, t.dtype)
        if isinstance(op, PlaceholderOp):
            if id(t) not in self.tensor_ids:
                return head + ("free placeholder", position)
            return head + (self.tensor_ids[id(t)],)
        if isinstance(op, ComputeOp):
            return head + ("compute", self.value(op.axes), self.expr(op.body))
        if isinstance(op, ScatterOp):
            targets = tuple((self.value(tg.indices), self.expr(tg.value), self.value(tg.where))
                            for tg in op.targets)
            init = None if op.init is None else self.tensor_ids[id(op.init)]
            return head + ("scatter", self.value(op.axes), targets, init)
        return head + (type(op).__name__, id(op))


def program_key(inputs, outputs):
    """A hashable key of the program computing ``outputs`` from ``inputs``."""
    builder = _KeyBuilder(inputs)
    stages = []
    for position, t in enumerate(topological_order(list(outputs))):
        stages.append(builder.stage(t, position))
        builder.tensor_ids.setdefault(id(t), ("stage", position))
    return (tuple(stages), tuple(builder.tensor_ids[id(t)] for t in outputs))


__all__ = ["program_key"]
