"""The exported entry points in LLVM IR: C-callable wrappers around kernel functions.

A kernel function (see :mod:`tegrad.codegen.export.interface`) takes one pointer to an
array of buffer pointers (the kernel's arguments, then its temporaries) and returns an
``i32`` status. The wrapper ``NAME`` takes the arguments as separate pointers plus a
workspace, checks every pointer (not NULL, aligned), fills the array, carving each
temporary from the workspace at its offset, and calls the kernel function:
``NAME(a0, ..., w) == kernel({a0, ..., w + offset_0, ...})`` when the pointers pass.
``NAME_error_string`` maps every status to a constant message.
"""
from __future__ import annotations

from llvmlite import ir

from tegrad.codegen.export.abi import EntryPoint

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_PTR = ir.PointerType()


def wrapper_module(entry: EntryPoint, kernel_function: str, triple: str, data_layout: str):
    """An ``ir.Module`` defining ``entry.name`` and ``entry.name + "_error_string"``, and
    declaring ``kernel_function`` (``i32 (ptr)``), which linking supplies."""
    module = ir.Module(name=f"{entry.name}_entry")
    module.triple = triple
    module.data_layout = data_layout
    kernel = ir.Function(module, ir.FunctionType(_I32, [_PTR]), kernel_function)
    _define_entry(module, entry, kernel)
    _define_error_string(module, entry)
    return module


def _define_entry(module, entry, kernel):
    fn = ir.Function(module, ir.FunctionType(_I32, [_PTR] * len(entry.params)), entry.name)
    for arg, param in zip(fn.args, entry.params):
        arg.name = param.ident
    fn.attributes.add("nounwind")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    count = len(entry.args) + len(entry.temp_offsets)
    # in the entry block, so that the array becomes registers once the kernel is inlined
    buffers = builder.alloca(_PTR, size=ir.Constant(_I32, max(count, 1)), name="buffers")
    for position, (arg, param) in enumerate(zip(fn.args, entry.params)):
        size = entry.workspace_bytes if param.role == "workspace" else param.nbytes
        if size == 0:
            continue  # nothing is read or written through it: it may be NULL
        bad = _null_or_misaligned(builder, arg, entry.alignment_of(param))
        fail = fn.append_basic_block(f"bad_{param.ident}")
        ok = fn.append_basic_block(f"ok_{param.ident}")
        builder.cbranch(bad, fail, ok)
        builder.position_at_end(fail)
        builder.ret(ir.Constant(_I32, -(position + 1)))
        builder.position_at_end(ok)
    workspace = fn.args[-1]
    pointers = list(fn.args[:-1])
    for offset in entry.temp_offsets:
        pointers.append(builder.gep(workspace, [ir.Constant(_I64, offset)], inbounds=True,
                                    source_etype=_I8))
    for i, pointer in enumerate(pointers):
        slot = builder.gep(buffers, [ir.Constant(_I64, i)], inbounds=True, source_etype=_PTR)
        builder.store(pointer, slot)
    builder.ret(builder.call(kernel, [buffers]))


def _null_or_misaligned(builder, pointer, alignment):
    address = builder.ptrtoint(pointer, _I64)
    null = builder.icmp_unsigned("==", address, ir.Constant(_I64, 0))
    low = builder.and_(address, ir.Constant(_I64, alignment - 1))
    misaligned = builder.icmp_unsigned("!=", low, ir.Constant(_I64, 0))
    return builder.or_(null, misaligned)


def _define_error_string(module, entry):
    fn = ir.Function(module, ir.FunctionType(_PTR, [_I32]), f"{entry.name}_error_string")
    fn.args[0].name = "code"
    codes = [0] + [-(p + 1) for p in range(len(entry.params))] + [c for c, _, _ in entry.checks]
    messages = {}
    for code in codes:
        messages.setdefault(entry.error_message(code), []).append(code)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    default = fn.append_basic_block("unknown")
    switch = builder.switch(fn.args[0], default)
    for n, (text, case_codes) in enumerate(messages.items()):
        block = fn.append_basic_block(f"code{n}")
        for code in case_codes:
            switch.add_case(ir.Constant(_I32, code), block)
        builder.position_at_end(block)
        builder.ret(_string_constant(module, f"{entry.name}.message{n}", text))
    builder.position_at_end(default)
    builder.ret(_string_constant(module, f"{entry.name}.unknown", "unknown error code"))


def _string_constant(module, name, text):
    data = bytearray(text.encode("utf-8") + b"\0")
    array_type = ir.ArrayType(_I8, len(data))
    var = ir.GlobalVariable(module, array_type, name)
    var.global_constant = True
    var.linkage = "private"
    var.unnamed_addr = True
    var.initializer = ir.Constant(array_type, data)
    return var
