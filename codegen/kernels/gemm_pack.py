"""The gemm's packing routine: a ``KC x NC`` panel of ``B`` copied into strips of ``NR``
contiguous columns (:meth:`PackingEmitter.emit_pack`), zero past the last column, so that
the micro-kernel's loads are contiguous whatever ``B``'s strides and offset tables are.
Runs of consecutive elements, rows every other element and columns down consecutive
rows are copied a vector at a time; anything else element by element.

>>> import llvmlite.ir as ir
>>> from tegrad.codegen.kernels.gemm_spec import Blocking, GemmSpec
>>> spec, blk = GemmSpec.dense("float32", 8, 32, 16), Blocking(8, 6, 16, 256, 256)
>>> pack = PackingEmitter(ir.Module(), spec, blk, "mm").emit_pack()
>>> pack.name, len(pack.args)
('tegrad.gemm.pack.float32.vl8.nr16', 7)
"""
from __future__ import annotations

import llvmlite.ir as ir

from tegrad.codegen.kernels.gemm_emitter import GemmEmitterBase
from tegrad.codegen.kernels.irutil import I32, I64, ceil_div, counted_loop, i32, i64, smin


class PackingEmitter(GemmEmitterBase):
    """Emits the routine packing a gemm's ``B`` panel by panel."""

    def emit_pack(self):
        """``pack(bsrc, bp, kc, nc, koff, noff, sbn)``: strips of NR columns,
        ``bp[(s*kc + k)*NR + jj] = B[koff[k] + (s*NR + jj)*sbn]``, zero past ``nc``
        columns (column ``j`` at ``noff[j]`` when ``noff`` is not null). Rows are always
        at a table's offsets: the driver makes one of a reduction stride's.
        """
        blk = self.blk
        # One routine for strides and tables (a column stride's offsets are computed
        # where a table's are loaded, once a strip; a reduction stride's are a table the
        # driver fills once a call): the tables' paths cover every case of the strides'
        # as fast (consecutive columns: one run; B transposed: by columns; a row offset
        # loaded from L1 where it was multiplied), and each specialisation of about 90k
        # characters of IR cost 0.3-0.4 s of LLVM a process (a 1-layer transformer step
        # compiled three packing routines).
        name = self.shared_name("pack")
        if name in self.module.globals:
            return self.module.globals[name]
        fnty = self.pack_type()
        if self.shared:
            return self._declare_shared(name, fnty, lambda em: em.emit_pack())
        fn = ir.Function(self.module, fnty, name=name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        src, dst, kc, nc, koff, noff, sbn = fn.args
        src.add_attribute("noalias")
        dst.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        no_table = b.icmp_unsigned("==", b.ptrtoint(noff, I64), i64(0))
        with counted_loop(b, i64(0), ceil_div(b, nc, i64(blk.nr)), name="s") as s:
            cols = smin(b, i64(blk.nr), b.sub(nc, b.mul(s, i64(blk.nr))))
            col_at = self._strip_columns(b, no_table, s, cols, noff, sbn)
            strip_dst = b.gep(dst, [b.mul(b.mul(s, kc), i64(blk.nr))], inbounds=True)
            joined = fn.append_basic_block("joined")
            # columns at consecutive elements of B, or every other one, are copied
            # a vector at a time
            self._pack_regular_strip(b, fn, cols, col_at, kc, koff, src, strip_dst,
                                     joined)
            # columns apart and rows at consecutive elements (B the transpose of a
            # row-major matrix: a dense layer's weights): VL rows at a time, transposed
            self._pack_by_columns(b, fn, cols, col_at, kc, koff, src, strip_dst, joined)
            # element by element: vectorised, its rows would make vectors wider
            # than the target's (aarch64: 16 floats) from its runs of NR elements
            with counted_loop(b, i64(0), kc, name="k", vectorize=False) as k:
                row_src = b.gep(src, [self._row_at(b, k, koff)], inbounds=True)
                row_dst = b.gep(strip_dst, [b.mul(k, i64(blk.nr))], inbounds=True)
                self._copy_row(b, row_src, row_dst, cols, col_at)
            b.branch(joined)
            b.position_at_end(joined)
        b.ret_void()
        return fn

    def _strip_columns(self, b, no_table, s, cols, noff, sbn):
        """The element offsets in B of strip ``s``'s ``NR`` columns, past its ``cols``
        columns the last one's: ``j * sbn`` for column ``j`` without a table
        (``no_table``), else ``noff[j]``; loaded once a strip (not a row)."""
        nr = self.blk.nr
        first = b.mul(s, i64(nr))
        column = [b.add(first, smin(b, i64(jj), b.sub(cols, i64(1)))) for jj in range(nr)]
        return self._strided_or_loaded(
            b, no_table, [b.mul(j, sbn) for j in column],
            lambda: [b.load(b.gep(noff, [j], inbounds=True)) for j in column], "columns")

    def _pack_regular_strip(self, b, fn, cols, col_at, kc, koff, src, dst, joined):
        """Copy the strip's rows a vector at a time when its ``cols`` column offsets
        form at most two runs of consecutive elements of B (a convolution's output rows
        in its padded input: one row, or the end of one and the start of the next), or,
        for a full strip, step by 2 (a stride-2 convolution's row: the ``2 * NR - 1``
        elements they span are loaded as two vectors and every other one kept). Either
        goes to ``joined``; otherwise the builder continues in a new block (the
        element-wise copy follows there)."""
        self._pack_two_runs(b, fn, cols, col_at, kc, koff, src, dst, joined)
        nr, vl = self.blk.nr, self.blk.vl
        # target-width vectors (a wider one would be split by the backend, and an export
        # for a narrower machine is checked to hold none)
        vty = ir.VectorType(self.elt, vl)
        hit = b.and_(b.icmp_signed("==", cols, i64(nr)), self._steps(b, col_at, 2))
        rows, other = fn.append_basic_block("step2"), fn.append_basic_block("gather")
        b.cbranch(hit, rows, other)
        b.position_at_end(rows)
        with counted_loop(b, i64(0), kc, name="k2") as k:
            at = b.gep(src, [b.add(self._row_at(b, k, koff), col_at[0])], inbounds=True)
            out = b.gep(dst, [b.mul(k, i64(nr))], inbounds=True)
            for h in range(nr // vl):  # columns h*VL .. (h+1)*VL - 1 of the strip
                row = self._load_every_other(b, b.gep(at, [i64(2 * h * vl)], inbounds=True),
                                             vty)
                b.store(row, b.bitcast(b.gep(out, [i64(h * vl)], inbounds=True),
                                       vty.as_pointer()), align=self.esize)
        b.branch(joined)
        b.position_at_end(other)

    def _pack_by_columns(self, b, fn, cols, col_at, kc, koff, src, dst, joined):
        """When the first block of ``VL`` rows is at most two runs of consecutive
        elements in each column (``row_at(l) == row_at(0) + l``, a run's end and the
        next one's start), or every other one (a stride-2 convolution's window sums),
        pack blocks of ``VL`` rows a vector down each of the ``NR`` columns (the last
        real one again past ``cols``), transposed into ``VL`` rows (lanes past ``cols``
        zero), ``VL`` columns at a time. A block of one run takes a plain load per
        column, of two runs two masked loads, of rows every other element two loads
        kept at even places; other blocks and the last ``kc % VL`` rows are copied
        element by element. Goes to ``joined`` when taken; otherwise the builder
        continues in a new block."""
        blk = self.blk
        vl, nr = blk.vl, blk.nr
        check = fn.append_basic_block("by.columns.check")
        columns, other = fn.append_basic_block("by.columns"), fn.append_basic_block("by.rows")
        b.cbranch(b.icmp_signed(">=", kc, i64(vl)), check, other)
        b.position_at_end(check)
        # the first block decides (a B stored by rows fails here, at no cost to its copy)
        first = [self._row_at(b, i64(l), koff) for l in range(vl)]
        hit = b.or_(b.icmp_signed("<=", self._runs(b, first, i64(vl))[2], i64(1)),
                    self._steps(b, first, 2))
        b.cbranch(hit, columns, other)
        b.position_at_end(columns)
        lanes = ir.VectorType(I64, vl)
        keep = [b.icmp_signed("<", ir.Constant(lanes, [h * vl + q for q in range(vl)]),
                              self._splat(b, cols, lanes)) for h in range(nr // vl)]
        zero = ir.Constant(self.vty, [0.0] * vl)
        # every block, the last partial one too (copied element by element)
        with counted_loop(b, i64(0), ceil_div(b, kc, i64(vl)), name="kb") as kb:
            k0 = b.mul(kb, i64(vl))
            block_end = smin(b, b.add(k0, i64(vl)), kc)
            whole, done = fn.append_basic_block("kb.whole"), fn.append_basic_block("kb.done")
            partial = b.block
            b.cbranch(b.icmp_signed("==", b.sub(block_end, k0), i64(vl)), whole, done)
            b.position_at_end(whole)
            rows = [self._row_at(b, b.add(k0, i64(l)), koff) for l in range(vl)]
            p, second, breaks = self._runs(b, rows, i64(vl))
            is_runs = b.icmp_signed("<=", breaks, i64(1))
            vector_paths = fn.append_basic_block("kb.vectors")
            b.cbranch(b.or_(is_runs, self._steps(b, rows, 2)), vector_paths, done)
            not_vectors = b.block
            b.position_at_end(vector_paths)
            at = ir.Constant(lanes, list(range(vl)))
            split = b.icmp_signed("<", at, self._splat(b, p, lanes))
            masks = (split, b.not_(split))
            one_run = b.icmp_signed("==", breaks, i64(0))
            # VL columns at a time (their vectors and transposes fit in the registers)
            for h in range(nr // vl):
                fast = fn.append_basic_block("kb.runs")
                single = fn.append_basic_block("kb.run")
                strided = fn.append_basic_block("kb.step2")
                turn = fn.append_basic_block("kb.transpose")
                b.cbranch(is_runs, fast, strided)
                b.position_at_end(fast)
                two = fn.append_basic_block("kb.two.runs")
                b.cbranch(one_run, single, two)
                b.position_at_end(single)
                from_run = [self._load_vector(b, b.gep(src, [b.add(rows[0], col_at[jj])],
                                                       inbounds=True), self.vty)
                            for jj in range(h * vl, (h + 1) * vl)]
                run_end = b.block
                b.branch(turn)
                b.position_at_end(two)
                # rows [0, p) from rows[0] on, [p, VL) from rows[p] on (a run's end and
                # the next one's start): two masked loads down each column
                from_runs = []
                for jj in range(h * vl, (h + 1) * vl):
                    value = zero
                    for base, mask in zip((rows[0], second), masks):
                        ptr = b.bitcast(b.gep(src, [b.add(base, col_at[jj])]),
                                        self.vty.as_pointer())
                        value = b.call(self.masked_load, [ptr, i32(self.esize), mask, value])
                    from_runs.append(value)
                runs_end = b.block
                b.branch(turn)
                b.position_at_end(strided)
                from_pairs = [self._load_every_other(
                    b, b.gep(src, [b.add(rows[0], col_at[jj])], inbounds=True), self.vty)
                    for jj in range(h * vl, (h + 1) * vl)]
                strided_end = b.block
                b.branch(turn)
                b.position_at_end(turn)
                down = []
                for x, y, z in zip(from_run, from_runs, from_pairs):
                    phi = b.phi(self.vty)
                    phi.add_incoming(x, run_end)
                    phi.add_incoming(y, runs_end)
                    phi.add_incoming(z, strided_end)
                    down.append(phi)
                self._store_transposed(b, down, dst, k0, keep, zero, h)
            turned = b.block
            b.branch(done)
            b.position_at_end(done)
            # the block's rows still to copy element by element: none after a transpose
            copied = b.phi(I64)
            copied.add_incoming(block_end, turned)
            copied.add_incoming(k0, not_vectors)
            copied.add_incoming(k0, partial)
            with counted_loop(b, copied, block_end, name="kr") as k:
                self._copy_row(b, b.gep(src, [self._row_at(b, k, koff)], inbounds=True),
                               b.gep(dst, [b.mul(k, i64(nr))], inbounds=True), cols, col_at)
        b.branch(joined)
        b.position_at_end(other)

    def _store_transposed(self, b, down, dst, k0, keep, zero, h):
        """Rows ``k0 .. k0 + VL - 1`` of the packed strip's columns ``h * VL ..
        (h + 1) * VL - 1`` from ``down``, a vector down each of them, transposed; lanes
        not ``keep[h]`` zero."""
        vl, nr = self.blk.vl, self.blk.nr
        for l, row in enumerate(self._transpose(b, down)):
            at = b.gep(dst, [b.add(b.mul(b.add(k0, i64(l)), i64(nr)), i64(h * vl))],
                       inbounds=True)
            b.store(b.select(keep[h], row, zero), b.bitcast(at, self.vty.as_pointer()),
                    align=self.esize)

    @staticmethod
    def _steps(b, offsets, step):
        """Whether ``offsets[l] == offsets[0] + step * l`` for every ``l`` (i1)."""
        hit = b.icmp_signed("==", offsets[1], b.add(offsets[0], i64(step)))
        for l in range(2, len(offsets)):
            hit = b.and_(hit, b.icmp_signed("==", offsets[l], b.add(offsets[0], i64(step * l))))
        return hit

    @staticmethod
    def _transpose(b, rows):
        """The transpose of the square matrix whose rows are the vectors ``rows``.

        Butterfly stages of half-widths ``n/2, .., 1``: the pair of rows ``(i, i + w)``
        (``i & w == 0``) swaps the ``w``-lane blocks that are off the diagonal. Invariant
        after the stage of width ``w``: blocks of ``w x w`` elements are in their
        transposed places, each still untransposed inside."""
        n = len(rows)
        rows, w = list(rows), n // 2
        while w >= 1:
            low = ir.Constant(ir.VectorType(I32, n), [q if not q & w else n + q - w
                                                      for q in range(n)])
            high = ir.Constant(ir.VectorType(I32, n), [q + w if not q & w else n + q
                                                       for q in range(n)])
            for i in range(n):
                if not i & w:
                    rows[i], rows[i + w] = (b.shuffle_vector(rows[i], rows[i + w], low),
                                            b.shuffle_vector(rows[i], rows[i + w], high))
            w //= 2
        return rows

    def _pack_two_runs(self, b, fn, cols, col_at, kc, koff, src, dst, joined):
        """Columns ``[0, p)`` at consecutive elements from ``col_at[0]`` and ``[p, cols)``
        from ``col_at[p]`` (``p == cols``: one run): each row is two masked vector loads
        per ``VL`` columns, lanes past ``cols`` zero. Masked-off lanes touch no memory,
        so exactly the elements of the element-wise copy are read."""
        blk = self.blk
        p, second, breaks = self._runs(b, col_at, cols)
        runs, other = fn.append_basic_block("runs"), fn.append_basic_block("not.runs")
        b.cbranch(b.icmp_signed("<=", breaks, i64(1)), runs, other)
        b.position_at_end(runs)
        self._pack_one_run(b, fn, cols, breaks, col_at[0], kc, koff, src, dst, joined)
        self._pack_two_runs_in_order(b, fn, cols, p, second, col_at[0], kc, koff, src,
                                     dst, joined)
        lanes = ir.VectorType(I64, blk.vl)
        end = smin(b, p, cols)
        masks = []
        for v in range(blk.nr // blk.vl):
            at = ir.Constant(lanes, [v * blk.vl + lane for lane in range(blk.vl)])
            masks.append((b.icmp_signed("<", at, self._splat(b, end, lanes)),
                          b.and_(b.icmp_signed(">=", at, self._splat(b, p, lanes)),
                                 b.icmp_signed("<", at, self._splat(b, cols, lanes)))))
        zero = ir.Constant(self.vty, [0.0] * blk.vl)
        with counted_loop(b, i64(0), kc, name="k1") as k:
            row = self._row_at(b, k, koff)
            # the second run's base may lie before B (its lanes before p are masked off)
            bases = (b.gep(src, [b.add(row, col_at[0])]), b.gep(src, [b.add(row, second)]))
            out = b.gep(dst, [b.mul(k, i64(blk.nr))], inbounds=True)
            for v, (first_mask, second_mask) in enumerate(masks):
                ptrs = [b.bitcast(b.gep(base, [i64(v * blk.vl)]), self.vty.as_pointer())
                        for base in bases]
                value = b.call(self.masked_load, [ptrs[0], i32(self.esize), first_mask, zero])
                value = b.call(self.masked_load, [ptrs[1], i32(self.esize), second_mask, value])
                b.store(value, b.bitcast(b.gep(out, [i64(v * blk.vl)], inbounds=True),
                                         self.vty.as_pointer()), align=self.esize)
        b.branch(joined)
        b.position_at_end(other)

    def _pack_one_run(self, b, fn, cols, breaks, first, kc, koff, src, dst, joined):
        """A full strip whose columns are one run of consecutive elements from ``first``
        (a convolution's output row in its padded input): each row is ``NR / VL`` plain
        vector loads and stores. The two-run path's masked loads (and their masks, which
        LLVM recomputes in the loop) ran this copy at a third of the speed of a dense
        B's (measured: a 3x3 conv 16x64x16x16 -> 64 on Zen 3, packing 6.2 of 20 ms).
        Goes to ``joined`` when taken; otherwise the builder continues in a new block."""
        blk = self.blk
        whole, other = fn.append_basic_block("one.run"), fn.append_basic_block("two.runs")
        b.cbranch(b.and_(b.icmp_signed("==", breaks, i64(0)),
                         b.icmp_signed("==", cols, i64(blk.nr))), whole, other)
        b.position_at_end(whole)
        with counted_loop(b, i64(0), kc, name="k1") as k:
            base = b.gep(src, [b.add(self._row_at(b, k, koff), first)], inbounds=True)
            out = b.gep(dst, [b.mul(k, i64(blk.nr))], inbounds=True)
            for v in range(blk.nr // blk.vl):
                at = b.bitcast(b.gep(base, [i64(v * blk.vl)], inbounds=True),
                               self.vty.as_pointer())
                b.store(b.load(at, align=self.esize),
                        b.bitcast(b.gep(out, [i64(v * blk.vl)], inbounds=True),
                                  self.vty.as_pointer()), align=self.esize)
        b.branch(joined)
        b.position_at_end(other)

    def _pack_two_runs_in_order(self, b, fn, cols, p, second, first, kc, koff, src,
                                dst, joined):
        """A full strip of two runs, the second at or after the first in memory (the end
        of a convolution's output row and the start of the next, in its padded input):
        each row is two plain vector loads per ``VL`` columns, one from each run's base,
        and a select of lane ``< p`` from the first. Every element either load reads lies
        between the row's first element and its last (``second + NR - 1 >= first +
        NR - 1``), which the element-wise copy reads: inside B. Masked loads ran this copy
        at about 8 cycles an element on Zen 3 (LeNet's second convolution's input
        gradient: packing 78% of the product's time).
        Goes to ``joined`` when taken; otherwise the builder continues in a new block."""
        blk = self.blk
        plain, other = fn.append_basic_block("two.runs.plain"), fn.append_basic_block(
            "two.runs.masked")
        b.cbranch(b.and_(b.icmp_signed("==", cols, i64(blk.nr)),
                         b.icmp_signed(">=", second, first)), plain, other)
        b.position_at_end(plain)
        # lane numbers as i32 (p <= NR): one compare gives the select's mask in the
        # element width, which LLVM keeps out of the loop (from i64 lanes it packed two
        # compares' results in every iteration)
        lanes = ir.VectorType(I32, blk.vl)
        p32 = b.trunc(p, I32)
        firsts = [b.icmp_signed("<", ir.Constant(lanes, [v * blk.vl + lane
                                                        for lane in range(blk.vl)]),
                                self._splat(b, p32, lanes))
                  for v in range(blk.nr // blk.vl)]
        with counted_loop(b, i64(0), kc, name="k1") as k:
            row = self._row_at(b, k, koff)
            bases = [b.gep(src, [b.add(row, at)], inbounds=True) for at in (first, second)]
            out = b.gep(dst, [b.mul(k, i64(blk.nr))], inbounds=True)
            for v, from_first in enumerate(firsts):
                a, c = (b.load(b.bitcast(b.gep(base, [i64(v * blk.vl)], inbounds=True),
                                         self.vty.as_pointer()), align=self.esize)
                        for base in bases)
                b.store(b.select(from_first, a, c),
                        b.bitcast(b.gep(out, [i64(v * blk.vl)], inbounds=True),
                                  self.vty.as_pointer()), align=self.esize)
        b.branch(joined)
        b.position_at_end(other)

    @staticmethod
    def _runs(b, offsets, count):
        """``(p, base, breaks)`` of the first ``count`` of ``offsets`` (i64 values):
        ``breaks`` places where one is not the one before plus 1, ``p`` the first such
        place (``len(offsets)`` when none) and ``base == offsets[p] - p`` (``offsets[0]``
        when none). With at most one break, entry ``j`` is ``offsets[0] + j`` below ``p``
        and ``base + j`` from ``p`` on."""
        p, base, breaks = i64(len(offsets)), offsets[0], i64(0)
        for j in range(len(offsets) - 1, 0, -1):
            brk = b.and_(b.icmp_signed("<", i64(j), count),
                         b.icmp_signed("!=", offsets[j], b.add(offsets[j - 1], i64(1))))
            p = b.select(brk, i64(j), p)
            base = b.select(brk, b.sub(offsets[j], i64(j)), base)
            breaks = b.add(breaks, b.zext(brk, I64))
        return p, base, breaks

    @staticmethod
    def _row_at(b, k, koff):
        """The element offset of B's reduction row ``k``, from its table."""
        return b.load(b.gep(koff, [k], inbounds=True))

    def _copy_row(self, b, row_src, row_dst, cols, col_at):
        """``row_dst[jj] = B[row, column jj]`` element by element, the columns at the
        offsets ``col_at``; past the last of ``cols`` columns the last one is read (in
        bounds) and 0 stored."""
        for jj in range(self.blk.nr):
            target = b.gep(row_dst, [i64(jj)], inbounds=True)
            value = b.load(b.gep(row_src, [col_at[jj]], inbounds=True), align=self.esize)
            value = b.select(b.icmp_signed("<", i64(jj), cols), value, self.const(0.0))
            b.store(value, target)

    def _load_vector(self, b, at, vty):
        return b.load(b.bitcast(at, vty.as_pointer()), align=self.esize)

    def _load_every_other(self, b, at, vty):
        """``at[0], at[2], .., at[2n - 2]`` as a vector of ``vty`` (``n`` lanes): the
        first vector's even lanes, then the odd ones of the second, loaded from
        ``n - 1`` on (nothing past the last element read)."""
        n = vty.count
        first = self._load_vector(b, at, vty)
        second = self._load_vector(b, b.gep(at, [i64(n - 1)], inbounds=True), vty)
        even = [2 * q for q in range(n // 2)] + [n + 1 + 2 * q for q in range(n - n // 2)]
        return b.shuffle_vector(first, second, ir.Constant(ir.VectorType(I32, n), even))
