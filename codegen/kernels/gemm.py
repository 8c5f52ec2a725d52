"""A register-blocked (BLIS-style) matrix-multiply micro-kernel and its macro-loops, in
LLVM IR through llvmlite, for float32 and float64.

The kernel computes, for every batch ``p``, row ``i`` and column ``j``,

    C[p, i, j] = sum(A[p, i, k] * B[p, k, j] for k in range(K))

(overwriting ``C``), with arbitrary element strides for every axis of ``A`` and ``B``
and a stride-1 column axis of ``C``. The emitted code:

- keeps an ``MR x NR`` block of ``C`` in ``MR * NR / VL`` vector accumulators along the
  columns (``VL`` lanes: 16 float32 or 8 float64 with AVX-512, 8 or 4 with AVX2), each
  step of the reduction broadcasting one element of ``A`` per row and loading ``NR / VL``
  vectors of ``B``: one fused multiply-add per accumulator;
- runs the reduction innermost, in cache blocks of ``KC`` (``C`` is loaded and updated
  after the first block), columns in blocks of ``NC``;
- packs each ``KC x NC`` panel of ``B`` into an aligned slot of the caller's packing space
  (:mod:`.packspace`), strip by strip (``NR`` contiguous columns, zero-padded past
  ``N``), so the micro-kernel's loads are contiguous whatever ``B``'s strides are;
- handles edges: the last row block (``M % MR`` rows) by a micro-kernel made for that many
  rows, the last column strip by masked loads and stores of ``C``, any ``K`` (even 1) by
  the run-time trip count of the reduction loop.

Entry point ``void NAME(A, B, C, i8 *space, i32 n_threads)``, ``space`` of
:func:`pack_space_bytes` ``(spec, n_threads)`` bytes: nothing is allocated inside (an
exported library's ABI promises that). It only fills the product's parameters (extents,
strides, offset tables, its micro-kernels and packing routine) for the driver, the
macro-loops that every product of a dtype and blocking shares (compiled once per
process in the JIT): a product adds little code of its own to compile. The driver's
tasks are ``(batch, column chunk, row group)`` triples, handed to the thread pool
(:mod:`.threadpool`), whose chunks of tasks are calls, each packing into a slot of
``space`` it claims for the call (one slot per thread the call may run on). With
one thread a task is a whole batch; with more, about ``CHUNKS_PER_THREAD`` tasks per
thread: batches cut into column chunks of whole strips (a task packs only its columns
of ``B``), and those into groups of row blocks only while there are fewer chunks than
threads. Every ``C`` element is written by
exactly one task, and the sum over ``k`` runs in increasing ``k`` whatever the thread
count and chunks, so results are bit-identical for every ``n_threads``.

>>> import numpy as np
>>> spec = GemmSpec.dense("float64", 3, 5, 4)
>>> f = compile_gemm(spec)
>>> a, b = np.arange(12.).reshape(3, 4), np.arange(20.).reshape(4, 5)
>>> bool(np.array_equal(f(a, b), a @ b))
True
"""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from typing import Optional

import llvmlite.ir as ir
import numpy as np

from tegrad.ir.errors import ShapeError, TegradError

from tegrad.codegen.kernels import jit, packspace, threadpool
from tegrad.codegen.kernels.irutil import (I1, I8, I32, I64, VOIDPTR, carried_loop,
                                           ceil_div, constant_table, counted_loop, i32, i64,
                                           smin, vector_intrinsics)
from tegrad.codegen.target import resolve

_ELEMENT = {"float32": ir.FloatType(), "float64": ir.DoubleType()}
_ITEMSIZE = {"float32": 4, "float64": 8}


@dataclass(frozen=True)
class GemmSpec:
    """A batched matrix product ``C[p, i, j] = sum_k A[p, i, k] * B[p, k, j]``.

    Extents ``batch, m, n, k``; element strides ``a_strides = (p, i, k)``,
    ``b_strides = (p, k, j)``, ``c_strides = (p, i, j)`` with ``c_strides[2] == 1``.

    Axes that are not one strided axis (a reduction over several axes whose strides do
    not merge, such as a convolution's channels and taps; several batch axes) are given
    by offset tables instead: ``k_offsets[k] = (a, b)``, the element offsets of reduction
    index ``k`` in A and B (replacing ``k * a_strides[2]`` and ``k * b_strides[1]``),
    ``batch_offsets[p] = (a, b, c)`` (replacing ``p * strides[0]``), and ``n_offsets[j]``,
    the element offset of column ``j`` in B (replacing ``j * b_strides[2]``: columns that
    are contiguous in C but not one strided axis of B, such as a convolution's output rows
    and columns in its padded input).
    """

    dtype: str
    batch: int
    m: int
    n: int
    k: int
    a_strides: tuple
    b_strides: tuple
    c_strides: tuple
    k_offsets: Optional[tuple] = None
    batch_offsets: Optional[tuple] = None
    n_offsets: Optional[tuple] = None

    def __post_init__(self):
        if self.dtype not in _ELEMENT:
            raise TegradError(f"gemm: dtype {self.dtype!r} is not float32 or float64")
        if min(self.batch, self.m, self.n, self.k) < 1:
            raise ShapeError(f"gemm: extents must be positive, got batch={self.batch} "
                             f"m={self.m} n={self.n} k={self.k}")
        if self.c_strides[2] != 1:
            raise ShapeError("gemm: the output's column axis must have stride 1")
        if self.k_offsets is not None and len(self.k_offsets) != self.k:
            raise ShapeError(f"gemm: {len(self.k_offsets)} reduction offsets for k={self.k}")
        if self.n_offsets is not None and len(self.n_offsets) != self.n:
            raise ShapeError(f"gemm: {len(self.n_offsets)} column offsets for n={self.n}")
        if self.batch_offsets is not None and len(self.batch_offsets) != self.batch:
            raise ShapeError(f"gemm: {len(self.batch_offsets)} batch offsets for "
                             f"batch={self.batch}")

    @classmethod
    def dense(cls, dtype, m, n, k, batch=1):
        """C-contiguous ``A (batch, m, k)``, ``B (batch, k, n)``, ``C (batch, m, n)``.

        >>> GemmSpec.dense("float32", 2, 3, 4).b_strides
        (12, 3, 1)
        """
        return cls(dtype, batch, m, n, k, (m * k, k, 1), (k * n, n, 1), (m * n, n, 1))

    @property
    def flops(self):
        return 2 * self.batch * self.m * self.n * self.k

    @staticmethod
    def span(strides, extents):
        """``(lowest, highest)`` element offsets an operand with these strides reaches.

        >>> GemmSpec.span((0, -3, 1), (1, 4, 3))
        (-9, 2)
        """
        lo = sum(min(0, (d - 1) * s) for d, s in zip(extents, strides))
        hi = sum(max(0, (d - 1) * s) for d, s in zip(extents, strides))
        return lo, hi

    def spans(self):
        """``(lowest, highest)`` element offsets of A, B and C (strides and tables)."""
        def offsets(operand, axis):
            table = self.batch_offsets if axis == "batch" else self.k_offsets
            if table is not None:
                return [row[operand] for row in table]
            strides = (self.a_strides, self.b_strides, self.c_strides)[operand]
            extent, stride = {("batch", 0): (self.batch, strides[0]),
                              ("batch", 1): (self.batch, strides[0]),
                              ("batch", 2): (self.batch, strides[0]),
                              ("k", 0): (self.k, strides[2]),
                              ("k", 1): (self.k, strides[1])}[axis, operand]
            return [0, (extent - 1) * stride]

        def span(parts):
            return sum(min(p) for p in parts), sum(max(p) for p in parts)

        a = [offsets(0, "batch"), [0, (self.m - 1) * self.a_strides[1]], offsets(0, "k")]
        b_n = list(self.n_offsets) if self.n_offsets is not None else \
            [0, (self.n - 1) * self.b_strides[2]]
        b = [offsets(1, "batch"), offsets(1, "k"), b_n]
        c = [offsets(2, "batch"), [0, (self.m - 1) * self.c_strides[1]],
             [0, self.n - 1]]
        return span(a), span(b), span(c)


@dataclass(frozen=True)
class Blocking:
    """Register and cache blocks: ``mr x nr`` outputs in registers (``nr`` a multiple of
    ``vl``), reduction blocks of ``kc``, column blocks of ``nc`` (a multiple of ``nr``)."""

    vl: int
    mr: int
    nr: int
    kc: int
    nc: int


def default_blocking(dtype, *, target=None, vector_bits=None, packed_bytes=256 * 1024):
    """Blocks for ``target`` (:class:`~tegrad.codegen.target.Target`, None: the host;
    ``vector_bits`` replaces its vector width): 2 vectors of columns, as many rows as
    its vector registers allow; ``packed_bytes``: the packed block of B, in bytes.

    >>> default_blocking("float32", vector_bits=512)
    Blocking(vl=16, mr=8, nr=32, kc=256, nc=256)
    """
    target = resolve(target, vector_bits)
    vl = target.lanes(dtype)
    # accumulators (2 vectors a row) + 2 vectors of B + 1 broadcast of A in registers;
    # more than 8 rows gains little (AVX-512: 8, AVX2: 6)
    mr = max(1, min(8, (target.vector_registers - 3) // 2))
    nr = 2 * vl
    kc = 256
    nc = max(nr, packed_bytes // (kc * _ITEMSIZE[dtype]) // nr * nr)
    return Blocking(vl, mr, nr, kc, nc)


def pack_slot_bytes(spec, blocking=None, *, target=None):
    """The bytes one task packs ``B`` into: a ``min(KC, k) x min(NC, n)`` panel, the
    columns a whole number of ``NR``-wide strips, in whole cache lines.

    >>> pack_slot_bytes(GemmSpec.dense("float32", 64, 64, 64), default_blocking(
    ...     "float32", vector_bits=512))
    16384
    """
    blk = blocking or default_blocking(spec.dtype, target=target)
    strips = -(-min(blk.nc, spec.n) // blk.nr)
    return packspace.round_to_line(min(blk.kc, spec.k) * strips * blk.nr * _ITEMSIZE[spec.dtype])


def pack_space_bytes(spec, threads, blocking=None, *, target=None):
    """The bytes of the ``space`` argument of ``spec``'s kernel called on ``threads``
    threads: a slot of :func:`pack_slot_bytes` per thread (see :mod:`.packspace`).

    >>> blk = default_blocking("float32", vector_bits=512)
    >>> pack_space_bytes(GemmSpec.dense("float32", 64, 64, 64), 2, blk)
    32896
    """
    return packspace.space_bytes(slot_bytes=pack_slot_bytes(spec, blocking, target=target),
                                 threads=threads)


class _GemmEmitter:
    def __init__(self, module, spec, blocking, name, shared=False):
        self.module, self.spec, self.blk, self.name = module, spec, blocking, name
        #: micro-kernels and packing routines are compiled once per process and declared
        #: here (JIT modules only: an exported library defines its own)
        self.shared = shared
        self.elt = _ELEMENT[spec.dtype]
        self.esize = _ITEMSIZE[spec.dtype]
        self.vty = ir.VectorType(self.elt, blocking.vl)
        self.eptr = self.elt.as_pointer()
        self.fma, self.masked_load, self.masked_store = vector_intrinsics(module, self.vty)

    def const(self, v):
        return ir.Constant(self.elt, v)

    # -- the micro-kernel -------------------------------------------------------------

    def _declare_shared(self, name, fnty, define):
        """``name`` declared in this module, defined by ``define(emitter)`` in the
        process's shared code (see :func:`.jit.shared_function`)."""
        def build(module):
            define(_GemmEmitter(module, self.spec, self.blk, self.name)).linkage = "external"
        jit.shared_function(name, build)
        return ir.Function(self.module, fnty, name=name)

    def shared_name(self, what):
        """The name of a function every gemm of the module with this dtype and register
        blocking shares (strides are its arguments: one copy to compile)."""
        return f"tegrad.gemm.{what}.{self.spec.dtype}.vl{self.blk.vl}.nr{self.blk.nr}"

    def emit_micro(self, mr):
        """``micro(a, bp, c, kc, accumulate, n_valid, koff, sam, sak, scm)``: ``C[r*scm +
        :n_valid] (+)= sum_k a[r*sam + k*sak] * bp[k*NR : (k+1)*NR]`` for ``r < mr``
        (``a[r*sam + koff[k]]`` with a reduction offset table)."""
        blk, spec = self.blk, self.spec
        name = self.shared_name(f"micro{mr}.{'ktable' if spec.k_offsets else 'kstride'}")
        if name in self.module.globals:
            return self.module.globals[name]
        fnty = self.micro_type()
        if self.shared:
            return self._declare_shared(name, fnty, lambda em: em.emit_micro(mr))
        fn = ir.Function(self.module, fnty, name=name)
        fn.linkage = "internal"
        # One call per KC-long reduction costs nothing; inlined copies cost compile time.
        fn.attributes.add("noinline")
        for arg in fn.args[:3]:
            arg.add_attribute("noalias")
        a, bp, c, kc, accumulate, n_valid, koff, sam, sak, scm = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        nv = blk.nr // blk.vl
        zero = ir.Constant(self.vty, [0.0] * blk.vl)
        with carried_loop(b, i64(0), kc, [zero] * (mr * nv), name="k") as loop:
            k = loop.i
            acc = [loop.values[r * nv:(r + 1) * nv] for r in range(mr)]
            brow = b.gep(bp, [b.mul(k, i64(blk.nr))], inbounds=True)
            bvec = [b.load(b.bitcast(b.gep(brow, [i64(v * blk.vl)], inbounds=True),
                                     self.vty.as_pointer()), align=self.vty_align)
                    for v in range(nv)]
            if self.spec.k_offsets is None:
                acol = b.gep(a, [b.mul(k, sak)], inbounds=True)
            else:
                acol = b.gep(a, [b.load(b.gep(koff, [k], inbounds=True))], inbounds=True)
            new = []
            for r in range(mr):
                x = b.load(b.gep(acol, [b.mul(i64(r), sam)], inbounds=True), align=self.esize)
                xs = self._splat(b, x, self.vty)
                new += [b.call(self.fma, [xs, bvec[v], acc[r][v]]) for v in range(nv)]
            loop.carry(new)
        acc = [loop.values[r * nv:(r + 1) * nv] for r in range(mr)]
        full = fn.append_basic_block("store.full")
        partial = fn.append_basic_block("store.partial")
        out = fn.append_basic_block("out")
        b.cbranch(b.icmp_signed("==", n_valid, i64(blk.nr)), full, partial)
        for block, masked in ((full, False), (partial, True)):
            b.position_at_end(block)
            self._store_block(b, acc, c, scm, accumulate, n_valid, masked)
            b.branch(out)
        b.position_at_end(out)
        b.ret_void()
        return fn

    @property
    def vty_align(self):
        return min(64, self.blk.vl * self.esize)

    def _store_block(self, b, acc, c, scm, accumulate, n_valid, masked):
        """``C (+)= acc``: plain unaligned vector accesses, or masked to ``n_valid`` lanes."""
        blk = self.blk
        lanes = ir.Constant(ir.VectorType(I64, blk.vl), list(range(blk.vl)))
        for r, row in enumerate(acc):
            crow = b.gep(c, [b.mul(i64(r), scm)], inbounds=True)
            for v, value in enumerate(row):
                ptr = b.bitcast(b.gep(crow, [i64(v * blk.vl)], inbounds=True),
                                self.vty.as_pointer())
                if masked:
                    left = b.sub(n_valid, i64(v * blk.vl))
                    mask = b.icmp_signed("<", lanes, self._splat(b, left, lanes.type))
                    zero = ir.Constant(self.vty, [0.0] * blk.vl)
                    old = b.call(self.masked_load, [ptr, i32(self.esize), mask, zero])
                    value = b.select(accumulate, b.fadd(old, value), value)
                    b.call(self.masked_store, [value, ptr, i32(self.esize), mask])
                else:
                    old = b.load(ptr, align=self.esize)
                    value = b.select(accumulate, b.fadd(old, value), value)
                    b.store(value, ptr, align=self.esize)

    # -- packing ----------------------------------------------------------------------

    def emit_pack(self):
        """``pack(bsrc, bp, kc, nc, koff, noff, sbk, sbn)``: strips of NR columns,
        ``bp[(s*kc + k)*NR + jj] = B[k*sbk + (s*NR + jj)*sbn]``, zero past ``nc`` columns
        (row ``k`` at ``koff[k]`` with a reduction offset table, column ``j`` at ``noff[j]``
        with a column offset table)."""
        blk, spec = self.blk, self.spec
        name = self.shared_name(f"pack.{'ktable' if spec.k_offsets else 'kstride'}."
                                f"{'ntable' if spec.n_offsets else 'nstride'}")
        if name in self.module.globals:
            return self.module.globals[name]
        fnty = self.pack_type()
        if self.shared:
            return self._declare_shared(name, fnty, lambda em: em.emit_pack())
        fn = ir.Function(self.module, fnty, name=name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        src, dst, kc, nc, koff, noff, sbk, sbn = fn.args
        src.add_attribute("noalias")
        dst.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        with counted_loop(b, i64(0), ceil_div(b, nc, i64(blk.nr)), name="s") as s:
            cols = smin(b, i64(blk.nr), b.sub(nc, b.mul(s, i64(blk.nr))))
            if spec.n_offsets is None:
                strip_src = b.gep(src, [b.mul(s, b.mul(i64(blk.nr), sbn))], inbounds=True)
                col_at = None
            else:
                strip_src = src
                strip_noff = b.gep(noff, [b.mul(s, i64(blk.nr))], inbounds=True)
                # this strip's column offsets, loaded once per strip (not per row)
                col_at = [b.load(b.gep(strip_noff, [smin(b, i64(jj), b.sub(cols, i64(1)))],
                                       inbounds=True)) for jj in range(blk.nr)]
            strip_dst = b.gep(dst, [b.mul(b.mul(s, kc), i64(blk.nr))], inbounds=True)
            full = fn.append_basic_block("full")
            partial = fn.append_basic_block("partial")
            joined = fn.append_basic_block("joined")
            is_full = b.icmp_signed("==", cols, i64(blk.nr))
            if spec.n_offsets is not None:
                # columns at consecutive elements of B, or every other one, are copied
                # a vector at a time
                self._pack_regular_strip(b, fn, cols, col_at, kc, koff, sbk, strip_src,
                                         strip_dst, joined)
            # columns apart and rows at consecutive elements (B the transpose of a
            # row-major matrix: a dense layer's weights): VL rows at a time, transposed
            self._pack_by_columns(b, fn, cols, col_at, kc, koff, sbk, sbn, strip_src,
                                  strip_dst, joined)
            b.cbranch(is_full, full, partial)
            for block, guarded in ((full, False), (partial, True)):
                b.position_at_end(block)
                if not guarded and col_at is None:
                    self._copy_consecutive_columns(b, fn, kc, koff, sbk, sbn, strip_src,
                                                   strip_dst, joined)
                # element by element: vectorised, its rows would make vectors wider
                # than the target's (aarch64: 16 floats) from its runs of NR elements
                with counted_loop(b, i64(0), kc, name="k", vectorize=False) as k:
                    row_src = b.gep(strip_src, [self._row_at(b, k, koff, sbk)], inbounds=True)
                    row_dst = b.gep(strip_dst, [b.mul(k, i64(blk.nr))], inbounds=True)
                    self._copy_row(b, row_src, row_dst, cols, col_at, sbn, guarded)
                b.branch(joined)
            b.position_at_end(joined)
        b.ret_void()
        return fn

    def _pack_regular_strip(self, b, fn, cols, col_at, kc, koff, sbk, src, dst, joined):
        """Copy the strip's rows a vector at a time when its ``cols`` column offsets
        form at most two runs of consecutive elements of B (a convolution's output rows
        in its padded input: one row, or the end of one and the start of the next), or,
        for a full strip, step by 2 (a stride-2 convolution's row: the ``2 * NR - 1``
        elements they span are loaded as two vectors and every other one kept). Either
        goes to ``joined``; otherwise the builder continues in a new block (the
        element-wise copy follows there)."""
        self._pack_two_runs(b, fn, cols, col_at, kc, koff, sbk, src, dst, joined)
        nr = self.blk.nr
        vty = ir.VectorType(self.elt, nr)
        hit = b.and_(b.icmp_signed("==", cols, i64(nr)), self._steps(b, col_at, 2))
        rows, other = fn.append_basic_block("step2"), fn.append_basic_block("gather")
        b.cbranch(hit, rows, other)
        b.position_at_end(rows)
        with counted_loop(b, i64(0), kc, name="k2") as k:
            at = b.gep(src, [b.add(self._row_at(b, k, koff, sbk), col_at[0])], inbounds=True)
            row = self._load_every_other(b, at, vty)
            out = b.gep(dst, [b.mul(k, i64(nr))], inbounds=True)
            b.store(row, b.bitcast(out, vty.as_pointer()), align=self.esize)
        b.branch(joined)
        b.position_at_end(other)

    def _pack_by_columns(self, b, fn, cols, col_at, kc, koff, sbk, sbn, src, dst, joined):
        """When the first block of ``VL`` rows is at most two runs of consecutive
        elements in each column (``row_at(l) == row_at(0) + l``, a run's end and the
        next one's start), or every other one (a stride-2 convolution's window sums),
        pack blocks of ``VL`` rows a vector down each of the ``NR`` columns (the last
        real one again past ``cols``), transposed into ``VL`` rows (lanes past ``cols``
        zero), ``VL`` columns at a time. A block of one run takes a plain load per
        column, of two runs two masked loads, of rows every other element two loads
        kept at even places; other blocks and the last ``kc % VL`` rows are copied
        element by element. Goes to ``joined`` when taken; otherwise the builder
        continues in a new block."""
        blk = self.blk
        vl, nr = blk.vl, blk.nr
        check = fn.append_basic_block("by.columns.check")
        columns, other = fn.append_basic_block("by.columns"), fn.append_basic_block("by.rows")
        b.cbranch(b.icmp_signed(">=", kc, i64(vl)), check, other)
        b.position_at_end(check)
        # the first block decides (a B stored by rows fails here, at no cost to its copy)
        first = [self._row_at(b, i64(l), koff, sbk) for l in range(vl)]
        hit = b.or_(b.icmp_signed("<=", self._runs(b, first, i64(vl))[2], i64(1)),
                    self._steps(b, first, 2))
        b.cbranch(hit, columns, other)
        b.position_at_end(columns)
        if col_at is None:
            col_at = [self._column_at(b, jj, cols, sbn, True) for jj in range(nr)]
        lanes = ir.VectorType(I64, vl)
        keep = [b.icmp_signed("<", ir.Constant(lanes, [h * vl + q for q in range(vl)]),
                              self._splat(b, cols, lanes)) for h in range(nr // vl)]
        zero = ir.Constant(self.vty, [0.0] * vl)
        # every block, the last partial one too (copied element by element)
        with counted_loop(b, i64(0), ceil_div(b, kc, i64(vl)), name="kb") as kb:
            k0 = b.mul(kb, i64(vl))
            block_end = smin(b, b.add(k0, i64(vl)), kc)
            whole, done = fn.append_basic_block("kb.whole"), fn.append_basic_block("kb.done")
            partial = b.block
            b.cbranch(b.icmp_signed("==", b.sub(block_end, k0), i64(vl)), whole, done)
            b.position_at_end(whole)
            rows = [self._row_at(b, b.add(k0, i64(l)), koff, sbk) for l in range(vl)]
            p, second, breaks = self._runs(b, rows, i64(vl))
            is_runs = b.icmp_signed("<=", breaks, i64(1))
            vector_paths = fn.append_basic_block("kb.vectors")
            b.cbranch(b.or_(is_runs, self._steps(b, rows, 2)), vector_paths, done)
            not_vectors = b.block
            b.position_at_end(vector_paths)
            at = ir.Constant(lanes, list(range(vl)))
            split = b.icmp_signed("<", at, self._splat(b, p, lanes))
            masks = (split, b.not_(split))
            one_run = b.icmp_signed("==", breaks, i64(0))
            # VL columns at a time (their vectors and transposes fit in the registers)
            for h in range(nr // vl):
                fast = fn.append_basic_block("kb.runs")
                single = fn.append_basic_block("kb.run")
                strided = fn.append_basic_block("kb.step2")
                turn = fn.append_basic_block("kb.transpose")
                b.cbranch(is_runs, fast, strided)
                b.position_at_end(fast)
                two = fn.append_basic_block("kb.two.runs")
                b.cbranch(one_run, single, two)
                b.position_at_end(single)
                from_run = [self._load_vector(b, b.gep(src, [b.add(rows[0], col_at[jj])],
                                                       inbounds=True), self.vty)
                            for jj in range(h * vl, (h + 1) * vl)]
                run_end = b.block
                b.branch(turn)
                b.position_at_end(two)
                # rows [0, p) from rows[0] on, [p, VL) from rows[p] on (a run's end and
                # the next one's start): two masked loads down each column
                from_runs = []
                for jj in range(h * vl, (h + 1) * vl):
                    value = zero
                    for base, mask in zip((rows[0], second), masks):
                        ptr = b.bitcast(b.gep(src, [b.add(base, col_at[jj])]),
                                        self.vty.as_pointer())
                        value = b.call(self.masked_load, [ptr, i32(self.esize), mask, value])
                    from_runs.append(value)
                runs_end = b.block
                b.branch(turn)
                b.position_at_end(strided)
                from_pairs = [self._load_every_other(
                    b, b.gep(src, [b.add(rows[0], col_at[jj])], inbounds=True), self.vty)
                    for jj in range(h * vl, (h + 1) * vl)]
                strided_end = b.block
                b.branch(turn)
                b.position_at_end(turn)
                down = []
                for x, y, z in zip(from_run, from_runs, from_pairs):
                    phi = b.phi(self.vty)
                    phi.add_incoming(x, run_end)
                    phi.add_incoming(y, runs_end)
                    phi.add_incoming(z, strided_end)
                    down.append(phi)
                self._store_transposed(b, down, dst, k0, keep, zero, h)
            turned = b.block
            b.branch(done)
            b.position_at_end(done)
            # the block's rows still to copy element by element: none after a transpose
            copied = b.phi(I64)
            copied.add_incoming(block_end, turned)
            copied.add_incoming(k0, not_vectors)
            copied.add_incoming(k0, partial)
            with counted_loop(b, copied, block_end, name="kr") as k:
                self._copy_row(b, b.gep(src, [self._row_at(b, k, koff, sbk)], inbounds=True),
                               b.gep(dst, [b.mul(k, i64(nr))], inbounds=True), cols, col_at,
                               sbn, True)
        b.branch(joined)
        b.position_at_end(other)

    def _store_transposed(self, b, down, dst, k0, keep, zero, h):
        """Rows ``k0 .. k0 + VL - 1`` of the packed strip's columns ``h * VL ..
        (h + 1) * VL - 1`` from ``down``, a vector down each of them, transposed; lanes
        not ``keep[h]`` zero."""
        vl, nr = self.blk.vl, self.blk.nr
        for l, row in enumerate(self._transpose(b, down)):
            at = b.gep(dst, [b.add(b.mul(b.add(k0, i64(l)), i64(nr)), i64(h * vl))],
                       inbounds=True)
            b.store(b.select(keep[h], row, zero), b.bitcast(at, self.vty.as_pointer()),
                    align=self.esize)

    @staticmethod
    def _steps(b, offsets, step):
        """Whether ``offsets[l] == offsets[0] + step * l`` for every ``l`` (i1)."""
        hit = b.icmp_signed("==", offsets[1], b.add(offsets[0], i64(step)))
        for l in range(2, len(offsets)):
            hit = b.and_(hit, b.icmp_signed("==", offsets[l], b.add(offsets[0], i64(step * l))))
        return hit

    @staticmethod
    def _transpose(b, rows):
        """The transpose of the square matrix whose rows are the vectors ``rows``.

        Butterfly stages of half-widths ``n/2, .., 1``: the pair of rows ``(i, i + w)``
        (``i & w == 0``) swaps the ``w``-lane blocks that are off the diagonal. Invariant
        after the stage of width ``w``: blocks of ``w x w`` elements are in their
        transposed places, each still untransposed inside."""
        n = len(rows)
        rows, w = list(rows), n // 2
        while w >= 1:
            low = ir.Constant(ir.VectorType(I32, n), [q if not q & w else n + q - w
                                                      for q in range(n)])
            high = ir.Constant(ir.VectorType(I32, n), [q + w if not q & w else n + q
                                                       for q in range(n)])
            for i in range(n):
                if not i & w:
                    rows[i], rows[i + w] = (b.shuffle_vector(rows[i], rows[i + w], low),
                                            b.shuffle_vector(rows[i], rows[i + w], high))
            w //= 2
        return rows

    def _pack_two_runs(self, b, fn, cols, col_at, kc, koff, sbk, src, dst, joined):
        """Columns ``[0, p)`` at consecutive elements from ``col_at[0]`` and ``[p, cols)``
        from ``col_at[p]`` (``p == cols``: one run): each row is two masked vector loads
        per ``VL`` columns, lanes past ``cols`` zero. Masked-off lanes touch no memory,
        so exactly the elements of the element-wise copy are read."""
        blk = self.blk
        p, second, breaks = self._runs(b, col_at, cols)
        runs, other = fn.append_basic_block("runs"), fn.append_basic_block("not.runs")
        b.cbranch(b.icmp_signed("<=", breaks, i64(1)), runs, other)
        b.position_at_end(runs)
        lanes = ir.VectorType(I64, blk.vl)
        end = smin(b, p, cols)
        masks = []
        for v in range(blk.nr // blk.vl):
            at = ir.Constant(lanes, [v * blk.vl + lane for lane in range(blk.vl)])
            masks.append((b.icmp_signed("<", at, self._splat(b, end, lanes)),
                          b.and_(b.icmp_signed(">=", at, self._splat(b, p, lanes)),
                                 b.icmp_signed("<", at, self._splat(b, cols, lanes)))))
        zero = ir.Constant(self.vty, [0.0] * blk.vl)
        with counted_loop(b, i64(0), kc, name="k1") as k:
            row = self._row_at(b, k, koff, sbk)
            # the second run's base may lie before B (its lanes before p are masked off)
            bases = (b.gep(src, [b.add(row, col_at[0])]), b.gep(src, [b.add(row, second)]))
            out = b.gep(dst, [b.mul(k, i64(blk.nr))], inbounds=True)
            for v, (first_mask, second_mask) in enumerate(masks):
                ptrs = [b.bitcast(b.gep(base, [i64(v * blk.vl)]), self.vty.as_pointer())
                        for base in bases]
                value = b.call(self.masked_load, [ptrs[0], i32(self.esize), first_mask, zero])
                value = b.call(self.masked_load, [ptrs[1], i32(self.esize), second_mask, value])
                b.store(value, b.bitcast(b.gep(out, [i64(v * blk.vl)], inbounds=True),
                                         self.vty.as_pointer()), align=self.esize)
        b.branch(joined)
        b.position_at_end(other)

    @staticmethod
    def _runs(b, offsets, count):
        """``(p, base, breaks)`` of the first ``count`` of ``offsets`` (i64 values):
        ``breaks`` places where one is not the one before plus 1, ``p`` the first such
        place (``len(offsets)`` when none) and ``base == offsets[p] - p`` (``offsets[0]``
        when none). With at most one break, entry ``j`` is ``offsets[0] + j`` below ``p``
        and ``base + j`` from ``p`` on."""
        p, base, breaks = i64(len(offsets)), offsets[0], i64(0)
        for j in range(len(offsets) - 1, 0, -1):
            brk = b.and_(b.icmp_signed("<", i64(j), count),
                         b.icmp_signed("!=", offsets[j], b.add(offsets[j - 1], i64(1))))
            p = b.select(brk, i64(j), p)
            base = b.select(brk, b.sub(offsets[j], i64(j)), base)
            breaks = b.add(breaks, b.zext(brk, I64))
        return p, base, breaks

    @staticmethod
    def _splat(b, value, vty):
        """``value`` in every lane of ``vty``."""
        one = b.insert_element(ir.Constant(vty, ir.Undefined), value, i32(0))
        return b.shuffle_vector(one, ir.Constant(vty, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, vty.count), [0] * vty.count))

    def _row_at(self, b, k, koff, sbk):
        """The element offset of B's reduction row ``k`` (its stride, or its table)."""
        if self.spec.k_offsets is None:
            return b.mul(k, sbk)
        return b.load(b.gep(koff, [k], inbounds=True))

    @staticmethod
    def _column_at(b, jj, cols, sbn, guarded):
        """The offset of column ``jj`` at stride ``sbn`` (past the last of ``cols``
        columns, when ``guarded``, the last one's)."""
        return b.mul(smin(b, i64(jj), b.sub(cols, i64(1))) if guarded else i64(jj), sbn)

    def _copy_consecutive_columns(self, b, fn, kc, koff, sbk, sbn, src, dst, joined):
        """When the strip's columns are consecutive elements of B (``sbn == 1``), copy
        each row as ``NR / VL`` vectors, the target's width (LLVM would vectorise the
        element copy across rows at a width of its choosing, wider than the target's
        registers on aarch64). Goes to ``joined`` when taken; otherwise the builder
        continues in a new block."""
        vectors = fn.append_basic_block("consecutive")
        other = fn.append_basic_block("strided")
        b.cbranch(b.icmp_signed("==", sbn, i64(1)), vectors, other)
        b.position_at_end(vectors)
        with counted_loop(b, i64(0), kc, name="kv") as k:
            row_src = b.gep(src, [self._row_at(b, k, koff, sbk)], inbounds=True)
            row_dst = b.gep(dst, [b.mul(k, i64(self.blk.nr))], inbounds=True)
            for h in range(0, self.blk.nr, self.blk.vl):
                value = self._load_vector(b, b.gep(row_src, [i64(h)], inbounds=True), self.vty)
                at = b.gep(row_dst, [i64(h)], inbounds=True)
                b.store(value, b.bitcast(at, self.vty.as_pointer()), align=self.esize)
        b.branch(joined)
        b.position_at_end(other)

    def _copy_row(self, b, row_src, row_dst, cols, col_at, sbn, guarded):
        """``row_dst[jj] = B[row, column jj]`` element by element; past the last of
        ``cols`` columns (``guarded``) the last one is read (in bounds) and 0 stored.
        The columns are at the offsets ``col_at``, or at the stride ``sbn`` when None."""
        for jj in range(self.blk.nr):
            target = b.gep(row_dst, [i64(jj)], inbounds=True)
            if col_at is None:
                col = self._column_at(b, jj, cols, sbn, guarded)
            else:
                col = col_at[jj]
            value = b.load(b.gep(row_src, [col], inbounds=True), align=self.esize)
            if guarded:
                value = b.select(b.icmp_signed("<", i64(jj), cols), value, self.const(0.0))
            b.store(value, target)

    def _load_vector(self, b, at, vty):
        return b.load(b.bitcast(at, vty.as_pointer()), align=self.esize)

    def _load_every_other(self, b, at, vty):
        """``at[0], at[2], .., at[2n - 2]`` as a vector of ``vty`` (``n`` lanes): the
        first vector's even lanes, then the odd ones of the second, loaded from
        ``n - 1`` on (nothing past the last element read)."""
        n = vty.count
        first = self._load_vector(b, at, vty)
        second = self._load_vector(b, b.gep(at, [i64(n - 1)], inbounds=True), vty)
        even = [2 * q for q in range(n // 2)] + [n + 1 + 2 * q for q in range(n - n // 2)]
        return b.shuffle_vector(first, second, ir.Constant(ir.VectorType(I32, n), even))

    # -- macro-loops and the entry point ----------------------------------------------

    # -- the driver: the macro-loops of every product of this dtype and blocking ------

    #: the fields of the parameters a product hands its driver (see :meth:`emit_driver`)
    PARAMS = ("a", "b", "c", "claims", "slots", "slot_bytes", "batch", "m", "n", "k",
              "sa0", "sa1", "sa2", "sb0", "sb1", "sb2", "sc0", "sc1", "sc2", "k0_offsets",
              "k1_offsets", "n_offsets", "batch_offsets", "chunk", "rows_per_task",
              "micro_full", "micro_tail", "pack")

    def params_type(self):
        eptr, iptr = self.eptr, I64.as_pointer()
        micro = self.micro_type().as_pointer()
        kinds = {"a": eptr, "b": eptr, "c": eptr, "claims": iptr, "k0_offsets": iptr,
                 "k1_offsets": iptr, "n_offsets": iptr, "batch_offsets": iptr,
                 "micro_full": micro, "micro_tail": micro,
                 "pack": self.pack_type().as_pointer()}
        return ir.LiteralStructType([kinds.get(f, I64) for f in self.PARAMS])

    def micro_type(self):
        return ir.FunctionType(ir.VoidType(), [self.eptr, self.eptr, self.eptr, I64, I1, I64,
                                               I64.as_pointer(), I64, I64, I64])

    def pack_type(self):
        return ir.FunctionType(ir.VoidType(), [self.eptr, self.eptr, I64, I64,
                                               I64.as_pointer(), I64.as_pointer(), I64, I64])

    def emit_driver(self):
        """``driver(params, begin, end)``: the tasks ``[begin, end)`` of one chunk of a
        fork-join, for any product of this dtype and blocking (its extents, strides,
        offset tables, micro-kernels and packing routine are read from ``params``; a
        null table means the stride). Task ``t`` is row group ``t % row_groups`` (of
        ``params.rows_per_task`` row blocks) of column chunk ``g % chunks`` of batch
        ``g // chunks`` (``g = t // row_groups``), the chunks ``params.chunk`` columns
        wide: a call packs only the columns of its tasks, into the slot of
        ``params.claims``'s space it claims (:mod:`.packspace`)."""
        blk = self.blk
        name = f"tegrad.gemm.driver.{self.spec.dtype}.vl{blk.vl}.mr{blk.mr}.nr{blk.nr}." \
               f"kc{blk.kc}.nc{blk.nc}"
        if name in self.module.globals:
            return self.module.globals[name]
        if self.shared:
            return self._declare_shared(name, threadpool.TASK_FN_TYPE,
                                        lambda em: em.emit_driver())
        fn = ir.Function(self.module, threadpool.TASK_FN_TYPE, name=name)
        fn.linkage = "internal"
        raw, t_begin, t_end = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ptr = b.bitcast(raw, self.params_type().as_pointer())

        def field(f):
            return b.gep(ptr, [i32(0), i32(self.PARAMS.index(f))], inbounds=True)

        p = {f: b.load(field(f)) for f in self.PARAMS}
        m, n, k, chunk = p["m"], p["n"], p["k"], p["chunk"]
        null = ir.Constant(I64.as_pointer(), None)

        def is_null(table):
            return b.icmp_unsigned("==", b.ptrtoint(table, I64), i64(0))

        # A 64-byte aligned panel of this call's own for the packed B, held until it returns.
        claimed, bp = packspace.emit_claim(b, fn, p["claims"], p["slots"], p["slot_bytes"],
                                           self.eptr)

        row_blocks = ceil_div(b, m, i64(blk.mr))
        rows_per = p["rows_per_task"]
        row_groups = ceil_div(b, row_blocks, rows_per)
        chunks = ceil_div(b, n, chunk)
        k_tables = [p["k0_offsets"], p["k1_offsets"]]
        # with a reduction table, k0's offset is in the table, not in the base pointers
        a_k_stride = b.select(is_null(k_tables[0]), p["sa2"], i64(0))
        b_k_stride = b.select(is_null(k_tables[1]), p["sb1"], i64(0))
        b_n_stride = b.select(is_null(p["n_offsets"]), p["sb2"], i64(0))
        batch_table = p["batch_offsets"]
        first = b.sdiv(t_begin, row_groups)
        last = b.sdiv(b.sub(t_end, i64(1)), row_groups)
        with counted_loop(b, first, b.add(last, i64(1)), name="g") as g:
            task0 = b.mul(g, row_groups)
            lo = b.sub(b.select(b.icmp_signed(">", t_begin, task0), t_begin, task0), task0)
            hi = b.sub(smin(b, t_end, b.add(task0, row_groups)), task0)
            lo, hi = b.mul(lo, rows_per), smin(b, row_blocks, b.mul(hi, rows_per))
            batch, col0 = b.sdiv(g, chunks), b.mul(b.srem(g, chunks), chunk)
            col1 = smin(b, n, b.add(col0, chunk))
            strided = [b.mul(batch, stride) for stride in (p["sa0"], p["sb0"], p["sc0"])]
            before = b.block
            read, joined = fn.append_basic_block("batch.table"), fn.append_basic_block("batch")
            b.cbranch(is_null(batch_table), joined, read)
            b.position_at_end(read)
            from_table = [b.load(b.gep(batch_table, [b.add(b.mul(batch, i64(3)), i64(j))],
                                       inbounds=True)) for j in range(3)]
            b.branch(joined)
            b.position_at_end(joined)
            at = []
            for x, y in zip(strided, from_table):
                phi = b.phi(I64)
                phi.add_incoming(x, before)
                phi.add_incoming(y, read)
                at.append(phi)
            a_p, b_p, c_p = (b.gep(base, [off], inbounds=True)
                             for base, off in zip((p["a"], p["b"], p["c"]), at))
            with counted_loop(b, i64(0), k, blk.kc, name="k0") as k0:
                kc = smin(b, i64(blk.kc), b.sub(k, k0))
                accumulate = b.icmp_signed(">", k0, i64(0))
                koff = [b.select(is_null(t), null, b.gep(t, [k0], inbounds=True))
                        for t in k_tables]
                with counted_loop(b, col0, col1, blk.nc, name="n0") as n0:
                    nc = smin(b, i64(blk.nc), b.sub(col1, n0))
                    src = b.gep(b_p, [b.add(b.mul(k0, b_k_stride), b.mul(n0, b_n_stride))],
                                inbounds=True)
                    noff = b.select(is_null(p["n_offsets"]), null,
                                    b.gep(p["n_offsets"], [n0], inbounds=True))
                    b.call(p["pack"], [src, bp, kc, nc, koff[1], noff, p["sb1"], p["sb2"]])
                    with counted_loop(b, lo, hi, name="rb") as rb:
                        m0 = b.mul(rb, i64(blk.mr))
                        a_blk = b.gep(a_p, [b.add(b.mul(m0, p["sa1"]), b.mul(k0, a_k_stride))],
                                      inbounds=True)
                        c_row = b.gep(c_p, [b.add(b.mul(m0, p["sc1"]), n0)], inbounds=True)
                        n_strips = ceil_div(b, nc, i64(blk.nr))
                        full = b.icmp_signed("<=", b.add(m0, i64(blk.mr)), m)
                        micro = b.select(full, p["micro_full"], p["micro_tail"])
                        with counted_loop(b, i64(0), n_strips, name="s") as s_:
                            j0 = b.mul(s_, i64(blk.nr))
                            b.call(micro, [a_blk, b.gep(bp, [b.mul(j0, kc)], inbounds=True),
                                           b.gep(c_row, [j0], inbounds=True), kc, accumulate,
                                           smin(b, i64(blk.nr), b.sub(nc, j0)), koff[0],
                                           p["sa1"], p["sa2"], p["sc1"]])
        packspace.emit_release(b, p["claims"], claimed)
        b.ret_void()
        return fn

    def table(self, what, values):
        """An ``i64*`` to this product's constant offset table ``what``."""
        return constant_table(self.module, f"{self.name}.{what}_offsets", values)

    def emit_entry(self, driver, micro_full, micro_tail, pack, min_flops_per_thread):
        """``void NAME(A, B, C, i8 *space, i32 n_threads)``: the product's parameters,
        handed to the driver through the thread pool."""
        spec, blk = self.spec, self.blk
        fnty = ir.FunctionType(ir.VoidType(), [self.eptr, self.eptr, self.eptr,
                                               I8.as_pointer(), I32])
        fn = ir.Function(self.module, fnty, name=self.name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ptr = b.alloca(self.params_type())
        null = ir.Constant(I64.as_pointer(), None)

        def put(f, value):
            b.store(value, b.gep(ptr, [i32(0), i32(self.PARAMS.index(f))], inbounds=True))

        for f, arg in zip("abc", fn.args[:3]):
            put(f, arg)
        for f in ("batch", "m", "n", "k"):
            put(f, i64(getattr(spec, f)))
        for f, strides in zip(("sa", "sb", "sc"), (spec.a_strides, spec.b_strides,
                                                   spec.c_strides)):
            for j, v in enumerate(strides):
                put(f"{f}{j}", i64(v))
        for j in range(2):
            put(f"k{j}_offsets", null if spec.k_offsets is None else
                self.table(f"k{j}", [row[j] for row in spec.k_offsets]))
        put("n_offsets", null if spec.n_offsets is None else self.table("n", spec.n_offsets))
        put("batch_offsets", null if spec.batch_offsets is None else
            self.table("batch", [v for row in spec.batch_offsets for v in row]))
        put("micro_full", micro_full)
        put("micro_tail", micro_full if micro_tail is None else micro_tail)
        put("pack", pack)
        # Work too small to pay for waking threads runs on fewer of them.
        threads = threadpool.threads_worth(b, fn.args[4], spec.flops, min_flops_per_thread)
        # One slot per thread this call runs on (the pool runs no more of its tasks at
        # once), in a space sized for n_threads >= threads: see .packspace.
        put("claims", packspace.emit_init(b, fn.args[3]))
        at_least_one = b.select(b.icmp_signed("<", threads, i32(1)), i32(1), threads)
        put("slots", b.zext(smin(b, at_least_one, i32(threadpool.MAX_THREADS)), I64))
        put("slot_bytes", i64(pack_slot_bytes(spec, blk)))
        # Tasks for the pool's chunks (one, serially): whole batches while there are
        # enough of them, else each batch cut into column chunks of whole strips (a task
        # packs only its columns of B), then, when those are still too few, into groups
        # of row blocks (their tasks pack the same columns again).
        threads = b.zext(threads, I64)
        want = b.select(b.icmp_signed(">", threads, i64(1)),
                        b.mul(threads, i64(threadpool.CHUNKS_PER_THREAD)), i64(1))
        per_batch = ceil_div(b, want, i64(spec.batch))
        strips = -(-spec.n // blk.nr)
        width = b.mul(ceil_div(b, i64(strips), smin(b, per_batch, i64(strips))), i64(blk.nr))
        chunks = ceil_div(b, i64(spec.n), width)
        row_blocks = -(-spec.m // blk.mr)
        few = b.icmp_signed("<", b.mul(i64(spec.batch), chunks), threads)
        row_groups = b.select(few, smin(b, ceil_div(b, per_batch, chunks), i64(row_blocks)),
                              i64(1))
        rows_per = ceil_div(b, i64(row_blocks), row_groups)
        row_groups = ceil_div(b, i64(row_blocks), rows_per)  # none left empty
        put("chunk", width)
        put("rows_per_task", rows_per)
        n_tasks = b.mul(i64(spec.batch), b.mul(chunks, row_groups))
        parallel_for = threadpool.declare_parallel_for(self.module)
        b.call(parallel_for, [driver, b.bitcast(ptr, VOIDPTR), n_tasks, b.trunc(threads, I32)])
        b.ret_void()
        return fn


#: the default least work (flops) that pays for one more thread: 2**21, 10-15 us of one
#: core (a fork-join costs about a microsecond, but a worker descheduled mid-range by
#: another process's threads costs a time slice: see parallel.MIN_PARALLEL_WORK)
MIN_FLOPS_PER_THREAD = 1 << 21


def emit_gemm(module, spec, *, name="tegrad_gemm", blocking=None,
              min_flops_per_thread=MIN_FLOPS_PER_THREAD, shared=False, target=None):
    """Emit ``void name(A, B, C, i8 *space, i32 n_threads)`` computing ``spec`` into
    ``module``; ``space``: :func:`pack_space_bytes` ``(spec, n_threads, blocking)`` bytes
    of the caller's (any alignment, contents not kept), where the tasks pack ``B``.

    With ``shared`` (a module for this process's JIT), the micro-kernels and packing
    routines are declared, compiled once per process (:func:`.jit.shared_function`).

    At most ``spec.flops // min_flops_per_thread`` threads (at least 1) run, whatever
    ``n_threads`` asks. The thread pool is declared, not defined: call
    :func:`threadpool.emit_thread_pool` on the module for an exported library; the JIT
    links the process's pool. ``blocking`` defaults to :func:`default_blocking` for
    ``target`` (None: the host).
    """
    blk = blocking or default_blocking(spec.dtype, target=target)
    if blk.nr % blk.vl or blk.nc % blk.nr:
        raise TegradError(f"gemm: blocking {blk} needs nr a multiple of vl and nc of nr")
    em = _GemmEmitter(module, spec, blk, name, shared)
    full = em.emit_micro(blk.mr)
    tail = em.emit_micro(spec.m % blk.mr) if spec.m % blk.mr else None
    return em.emit_entry(em.emit_driver(), full, tail, em.emit_pack(), min_flops_per_thread)


class CompiledGemm:
    """A JIT-compiled :class:`GemmSpec` callable on numpy arrays: ``f(a, b, out=None,
    threads=1)`` with ``a`` and ``b`` of the spec's (batch-less when batch is 1) shapes,
    C-contiguous (other layouts are the spec's strides: use :attr:`address` directly).
    ``emit`` is the kernel's emitter (:func:`emit_gemm`, or another with its arguments);
    ``space_bytes(threads)``, the bytes of packing space it needs (default: the gemm's).
    Each Python thread calling it has a packing space of its own, kept between calls."""

    def __init__(self, spec, blocking=None, min_flops_per_thread=MIN_FLOPS_PER_THREAD,
                 emit=None, space_bytes=None):
        threadpool.parallel_for_address()  # the pool must be registered before linking
        module = ir.Module(name="tegrad_gemm")
        (emit or emit_gemm)(module, spec, name="tegrad_gemm", blocking=blocking,
                            min_flops_per_thread=min_flops_per_thread)
        self.spec = spec
        self.engine = jit.compile_module(module)
        self.address = self.engine.get_function_address("tegrad_gemm")
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_int32)(self.address)
        self._spans = spec.spans()
        self._space_bytes = space_bytes or functools.partial(pack_space_bytes, spec,
                                                             blocking=blocking)
        self._spaces = threading.local()  # concurrent calls must not share a space

    def space(self, threads):
        """This Python thread's packing space for a call on ``threads`` threads."""
        need = self._space_bytes(threads)
        have = getattr(self._spaces, "array", None)
        if have is None or have.size < need:
            self._spaces.array = have = np.empty(max(need, 1), np.uint8)
        return have

    def call_pointers(self, a, b, c, threads=1):
        """Run on raw addresses (ints), unchecked: each must be the element the spec's
        strides start from, with every element they reach inside its buffer."""
        threads = int(threads)
        self._fn(a, b, c, self.space(threads).ctypes.data, threads)

    def call_raw(self, a, b, c, threads=1):
        """Run on arrays laid out with the spec's strides from their first element."""
        dtype = np.dtype(self.spec.dtype)
        for what, arr, (lo, hi) in zip("ABC", (a, b, c), self._spans):
            if lo < 0:
                raise ShapeError(f"gemm: {what} has negative strides; call the kernel at "
                                 f":attr:`address` with a base pointer inside the array")
            if arr.dtype != dtype or not arr.flags.c_contiguous or arr.size <= hi:
                raise ShapeError(f"gemm: {what} must be a C-contiguous {dtype} array of at "
                                 f"least {hi + 1} elements")
        if not c.flags.writeable:
            raise ShapeError("gemm: C is not writeable")
        self.call_pointers(a.ctypes.data, b.ctypes.data, c.ctypes.data, threads)
        return c

    def __call__(self, a, b, out=None, threads=1):
        spec = self.spec
        lead = () if spec.batch == 1 and a.ndim == 2 else (spec.batch,)
        if out is None:
            out = np.empty(lead + (spec.m, spec.n), spec.dtype)
        return self.call_raw(np.ascontiguousarray(a), np.ascontiguousarray(b), out, threads)


@functools.lru_cache(maxsize=256)
def compile_gemm(spec, blocking=None, *, min_flops_per_thread=MIN_FLOPS_PER_THREAD):
    """The JIT-compiled kernel of ``spec`` (cached per spec and options)."""
    return CompiledGemm(spec, blocking, min_flops_per_thread)
