"""What the emitters of a gemm's routines share: :class:`GemmEmitterBase`, the spec,
its blocking and the module they emit into, the vector type and intrinsics, the
signatures of the micro-kernel and the packing routine, and the declaration of a routine
compiled once per process (:meth:`GemmEmitterBase._declare_shared`). The routines are
emitted by :mod:`.gemm_micro`, :mod:`.gemm_pack` and :mod:`.gemm_driver`, composed in
:mod:`.gemm`.

>>> import llvmlite.ir as ir
>>> from tegrad.codegen.kernels.gemm_spec import Blocking, GemmSpec
>>> spec, blk = GemmSpec.dense("float32", 8, 32, 16), Blocking(8, 6, 16, 256, 256)
>>> GemmEmitterBase(ir.Module(), spec, blk, "mm").shared_name("micro6")
'tegrad.gemm.micro6.float32.vl8.nr16'
"""
from __future__ import annotations

import llvmlite.ir as ir

from tegrad.codegen.target import jit
from tegrad.codegen.kernels.gemm_spec import ELEMENT, ITEMSIZE
from tegrad.codegen.kernels.irutil import I1, I32, I64, i32, vector_intrinsics


class GemmEmitterBase:
    """The state of a gemm's emission into ``module``: ``spec``, its ``blocking``, the
    product's entry ``name``; the routines' emitters derive from it."""

    def __init__(self, module, spec, blocking, name, shared=False):
        self.module, self.spec, self.blk, self.name = module, spec, blocking, name
        #: micro-kernels and packing routines are compiled once per process and declared
        #: here (JIT modules only: an exported library defines its own)
        self.shared = shared
        self.elt = ELEMENT[spec.dtype]
        self.esize = ITEMSIZE[spec.dtype]
        self.vty = ir.VectorType(self.elt, blocking.vl)
        self.eptr = self.elt.as_pointer()
        self.fma, self.masked_load, self.masked_store = vector_intrinsics(module, self.vty)

    def const(self, v):
        return ir.Constant(self.elt, v)

    def _declare_shared(self, name, fnty, define):
        """``name`` declared in this module, defined by ``define(emitter)`` in the
        process's shared code (see :func:`.jit.shared_function`), compiled on the JIT's
        background thread while the module is emitted (:func:`.jit.request_shared`)."""
        def build(module):
            # (an emitter of this one's class, which emits every routine)
            define(type(self)(module, self.spec, self.blk, self.name)).linkage = "external"
        jit.request_shared(name, build)
        return ir.Function(self.module, fnty, name=name)

    def shared_name(self, what):
        """The name of a function every gemm of the module with this dtype and register
        blocking shares (strides are its arguments: one copy to compile)."""
        return f"tegrad.gemm.{what}.{self.spec.dtype}.vl{self.blk.vl}.nr{self.blk.nr}"

    def micro_type(self):
        return ir.FunctionType(ir.VoidType(), [self.eptr, self.eptr, self.eptr, I64, I1, I64,
                                               I64.as_pointer(), I64, I64, I64])

    def pack_type(self):
        return ir.FunctionType(ir.VoidType(), [self.eptr, self.eptr, I64, I64,
                                               I64.as_pointer(), I64.as_pointer(), I64])

    @staticmethod
    def _strided_or_loaded(b, no_table, strided, load, name):
        """The values ``strided`` (computed from strides) when ``no_table`` (i1), else
        ``load()``'s, emitted in a block of their own (a table is read only when
        given), joined by phis."""
        fn, before = b.function, b.block
        read, joined = fn.append_basic_block(f"{name}.table"), fn.append_basic_block(name)
        b.cbranch(no_table, joined, read)
        b.position_at_end(read)
        loaded = load()
        b.branch(joined)
        b.position_at_end(joined)
        out = []
        for x, y in zip(strided, loaded):
            phi = b.phi(x.type)
            phi.add_incoming(x, before)
            phi.add_incoming(y, read)
            out.append(phi)
        return out

    @staticmethod
    def _splat(b, value, vty):
        """``value`` in every lane of ``vty``."""
        one = b.insert_element(ir.Constant(vty, ir.Undefined), value, i32(0))
        return b.shuffle_vector(one, ir.Constant(vty, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, vty.count), [0] * vty.count))
