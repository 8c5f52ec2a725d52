"""A plain Python interpreter of the loop IR, the oracle for lowering and schedules.

Statements run one at a time; expressions are evaluated with the reference evaluator's
scalar semantics (:class:`tegrad.reference.evaluator.ExprEvaluator` at one point:
floor ``//`` and ``%``, the intrinsic table, casts of non-finite floats), extended with
loads. It is slow: for tests on small shapes.

:func:`run` also counts ``iterations``, the points the kernel visits: each execution of
a loop body (or of a :class:`Let`, a single-trip loop) whose statements store to a
non-local buffer or accumulate, outside any inner loop, and each top-level statement of
the kernel (a stage) that does so outside its loops. That is the count
:func:`tegrad.cost` predicts for the lowered program.

>>> import numpy as np
>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Buffer, For, Kernel, Load, Store
>>> A, B = Buffer("A", (3,), "float64", "input"), Buffer("B", (3,), "float64", "output")
>>> i = Var("i", "int64")
>>> k = Kernel("k", (A, B), (), For(i, Const(0, "int64"), Const(3, "int64"),
...                                 Store(B, (i,), Load(A, (i,)) + 1.0)))
>>> outs, count = run(k, [np.arange(3.0)])
>>> outs[0].tolist(), count
([1.0, 2.0, 3.0], 3)
"""
from __future__ import annotations

import warnings

import numpy as np

from tegrad.ir.errors import OutOfBoundsError, TegradError
from tegrad.ir.mapper import Dispatcher
from tegrad.reference.evaluator import ExprEvaluator

from tegrad.codegen.loops.mapper import stmt_children
from tegrad.codegen.loops.printer import format_expr
from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Check, For, If, Let, Load,
                                        MatrixProduct, Store)


class _LoadEvaluator(ExprEvaluator):
    """The evaluator's expression semantics on scalars, plus loads from buffers."""

    _method_names = {Load: "map_load"}

    def __init__(self, memory):
        super().__init__({})
        self.memory = memory

    def map_load(self, e, scope):
        data = self.memory[e.buffer]
        idx = tuple(int(self(i, scope)) for i in e.indices)
        for d, (ix, extent) in enumerate(zip(idx, e.buffer.shape)):
            if not 0 <= ix < extent:
                if scope.mask is not None and not np.any(scope.mask):
                    # an arm the evaluator (and the compiled code's branch) leaves unread
                    return np.zeros((), e.buffer.dtype)
                raise OutOfBoundsError(f"load of {e.buffer.name!r} (shape {e.buffer.shape}) at "
                                       f"{idx} is out of bounds in dimension {d}")
        return data[idx]


def _is_point(body):
    """The body stores to a non-local buffer or accumulates, outside any inner loop (a
    reduction of a tuple accumulates by storing new values of locals allocated around
    the body; a store to a local allocated in it is not an accumulation)."""
    stack, own = [body], set()
    while stack:
        s = stack.pop()
        t = type(s)
        if t is Allocate:
            own.add(s.buffer)
        if t is Accumulate or (t is Store and (s.buffer.scope != "local"
                                               or s.buffer not in own)):
            return True
        if t not in (For, Let):
            stack.extend(stmt_children(s))
    return False


class Interpreter(Dispatcher):
    """Runs statements over ``memory`` (buffer -> numpy array); counts iterations."""

    _method_names = {Block: "run_Block", For: "run_For", Let: "run_Let", If: "run_If",
                     Store: "run_Store", Accumulate: "run_Accumulate",
                     Allocate: "run_Allocate", Check: "run_Check",
                     MatrixProduct: "run_MatrixProduct"}

    def __init__(self, memory):
        self.memory = memory
        self.ev = _LoadEvaluator(memory)
        self.iterations = 0
        self._point = {}

    def value(self, e, env):
        return self.ev.at_point(e, env)

    def is_point(self, body):
        hit = self._point.get(id(body))
        if hit is None or hit[0] is not body:
            hit = (body, _is_point(body))
            self._point[id(body)] = hit
        return hit[1]

    def run(self, s, env):
        self.method_for(type(s), s)(s, env)

    def run_Block(self, s, env):
        for c in s.stmts:
            self.run(c, env)

    def run_For(self, s, env):
        begin, end = int(self.value(s.begin, env)), int(self.value(s.end, env))
        point = self.is_point(s.body)
        for v in range(begin, end, s.step):
            inner = dict(env)
            inner[s.var.name] = np.array(v, dtype=np.int64)
            if point:
                self.iterations += 1
            self.run(s.body, inner)

    def run_Let(self, s, env):
        inner = dict(env)
        inner[s.var.name] = self.value(s.value, env)
        if self.is_point(s.body):
            self.iterations += 1
        self.run(s.body, inner)

    def run_If(self, s, env):
        if bool(self.value(s.cond, env)):
            self.run(s.then, env)
        elif s.otherwise is not None:
            self.run(s.otherwise, env)

    def _index(self, s, env):
        idx = tuple(int(self.value(i, env)) for i in s.indices)
        for d, (ix, extent) in enumerate(zip(idx, s.buffer.shape)):
            if not 0 <= ix < extent:
                raise OutOfBoundsError(f"store to {s.buffer.name!r} (shape {s.buffer.shape}) "
                                       f"at {idx} is out of bounds in dimension {d}")
        return idx

    def run_Store(self, s, env):
        idx = self._index(s, env)
        self.memory[s.buffer][idx] = self.value(s.value, env)

    def run_Accumulate(self, s, env):
        idx = self._index(s, env)
        buf = self.memory[s.buffer]
        x, y, body = s.reducer.combiner(s.buffer.dtype)
        scope_env = dict(env)
        scope_env[x.name] = np.asarray(buf[idx])
        scope_env[y.name] = np.asarray(self.value(s.value, env)).astype(s.buffer.dtype)
        buf[idx] = self.value(body, scope_env)

    def run_Allocate(self, s, env):
        self.memory[s.buffer] = np.zeros(s.buffer.shape, dtype=s.buffer.dtype)
        try:
            self.run(s.body, env)
        finally:
            del self.memory[s.buffer]

    def run_MatrixProduct(self, s, env):
        """Counted as its loop nest would be: a store per output element, an update per
        term of each sum."""
        spec = s.spec
        a_at, b_at, c_at = matrix_product_indices(spec)
        a = self.memory[s.a].reshape(-1)[a_at + s.a_offset]
        b = self.memory[s.b].reshape(-1)[b_at + s.b_offset]
        c = self.memory[s.c].reshape(-1)
        product = np.matmul(a, b)
        c[c_at + s.c_offset] = c[c_at + s.c_offset] + product if spec.accumulate else product
        self.iterations += spec.batch * spec.m * spec.n * (1 + spec.k)

    def run_Check(self, s, env):
        if not bool(self.value(s.cond, env)):
            error = OutOfBoundsError if s.error == "index_out_of_range" else TegradError
            raise error(f"{s.message} (check {format_expr(s.cond)})")


def matrix_product_indices(spec):
    """Element offsets ``(a, b, c)`` of a :class:`MatrixProduct`'s operands, as arrays of
    shapes ``(batch, m, k)``, ``(batch, k, n)`` and ``(batch, m, n)``."""
    p, i, j, k = (np.arange(n, dtype=np.int64) for n in (spec.batch, spec.m, spec.n, spec.k))
    if spec.batch_offsets is None:
        pa, pb, pc = (p * s[0] for s in (spec.a_strides, spec.b_strides, spec.c_strides))
    else:
        pa, pb, pc = (np.array([row[x] for row in spec.batch_offsets], dtype=np.int64)
                      for x in range(3))
    if spec.k_offsets is None:
        ka, kb = k * spec.a_strides[2], k * spec.b_strides[1]
    else:
        ka, kb = (np.array([row[x] for row in spec.k_offsets], dtype=np.int64) for x in range(2))
    a = pa[:, None, None] + (i * spec.a_strides[1])[None, :, None] + ka[None, None, :]
    bj = j * spec.b_strides[2] if spec.n_offsets is None else \
        np.array(spec.n_offsets, dtype=np.int64)
    b = pb[:, None, None] + kb[None, :, None] + bj[None, None, :]
    c = pc[:, None, None] + (i * spec.c_strides[1])[None, :, None] + j[None, None, :]
    return a, b, c


def run(kernel, inputs):
    """Run ``kernel`` on the input arrays; ``(outputs, iterations)``.

    Outputs and temporaries start as zeros (the lowering writes every element it needs).
    """
    ins = [b for b in kernel.args if b.scope == "input"]
    if len(inputs) != len(ins):
        raise TegradError(f"kernel {kernel.name!r} takes {len(ins)} inputs, got {len(inputs)}")
    memory = {}
    for buf, arr in zip(ins, inputs):
        arr = np.asarray(arr)
        if arr.shape != tuple(buf.shape) or arr.dtype != np.dtype(buf.dtype):
            raise TegradError(f"input {buf.name!r}: expected {buf.dtype}{list(buf.shape)}, got "
                              f"{arr.dtype}{list(arr.shape)}")
        memory[buf] = arr
    outs = [b for b in kernel.args if b.scope == "output"]
    for buf in outs + list(kernel.temps):
        memory[buf] = np.zeros(buf.shape, dtype=buf.dtype)
    interp = Interpreter(memory)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for stage in (kernel.body.stmts if type(kernel.body) is Block else (kernel.body,)):
            if _is_point(stage):
                interp.iterations += 1
            interp.run(stage, {})
    return [memory[b] for b in outs], interp.iterations
