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
from tegrad.codegen.kernels.irutil import carried_loop, counted_loop
from tegrad.codegen.llvm.types import I8, I32, I64, PTR


def overlap_pairs(buffers):
    """The pairs ``(output, other)`` of argument positions whose memory must not overlap
    (an output and an input, or two outputs); a negative status ``-(k + 1)`` from the
    Python entry reports that pair ``k`` overlaps."""
    outputs = [k for k, b in enumerate(buffers) if b.scope == "output"]
    return [(k, m) for k in outputs for m in range(len(buffers))
            if m != k and (buffers[m].scope != "output" or m < k)]


def _constant_array(module, name, element, values):
    """An internal constant global array of ``values`` (of the IR type ``element``)."""
    array_type = ir.ArrayType(element, len(values))
    table = ir.GlobalVariable(module, array_type, name=name)
    table.global_constant = True
    table.linkage = "internal"
    table.initializer = ir.Constant(array_type, list(values))
    return table, array_type


def _emit_overlap_loop(b, module, name, buffers, lo, hi):
    """``for p in overlap_pairs(buffers): if overlap(p): return -(p + 1)`` as two nested
    loops: over the outputs (a constant table of their positions), and over every
    argument, counting the pairs in :func:`overlap_pairs`' order (an argument is paired
    with an output unless it is the output, or an output after it: a constant table of
    which arguments are outputs). The spans are read from the stack arrays ``lo`` and
    ``hi``. The IR is of constant size but for two tables linear in the number of
    arguments: a table of the pairs themselves was quadratic (an 8-layer transformer
    step's 271 arguments: 475 KB of IR)."""

    def element(array, index):
        return b.gep(array, [index], inbounds=True, source_etype=I64)

    n = len(buffers)
    is_output = [int(buf.scope == "output") for buf in buffers]
    outputs, outputs_type = _constant_array(module, f"{name}.outputs", I32,
                                            [k for k, o in enumerate(is_output) if o])
    flags, flags_type = _constant_array(module, f"{name}.is_output", I8, is_output)

    def entry_of(table, table_type, index, typ):
        return b.load(b.gep(table, [ir.Constant(I64, 0), index], inbounds=True,
                            source_etype=table_type), typ=typ)

    found = b.function.append_basic_block("overlap.found")
    zero = ir.Constant(I64, 0)
    with carried_loop(b, zero, ir.Constant(I64, sum(is_output)), [zero], name="overlap.out",
                      vectorize=False) as per_output:
        k = b.sext(entry_of(outputs, outputs_type, per_output.i, I32), I64)
        k_lo, k_hi = b.load(element(lo, k), typ=I64), b.load(element(hi, k), typ=I64)
        with carried_loop(b, zero, ir.Constant(I64, n), per_output.values, name="overlap.arg",
                          vectorize=False) as per_arg:
            m, pair = per_arg.i, per_arg.values[0]
            output = b.icmp_unsigned("!=", entry_of(flags, flags_type, m, I8),
                                     ir.Constant(I8, 0))
            paired = b.and_(b.icmp_unsigned("!=", m, k),
                            b.or_(b.not_(output), b.icmp_unsigned("<", m, k)))
            overlap = b.and_(b.icmp_unsigned("<", k_lo, b.load(element(hi, m), typ=I64)),
                             b.icmp_unsigned("<", b.load(element(lo, m), typ=I64), k_hi))
            apart = b.function.append_basic_block("overlap.apart")
            b.cbranch(b.and_(paired, overlap), found, apart)
            b.position_at_end(apart)
            per_arg.carry([b.add(pair, b.zext(paired, I64))])
        per_output.carry(per_arg.values)
    done = b.block
    b.position_at_end(found)
    b.ret(b.neg(b.trunc(b.add(per_arg.values[0], ir.Constant(I64, 1)), I32)))
    b.position_at_end(done)


def emit_python_entry(km, n_args, items_offset, data_offset):
    """Emit ``i32 NAME.py(ptr storage, ptr arrays)`` into ``km.module`` (see the module's
    docstring): the first ``n_args`` buffers' data pointers are read from the tuple
    ``arrays`` (its items at ``items_offset`` bytes, an array's data pointer at
    ``data_offset``), the others' from ``storage``. Loops over the arguments, so that a
    step of hundreds of arguments is not hundreds of copies of the same code.
    """
    kernel_fn = km.module.globals[km.name]
    n = len(km.buffers)
    fn = ir.Function(km.module, ir.FunctionType(I32, [PTR, PTR]), name=f"{km.name}.py")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    table = b.alloca(PTR, size=n)
    lo, hi = b.alloca(I64, size=max(n_args, 1)), b.alloca(I64, size=max(n_args, 1))
    storage, arrays = fn.args

    def slot(base, k, typ=PTR):
        return b.gep(base, [k], inbounds=True, source_etype=typ)

    args = km.buffers[:n_args]
    nbytes, nbytes_type = _constant_array(
        km.module, f"{km.name}.nbytes", I64,
        [buf.size * np.dtype(buf.dtype).itemsize for buf in args])
    items = b.gep(arrays, [ir.Constant(I64, items_offset)], inbounds=True, source_etype=I8)
    with counted_loop(b, ir.Constant(I64, 0), ir.Constant(I64, n_args), name="arg",
                      vectorize=False) as k:
        obj = b.load(slot(items, k), typ=PTR)
        field = b.gep(obj, [ir.Constant(I64, data_offset)], inbounds=True, source_etype=I8)
        data = b.load(field, typ=PTR)
        b.store(data, slot(table, k))
        start = b.ptrtoint(data, I64)
        size = b.load(b.gep(nbytes, [ir.Constant(I64, 0), k], inbounds=True,
                            source_etype=nbytes_type), typ=I64)
        b.store(start, slot(lo, k, I64))
        b.store(b.add(start, size), slot(hi, k, I64))
    pairs = overlap_pairs(args)
    if len(pairs) <= UNROLLED_OVERLAP_PAIRS:
        starts, ends = ([b.load(slot(array, ir.Constant(I64, k), I64), typ=I64)
                         for k in range(n_args)] for array in (lo, hi))
        for pair, (k, m) in enumerate(pairs):
            overlap = b.and_(b.icmp_unsigned("<", starts[k], ends[m]),
                             b.icmp_unsigned("<", starts[m], ends[k]))
            with b.if_then(overlap, likely=False):
                b.ret(ir.Constant(I32, -(pair + 1)))
    else:
        _emit_overlap_loop(b, km.module, f"{km.name}.pairs", args, lo, hi)
    with counted_loop(b, ir.Constant(I64, 0), ir.Constant(I64, n - n_args), name="stored",
                      vectorize=False) as j:
        b.store(b.load(slot(storage, j), typ=PTR), slot(table, b.add(j, ir.Constant(
            I64, n_args))))
    b.ret(b.call(kernel_fn, [table]))
