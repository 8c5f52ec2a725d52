"""LLVM IR for a loop-IR :class:`~tegrad.codegen.loops.nodes.Kernel`.

The kernel becomes ``i32 tegrad.NAME(ptr buffers)``: ``buffers`` is an array of data pointers,
the kernel's arguments, then its temporaries, then its large local buffers (see
:class:`KernelModule`). The body lives in an internal function taking one ``noalias``
pointer per buffer (LLVM inlines it, keeping the no-alias facts). It returns 0, or the
1-based index in :attr:`KernelModule.errors` of the failed check: a :class:`Check` node, a
zero integer divisor, or a data-dependent index outside its buffer. Each of these stops
the kernel before anything is read or written out of bounds.

One lowering per statement kind (:data:`STMT_LOWERINGS`, :mod:`.statements`) and per
expression kind (:data:`EXPR_LOWERINGS`, :mod:`.expressions`: generators run on an
explicit stack by :func:`tegrad.ir.mapper.run`, so an expression of any depth emits
without recursion; a lowering gets a sub-expression's value with ``(yield
em.expr_step(sub, dtype))``); binary ops, comparisons, intrinsics and conversions have
their own tables (:mod:`.arithmetic`, :mod:`.intrinsics`, :mod:`.conversions`).

An expression's value has numpy's dtype for the evaluator's computation: loop variables
are int64 (the evaluator's index arrays), binary operands are promoted as numpy promotes
them, and a store converts to the buffer's dtype as ``astype`` does.

This module lays out the module's functions (:func:`emit_kernel`; a large kernel in
parts, :func:`kernel_parts`); beside it, :mod:`.emitter` holds the emitter's state and
the services the lowerings call, :mod:`.kernel_buffers` where the buffers live, and
:mod:`.python_entry` the entry for calls from Python.

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Buffer, For, Kernel, Load, Store
>>> A = Buffer("A", (4,), "float32", "input")
>>> B = Buffer("B", (4,), "float32", "output")
>>> i = Var("i", "int64")
>>> k = Kernel("double", (A, B), (), For(i, Const(0, "int64"), Const(4, "int64"),
...                                          Store(B, (i,), Load(A, (i,)) * 2)))
>>> km = emit_kernel(k)
>>> "define i32 @\\"tegrad.double\\"(ptr" in str(km.module), km.errors
(True, ())
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import buffers_of, distinct_exprs, walk_stmts
from tegrad.codegen.tuning import PART_SIZE, STACK_LIMIT_BYTES
from tegrad.codegen.llvm.emitter import KernelEmitter, ValueMemo
from tegrad.codegen.llvm.equal_parts import part_key
from tegrad.codegen.llvm.expressions import EXPR_LOWERINGS
from tegrad.codegen.llvm.kernel_buffers import (PACKING_SPACE, STORAGE_ALIGNMENT,
                                                StoragePlan,
                                                has_product, packing_space)
from tegrad.codegen.llvm.names import llvm_name
from tegrad.codegen.llvm.parallel import resolve_threads
from tegrad.codegen.llvm.profiling import ProfileLayout, monotonic_ns
from tegrad.codegen.llvm.python_entry import emit_python_entry, overlap_pairs
from tegrad.codegen.llvm.statements import RARE_BRANCH, STMT_LOWERINGS
from tegrad.codegen.llvm.types import I32, I64, PTR


@dataclass(frozen=True)
class KernelModule:
    """An LLVM module holding one kernel and what the runtime needs to call it.

    ``name``: the kernel's symbol; ``buffers``: the buffers in the order of the pointer
    array (``kernel.args``, ``kernel.temps``, then ``extra``: the local buffers too large
    for the stack, then the products' packing space when they need one, see
    :func:`packing_space`);
    ``errors``: ``(kind, tensor, message)`` per non-zero status code (code ``n`` is
    ``errors[n - 1]``; ``message`` is a ``Check`` node's, or None); ``storage``: the
    :class:`~.kernel_buffers.StoragePlan` of the buffers after the arguments (their
    offsets in one block of memory; the caller's storage must follow it, as buffers of
    disjoint lifetimes share memory and the code assumes no other overlap);
    ``profile``: the :class:`~.profiling.ProfileLayout` of its counters when profiled,
    else None.
    """

    module: ir.Module
    name: str
    buffers: tuple
    extra: tuple
    errors: tuple
    storage: StoragePlan
    profile: ProfileLayout | None = None


def emit_kernel(kernel, *, triple=None, data_layout=None, python_abi=None, threads=None,
                shared_gemm=False, defer_rare=False, check_bounds=False, target=None,
                profile=False):
    """Emit ``kernel`` as an LLVM module (see the module docstring for the ABI).

    Loops marked ``parallel`` run on ``threads`` threads of the native pool (None: every
    usable core; 1: serially, without the pool), see :mod:`.parallel`; the module then
    declares ``tegrad_parallel_for``.

    With ``python_abi = (tuple_items_offset, array_data_offset)`` (byte offsets of the
    items in a Python tuple object and of the data pointer in a numpy array object), the
    module also has ``i32 NAME.py(ptr storage, ptr arrays)``, which takes a tuple of the
    argument arrays and the other buffers' pointers in ``storage``: a call from Python
    then passes two arguments and builds no pointer array. It first checks that no output
    overlaps another argument (see :func:`overlap_pairs`).

    ``threads`` is the most threads a :class:`MatrixProduct` runs on (None: every core this
    process may use); the module then calls the thread pool's ``tegrad_parallel_for``,
    which the JIT resolves to the process's pool.

    The products' kernels are blocked for ``target``'s vector registers (a
    :class:`~tegrad.codegen.target.Target`; None: the host's).

    With ``shared_gemm`` (a module for this process's JIT), the products' micro-kernels
    and packing routines are declared, compiled once per process (see
    :func:`tegrad.codegen.target.jit.shared_function`).

    With ``defer_rare``, the ``otherwise`` branch of a ``likely`` :class:`If` is not
    emitted: where it would run, the kernel stops with the status of
    ``(RARE_BRANCH, tensor, None)`` (the caller then runs a module emitted without
    ``defer_rare``, from the start: a kernel only reads its inputs).

    With ``check_bounds``, every :class:`Load`, :class:`Store` and :class:`Accumulate`
    checks its element before touching it: each index against its axis's extent (an index
    wrong in one axis fails even where the flat offset stays inside the buffer) and the
    flat offset against the buffer's size; the first violation stops the kernel with
    ``("index_out_of_range", buffer, message)``, the message naming the buffer and the
    stage (the tensor whose statement holds the access). Constant indices are checked
    here instead. A :class:`MatrixProduct` is not checked at run time: its spans (every
    element its offset tables and strides reach) are checked against its buffers when the
    node is built, and its offset tables are constants, never data. Without
    ``check_bounds`` nothing of this is emitted.

    With ``profile``, each top-level statement of the body (:func:`top_statements`) is a
    function of its own, timed by the caller, and the module holds the counters of
    :mod:`.profiling` (``KernelModule.profile``): for the JIT only (it calls the C
    library's ``clock_gettime``). Without it nothing of this is emitted.
    """
    km = _ModuleEmitter(kernel, triple, data_layout, resolve_threads(threads),
                        shared_gemm, defer_rare, check_bounds, target, profile=profile).run()
    if python_abi is not None:
        emit_python_entry(km, len(kernel.args), *python_abi)
    return km


def top_statements(body):
    """The top-level statements of the kernel body ``body`` (a block's, or ``body``
    alone): what a profiled kernel times one by one."""
    return list(body.stmts) if type(body) is _n.Block else [body]


def kernel_parts(body, storage=None, packing=None):
    """The top-level statements of the kernel body ``body`` in groups, each to become a
    function taking the buffers it uses, all ``noalias``: one group per statement when
    the whole is larger than :data:`PART_SIZE` nodes (the equal statements of equal
    blocks then become one function, :mod:`.equal_parts`), else consecutive statements
    together. Given the kernel's ``storage`` plan, no group uses two buffers that share
    memory (``packing``: the packing space, used by the statements holding products):
    the no-alias facts hold only where none of them overlap (one statement's buffers
    never share: the plan keeps buffers alive at one statement apart)."""
    stmts = top_statements(body)
    if len(stmts) > 1 and sum(_stmt_size(s) for s in stmts) > PART_SIZE:
        return [[s] for s in stmts]
    shares = storage.shares if storage is not None else {}
    parts, used = [[]], set()
    for s in stmts:
        touched = _buffers_used(s) if shares else set()
        if packing is not None and shares and has_product(s):
            touched.add(packing)
        if parts[-1] and any(shares.get(b, frozenset()) & used for b in touched):
            parts.append([])
            used = set()
        parts[-1].append(s)
        used |= touched
    return parts


def _buffers_used(stmt):
    """Every buffer ``stmt`` reads, writes or allocates."""
    used, allocated = buffers_of(stmt)
    return set(used) | allocated


def _stmt_size(s):
    """The statements in ``s`` and the distinct expression nodes they hold."""
    return sum(1 for _ in walk_stmts(s)) + sum(1 for _ in distinct_exprs(s))


class _ModuleEmitter(KernelEmitter):
    """Lays out the kernel's module: the outer function reading the pointer array, the
    body (or its parts, each a function of its own) emitted by :class:`KernelEmitter`;
    profiled, one part per top-level statement, timed (see :mod:`.profiling`)."""

    def __init__(self, *args, profile=False):
        super().__init__(*args)
        self.profile = ProfileLayout(f"{self.symbol}.profile",
                                     len(top_statements(self.kernel.body))) if profile else None

    def run(self):
        if self.profile is None:
            parts = kernel_parts(self.kernel.body, self.storage, self.packing)
        else:
            parts = [[s] for s in top_statements(self.kernel.body)]
        whole = len(parts) == 1 and self.profile is None
        # the parts' caller touches no memory itself: its pointers need no no-alias facts
        # (and may not claim them where buffers share memory)
        body = self._buffer_function(f"{self.symbol}.body", noalias=whole)
        body.attributes.add("alwaysinline")
        if whole:
            self._emit_into(body, self.kernel.body)
        else:
            # each part its own function: LLVM's optimisation time grows faster than the
            # size of a function, and stages gain little from being optimised together
            # (taking only the buffers it uses: LLVM's time also grows with the number
            # of no-alias arguments)
            calls, position = [], {b: k for k, b in enumerate(self.buffers)}
            #: a part's key (:func:`part_key`) -> the function of the first part of that
            #: key, which the others call on their own buffers (an equal block of a model)
            shared = {}
            pointers = set(self.buffers)
            for k, part in enumerate(parts):
                stmt = _n.Block(tuple(part)) if len(part) > 1 else part[0]
                key, order = part_key(stmt)
                used = _buffers_used(stmt)
                buffers = [b for b in order if b in used and b in pointers]
                if has_product(stmt):
                    buffers.append(self.packing)
                # which buffers come by pointer (a large local does, a small one is on
                # the stack) is part of what the function does
                key = (key, tuple(order.index(b) if b in order else -1 for b in buffers))
                fn = shared.get(key)
                if fn is None:
                    fn = self._buffer_function(f"{self.symbol}.part{k}", buffers)
                    fn.attributes.add("noinline")
                    codes = self._emit_into(fn, stmt, buffers)
                    # a status other than a rare branch's names this part's tensors: a
                    # part that may return one is not shared (another would report it)
                    if all(self.errors[c - 1][0] == RARE_BRANCH for c in codes):
                        shared[key] = fn
                calls.append((fn, [body.args[position[b]] for b in buffers]))
            bld = ir.IRBuilder(body.append_basic_block("entry"))
            times = [self._now(bld)]
            for k, (fn, args) in enumerate(calls):
                status = bld.call(fn, args)
                times.append(self._now(bld))
                ok = body.append_basic_block(f"after.part{k}")
                fail = body.append_basic_block(f"fail.part{k}")
                bld.cbranch(bld.icmp_signed("==", status, ir.Constant(I32, 0)), ok, fail)
                bld.position_at_end(fail)
                bld.ret(status)
                bld.position_at_end(ok)
            self._count(bld, times)
            bld.ret(ir.Constant(I32, 0))

        outer = ir.Function(self.module, ir.FunctionType(I32, [PTR]), name=self.symbol)
        outer.attributes.add("nounwind")
        b = ir.IRBuilder(outer.append_basic_block("entry"))
        pointers = [b.load(b.gep(outer.args[0], [ir.Constant(I64, k)], inbounds=True,
                                  source_etype=PTR), typ=PTR)
                    for k in range(len(self.buffers))]
        start = self._now(b)
        status = b.call(body, pointers)
        if start is not None:  # the whole call, counted when it succeeds
            done = b.icmp_signed("==", status, ir.Constant(I32, 0))
            self.profile.add(b, self.module.globals[self.profile.symbol],
                             self.profile.statements,
                             b.select(done, b.sub(self._now(b), start), ir.Constant(I64, 0)),
                             b.zext(done, I64))
        b.ret(status)
        return KernelModule(self.module, self.symbol, self.buffers, self.extra,
                            tuple(self.errors), self.storage, self.profile)

    def _now(self, builder):
        """The clock read at ``builder`` when profiling (nanoseconds), else None."""
        if self.profile is None:
            return None
        return builder.call(monotonic_ns(self.module), [])

    def _count(self, builder, times):
        """Add each part's time (between consecutive ``times``) and one call to its
        counters, when profiling."""
        if self.profile is None:
            return
        table = self.profile.declare(self.module)
        one = ir.Constant(I64, 1)
        for k in range(len(times) - 1):
            self.profile.add(builder, table, k, builder.sub(times[k + 1], times[k]), one)

    def _buffer_function(self, name, buffers=None, noalias=True):
        """An internal ``i32 name(ptr ...)`` taking one pointer per buffer (of ``buffers``,
        by default all the kernel's), each ``noalias`` unless ``noalias`` is false."""
        buffers = self.buffers if buffers is None else buffers
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR] * len(buffers)), name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        args = set(self.kernel.args)
        for arg, buf in zip(fn.args, buffers):
            arg.name = llvm_name(buf.name)
            if noalias:
                arg.add_attribute("noalias")
            if buf not in args:
                # storage the runtime allocates; arguments are numpy arrays, whose data
                # is only guaranteed element-aligned (a view may start anywhere)
                arg.attributes.align = STORAGE_ALIGNMENT
        return fn

    def _emit_into(self, fn, stmt, buffers=None):
        """Emit ``stmt`` as the body of ``fn`` (a :meth:`_buffer_function` of ``buffers``),
        returning 0 at its end; the status codes ``fn`` may return (a set)."""
        self.codes = set()
        self.function = fn
        self.pointers = dict(zip(self.buffers if buffers is None else buffers, fn.args))
        self.env, self.memo = {}, ValueMemo()
        self.entry = fn.append_basic_block("entry")
        start = fn.append_basic_block("start")
        self.builder = ir.IRBuilder(start)
        self.stmt(stmt)
        if not self.builder.block.is_terminated:
            self.builder.ret(ir.Constant(I32, 0))
        ir.IRBuilder(self.entry).branch(start)
        return self.codes


__all__ = ["KernelModule", "PACKING_SPACE", "RARE_BRANCH", "emit_kernel", "EXPR_LOWERINGS",
           "STMT_LOWERINGS", "STACK_LIMIT_BYTES", "STORAGE_ALIGNMENT", "kernel_parts",
           "top_statements",
           "overlap_pairs", "packing_space"]
