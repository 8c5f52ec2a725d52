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
(:mod:`.fork_join`), whose chunks of tasks are calls, each packing into a slot of
``space`` it claims for the call (one slot per thread the call may run on). With
one thread a task is a whole batch; with more, about ``CHUNKS_PER_THREAD`` tasks per
thread: batches cut into column chunks of whole strips (a task packs only its columns
of ``B``), and those into groups of row blocks only while there are fewer chunks than
threads. Every ``C`` element is written by
exactly one task, and the sum over ``k`` runs in increasing ``k`` whatever the thread
count and chunks, so results are bit-identical for every ``n_threads``.

This module emits a product (:func:`emit_gemm`) and compiles one for numpy arrays
(:func:`compile_gemm`); the pieces live beside it: :mod:`.gemm_spec` (the spec, its
blocking, the packing space), :mod:`.gemm_micro` (the micro-kernel), :mod:`.gemm_pack`
(the packing routine), :mod:`.gemm_driver` (the macro-loops and the entry point), all on
:mod:`.gemm_emitter`'s shared state.

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

import llvmlite.ir as ir
import numpy as np

from tegrad.ir.errors import ShapeError, TegradError

from tegrad.codegen.tuning import MIN_FLOPS_PER_THREAD
from tegrad.codegen.target import jit
from tegrad.codegen.kernels.gemm_driver import DriverEmitter
from tegrad.codegen.kernels.gemm_micro import MicroKernelEmitter
from tegrad.codegen.kernels.gemm_pack import PackingEmitter
from tegrad.codegen.kernels.gemm_spec import (Blocking, GemmSpec, default_blocking,
                                              pack_slot_bytes, pack_space_bytes)
from tegrad.codegen.kernels.gemm_spec import (  # noqa: F401  (the dot kernel's names)
    ELEMENT as _ELEMENT, ITEMSIZE as _ITEMSIZE)

__all__ = ["Blocking", "CompiledGemm", "GemmSpec", "compile_gemm", "default_blocking",
           "emit_gemm", "pack_slot_bytes", "pack_space_bytes", "request_shared_routines"]


class _GemmEmitter(MicroKernelEmitter, PackingEmitter, DriverEmitter):
    """The emitter of a gemm's routines: its micro-kernels, packing routine, driver and
    entry point."""


def emit_gemm(module, spec, *, name="tegrad_gemm", blocking=None,
              min_flops_per_thread=MIN_FLOPS_PER_THREAD, shared=False, target=None):
    """Emit ``void name(A, B, C, i8 *space, i32 n_threads)`` computing ``spec`` into
    ``module``; ``space``: :func:`pack_space_bytes` ``(spec, n_threads, blocking)`` bytes
    of the caller's (any alignment, contents not kept), where the tasks pack ``B``.

    With ``shared`` (a module for this process's JIT), the micro-kernels and packing
    routines are declared, compiled once per process (:func:`.jit.shared_function`).

    At most ``spec.flops // min_flops_per_thread`` threads (at least 1) run, whatever
    ``n_threads`` asks. The thread pool is declared, not defined: call
    :func:`tegrad.codegen.runtime.thread_pool.emit_thread_pool` on the module for an
    exported library; the JIT links the process's pool. ``blocking`` defaults to :func:`default_blocking` for
    ``target`` (None: the host).
    """
    blk = blocking or default_blocking(spec.dtype, target=target)
    if blk.nr % blk.vl or blk.nc % blk.nr:
        raise TegradError(f"gemm: blocking {blk} needs nr a multiple of vl and nc of nr")
    em = _GemmEmitter(module, spec, blk, name, shared)
    full = em.emit_micro(blk.mr)
    tail = em.emit_micro(spec.m % blk.mr) if spec.m % blk.mr else None
    return em.emit_entry(full, tail, em.emit_pack(), min_flops_per_thread)


def request_shared_routines(dtype):
    """Start compiling, on the JIT's background thread, the host's shared routines that
    every gemm of ``dtype`` calls whatever its spec (its packing routine, driver and
    launch, and the thread pool the launch calls) and the micro-kernel of full row
    blocks with a strided reduction, as a module emitted with ``shared`` later declares
    them (:func:`.jit.request_shared`); returns at once. A caller that knows a program
    will run products of ``dtype`` calls it before lowering: a first build then no
    longer waits for these after emitting. (The other micro-kernels depend on the
    spec: each is requested as a module declares it.)

    >>> request_shared_routines("float64"); jit.await_requested()
    >>> blk = default_blocking("float64")
    >>> jit.shared_address(f"tegrad.gemm.pack.float64.vl{blk.vl}.nr{blk.nr}") is not None
    True
    """
    blk = default_blocking(dtype)
    # (these routines depend on the dtype and the blocking alone: any spec declares them)
    em = _GemmEmitter(ir.Module(name="requests"), GemmSpec.dense(dtype, blk.mr, blk.nr, 1),
                      blk, "requests", shared=True)
    em.emit_pack()
    em.emit_launch()
    em.emit_micro(blk.mr)  # (the micro-kernel of full row blocks, strided: nearly any spec's)


class CompiledGemm:
    """A JIT-compiled :class:`GemmSpec` callable on numpy arrays: ``f(a, b, out=None,
    threads=1)`` with ``a`` and ``b`` of the spec's (batch-less when batch is 1) shapes,
    C-contiguous (other layouts are the spec's strides: use :attr:`address` directly).
    ``emit`` is the kernel's emitter (:func:`emit_gemm`, or another with its arguments);
    ``space_bytes(threads)``, the bytes of packing space it needs (default: the gemm's).
    Each Python thread calling it has a packing space of its own, kept between calls."""

    def __init__(self, spec, blocking=None, min_flops_per_thread=MIN_FLOPS_PER_THREAD,
                 emit=None, space_bytes=None):
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
