"""Where a kernel's buffers live: local buffers on the stack up to
:data:`STACK_LIMIT_BYTES`, larger ones (:func:`large_locals`) and the matrix products'
packing space (:func:`packing_space`) in storage the runtime owns, passed after the
kernel's arguments and temporaries, aligned to :data:`STORAGE_ALIGNMENT` bytes.
"""
from __future__ import annotations

import numpy as np

from tegrad.codegen.kernels.product import product_space_bytes
from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import walk_stmts

#: local buffers larger than this many bytes live in storage the runtime owns (passed in
#: the buffer array) instead of on the stack
STACK_LIMIT_BYTES = 64 * 1024

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
