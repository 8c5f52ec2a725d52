"""A dot-product kernel for matrix products whose reduction runs along memory in both
operands, in LLVM IR through llvmlite: a dense layer's logits ``x @ w.T`` with few
outputs, a convolution's weight gradient with few channels.

It computes the same :class:`~.gemm.GemmSpec` as the gemm kernel,

    C[p, i, j] = sum(A[p, i, k] * B[p, k, j] for k in range(K)),

when its reduction is *rows of runs* (:func:`dot_layout`): ``k == r * L + t`` with
``t < L`` reading ``A`` at ``a_row[r] + t`` and ``B`` at ``b_row[r] + t``, consecutive
elements of both (a stride-1 ``k``: one row of ``L == K``). Where the gemm kernel holds
a block of outputs in vectors along ``C``'s columns, broadcasting ``A`` and packing ``B``,
this one holds an ``MR x NR`` block of outputs each as a vector of partial sums along
``k``: every step loads ``MR`` vectors of ``A`` and ``NR`` of ``B`` straight from the
operands (no packing) for ``MR * NR`` fused multiply-adds; a run's last ``L % VL``
elements are masked loads (zeros past the run). After the last row each vector is
summed across its lanes (a fixed tree: halves added to halves). So it pays when the
gemm's vectors along ``n`` would be mostly empty (``n`` narrower than its strip) or its
packing of ``B`` is used by few rows, and each output's sum is long
(:func:`prefers_dot`).

The sum of each output is reassociated along its runs (lane ``l`` sums the terms
``t == l (mod VL)``, then the lanes are added), the order the issue allows for a
reduction along a stride-1 axis; it is fixed by the spec, so results are bit-identical
for every thread count. Blocks past ``m`` or ``n`` (``m % MR``, ``n % NR``) read the last
row or column again and store nothing: no loads outside the operands, and
:func:`dot_blocking` chooses ``MR x NR`` to waste little.

Entry point ``void NAME(A, B, C, i8 *space, i32 n_threads)``, like the gemm's (this
kernel packs nothing: ``space`` is unused, :func:`dot_space_bytes` is 0); its tasks are
``(batch, row block, column block)`` triples in the thread pool.

>>> import numpy as np
>>> spec = GemmSpec("float64", 1, 3, 2, 40, (0, 40, 1), (0, 1, 40), (0, 2, 1))
>>> dot_layout(spec).run
40
>>> a, b = np.arange(120.).reshape(3, 40), np.arange(80.).reshape(2, 40)
>>> bool(np.allclose(compile_dot(spec)(a, b), a @ b.T))  # B[k, j] is b[j, k]
True
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
import llvmlite.ir as ir
import numpy as np

from tegrad.codegen.kernels import fork_join
from tegrad.codegen.kernels.gemm import _ELEMENT, _ITEMSIZE, CompiledGemm, default_blocking
from tegrad.codegen.kernels.gemm import GemmSpec  # noqa: F401  (the examples' specs)
from tegrad.codegen.kernels.irutil import (I1, I8, I32, VOIDPTR, carried_loop,
                                           constant_table, counted_loop, i32, i64, smin,
                                           vector_intrinsics)
from tegrad.codegen.target import resolve
from tegrad.codegen.tuning import (DOT_MAX_COLUMNS, DOT_MAX_ROWS, DOT_UNROLL_VECTORS,
                                  LOAD_WEIGHT, MIN_FLOPS_PER_THREAD, MIN_LANE_FILL,
                                  MIN_VECTOR_STEPS)


@dataclass(frozen=True)
class DotLayout:
    """A product's reduction as ``len(rows)`` rows of ``run`` consecutive elements of
    both operands: ``rows[r] == (a, b)``, the element offsets of row ``r``'s first term
    in ``A`` and ``B`` (from the batch's and the output's offsets)."""

    run: int
    rows: tuple


def dot_layout(spec):
    """The :class:`DotLayout` of ``spec``'s reduction, or None when its terms are not
    rows of runs of stride 1 in both operands.

    >>> dot_layout(GemmSpec.dense("float32", 4, 5, 6)) is None  # B's k stride is n
    True
    >>> t = tuple((r * 9 + t, r * 7 + t) for r in range(3) for t in range(5))
    >>> dot_layout(GemmSpec("float32", 1, 2, 2, 15, (0, 1, 0), (0, 0, 1), (0, 2, 1),
    ...                     k_offsets=t))
    DotLayout(run=5, rows=((0, 0), (9, 7), (18, 14)))
    """
    if spec.k_offsets is None:
        if spec.a_strides[2] == 1 and spec.b_strides[1] == 1:
            return DotLayout(spec.k, ((0, 0),))
        return None
    table = np.asarray(spec.k_offsets, dtype=np.int64)
    steps = np.diff(table, axis=0)
    breaks = np.flatnonzero((steps != 1).any(axis=1))
    run = int(breaks[0]) + 1 if breaks.size else spec.k
    if run < 2 or spec.k % run:
        return None
    rows = table.reshape(-1, run, 2)
    if not np.array_equal(rows - rows[:, :1], np.broadcast_to(
            np.arange(run, dtype=np.int64)[None, :, None], rows.shape)):
        return None
    return DotLayout(run, tuple(map(tuple, rows[:, 0].tolist())))


def prefers_dot(spec, layout, *, target=None, vector_bits=None):
    """Whether ``spec`` (of reduction ``layout``, possibly None) runs faster on this
    kernel than on the gemm's: when the gemm's column strip would be mostly empty
    (``n`` under its ``nr``) or its packed ``B`` would serve fewer rows than two register
    blocks, and the sums fill the vectors and are long enough to pay for the sums
    across lanes; on ``target`` (None: the host; ``vector_bits`` replaces its width).

    >>> spec = GemmSpec("float32", 1, 32, 10, 6760, (0, 6760, 1), (0, 1, 6760), (0, 10, 1))
    >>> prefers_dot(spec, dot_layout(spec), vector_bits=512)
    True
    """
    if layout is None:
        return False
    gemm = default_blocking(spec.dtype, target=target, vector_bits=vector_bits)
    vl = gemm.vl
    vectors = -(-layout.run // vl)
    if layout.run / (vectors * vl) < MIN_LANE_FILL or \
            vectors * len(layout.rows) < MIN_VECTOR_STEPS:
        return False
    return spec.n < gemm.nr or spec.m < 2 * gemm.mr


@dataclass(frozen=True)
class DotBlocking:
    """``mr x nr`` outputs per block, each a vector of ``vl`` partial sums."""

    vl: int
    mr: int
    nr: int


def dot_blocking(spec, *, target=None, vector_bits=None):
    """The block shape of the fewest weighted operations: the outputs computed (blocks
    past ``m`` and ``n`` included) times one multiply-add and
    ``(mr + nr) / (mr * nr)`` loads each, within the vector registers (``mr * nr``
    accumulators, ``mr`` vectors of ``A`` and one of ``B``) of ``target`` (None: the
    host; ``vector_bits`` replaces its width).

    >>> dot_blocking(GemmSpec("float32", 1, 32, 10, 64, (0, 64, 1), (0, 1, 64), (0, 10, 1)),
    ...              vector_bits=512)
    DotBlocking(vl=16, mr=4, nr=5)
    """
    target = resolve(target, vector_bits)
    vl, registers = target.lanes(spec.dtype), target.vector_registers

    def cost(shape):
        mr, nr = shape
        outputs = -(-spec.m // mr) * mr * -(-spec.n // nr) * nr
        return outputs * (1 + LOAD_WEIGHT * (mr + nr) / (mr * nr)), -mr * nr

    shapes = [(mr, nr) for mr, nr in itertools.product(range(1, DOT_MAX_ROWS + 1),
                                                          range(1, DOT_MAX_COLUMNS + 1))
              if mr * nr + mr + 1 <= registers and mr <= spec.m and nr <= spec.n]
    mr, nr = min(shapes, key=cost)
    return DotBlocking(vl, mr, nr)


def _flat(blocks):
    return [v for row in blocks for v in row]


class _DotEmitter:
    def __init__(self, module, spec, layout, blocking, name):
        self.module, self.spec, self.layout, self.blk, self.name = \
            module, spec, layout, blocking, name
        self.elt = _ELEMENT[spec.dtype]
        self.esize = _ITEMSIZE[spec.dtype]
        self.vty = ir.VectorType(self.elt, blocking.vl)
        self.vptr = self.vty.as_pointer()
        self.eptr = self.elt.as_pointer()
        self.fma, self.masked_load, _ = vector_intrinsics(module, self.vty)
        self.mask_ty = ir.VectorType(I1, blocking.vl)
        self.params_ty = ir.LiteralStructType([self.eptr] * 3)

    def table(self, what, values):
        """An ``i64*`` to this kernel's constant table ``what``."""
        return constant_table(self.module, f"{self.name}.{what}", values)

    def emit_driver(self):
        """``driver(params, begin, end)``: tasks ``[begin, end)``, task ``t`` the block
        ``(t // nb) % mb, t % nb`` of batch ``t // (mb * nb)``."""
        spec, blk, layout = self.spec, self.blk, self.layout
        fn = ir.Function(self.module, fork_join.TASK_FN_TYPE, name=f"{self.name}.driver")
        fn.linkage = "internal"
        raw, t_begin, t_end = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        params = b.bitcast(raw, self.params_ty.as_pointer())
        a, bb, c = (b.load(b.gep(params, [i32(0), i32(f)], inbounds=True)) for f in range(3))
        mb, nb = -(-spec.m // blk.mr), -(-spec.n // blk.nr)
        batch_table = None if spec.batch_offsets is None else \
            self.table("batch", [v for row in spec.batch_offsets for v in row])
        n_table = None if spec.n_offsets is None else self.table("n", spec.n_offsets)
        rows = None if len(layout.rows) == 1 else \
            self.table("rows", [v for row in layout.rows for v in row])
        with counted_loop(b, t_begin, t_end, name="t") as t:
            p = b.sdiv(t, i64(mb * nb))
            rest = b.srem(t, i64(mb * nb))
            i0, j0 = b.mul(b.sdiv(rest, i64(nb)), i64(blk.mr)), \
                b.mul(b.srem(rest, i64(nb)), i64(blk.nr))
            if batch_table is None:
                pa, pb, pc = (b.mul(p, i64(s[0])) for s in
                              (spec.a_strides, spec.b_strides, spec.c_strides))
            else:
                pa, pb, pc = (b.load(b.gep(batch_table, [b.add(b.mul(p, i64(3)), i64(x))],
                                           inbounds=True)) for x in range(3))
            # a block past the last row (column) reads the last one again
            a_rows = [b.gep(a, [b.add(pa, b.mul(smin(b, b.add(i0, i64(r)), i64(spec.m - 1)),
                                                i64(spec.a_strides[1])))], inbounds=True)
                      for r in range(blk.mr)]
            b_cols = []
            for col in range(blk.nr):
                j = smin(b, b.add(j0, i64(col)), i64(spec.n - 1))
                off = b.mul(j, i64(spec.b_strides[2])) if n_table is None else \
                    b.load(b.gep(n_table, [j], inbounds=True))
                b_cols.append(b.gep(bb, [b.add(pb, off)], inbounds=True))
            acc = self.emit_sums(b, a_rows, b_cols, rows)
            self.emit_stores(b, acc, b.gep(c, [pc], inbounds=True), i0, j0)
        b.ret_void()
        return fn

    def emit_sums(self, b, a_rows, b_cols, rows):
        """The ``mr x nr`` vectors of partial sums over every row of runs."""
        blk = self.blk
        zero = ir.Constant(self.vty, [0.0] * blk.vl)
        acc = [[zero] * blk.nr for _ in range(blk.mr)]
        if rows is None:
            return self.emit_run(b, a_rows, b_cols, acc)
        with carried_loop(b, i64(0), i64(len(self.layout.rows)), _flat(acc), name="r") as loop:
            ka, kb = (b.load(b.gep(rows, [b.add(b.mul(loop.i, i64(2)), i64(x))],
                                   inbounds=True)) for x in range(2))
            loop.carry(_flat(self.emit_run(b, [b.gep(p, [ka], inbounds=True) for p in a_rows],
                                           [b.gep(p, [kb], inbounds=True) for p in b_cols],
                                           self._blocks(loop.values))))
        return self._blocks(loop.values)

    def _blocks(self, values):
        """``values`` (row-major) as ``mr`` lists of ``nr``."""
        nr = self.blk.nr
        return [values[r * nr:(r + 1) * nr] for r in range(self.blk.mr)]

    def emit_run(self, b, a_rows, b_cols, acc):
        """``acc`` plus one run's terms: ``acc[r][c] += a_rows[r][t] * b_cols[c][t]`` for
        ``t < run``, lane ``t % VL``."""
        blk, run = self.blk, self.layout.run
        whole, left = divmod(run, blk.vl)

        def step(acc, at, mask=None):
            def load(p):
                ptr = b.bitcast(b.gep(p, [at], inbounds=True), self.vptr)
                if mask is None:
                    return b.load(ptr, align=self.esize)
                zero = ir.Constant(self.vty, [0.0] * blk.vl)
                return b.call(self.masked_load, [ptr, i32(self.esize), mask, zero])

            xs = [load(p) for p in a_rows]
            out = [list(row) for row in acc]
            for col, p in enumerate(b_cols):
                y = load(p)
                for r, x in enumerate(xs):
                    out[r][col] = b.call(self.fma, [x, y, out[r][col]])
            return out

        if whole <= DOT_UNROLL_VECTORS:
            for v in range(whole):
                acc = step(acc, i64(v * blk.vl))
        else:
            with carried_loop(b, i64(0), i64(whole * blk.vl), _flat(acc), blk.vl,
                              name="v") as loop:
                loop.carry(_flat(step(self._blocks(loop.values), loop.i)))
            acc = self._blocks(loop.values)
        if left:
            mask = ir.Constant(self.mask_ty, [int(x < left) for x in range(blk.vl)])
            acc = step(acc, i64(whole * blk.vl), mask)
        return acc

    def lane_sum(self, b, v):
        """The sum of ``v``'s lanes: halves added to halves until one is left."""
        width = self.blk.vl
        while width > 1:
            width //= 2
            undef = ir.Constant(v.type, ir.Undefined)
            lo = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, width),
                                                        list(range(width))))
            hi = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, width),
                                                        list(range(width, 2 * width))))
            v = b.fadd(lo, hi)
        return b.extract_element(v, i32(0))

    def emit_stores(self, b, acc, c, i0, j0):
        """``C[i0 + r, j0 + col] = lane_sum(acc[r][col])`` inside ``m x n`` (``+=`` when
        the spec accumulates)."""
        spec = self.spec
        for r, row in enumerate(acc):
            i = b.add(i0, i64(r))
            row_ptr = b.gep(c, [b.mul(i, i64(spec.c_strides[1]))], inbounds=True)
            for col, value in enumerate(row):
                j = b.add(j0, i64(col))
                inside = b.and_(b.icmp_signed("<", i, i64(spec.m)),
                                b.icmp_signed("<", j, i64(spec.n)))
                with b.if_then(inside):
                    at = b.gep(row_ptr, [j], inbounds=True)
                    total = self.lane_sum(b, value)
                    if spec.accumulate:
                        total = b.fadd(b.load(at, align=self.esize), total)
                    b.store(total, at, align=self.esize)

    def emit_entry(self, driver, min_flops_per_thread):
        spec, blk = self.spec, self.blk
        fnty = ir.FunctionType(ir.VoidType(), [self.eptr] * 3 + [I8.as_pointer(), I32])
        fn = ir.Function(self.module, fnty, name=self.name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        params = b.alloca(self.params_ty)
        for f, arg in enumerate(fn.args[:3]):
            b.store(arg, b.gep(params, [i32(0), i32(f)], inbounds=True))
        threads = fork_join.threads_worth(b, fn.args[4], spec.flops, min_flops_per_thread)
        tasks = spec.batch * -(-spec.m // blk.mr) * -(-spec.n // blk.nr)
        b.call(fork_join.declare_parallel_for(self.module),
               [driver, b.bitcast(params, VOIDPTR), i64(tasks), threads])
        b.ret_void()
        return fn


def emit_dot(module, spec, *, name="tegrad_dot", blocking=None,
             min_flops_per_thread=MIN_FLOPS_PER_THREAD, shared=False, target=None):
    """Emit ``void name(A, B, C, i8 *space, i32 n_threads)`` computing ``spec`` (whose reduction
    must have a :func:`dot_layout`) into ``module``; the arguments are
    :func:`~.gemm.emit_gemm`'s (``shared`` is accepted for symmetry: this kernel is
    emitted whole into every module; ``target`` as :func:`dot_blocking`'s)."""
    layout = dot_layout(spec)
    if layout is None:
        raise ValueError("emit_dot: the product's reduction is not rows of runs of "
                         "stride 1 in both operands")
    em = _DotEmitter(module, spec, layout, blocking or dot_blocking(spec, target=target), name)
    return em.emit_entry(em.emit_driver(), min_flops_per_thread)


@functools.lru_cache(maxsize=256)
def compile_dot(spec, blocking=None, *, min_flops_per_thread=MIN_FLOPS_PER_THREAD):
    """The JIT-compiled dot-product kernel of ``spec`` (cached per spec and options),
    called like :func:`~.gemm.compile_gemm`'s."""
    return CompiledGemm(spec, blocking, min_flops_per_thread, emit=emit_dot,
                        space_bytes=dot_space_bytes)


def dot_space_bytes(threads):
    """The packing space the dot kernel needs on ``threads`` threads: none (its
    operands' runs are read in place).

    >>> dot_space_bytes(8)
    0
    """
    return 0


__all__ = ["DotBlocking", "DotLayout", "compile_dot", "dot_blocking", "dot_layout",
           "dot_space_bytes", "emit_dot", "prefers_dot"]
