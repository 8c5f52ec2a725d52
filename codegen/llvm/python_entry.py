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

from tegrad.codegen.tuning import UNROLLED_OVERLAP_PAIRS
from tegrad.codegen.llvm.types import I8, I32, I64, PTR


def overlap_pairs(buffers):
    """The pairs ``(output, other)`` of argument positions whose memory must not overlap
    (an output and an input, or two outputs); a negative status ``-(k + 1)`` from the
    Python entry reports that pair ``k`` overlaps."""
    outputs = [k for k, b in enumerate(buffers) if b.scope == "output"]
    return [(k, m) for k in outputs for m in range(len(buffers))
            if m != k and (buffers[m].scope != "output" or m < k)]




def _emit_overlap_loop(b, module, name, pairs, starts, ends):
    """``for p in pairs: if overlap(p): return -(p + 1)`` as a loop over a constant table
    of the pairs' positions, reading the arguments' spans from two stack arrays."""
    n = len(starts)
    lo, hi = b.alloca(I64, size=n), b.alloca(I64, size=n)

    def element(array, index):
        return b.gep(array, [index], inbounds=True, source_etype=I64)

    for k in range(n):
        b.store(starts[k], element(lo, ir.Constant(I64, k)))
        b.store(ends[k], element(hi, ir.Constant(I64, k)))
    table_type = ir.ArrayType(I32, 2 * len(pairs))
    table = ir.GlobalVariable(module, table_type, name=name)
    table.global_constant = True
    table.linkage = "internal"
    table.initializer = ir.Constant(table_type, [v for pair in pairs for v in pair])
    fn = b.function
    head, body, found, done = (fn.append_basic_block(f"overlap.{s}")
                               for s in ("head", "body", "found", "done"))
    entry = b.block
    b.branch(head)
    b.position_at_end(head)
    p = b.phi(I64)
    p.add_incoming(ir.Constant(I64, 0), entry)
    b.cbranch(b.icmp_unsigned("<", p, ir.Constant(I64, len(pairs))), body, done)
    b.position_at_end(body)

    def span(array, position):
        at = b.gep(table, [ir.Constant(I64, 0), position], inbounds=True,
                   source_etype=table_type)
        return b.load(element(array, b.sext(b.load(at, typ=I32), I64)), typ=I64)

    first = b.shl(p, ir.Constant(I64, 1))
    second = b.add(first, ir.Constant(I64, 1))
    overlap = b.and_(b.icmp_unsigned("<", span(lo, first), span(hi, second)),
                     b.icmp_unsigned("<", span(lo, second), span(hi, first)))
    following = b.add(p, ir.Constant(I64, 1))
    p.add_incoming(following, body)
    b.cbranch(overlap, found, head)
    b.position_at_end(found)
    b.ret(b.neg(b.trunc(following, I32)))
    b.position_at_end(done)


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
    pairs = overlap_pairs(args)
    if len(pairs) <= UNROLLED_OVERLAP_PAIRS:
        for pair, (k, m) in enumerate(pairs):
            overlap = b.and_(b.icmp_unsigned("<", starts[k], ends[m]),
                             b.icmp_unsigned("<", starts[m], ends[k]))
            with b.if_then(overlap, likely=False):
                b.ret(ir.Constant(I32, -(pair + 1)))
    else:
        _emit_overlap_loop(b, km.module, f"{km.name}.pairs", pairs, starts, ends)
    for j in range(n - n_args):
        b.store(b.load(slot(storage, j), typ=PTR), slot(table, n_args + j))
    b.ret(b.call(kernel_fn, [table]))
