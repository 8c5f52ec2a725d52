"""Where a kernel's buffers live: local buffers on the stack up to
:data:`STACK_LIMIT_BYTES`, larger ones (:func:`large_locals`) and the matrix products'
packing space (:func:`packing_space`) in storage the runtime owns, passed after the
kernel's arguments and temporaries, aligned to :data:`STORAGE_ALIGNMENT` bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tegrad.codegen.kernels.product import product_space_bytes
from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import buffers_of, walk_stmts
from tegrad.codegen.tuning import SHARED_MIN_BYTES, STACK_LIMIT_BYTES

#: the alignment (bytes) of the storage the runtime allocates for temporaries and large
#: local buffers, declared to LLVM
STORAGE_ALIGNMENT = 64

#: the name of the kernel's buffer of packing space for its matrix products (a name no
#: tensor's buffer has: those are the tensors' names, and no tensor is named so by tegrad)
PACKING_SPACE = "tegrad.packing"


def large_locals(stmt):
    """Local buffers too large for the stack."""
    out = []
    for s in walk_stmts(stmt):
        if isinstance(s, _n.Allocate):
            b = s.buffer
            if b.size * np.dtype(b.dtype).itemsize > STACK_LIMIT_BYTES and b not in out:
                out.append(b)
    return out


def packing_space(stmt, threads, target=None):
    """The buffer where the matrix products of ``stmt`` pack their operands (None when
    none packs): one for all of them, sized for the largest on ``threads`` threads (the
    products run one after another, never inside a parallel loop's task: see
    :mod:`.parallel`), passed after the large local buffers, so an export carves it from
    the caller's workspace and the JIT's executable owns it: nothing is allocated in a
    call.

    >>> from tegrad.codegen.kernels.gemm import GemmSpec
    >>> from tegrad.codegen.loops.nodes import Buffer, MatrixProduct
    >>> a, b, c = (Buffer(n, (64, 64), "float32") for n in "abc")
    >>> mm = MatrixProduct(GemmSpec.dense("float32", 64, 64, 64), c, a, b, 0, 0, 0)
    >>> packing_space(mm, 2).shape[0] > packing_space(mm, 1).shape[0]
    True
    """
    nbytes = max([product_space_bytes(s.spec, threads, target) for s in walk_stmts(stmt)
                  if isinstance(s, _n.MatrixProduct)], default=0)
    return _n.Buffer(PACKING_SPACE, (nbytes,), "uint8", "local") if nbytes else None


def has_product(stmt):
    return any(isinstance(s, _n.MatrixProduct) for s in walk_stmts(stmt))




def buffer_bytes(buffer):
    """The bytes of ``buffer``'s storage (a bool element takes a byte)."""
    dtype = "uint8" if buffer.dtype == "bool" else buffer.dtype
    return max(buffer.size, 1) * np.dtype(dtype).itemsize


@dataclass(frozen=True)
class StoragePlan:
    """Where the runtime's storage holds each buffer: ``offsets[b]`` the byte offset of
    buffer ``b`` in one block of ``nbytes`` bytes (each aligned to
    :data:`STORAGE_ALIGNMENT`); ``shares[b]`` the buffers whose memory overlaps ``b``'s
    (all of them live only while ``b`` is dead); ``separate_bytes`` what the buffers
    would take each in a place of its own."""

    offsets: dict
    nbytes: int
    shares: dict
    separate_bytes: int

    def sharing(self, a, b):
        """Whether buffers ``a`` and ``b`` have overlapping memory."""
        return b in self.shares.get(a, ())


def _round_up(n, multiple):
    return -(-n // multiple) * multiple


def live_ranges(body, buffers, packing=None):
    """``{buffer: (first, last)}``: the top-level statements of the kernel body ``body``
    (by position) between the first and the last that use each of ``buffers`` (reading,
    writing or allocating it; ``packing`` is used by every statement holding a matrix
    product). A buffer no statement uses is live throughout. A kernel runs its top-level
    statements once each, in order, so a buffer holds nothing another statement needs
    outside its range."""
    stmts = list(body.stmts) if type(body) is _n.Block else [body]
    wanted, ranges = set(buffers), {}
    for k, s in enumerate(stmts):
        used, allocated = buffers_of(s)
        touched = set(used) | allocated
        if packing is not None and has_product(s):
            touched.add(packing)
        for b in touched & wanted:
            first, _ = ranges.get(b, (k, k))
            ranges[b] = (first, k)
    everywhere = (0, max(len(stmts) - 1, 0))
    return {b: ranges.get(b, everywhere) for b in buffers}


def plan_storage(body, buffers, packing=None):
    """A :class:`StoragePlan` for ``buffers`` (a kernel's temporaries and large local
    buffers, packing space included) used by the kernel body ``body``: buffers of at
    least :data:`SHARED_MIN_BYTES` whose :func:`live_ranges` do not intersect may take
    the same memory, so the block is about the peak of the buffers live together rather
    than their sum.

    Greedy by size (largest first, ties by first use): each buffer takes the lowest
    aligned offset where it overlaps no placed buffer whose range intersects its own.

    >>> from tegrad.ir.expr import Var, Const
    >>> from tegrad.codegen.loops.nodes import Block, Buffer, Load, Store
    >>> a, b, c = (Buffer(n, (1024,), "float32") for n in "abc")
    >>> zero = Const(0, "int64")
    >>> body = Block((Store(a, (zero,), Const(1.0, "float32")),
    ...               Store(b, (zero,), Load(a, (zero,))),
    ...               Store(c, (zero,), Load(b, (zero,)))))
    >>> plan = plan_storage(body, [a, b, c])
    >>> plan.nbytes, plan.separate_bytes, plan.offsets[a] == plan.offsets[c]
    (8192, 12288, True)
    """
    ranges = live_ranges(body, buffers, packing)
    nbytes_of = {b: _round_up(buffer_bytes(b), STORAGE_ALIGNMENT) for b in buffers}
    everywhere = (0, max(hi for _, hi in ranges.values()) if ranges else 0)
    for b in buffers:
        if nbytes_of[b] < SHARED_MIN_BYTES:
            ranges[b] = everywhere
    order = sorted(buffers, key=lambda b: (-nbytes_of[b], ranges[b][0]))
    placed, offsets = [], {}
    for b in order:
        lo, hi = ranges[b]
        size = nbytes_of[b]
        # the placed buffers alive together with b, by offset: b fits in the first gap
        busy = sorted((offsets[p], offsets[p] + nbytes_of[p]) for p in placed
                      if ranges[p][0] <= hi and lo <= ranges[p][1])
        at = 0
        for start, end in busy:
            if at + size <= start:
                break
            at = max(at, end)
        offsets[b] = at
        placed.append(b)
    shares = {b: frozenset(p for p in buffers if p != b
                           and offsets[p] < offsets[b] + nbytes_of[b]
                           and offsets[b] < offsets[p] + nbytes_of[p])
              for b in buffers}
    total = max((offsets[b] + nbytes_of[b] for b in buffers), default=0)
    return StoragePlan(offsets, total, {b: s for b, s in shares.items() if s},
                       sum(nbytes_of.values()))
