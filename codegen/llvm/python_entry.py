"""The entry of a kernel for calls from Python: ``i32 NAME.py(ptr storage, ptr arrays)``
takes the tuple of the argument arrays, reads their data pointers from the numpy objects
and the other buffers' from ``storage``, checks that no output overlaps another argument
(:func:`overlap_pairs`) and calls the kernel with the pointer array it builds.

>>> from tegrad.codegen.loops.nodes import Buffer
>>> x, y, z = (Buffer(n, (2,), "float32", s) for n, s in
...            (("x", "input"), ("y", "output"), ("z", "output")))
>>> overlap_pairs([x, y, z])
[(1, 0), (2, 0), (2, 1)]
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tegrad.codegen.llvm.types import I8, I32, I64, PTR


def overlap_pairs(buffers):
    """The pairs ``(output, other)`` of argument positions whose memory must not overlap
    (an output and an input, or two outputs); a negative status ``-(k + 1)`` from the
    Python entry reports that pair ``k`` overlaps."""
    outputs = [k for k, b in enumerate(buffers) if b.scope == "output"]
    return [(k, m) for k in outputs for m in range(len(buffers))
            if m != k and (buffers[m].scope != "output" or m < k)]


def emit_python_entry(km, n_args, items_offset, data_offset):
    kernel_fn = km.module.globals[km.name]
    n = len(km.buffers)
    fn = ir.Function(km.module, ir.FunctionType(I32, [PTR, PTR]), name=f"{km.name}.py")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    table = b.alloca(PTR, size=n)
    storage, arrays = fn.args

    def slot(base, k):
        return b.gep(base, [ir.Constant(I64, k)], inbounds=True, source_etype=PTR)

    items = b.gep(arrays, [ir.Constant(I64, items_offset)], inbounds=True, source_etype=I8)
    starts = []
    for k in range(n_args):
        obj = b.load(slot(items, k), typ=PTR)
        field = b.gep(obj, [ir.Constant(I64, data_offset)], inbounds=True, source_etype=I8)
        data = b.load(field, typ=PTR)
        starts.append(b.ptrtoint(data, I64))
        b.store(data, slot(table, k))
    args = km.buffers[:n_args]
    ends = [b.add(start, ir.Constant(I64, buf.size * np.dtype(buf.dtype).itemsize))
            for start, buf in zip(starts, args)]
    for pair, (k, m) in enumerate(overlap_pairs(args)):
        overlap = b.and_(b.icmp_unsigned("<", starts[k], ends[m]),
                         b.icmp_unsigned("<", starts[m], ends[k]))
        with b.if_then(overlap, likely=False):
            b.ret(ir.Constant(I32, -(pair + 1)))
    for j in range(n - n_args):
        b.store(b.load(slot(storage, j), typ=PTR), slot(table, n_args + j))
    b.ret(b.call(kernel_fn, [table]))
