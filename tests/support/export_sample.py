"""A hand-built kernel and its hand-written LLVM kernel function, for the export tests.

The kernel follows the backend's convention (``i32 kernel(ptr buffers)``, buffers = args
then temps, status 0 or a check code):

    for i in [0, N):  check 0 <= idx[i] < N  (code 1: index_out_of_range, idx)
                      t[i] = x[idx[i]] * w
    for i in [0, N):  y[i] = t[i] + b
    check d != 0  (code 2: division_by_zero, d)
    for i in [0, N):  q[i] = idx[i] // d      (floor division)

``tests/codegen/export/test_export_sample.py`` checks that the hand-written function does
what the loop IR says (run through llvmlite's JIT against numpy), so the export tests rest
on a correct kernel.
"""
import numpy as np
from llvmlite import ir

from tegrad.codegen.export import KernelModule
from tegrad.codegen.loops.nodes import Block, Buffer, Check, For, Kernel, Load, Store
from tegrad.ir.expr import Const, Var, binary, compare, logical_and

N = 37
CHECKS = {1: ("index_out_of_range", "idx"), 2: ("division_by_zero", "d")}


def sample_kernel(name="affine_gather", n=N):
    """The loop-IR Kernel of the module docstring."""
    x = Buffer("x", (n,), "float32", "input")
    idx = Buffer("idx", (n,), "int32", "input")
    w = Buffer("w", (), "float32", "input")
    b = Buffer("b", (), "float32", "input")
    d = Buffer("d", (), "int32", "input")
    y = Buffer("y", (n,), "float32", "output")
    q = Buffer("q", (n,), "int32", "output")
    t = Buffer("t", (n,), "float32", "temp")
    i = Var("i", "int64")
    zero, end = Const(0, "int64"), Const(n, "int64")
    j = Load(idx, (i,))
    in_range = logical_and(compare("ge", j, Const(0, "int32")), compare("lt", j, Const(n, "int32")))
    body = Block((
        For(i, zero, end, Block((Check(in_range, "index_out_of_range", "idx"),
                                 Store(t, (i,), binary("mul", Load(x, (j,)), Load(w, ())))))),
        For(i, zero, end, Store(y, (i,), binary("add", Load(t, (i,)), Load(b, ())))),
        Check(compare("ne", Load(d, ()), Const(0, "int32")), "division_by_zero", "d"),
        For(i, zero, end, Store(q, (i,), binary("floordiv", j, Load(d, ())))),
    ))
    return Kernel(name, (x, idx, w, b, d, y, q), (t,), body)


def reference(x, idx, w, b, d):
    """What the kernel computes, in numpy."""
    y = (x[idx] * np.float32(w) + np.float32(b)).astype(np.float32)
    q = np.floor_divide(idx, np.int32(d)).astype(np.int32)
    return y, q


def sample_module(kernel, target=None, *, function="kernel", helper="helper"):
    """A KernelModule for :func:`sample_kernel` (any name; ``n`` read from its shape).

    ``helper`` names an internal-looking but external function the kernel calls, so that
    two such modules in one library would clash unless export renames definitions.
    """
    n = kernel.args[0].shape[0]
    i32, i64, f32, ptr = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.PointerType()
    module = ir.Module(name=kernel.name)
    mul = ir.Function(module, ir.FunctionType(f32, [f32, f32]), helper)
    bb = ir.IRBuilder(mul.append_basic_block())
    bb.ret(bb.fmul(*mul.args))
    fn = ir.Function(module, ir.FunctionType(i32, [ptr]), function)
    entry = fn.append_basic_block("entry")
    bld = ir.IRBuilder(entry)

    def buffer(k):
        slot = bld.gep(fn.args[0], [ir.Constant(i64, k)], source_etype=ptr)
        return bld.load(slot, typ=ptr)

    x, idx, w, b, d, y, q, t = (buffer(k) for k in range(8))
    wv = bld.load(w, typ=f32)
    bv = bld.load(b, typ=f32)
    dv = bld.load(d, typ=i32)

    def loop(tag, make_body):
        head = fn.append_basic_block(f"{tag}_head")
        body = fn.append_basic_block(f"{tag}_body")
        done = fn.append_basic_block(f"{tag}_done")
        before = bld.block
        bld.branch(head)
        bld.position_at_end(head)
        iv = bld.phi(i64)
        iv.add_incoming(ir.Constant(i64, 0), before)
        bld.cbranch(bld.icmp_signed("<", iv, ir.Constant(i64, n)), body, done)
        bld.position_at_end(body)
        make_body(iv)
        iv.add_incoming(bld.add(iv, ir.Constant(i64, 1)), bld.block)
        bld.branch(head)
        bld.position_at_end(done)

    def gather(iv):
        j = bld.load(bld.gep(idx, [iv], source_etype=i32), typ=i32)
        ok = bld.and_(bld.icmp_signed(">=", j, ir.Constant(i32, 0)),
                      bld.icmp_signed("<", j, ir.Constant(i32, n)))
        fail = fn.append_basic_block("bad_index")
        good = fn.append_basic_block("good_index")
        bld.cbranch(ok, good, fail)
        bld.position_at_end(fail)
        bld.ret(ir.Constant(i32, 1))
        bld.position_at_end(good)
        xv = bld.load(bld.gep(x, [bld.sext(j, i64)], source_etype=f32), typ=f32)
        bld.store(bld.call(mul, [xv, wv]), bld.gep(t, [iv], source_etype=f32))

    def shift(iv):
        tv = bld.load(bld.gep(t, [iv], source_etype=f32), typ=f32)
        bld.store(bld.fadd(tv, bv), bld.gep(y, [iv], source_etype=f32))

    def floordiv(iv):
        j = bld.load(bld.gep(idx, [iv], source_etype=i32), typ=i32)
        quotient = bld.sdiv(j, dv)
        remainder = bld.srem(j, dv)
        signs_differ = bld.icmp_signed("<", bld.xor(remainder, dv), ir.Constant(i32, 0))
        inexact = bld.icmp_signed("!=", remainder, ir.Constant(i32, 0))
        adjust = bld.zext(bld.and_(signs_differ, inexact), i32)
        bld.store(bld.sub(quotient, adjust), bld.gep(q, [iv], source_etype=i32))

    loop("gather", gather)
    loop("shift", shift)
    zero_divisor = fn.append_basic_block("zero_divisor")
    divide = fn.append_basic_block("divide")
    bld.cbranch(bld.icmp_signed("==", dv, ir.Constant(i32, 0)), zero_divisor, divide)
    bld.position_at_end(zero_divisor)
    bld.ret(ir.Constant(i32, 2))
    bld.position_at_end(divide)
    loop("divide", floordiv)
    bld.ret(ir.Constant(i32, 0))
    return KernelModule(module, function, dict(CHECKS))


def sample_inputs(seed=0, n=N):
    """Values for ``(x, idx, w, b, d)``: ``idx`` a permutation (every index in range)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    idx = rng.permutation(n).astype(np.int32)
    return x, idx, np.float32(1.5), np.float32(-0.25), np.int32(-3)
