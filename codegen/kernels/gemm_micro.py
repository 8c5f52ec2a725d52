"""The gemm's micro-kernel: an ``MR x NR`` block of ``C`` in vector accumulators, the
reduction over one ``KC`` block of the packed ``B`` (:meth:`MicroKernelEmitter.emit_micro`),
then stored, added to ``C`` after the first block, masked past the last column.

>>> import llvmlite.ir as ir
>>> from tegrad.codegen.kernels.gemm_spec import Blocking, GemmSpec
>>> spec, blk = GemmSpec.dense("float32", 8, 32, 16), Blocking(8, 6, 16, 256, 256)
>>> micro = MicroKernelEmitter(ir.Module(), spec, blk, "mm").emit_micro(6)
>>> micro.name, len(micro.args)
('tegrad.gemm.micro6.kstride.float32.vl8.nr16', 10)
"""
from __future__ import annotations

import llvmlite.ir as ir

from tegrad.codegen.kernels.gemm_emitter import GemmEmitterBase
from tegrad.codegen.kernels.irutil import I64, carried_loop, i32, i64


class MicroKernelEmitter(GemmEmitterBase):
    """Emits the micro-kernels of a gemm (one per row count: full blocks and the last)."""

    def emit_micro(self, mr):
        """``micro(a, bp, c, kc, accumulate, n_valid, koff, sam, sak, scm)``: ``C[r*scm +
        :n_valid] (+)= sum_k a[r*sam + k*sak] * bp[k*NR : (k+1)*NR]`` for ``r < mr``
        (``a[r*sam + koff[k]]`` with a reduction offset table)."""
        blk, spec = self.blk, self.spec
        name = self.shared_name(f"micro{mr}.{'ktable' if spec.k_offsets else 'kstride'}")
        if name in self.module.globals:
            return self.module.globals[name]
        fnty = self.micro_type()
        if self.shared:
            return self._declare_shared(name, fnty, lambda em: em.emit_micro(mr))
        fn = ir.Function(self.module, fnty, name=name)
        fn.linkage = "internal"
        # One call per KC-long reduction costs nothing; inlined copies cost compile time.
        fn.attributes.add("noinline")
        for arg in fn.args[:3]:
            arg.add_attribute("noalias")
        a, bp, c, kc, accumulate, n_valid, koff, sam, sak, scm = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        nv = blk.nr // blk.vl
        zero = ir.Constant(self.vty, [0.0] * blk.vl)
        with carried_loop(b, i64(0), kc, [zero] * (mr * nv), name="k") as loop:
            k = loop.i
            acc = [loop.values[r * nv:(r + 1) * nv] for r in range(mr)]
            brow = b.gep(bp, [b.mul(k, i64(blk.nr))], inbounds=True)
            bvec = [b.load(b.bitcast(b.gep(brow, [i64(v * blk.vl)], inbounds=True),
                                     self.vty.as_pointer()), align=self.vty_align)
                    for v in range(nv)]
            if self.spec.k_offsets is None:
                acol = b.gep(a, [b.mul(k, sak)], inbounds=True)
            else:
                acol = b.gep(a, [b.load(b.gep(koff, [k], inbounds=True))], inbounds=True)
            new = []
            for r in range(mr):
                x = b.load(b.gep(acol, [b.mul(i64(r), sam)], inbounds=True), align=self.esize)
                xs = self._splat(b, x, self.vty)
                new += [b.call(self.fma, [xs, bvec[v], acc[r][v]]) for v in range(nv)]
            loop.carry(new)
        acc = [loop.values[r * nv:(r + 1) * nv] for r in range(mr)]
        full = fn.append_basic_block("store.full")
        partial = fn.append_basic_block("store.partial")
        out = fn.append_basic_block("out")
        b.cbranch(b.icmp_signed("==", n_valid, i64(blk.nr)), full, partial)
        for block, masked in ((full, False), (partial, True)):
            b.position_at_end(block)
            self._store_block(b, acc, c, scm, accumulate, n_valid, masked)
            b.branch(out)
        b.position_at_end(out)
        b.ret_void()
        return fn

    @property
    def vty_align(self):
        return min(64, self.blk.vl * self.esize)

    def _store_block(self, b, acc, c, scm, accumulate, n_valid, masked):
        """``C (+)= acc``: plain unaligned vector accesses, or masked to ``n_valid`` lanes."""
        blk = self.blk
        lanes = ir.Constant(ir.VectorType(I64, blk.vl), list(range(blk.vl)))
        for r, row in enumerate(acc):
            crow = b.gep(c, [b.mul(i64(r), scm)], inbounds=True)
            for v, value in enumerate(row):
                ptr = b.bitcast(b.gep(crow, [i64(v * blk.vl)], inbounds=True),
                                self.vty.as_pointer())
                if masked:
                    left = b.sub(n_valid, i64(v * blk.vl))
                    mask = b.icmp_signed("<", lanes, self._splat(b, left, lanes.type))
                    zero = ir.Constant(self.vty, [0.0] * blk.vl)
                    old = b.call(self.masked_load, [ptr, i32(self.esize), mask, zero])
                    value = b.select(accumulate, b.fadd(old, value), value)
                    b.call(self.masked_store, [value, ptr, i32(self.esize), mask])
                else:
                    old = b.load(ptr, align=self.esize)
                    value = b.select(accumulate, b.fadd(old, value), value)
                    b.store(value, ptr, align=self.esize)
