"""What a gemm computes and how it is blocked: :class:`GemmSpec` (a batched product's
extents, strides and offset tables), :class:`Blocking` (register and cache blocks,
:func:`default_blocking` for a target) and the packing space its tasks need
(:func:`pack_slot_bytes`, :func:`pack_space_bytes`). Numbers only: the code is emitted
by :mod:`.gemm`.

>>> spec = GemmSpec.dense("float32", 64, 64, 64)
>>> spec.flops, spec.spans()
(524288, ((0, 4095), (0, 4095), (0, 4095)))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import llvmlite.ir as ir

from tegrad.ir.errors import ShapeError, TegradError

from tegrad.codegen.kernels import packspace
from tegrad.codegen.target import resolve
from tegrad.codegen.tuning import GEMM_KC, GEMM_PACKED_B_BYTES, gemm_register_block

#: the LLVM type and the size in bytes of an element of each dtype a gemm computes in
ELEMENT = {"float32": ir.FloatType(), "float64": ir.DoubleType()}
ITEMSIZE = {"float32": 4, "float64": 8}


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

    ``accumulate`` adds the product to ``C`` (``C += A B``) instead of overwriting it: a
    sum of products runs as products into one output.
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
    accumulate: bool = False

    def __post_init__(self):
        if self.dtype not in ELEMENT:
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


def default_blocking(dtype, *, target=None, vector_bits=None,
                     packed_bytes=GEMM_PACKED_B_BYTES):
    """Blocks for ``target`` (:class:`~tegrad.codegen.target.Target`, None: the host;
    ``vector_bits`` replaces its vector width): 2 vectors of columns, as many rows as
    its vector registers allow; ``packed_bytes``: the packed block of B, in bytes.

    >>> default_blocking("float32", vector_bits=512)
    Blocking(vl=16, mr=8, nr=32, kc=256, nc=256)
    """
    vl, mr, nr = gemm_register_block(resolve(target, vector_bits), dtype)
    kc = GEMM_KC
    nc = max(nr, packed_bytes // (kc * ITEMSIZE[dtype]) // nr * nr)
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
    return packspace.round_to_line(min(blk.kc, spec.k) * strips * blk.nr * ITEMSIZE[spec.dtype])


def pack_space_bytes(spec, threads, blocking=None, *, target=None):
    """The bytes of the ``space`` argument of ``spec``'s kernel called on ``threads``
    threads: a slot of :func:`pack_slot_bytes` per thread (see :mod:`.packspace`).

    >>> blk = default_blocking("float32", vector_bits=512)
    >>> pack_space_bytes(GemmSpec.dense("float32", 64, 64, 64), 2, blk)
    32896
    """
    return packspace.space_bytes(slot_bytes=pack_slot_bytes(spec, blocking, target=target),
                                 threads=threads)
