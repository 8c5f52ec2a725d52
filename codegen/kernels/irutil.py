"""Small llvmlite helpers shared by the emitters of this package: counted loops,
constant tables and intrinsic declarations.

>>> import llvmlite.ir as ir
>>> m = ir.Module()
>>> f = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), name="f")
>>> b = ir.IRBuilder(f.append_basic_block())
>>> with counted_loop(b, i64(0), f.args[0]) as i:
...     pass
>>> _ = b.ret_void()
>>> "phi  i64" in str(m)
True
"""
from __future__ import annotations

import contextlib

import llvmlite.ir as ir
import numpy as np

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
VOIDPTR = I8.as_pointer()


def i32(v):
    return ir.Constant(I32, v)


def i64(v):
    return ir.Constant(I64, v)


@contextlib.contextmanager
def counted_loop(b, start, stop, step=1, *, name="i", vectorize=True):
    """``for (i = start; i < stop; i += step)``; yields ``i``, the builder continues after.

    ``step`` is a positive Python int; the body may add blocks (nested loops). Without
    ``vectorize``, LLVM's loop vectoriser leaves the loop alone.
    """
    with carried_loop(b, start, stop, (), step, name=name, vectorize=vectorize) as loop:
        yield loop.i
        loop.carry(())


class CarriedLoop:
    """What :func:`carried_loop` yields: the counter ``i``, the carried ``values`` (phis:
    their values at the start of an iteration, and after the loop), and :meth:`carry`,
    which the body calls once with the values for the next iteration."""

    def __init__(self, i, values):
        self.i, self.values, self.next = i, values, None

    def carry(self, values):
        self.next = list(values)


@contextlib.contextmanager
def carried_loop(b, start, stop, initial, step=1, *, name="i", vectorize=True):
    """``for (i = start; i < stop; i += step)`` carrying the values ``initial`` from one
    iteration to the next (vector accumulators); yields a :class:`CarriedLoop`, the
    builder continues after the loop, where ``loop.values`` are the final values."""
    fn = b.function
    pre = b.block
    head = fn.append_basic_block(f"{name}.head")
    body = fn.append_basic_block(f"{name}.body")
    exit_ = fn.append_basic_block(f"{name}.exit")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(start.type, name=name)
    i.add_incoming(start, pre)
    phis = []
    for value in initial:
        phi = b.phi(value.type)
        phi.add_incoming(value, pre)
        phis.append(phi)
    b.cbranch(b.icmp_signed("<", i, stop), body, exit_)
    b.position_at_end(body)
    loop = CarriedLoop(i, phis)
    yield loop
    if loop.next is None or len(loop.next) != len(phis):
        raise ValueError("carried_loop: the body must carry() one value per initial value")
    for phi, value in zip(phis, loop.next):
        phi.add_incoming(value, b.block)
    i.add_incoming(b.add(i, ir.Constant(start.type, step)), b.block)
    back = b.branch(head)
    if not vectorize:
        back.set_metadata("llvm.loop", loop_without_vectorisation(b.module))
    b.position_at_end(exit_)


#: the property naming a loop marked ``vectorized`` in its loop id: this prefix and the
#: loop's number (:func:`forced_vectorisation`), kept by LLVM when it vectorises the loop
VECTOR_MARK = "tegrad.vector."


def _loop_id(module, properties):
    """A new loop id (self-referential, as LLVM requires; distinct, as llvmlite gives the
    same node for the same operands) holding the properties ``properties`` (each a list
    of operands, e.g. ``["llvm.loop.vectorize.enable", i1 1]``)."""
    m = module

    def operand(v):
        return ir.MetaDataString(m, v) if isinstance(v, str) else v
    nodes = [m.add_metadata([operand(v) for v in p]) for p in properties]
    loop_id = m.add_metadata([ir.MetaDataString(m, f"tegrad.loop.{len(m.metadata)}")])
    loop_id.operands = (loop_id, *nodes)
    return loop_id


def loop_without_vectorisation(module):
    """A new loop id turning LLVM's loop vectoriser off (and its interleaving), for a
    loop's back edge: ``br ..., !llvm.loop !id``."""
    return _loop_id(module, [["llvm.loop.vectorize.enable", ir.Constant(I1, 0)],
                             ["llvm.loop.interleave.count", ir.Constant(I32, 1)]])


def forced_vectorisation(module, number, force=True):
    """A new loop id forcing LLVM's loop vectoriser on (its cost model no longer declines
    the loop; legality still applies), with the property ``tegrad.vector.<number>``:
    LLVM replaces the ``llvm.loop.vectorize.enable`` of a loop it vectorised by
    ``llvm.loop.isvectorized`` and keeps the other properties, so the optimised IR says
    which marked loops were vectorised (:mod:`tegrad.codegen.llvm.vector_marks`).

    Forcing also lets LLVM reassociate a floating-point reduction the loop carries: the
    schedule marks only loops that carry none (:mod:`tegrad.codegen.schedule.vector_loops`,
    :mod:`tegrad.codegen.schedule.accumulators`: each lane its own element). Without
    ``force``, the loop id only names the loop."""
    forced = [["llvm.loop.vectorize.enable", ir.Constant(I1, 1)]] if force else []
    return _loop_id(module, [[f"{VECTOR_MARK}{number}"]] + forced)


def smin(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def ceil_div(b, x, y):
    """``ceil(x / y)`` for ``x >= 0 < y``."""
    return b.sdiv(b.add(x, b.sub(y, ir.Constant(y.type, 1))), y)


def declare(module, name, fnty):
    """The function ``name`` of ``module``, declared with ``fnty`` if it is not there."""
    existing = module.globals.get(name)
    return existing if existing is not None else ir.Function(module, fnty, name=name)


def constant_table(module, name, values):
    """An ``i64*`` to the internal constant array ``name`` of ``module`` holding
    ``values`` (made once per name).

    Written as one byte string in little-endian order (the targets this package
    supports): llvmlite formats a byte string at once, but an ``i64`` array element by
    element, which for a convolution's tables costs more than compiling them.
    """
    g = module.globals.get(name)
    if g is None:
        data = bytearray(np.asarray(values, dtype="<i8").tobytes())
        ty = ir.ArrayType(ir.IntType(8), len(data))
        g = ir.GlobalVariable(module, ty, name=name)
        g.linkage = "internal"
        g.global_constant = True
        g.align = 8
        g.initializer = ir.Constant(ty, data)
    return g.bitcast(I64.as_pointer())


def vector_intrinsics(module, vty):
    """``(fma, masked_load, masked_store)`` of the vector type ``vty``, declared in
    ``module`` (``llvm.fma``; masked accesses with an ``i32`` alignment and an ``i1``
    vector mask, a load's masked-off lanes taken from its last argument)."""
    suffix = vector_suffix(vty)
    mask = ir.VectorType(I1, vty.count)
    return (declare(module, f"llvm.fma.{suffix}", ir.FunctionType(vty, [vty] * 3)),
            declare(module, f"llvm.masked.load.{suffix}.p0",
                    ir.FunctionType(vty, [vty.as_pointer(), I32, mask, vty])),
            declare(module, f"llvm.masked.store.{suffix}.p0",
                    ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), I32, mask])))


def vector_suffix(vty):
    """The intrinsic type suffix of a vector type, e.g. ``v16f32``."""
    elem = {"float": "f32", "double": "f64"}[str(vty.element)]
    return f"v{vty.count}{elem}"
