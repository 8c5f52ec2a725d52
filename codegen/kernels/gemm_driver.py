"""The gemm's macro-loops and entry point: the driver that every product of a dtype and
blocking shares (:meth:`DriverEmitter.emit_driver`: a chunk of tasks, each packing its
columns of ``B`` and calling the micro-kernels), the launch they share too
(:meth:`DriverEmitter.emit_launch`: the tasks a thread count gives, handed to the thread
pool), and a product's entry (:meth:`DriverEmitter.emit_entry`: its parameters, a
constant, handed to the launch).

>>> import llvmlite.ir as ir
>>> from tegrad.codegen.kernels.gemm_spec import Blocking, GemmSpec
>>> spec, blk = GemmSpec.dense("float32", 8, 32, 16), Blocking(8, 6, 16, 256, 256)
>>> DriverEmitter(ir.Module(), spec, blk, "mm").emit_driver().name
'tegrad.gemm.driver.float32.vl8.mr6.nr16.kc256.nc256'
"""
from __future__ import annotations

import llvmlite.ir as ir

from tegrad.codegen.tuning import CHUNKS_PER_THREAD
from tegrad.codegen.kernels import fork_join, packspace
from tegrad.codegen.kernels.gemm_emitter import GemmEmitterBase
from tegrad.codegen.kernels.gemm_spec import pack_slot_bytes
from tegrad.codegen.kernels.irutil import (I8, I32, I64, VOIDPTR, ceil_div, constant_table,
                                           counted_loop, i32, i64, smin)


class DriverEmitter(GemmEmitterBase):
    """Emits a gemm's driver (its macro-loops) and its entry point."""

    #: the fields of the parameters a product hands its driver (see :meth:`emit_driver`)
    PARAMS = ("a", "b", "c", "claims", "slots", "slot_bytes", "batch", "m", "n", "k",
              "sa0", "sa1", "sa2", "sb0", "sb1", "sb2", "sc0", "sc1", "sc2", "k0_offsets",
              "k1_offsets", "n_offsets", "batch_offsets", "chunk", "rows_per_task",
              "micro_full", "micro_tail", "pack", "accumulate", "useful_threads")

    def params_type(self):
        eptr, iptr = self.eptr, I64.as_pointer()
        micro = self.micro_type().as_pointer()
        kinds = {"a": eptr, "b": eptr, "c": eptr, "claims": iptr, "k0_offsets": iptr,
                 "k1_offsets": iptr, "n_offsets": iptr, "batch_offsets": iptr,
                 "micro_full": micro, "micro_tail": micro,
                 "pack": self.pack_type().as_pointer()}
        return ir.LiteralStructType([kinds.get(f, I64) for f in self.PARAMS])

    def emit_driver(self):
        """``driver(params, begin, end)``: the tasks ``[begin, end)`` of one chunk of a
        fork-join, for any product of this dtype and blocking (its extents, strides,
        offset tables, micro-kernels and packing routine are read from ``params``; a
        null table means the stride). Task ``t`` is row group ``t % row_groups`` (of
        ``params.rows_per_task`` row blocks) of column chunk ``g % chunks`` of batch
        ``g // chunks`` (``g = t // row_groups``), the chunks ``params.chunk`` columns
        wide: a call packs only the columns of its tasks, into the slot of
        ``params.claims``'s space it claims (:mod:`.packspace`)."""
        blk = self.blk
        name = self.blocking_name("driver")
        if name in self.module.globals:
            return self.module.globals[name]
        if self.shared:
            return self._declare_shared(name, fork_join.TASK_FN_TYPE,
                                        lambda em: em.emit_driver())
        fn = ir.Function(self.module, fork_join.TASK_FN_TYPE, name=name)
        fn.linkage = "internal"
        raw, t_begin, t_end = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ptr = b.bitcast(raw, self.params_type().as_pointer())
        # B's rows of a k block at a reduction stride, as a table: the packing routine
        # reads every B's rows from a table (one routine to compile, see .gemm_pack)
        strided_rows = b.alloca(I64, size=blk.kc)

        def field(f):
            return b.gep(ptr, [i32(0), i32(self.PARAMS.index(f))], inbounds=True)

        p = {f: b.load(field(f)) for f in self.PARAMS}
        m, n, k, chunk = p["m"], p["n"], p["k"], p["chunk"]
        null = ir.Constant(I64.as_pointer(), None)

        def is_null(table):
            return b.icmp_unsigned("==", b.ptrtoint(table, I64), i64(0))

        # A 64-byte aligned panel of this call's own for the packed B, held until it returns.
        claimed, bp = packspace.emit_claim(b, fn, p["claims"], p["slots"], p["slot_bytes"],
                                           self.eptr)

        row_blocks = ceil_div(b, m, i64(blk.mr))
        rows_per = p["rows_per_task"]
        row_groups = ceil_div(b, row_blocks, rows_per)
        chunks = ceil_div(b, n, chunk)
        k_tables = [p["k0_offsets"], p["k1_offsets"]]
        # with a reduction table, k0's offset is in the table, not in the base pointers
        a_k_stride = b.select(is_null(k_tables[0]), p["sa2"], i64(0))
        b_k_stride = b.select(is_null(k_tables[1]), p["sb1"], i64(0))
        with counted_loop(b, i64(0), smin(b, i64(blk.kc), k), name="row") as row:
            b.store(b.mul(row, p["sb1"]), b.gep(strided_rows, [row], inbounds=True))
        b_n_stride = b.select(is_null(p["n_offsets"]), p["sb2"], i64(0))
        batch_table = p["batch_offsets"]
        first = b.sdiv(t_begin, row_groups)
        last = b.sdiv(b.sub(t_end, i64(1)), row_groups)
        with counted_loop(b, first, b.add(last, i64(1)), name="g") as g:
            task0 = b.mul(g, row_groups)
            lo = b.sub(b.select(b.icmp_signed(">", t_begin, task0), t_begin, task0), task0)
            hi = b.sub(smin(b, t_end, b.add(task0, row_groups)), task0)
            lo, hi = b.mul(lo, rows_per), smin(b, row_blocks, b.mul(hi, rows_per))
            batch, col0 = b.sdiv(g, chunks), b.mul(b.srem(g, chunks), chunk)
            col1 = smin(b, n, b.add(col0, chunk))
            strided = [b.mul(batch, stride) for stride in (p["sa0"], p["sb0"], p["sc0"])]
            at = self._strided_or_loaded(
                b, is_null(batch_table), strided,
                lambda: [b.load(b.gep(batch_table, [b.add(b.mul(batch, i64(3)), i64(j))],
                                      inbounds=True)) for j in range(3)], "batch")
            a_p, b_p, c_p = (b.gep(base, [off], inbounds=True)
                             for base, off in zip((p["a"], p["b"], p["c"]), at))
            with counted_loop(b, i64(0), k, blk.kc, name="k0") as k0:
                kc = smin(b, i64(blk.kc), b.sub(k, k0))
                # every k block after the first adds to C; the first too for C += A B
                accumulate = b.or_(b.icmp_signed(">", k0, i64(0)),
                                   b.icmp_signed("!=", p["accumulate"], i64(0)))
                koff = [b.select(is_null(t), none, b.gep(t, [k0], inbounds=True))
                        for t, none in zip(k_tables, (null, strided_rows))]
                with counted_loop(b, col0, col1, blk.nc, name="n0") as n0:
                    nc = smin(b, i64(blk.nc), b.sub(col1, n0))
                    src = b.gep(b_p, [b.add(b.mul(k0, b_k_stride), b.mul(n0, b_n_stride))],
                                inbounds=True)
                    noff = b.select(is_null(p["n_offsets"]), null,
                                    b.gep(p["n_offsets"], [n0], inbounds=True))
                    n_strips = ceil_div(b, nc, i64(blk.nr))

                    def micro_call(rb, j0, panel):
                        m0 = b.mul(rb, i64(blk.mr))
                        a_blk = b.gep(a_p, [b.add(b.mul(m0, p["sa1"]), b.mul(k0, a_k_stride))],
                                      inbounds=True)
                        c_row = b.gep(c_p, [b.add(b.mul(m0, p["sc1"]), n0)], inbounds=True)
                        full = b.icmp_signed("<=", b.add(m0, i64(blk.mr)), m)
                        micro = b.select(full, p["micro_full"], p["micro_tail"])
                        b.call(micro, [a_blk, panel, b.gep(c_row, [j0], inbounds=True), kc,
                                       accumulate, smin(b, i64(blk.nr), b.sub(nc, j0)),
                                       koff[0], p["sa1"], p["sa2"], p["sc1"]])

                    # One row block (m <= MR: a convolution's input gradient over few
                    # channels) uses each packed element MR times at most: a strip is
                    # packed and multiplied at once, while it is in L1, rather than the
                    # whole KC x NC panel packed out to L2 and read back (LeNet's second
                    # convolution's input gradient, m = 6, on Zen 3: 4.35 -> 4.10 ms of
                    # CPU time a call).
                    one_block = b.icmp_signed("==", b.sub(hi, lo), i64(1))
                    with b.if_else(one_block) as (by_strip, by_panel):
                        with by_strip:
                            with counted_loop(b, i64(0), n_strips, name="s1") as s_:
                                j0 = b.mul(s_, i64(blk.nr))
                                strip_src = b.gep(src, [b.mul(j0, b_n_stride)], inbounds=True)
                                strip_noff = b.select(is_null(p["n_offsets"]), null,
                                                      b.gep(noff, [j0], inbounds=True))
                                b.call(p["pack"], [strip_src, bp, kc,
                                                   smin(b, i64(blk.nr), b.sub(nc, j0)),
                                                   koff[1], strip_noff, p["sb2"]])
                                micro_call(lo, j0, bp)
                        with by_panel:
                            b.call(p["pack"], [src, bp, kc, nc, koff[1], noff, p["sb2"]])
                            with counted_loop(b, lo, hi, name="rb") as rb:
                                with counted_loop(b, i64(0), n_strips, name="s") as s_:
                                    j0 = b.mul(s_, i64(blk.nr))
                                    micro_call(rb, j0, b.gep(bp, [b.mul(j0, kc)],
                                                             inbounds=True))
        packspace.emit_release(b, p["claims"], claimed)
        b.ret_void()
        return fn

    def table(self, what, values):
        """An ``i64*`` to this product's constant offset table ``what``."""
        return constant_table(self.module, f"{self.name}.{what}_offsets", values)

    def emit_entry(self, micro_full, micro_tail, pack, min_flops_per_thread):
        """``void NAME(A, B, C, i8 *space, i32 n_threads)``: the product's parameters, a
        constant of the module but for ``A``, ``B`` and ``C``, copied to the stack and
        handed to the launch every product of this dtype and blocking shares
        (:meth:`emit_launch`), so a product adds a dozen instructions to compile."""
        spec, blk = self.spec, self.blk
        fnty = ir.FunctionType(ir.VoidType(), [self.eptr, self.eptr, self.eptr,
                                               I8.as_pointer(), I32])
        fn = ir.Function(self.module, fnty, name=self.name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        params_ty = self.params_type()
        # Work too small to pay for waking threads runs on fewer of them.
        useful = fork_join.useful_threads(spec.flops, min_flops_per_thread)
        value = {"batch": spec.batch, "m": spec.m, "n": spec.n, "k": spec.k,
                 "slot_bytes": pack_slot_bytes(spec, blk),
                 "accumulate": int(spec.accumulate), "useful_threads": useful,
                 "micro_full": micro_full,
                 "micro_tail": micro_full if micro_tail is None else micro_tail,
                 "pack": pack}
        for f, strides in zip(("sa", "sb", "sc"), (spec.a_strides, spec.b_strides,
                                                   spec.c_strides)):
            value.update({f"{f}{j}": v for j, v in enumerate(strides)})
        for j in range(2):
            value[f"k{j}_offsets"] = (None if spec.k_offsets is None else
                                      self.table(f"k{j}", [row[j] for row in spec.k_offsets]))
        value["n_offsets"] = None if spec.n_offsets is None else self.table("n", spec.n_offsets)
        value["batch_offsets"] = (None if spec.batch_offsets is None else self.table(
            "batch", [v for row in spec.batch_offsets for v in row]))
        # (a field not given: no table, or one the entry or the launch sets, is zero)
        fields = [ir.Constant(ty, value.get(f)) if isinstance(value.get(f), (int, type(None)))
                  else value[f] for f, ty in zip(self.PARAMS, params_ty.elements)]
        constant = ir.GlobalVariable(self.module, params_ty, name=f"{self.name}.params")
        constant.global_constant, constant.linkage = True, "internal"
        constant.initializer = ir.Constant(params_ty, fields)
        ptr = b.alloca(params_ty)
        b.store(b.load(constant), ptr)
        for f, arg in zip("abc", fn.args[:3]):
            b.store(arg, b.gep(ptr, [i32(0), i32(self.PARAMS.index(f))], inbounds=True))
        b.call(self.emit_launch(), [b.bitcast(ptr, VOIDPTR), fn.args[3], fn.args[4]])
        b.ret_void()
        return fn

    def blocking_name(self, what):
        """The name of the routine ``what`` every product of this dtype and whole
        blocking shares."""
        blk = self.blk
        return f"tegrad.gemm.{what}.{self.spec.dtype}.vl{blk.vl}.mr{blk.mr}.nr{blk.nr}." \
               f"kc{blk.kc}.nc{blk.nc}"

    def launch_type(self):
        return ir.FunctionType(ir.VoidType(), [VOIDPTR, I8.as_pointer(), I32])

    def emit_launch(self):
        """``launch(params, space, n_threads)``: the tasks of the product ``params``
        describes handed to the thread pool, for any product of this dtype and blocking
        (:meth:`emit_entry` fills the parameters but for those the thread count decides,
        set here)."""
        name = self.blocking_name("launch")
        if name in self.module.globals:
            return self.module.globals[name]
        if self.shared:
            # the driver requested first: the launch's module declares it, and links it
            driver = self.emit_driver().name
            return self._declare_shared(name, self.launch_type(), lambda em: em._define_launch(
                name, ir.Function(em.module, fork_join.TASK_FN_TYPE, name=driver)))
        return self._define_launch(name, self.emit_driver())

    def _define_launch(self, name, driver):
        """The launch (see :meth:`emit_launch`) named ``name``, calling ``driver``."""
        blk = self.blk
        fn = ir.Function(self.module, self.launch_type(), name=name)
        fn.linkage = "internal"
        raw, space, n_threads = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ptr = b.bitcast(raw, self.params_type().as_pointer())

        def field(f):
            return b.gep(ptr, [i32(0), i32(self.PARAMS.index(f))], inbounds=True)

        batch, m, n = (b.load(field(f)) for f in ("batch", "m", "n"))
        threads = smin(b, n_threads, b.trunc(b.load(field("useful_threads")), I32))
        # One slot per thread this call runs on (the pool runs no more of its tasks at
        # once), in a space sized for n_threads >= threads: see .packspace.
        b.store(packspace.emit_init(b, space), field("claims"))
        at_least_one = b.select(b.icmp_signed("<", threads, i32(1)), i32(1), threads)
        b.store(b.zext(smin(b, at_least_one, i32(fork_join.MAX_THREADS)), I64), field("slots"))
        # Tasks for the pool's chunks (one, serially): whole batches while there are
        # enough of them, else each batch cut into column chunks of whole strips (a task
        # packs only its columns of B), then, when those are still too few, into groups
        # of row blocks (their tasks pack the same columns again).
        threads = b.zext(threads, I64)
        want = b.select(b.icmp_signed(">", threads, i64(1)),
                        b.mul(threads, i64(CHUNKS_PER_THREAD)), i64(1))
        per_batch = ceil_div(b, want, batch)
        strips = ceil_div(b, n, i64(blk.nr))
        width = b.mul(ceil_div(b, strips, smin(b, per_batch, strips)), i64(blk.nr))
        chunks = ceil_div(b, n, width)
        row_blocks = ceil_div(b, m, i64(blk.mr))
        few = b.icmp_signed("<", b.mul(batch, chunks), threads)
        row_groups = b.select(few, smin(b, ceil_div(b, per_batch, chunks), row_blocks),
                              i64(1))
        rows_per = ceil_div(b, row_blocks, row_groups)
        row_groups = ceil_div(b, row_blocks, rows_per)  # none left empty
        b.store(width, field("chunk"))
        b.store(rows_per, field("rows_per_task"))
        n_tasks = b.mul(batch, b.mul(chunks, row_groups))
        parallel_for = fork_join.declare_parallel_for(self.module)
        b.call(parallel_for, [driver, raw, n_tasks, b.trunc(threads, I32)])
        b.ret_void()
        return fn
