"""LLVM IR for a loop-IR :class:`~tegrad.codegen.loops.nodes.Kernel`.

The kernel becomes ``i32 tegrad.NAME(ptr buffers)``: ``buffers`` is an array of data pointers,
the kernel's arguments, then its temporaries, then its large local buffers (see
:class:`KernelModule`). The body lives in an internal function taking one ``noalias``
pointer per buffer (LLVM inlines it, keeping the no-alias facts). It returns 0, or the
1-based index in :attr:`KernelModule.errors` of the failed check: a :class:`Check` node, a
zero integer divisor, or a data-dependent index outside its buffer. Each of these stops
the kernel before anything is read or written out of bounds.

One lowering per statement kind (:data:`STMT_LOWERINGS`) and per expression kind
(:data:`EXPR_LOWERINGS`, generators run on an explicit stack by
:func:`tegrad.ir.mapper.run`, so an expression of any depth emits without recursion;
a lowering gets a sub-expression's value with ``(yield em.expr_step(sub, dtype))``);
binary ops, comparisons, intrinsics and conversions have their
own tables (:mod:`.arithmetic`, :mod:`.intrinsics`, :mod:`.conversions`).

An expression's value has numpy's dtype for the evaluator's computation: loop variables
are int64 (the evaluator's index arrays), binary operands are promoted as numpy promotes
them, and a store converts to the buffer's dtype as ``astype`` does.

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
from types import GeneratorType

import numpy as np
from llvmlite import ir

from tegrad.ir import dtypes as _dt
from tegrad.ir import expr as _ex
from tegrad.ir.mapper import bottom_up, children, run
from tegrad.codegen.kernels.irutil import loop_without_vectorisation
from tegrad.codegen.kernels.product import emit_product, product_space_bytes
from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import buffers_of, distinct_exprs, walk_expr, walk_stmts
from tegrad.codegen.llvm.arithmetic import BINARY_LOWERINGS, COMPARE_LOWERINGS
from tegrad.codegen.llvm.conversions import convert
from tegrad.codegen.llvm.intrinsics import INTRINSIC_LOWERINGS
from tegrad.codegen.llvm.names import llvm_name
from tegrad.codegen.llvm.parallel import emit_parallel_loop, resolve_threads
from tegrad.codegen.llvm.types import (I1, I8, I32, I64, PTR, Value, constant, memory_type,
                                       promote, register_type)

#: local buffers larger than this many bytes live in storage the runtime owns (passed in
#: the buffer array) instead of on the stack
STACK_LIMIT_BYTES = 64 * 1024

#: the alignment (bytes) of the storage the runtime allocates for temporaries and large
#: local buffers, declared to LLVM
STORAGE_ALIGNMENT = 64

#: the name of the kernel's buffer of packing space for its matrix products (a name no
#: tensor's buffer has: those are the tensors' names, and no tensor is named so by tegrad)
PACKING_SPACE = "tegrad.packing"

#: loops marked "unrolled" have at most this many iterations (the loop IR's limit, which
#: the schedule enforces); they are unrolled when emitted
UNROLL_LIMIT = _n.UNROLL_LIMIT

#: a loop whose body has more LLVM instructions than this is not given to LLVM's loop
#: vectoriser, whose time grows with the square of the body (a 4,000-instruction body:
#: 6.7 s of a 6.8 s compile, 0.4 s at 1,000)
VECTORIZE_LIMIT = 1000


#: the status kind of a kernel stopped where a deferred rare branch would run
RARE_BRANCH = "rare_branch"

_TYPE_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}
_INTRINSIC_ARITY = {"llvm.copysign": 2, "llvm.pow": 2}


@dataclass(frozen=True)
class KernelModule:
    """An LLVM module holding one kernel and what the runtime needs to call it.

    ``name``: the kernel's symbol; ``buffers``: the buffers in the order of the pointer
    array (``kernel.args``, ``kernel.temps``, then ``extra``: the local buffers too large
    for the stack, then the products' packing space when they need one, see
    :func:`packing_space`);
    ``errors``: ``(kind, tensor, message)`` per non-zero status code (code ``n`` is
    ``errors[n - 1]``; ``message`` is a ``Check`` node's, or None).
    """

    module: ir.Module
    name: str
    buffers: tuple
    extra: tuple
    errors: tuple


def emit_kernel(kernel, *, triple=None, data_layout=None, python_abi=None, threads=None,
                shared_gemm=False, defer_rare=False, check_bounds=False, target=None):
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
    :func:`tegrad.codegen.kernels.jit.shared_function`).

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
    """
    km = _KernelEmitter(kernel, triple, data_layout, resolve_threads(threads),
                        shared_gemm, defer_rare, check_bounds, target).run()
    if python_abi is not None:
        _emit_python_entry(km, len(kernel.args), *python_abi)
    return km


def overlap_pairs(buffers):
    """The pairs ``(output, other)`` of argument positions whose memory must not overlap
    (an output and an input, or two outputs); a negative status ``-(k + 1)`` from the
    Python entry reports that pair ``k`` overlaps."""
    outputs = [k for k, b in enumerate(buffers) if b.scope == "output"]
    return [(k, m) for k in outputs for m in range(len(buffers))
            if m != k and (buffers[m].scope != "output" or m < k)]


def _emit_python_entry(km, n_args, items_offset, data_offset):
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
    for pair, (k, m) in enumerate(overlap_pairs(args)):
        overlap = b.and_(b.icmp_unsigned("<", starts[k], ends[m]),
                         b.icmp_unsigned("<", starts[m], ends[k]))
        with b.if_then(overlap, likely=False):
            b.ret(ir.Constant(I32, -(pair + 1)))
    for j in range(n - n_args):
        b.store(b.load(slot(storage, j), typ=PTR), slot(table, n_args + j))
    b.ret(b.call(kernel_fn, [table]))


def _large_locals(stmt):
    """Local buffers too large for the stack."""
    out = []
    for s in walk_stmts(stmt):
        if isinstance(s, _n.Allocate):
            b = s.buffer
            if b.size * np.dtype(b.dtype).itemsize > STACK_LIMIT_BYTES and b not in out:
                out.append(b)
    return out


def packing_space(stmt, threads, target=None):
    """The buffer where the matrix products of ``stmt`` pack their operands (None when
    none packs): one for all of them, sized for the largest on ``threads`` threads (the
    products run one after another, never inside a parallel loop's task: see
    :mod:`.parallel`), passed after the large local buffers, so an export carves it from
    the caller's workspace and the JIT's executable owns it: nothing is allocated in a
    call.

    >>> from tegrad.codegen.kernels.gemm import GemmSpec
    >>> from tegrad.codegen.loops.nodes import Buffer, MatrixProduct
    >>> a, b, c = (Buffer(n, (64, 64), "float32") for n in "abc")
    >>> mm = MatrixProduct(GemmSpec.dense("float32", 64, 64, 64), c, a, b, 0, 0, 0)
    >>> packing_space(mm, 2).shape[0] > packing_space(mm, 1).shape[0]
    True
    """
    nbytes = max([product_space_bytes(s.spec, threads, target) for s in walk_stmts(stmt)
                  if isinstance(s, _n.MatrixProduct)], default=0)
    return _n.Buffer(PACKING_SPACE, (nbytes,), "uint8", "local") if nbytes else None


def _has_product(stmt):
    return any(isinstance(s, _n.MatrixProduct) for s in walk_stmts(stmt))


def _first_target(stmt):
    """The name of the first buffer ``stmt`` writes (names errors raised inside it)."""
    for s in walk_stmts(stmt):
        if isinstance(s, (_n.Store, _n.Accumulate)):
            return s.buffer.name
    return None


class ValueMemo:
    """Values remembered within nested frames (a statement, a branch of it): a lookup
    sees every open frame at once; :meth:`pop` forgets what the innermost one learnt.
    Outside any frame nothing is remembered."""

    def __init__(self):
        self.frames, self.table = [], {}

    def append(self, frame=None):
        """Open a frame (``frame`` is ignored: a frame records its own keys)."""
        self.frames.append([])

    def pop(self):
        """Close the innermost frame, forgetting its entries."""
        for key in self.frames.pop():
            del self.table[key]

    def __len__(self):
        return len(self.frames)

    def get(self, key):
        return self.table.get(key)

    def put(self, key, value):
        if self.frames and key not in self.table:
            self.table[key] = value
            self.frames[-1].append(key)


#: a kernel larger than this (statements plus distinct expression nodes) is emitted as
#: several functions of about this size each, called in turn, each taking the buffers it
#: uses (a 1,000-stage program and its gradient: 13 s of LLVM optimisation as one
#: function, 3.4-4.6 s in parts of 1,000-4,000; the 6-layer CNN step is 1,800)
PART_SIZE = 2000


def kernel_parts(body):
    """The top-level statements of the kernel body ``body`` in consecutive groups of
    about :data:`PART_SIZE` nodes (one group when the whole is smaller)."""
    stmts = list(body.stmts) if type(body) is _n.Block else [body]
    parts, size = [[]], 0
    for s in stmts:
        n = _stmt_size(s)
        if parts[-1] and size + n > PART_SIZE:
            parts.append([])
            size = 0
        parts[-1].append(s)
        size += n
    return parts


def _buffers_used(stmt):
    """Every buffer ``stmt`` reads, writes or allocates."""
    used, allocated = buffers_of(stmt)
    return set(used) | allocated


def _stmt_size(s):
    """The statements in ``s`` and the distinct expression nodes they hold."""
    return sum(1 for _ in walk_stmts(s)) + sum(1 for _ in distinct_exprs(s))


class _KernelEmitter:
    def __init__(self, kernel, triple, data_layout, threads, shared_gemm=False,
                 defer_rare=False, check_bounds=False, target=None):
        self.kernel = kernel
        self.target = target
        self.check_bounds = check_bounds
        self.threads = threads
        self.shared_gemm = shared_gemm
        self.defer_rare = defer_rare
        #: the failure path of the parallel task being emitted (None: the kernel's)
        self.task = None
        self.tasks = 0
        #: the gemm function emitted for each distinct spec
        self.gemms = {}
        # never the name of a C function the kernel may call (a kernel named "exp")
        # (ASCII and short whatever the kernel's name: see .names)
        self.symbol = f"tegrad.{llvm_name(kernel.name)}"
        self.module = ir.Module(name=llvm_name(kernel.name))
        if triple:
            self.module.triple = triple
        if data_layout:
            self.module.data_layout = data_layout
        #: the products' packing space (a buffer, or None when nothing packs)
        self.packing = packing_space(kernel.body, threads, target)
        self.extra = tuple(_large_locals(kernel.body)) + (
            (self.packing,) if self.packing is not None else ())
        self.buffers = tuple(kernel.args) + tuple(kernel.temps) + self.extra
        self.errors = []
        self.env = {}
        self.pointers = {}
        self.memo = ValueMemo()
        self.effects = {}
        self.tensor = kernel.name
        self._blocks = 0

    # -- module structure ------------------------------------------------------------
    def run(self):
        body = self._buffer_function(f"{self.symbol}.body")
        body.attributes.add("alwaysinline")
        parts = kernel_parts(self.kernel.body)
        if len(parts) == 1:
            self._emit_into(body, self.kernel.body)
        else:
            # each part its own function: LLVM's optimisation time grows faster than the
            # size of a function, and stages gain little from being optimised together
            # (taking only the buffers it uses: LLVM's time also grows with the number
            # of no-alias arguments)
            calls, position = [], {b: k for k, b in enumerate(self.buffers)}
            for k, part in enumerate(parts):
                stmt = _n.Block(tuple(part)) if len(part) > 1 else part[0]
                used = _buffers_used(stmt)
                if _has_product(stmt):
                    used.add(self.packing)
                buffers = [b for b in self.buffers if b in used]
                fn = self._buffer_function(f"{self.symbol}.part{k}", buffers)
                fn.attributes.add("noinline")
                self._emit_into(fn, stmt, buffers)
                calls.append((fn, [body.args[position[b]] for b in buffers]))
            bld = ir.IRBuilder(body.append_basic_block("entry"))
            for k, (fn, args) in enumerate(calls):
                status = bld.call(fn, args)
                ok = body.append_basic_block(f"after.part{k}")
                fail = body.append_basic_block(f"fail.part{k}")
                bld.cbranch(bld.icmp_signed("==", status, ir.Constant(I32, 0)), ok, fail)
                bld.position_at_end(fail)
                bld.ret(status)
                bld.position_at_end(ok)
            bld.ret(ir.Constant(I32, 0))

        outer = ir.Function(self.module, ir.FunctionType(I32, [PTR]), name=self.symbol)
        outer.attributes.add("nounwind")
        b = ir.IRBuilder(outer.append_basic_block("entry"))
        pointers = [b.load(b.gep(outer.args[0], [ir.Constant(I64, k)], inbounds=True,
                                  source_etype=PTR), typ=PTR)
                    for k in range(len(self.buffers))]
        b.ret(b.call(body, pointers))
        return KernelModule(self.module, self.symbol, self.buffers, self.extra,
                            tuple(self.errors))

    def _buffer_function(self, name, buffers=None):
        """An internal ``i32 name(ptr ...)`` taking one ``noalias`` pointer per buffer (of
        ``buffers``, by default all the kernel's)."""
        buffers = self.buffers if buffers is None else buffers
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR] * len(buffers)), name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        args = set(self.kernel.args)
        for arg, buf in zip(fn.args, buffers):
            arg.name = llvm_name(buf.name)
            arg.add_attribute("noalias")
            if buf not in args:
                # storage the runtime allocates; arguments are numpy arrays, whose data
                # is only guaranteed element-aligned (a view may start anywhere)
                arg.attributes.align = STORAGE_ALIGNMENT
        return fn

    def _emit_into(self, fn, stmt, buffers=None):
        """Emit ``stmt`` as the body of ``fn`` (a :meth:`_buffer_function` of ``buffers``),
        returning 0 at its end."""
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

    def new_block(self, name):
        self._blocks += 1
        return self.function.append_basic_block(f"{name}.{self._blocks}")

    # -- services used by the op tables ----------------------------------------------
    def intrinsic(self, name, ty, arity=None):
        """The LLVM float intrinsic ``name`` on ``ty`` (e.g. ``llvm.exp.f32``), taking
        ``arity`` operands of that type (by default as many as the intrinsic has)."""
        arity = arity or _INTRINSIC_ARITY.get(name, 1)
        full = f"{name}.{_TYPE_SUFFIX[str(ty)]}"
        fn = self.module.globals.get(full)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * arity), name=full)
        return fn

    def libm(self, name, ret, args):
        """A C library function (resolved from the process when the module is loaded)."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
            fn.attributes.add("nounwind")
        return fn

    def error_code(self, kind, tensor, message=None):
        key = (kind, tensor, message)
        if key not in self.errors:
            self.errors.append(key)
        return self.errors.index(key) + 1

    def fail_unless(self, ok, kind, tensor, message=None):
        """Return the status of ``(kind, tensor, message)`` unless the i1 ``ok`` holds."""
        code = self.error_code(kind, tensor, message)
        fail = self.new_block("fail")
        cont = self.new_block("ok")
        self.builder.cbranch(ok, cont, fail)
        self.builder.position_at_end(fail)
        if self.task is None:
            self.builder.ret(ir.Constant(I32, code))
        else:
            self.task.fail(self, code)
        self.builder.position_at_end(cont)

    def check_nonzero_divisor(self, is_zero, divisor):
        if isinstance(divisor, ir.Constant):
            return
        self.fail_unless(self.builder.not_(is_zero), "division_by_zero", self.tensor)

    # -- expressions -----------------------------------------------------------------
    def value_dtype(self, e):
        """The dtype of ``e``'s value (numpy's, as in the evaluator).

        Computed children first on an explicit stack; within a statement (whose variables
        keep their values) each node's dtype is remembered in the innermost memo frame.
        """
        def remembered(node):
            hit = self.memo.get(("dtype", id(node)))
            return hit if hit is not None and hit[0] is node else None

        def known(node):
            return type(node) not in _DTYPE_OPERANDS or remembered(node) is not None

        def combine(node, kids):
            hit = remembered(node)
            if hit is not None:
                return hit[1]
            out = _DTYPE_RULES[type(node)](self, node, kids) \
                if type(node) in _DTYPE_RULES else node.dtype
            self.memo.put(("dtype", id(node)), (node, out))
            return out
        return bottom_up(e, lambda node: _DTYPE_OPERANDS[type(node)](node), combine,
                         whole=known)

    def _lookup(self, var):
        try:
            return self.env[var.name]
        except KeyError:
            raise _ex.TegradError(f"kernel {self.kernel.name!r}: the variable {var.name!r} "
                                  f"is not bound here") from None

    def expr(self, e, dtype=None):
        """Emit ``e``; with ``dtype``, convert the value to it."""
        return run(self.expr_step(e, dtype))

    def expr_step(self, e, dtype=None):
        """The work of :meth:`expr` for :func:`~tegrad.ir.mapper.run`: the value, when
        memoised, else a generator emitting it."""
        v = self.memo.get(e)
        if v is not None and _ex.structural_equal(v[0], e):
            return v[1] if dtype is None else convert(self, v[1], dtype)
        return self._emitted(e, dtype)

    def _emitted(self, e, dtype):
        out = EXPR_LOWERINGS[type(e)](self, e)
        if type(out) is GeneratorType:
            out = yield from out
        self.memo.put(e, (e, out))
        return out if dtype is None else convert(self, out, dtype)

    def has_effects(self, e):
        """True when evaluating ``e`` where it is not selected could fail or read out of
        bounds (a load, an integer division by a non-constant): such arms get branches."""
        hit = self.effects.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]

        def known(node):
            hit = self.effects.get(id(node))
            return (hit is not None and hit[0] is node) or type(node) is _n.Load

        def combine(node, kids):
            hit = self.effects.get(id(node))
            if hit is not None and hit[0] is node:
                return hit[1]
            out = type(node) is _n.Load or any(kids) or _ex.may_divide_by_zero(node)
            self.effects[id(node)] = (node, out)
            return out
        return bottom_up(e, children, combine, whole=known)

    def branch_value(self, cond, arms, dtype):
        """``cond ? arms[0]() : arms[1]()`` with only the chosen arm evaluated; an arm
        returns the work of its value (a generator for :func:`~tegrad.ir.mapper.run`, or
        the value), and so does this method."""
        bld = self.builder
        then_bb, else_bb, merge = (self.new_block("then"), self.new_block("else"),
                                   self.new_block("merge"))
        bld.cbranch(cond, then_bb, else_bb)
        incoming = []
        for bb, arm in zip((then_bb, else_bb), arms):
            bld.position_at_end(bb)
            self.memo.append({})
            try:
                v = yield arm()
            finally:
                self.memo.pop()
            incoming.append((v, bld.block))
            bld.branch(merge)
        bld.position_at_end(merge)
        phi = bld.phi(register_type(dtype))
        for v, bb in incoming:
            phi.add_incoming(v, bb)
        return phi

    def offset(self, buffer, indices):
        """The linear element offset of ``buffer[indices]`` (C order), bounds-checked when
        an index depends on loaded data, and every index when the kernel checks bounds."""
        total = None
        stride = 1
        inside = []  # with check_bounds: the i1 conditions the access needs
        known_inside = True  # every index a constant inside its axis
        for index, extent in reversed(list(zip(indices, buffer.shape, strict=True))):
            i = self.expr(index, "int64").ir
            if self.check_bounds and not self.has_effects(index):
                known = isinstance(i, ir.Constant) and 0 <= i.constant < extent
                known_inside = known_inside and known
                if not known:  # unsigned: a negative index is a huge one
                    inside.append(self.builder.icmp_unsigned("<", i, ir.Constant(I64, extent)))
            if self.has_effects(index):
                ok = self.builder.icmp_unsigned("<", i, ir.Constant(I64, extent))
                source = next((n.buffer.name for n in walk_expr(index) if type(n) is _n.Load),
                              None)
                if source is None:
                    self.fail_unless(ok, "index_out_of_range", buffer.name)
                else:
                    self.fail_unless(ok, "index_out_of_range", source, _n.check_message(
                        "index_out_of_range", source, buffer.name, self.tensor))
            term = i if stride == 1 else self.builder.mul(i, ir.Constant(I64, stride))
            total = term if total is None else self.builder.add(total, term)
            stride *= extent
        total = ir.Constant(I64, 0) if total is None else total
        if self.check_bounds and not known_inside:
            inside.append(self.builder.icmp_unsigned("<", total, ir.Constant(I64, buffer.size)))
            self._check_inside(buffer, inside)
        return total

    def _check_inside(self, buffer, inside):
        """Stop unless every condition of ``inside`` holds (one branch per access: the
        checks cost the optimiser little)."""
        ok = inside[0]
        for cond in inside[1:]:
            ok = self.builder.and_(ok, cond)
        self.fail_unless(ok, "index_out_of_range", buffer.name, _n.check_message(
            "index_out_of_range", buffer.name, buffer.name, self.tensor))

    def address(self, buffer, indices):
        try:
            base = self.pointers[buffer]
        except KeyError:
            raise _ex.TegradError(f"kernel {self.kernel.name!r}: buffer {buffer.name!r} is "
                                  f"used outside its allocation") from None
        return self.builder.gep(base, [self.offset(buffer, indices)], inbounds=True,
                                source_etype=memory_type(buffer.dtype))

    def load(self, buffer, address):
        v = self.builder.load(address, typ=memory_type(buffer.dtype))
        if buffer.dtype == "bool":
            v = self.builder.trunc(v, I1)
        return Value(v, buffer.dtype)

    def store(self, buffer, address, value):
        v = convert(self, value, buffer.dtype).ir
        if buffer.dtype == "bool":
            v = self.builder.zext(v, memory_type("bool"))
        self.builder.store(v, address)

    # -- statements ------------------------------------------------------------------
    def stmt(self, s):
        STMT_LOWERINGS[type(s)](self, s)

    def statement_exprs(self, fn):
        """Run ``fn`` with a fresh expression memo (values are not reused across
        statements: a store may change what a load reads)."""
        self.memo.append({})
        try:
            return fn()
        finally:
            self.memo.pop()

    def emit_serial_for(self, s, begin, end, body):
        bld = self.builder
        pre = bld.block
        head, loop, latch, done = (self.new_block("for.head"), self.new_block("for.body"),
                                   self.new_block("for.latch"), self.new_block("for.end"))
        bld.branch(head)
        bld.position_at_end(head)
        i = bld.phi(I64, name=llvm_name(s.var.name))
        i.add_incoming(begin, pre)
        bld.cbranch(bld.icmp_signed("<", i, end), loop, done)
        bld.position_at_end(loop)
        first_inner = len(self.function.blocks)
        body(Value(i, "int64"))
        if not bld.block.is_terminated:
            bld.branch(latch)
        bld.position_at_end(latch)
        i.add_incoming(bld.add(i, ir.Constant(I64, s.step)), latch)
        back = bld.branch(head)
        size = sum(len(bb.instructions) for bb in [loop] + self.function.blocks[first_inner:])
        if size > VECTORIZE_LIMIT:
            back.set_metadata("llvm.loop", loop_without_vectorisation(self.module))
        bld.position_at_end(done)

    def emit_parallel_for(self, s, begin, end, body):
        """The one place a parallel loop is emitted: as tasks of the native pool."""
        emit_parallel_loop(self, s, begin, end, body)


# ---------------------------------------------------------------------------------------
# expression lowerings


def _const(em, e):
    return Value(constant(e.value, e.dtype), e.dtype)


def _var(em, e):
    return em._lookup(e)


def _load(em, e):
    return em.load(e.buffer, em.address(e.buffer, e.indices))


def _dtype_rules():
    """How a node's value dtype follows from its operands' (``_DTYPE_OPERANDS``)."""
    def first(em, e, kids):
        return kids[0]

    def promoted(em, e, kids):
        dtype = kids[0]
        for k in kids[1:]:
            dtype = promote(dtype, k)
        return dtype

    def boolean(em, e, kids):
        return "bool"

    rules = {_ex.Var: lambda em, e, kids: em._lookup(e).dtype,
             _n.Load: lambda em, e, kids: e.buffer.dtype,
             _ex.Binary: promoted, _ex.Neg: first, _ex.Select: promoted, _ex.Call: promoted}
    rules.update(dict.fromkeys((_ex.Compare, _ex.And, _ex.Or, _ex.Not), boolean))
    return rules


_DTYPE_RULES = _dtype_rules()

#: the operands whose dtypes a node's value dtype depends on (other nodes: none)
_DTYPE_OPERANDS = {
    _ex.Binary: lambda e: (e.a, e.b), _ex.Neg: lambda e: (e.a,),
    _ex.Select: lambda e: (e.true_value, e.false_value), _ex.Call: lambda e: e.args,
}


def _ir(work):
    """The LLVM value of the work of a :class:`Value`."""
    return (yield work).ir


def _binary(em, e):
    dtype = em.value_dtype(e)
    a = yield em.expr_step(e.a, dtype)
    b = yield em.expr_step(e.b, dtype)
    return Value(BINARY_LOWERINGS[e.op](em, a.ir, b.ir, dtype), dtype)


def _neg(em, e):
    a = yield em.expr_step(e.a)
    if _dt.is_float(a.dtype):
        return Value(em.builder.fneg(a.ir), a.dtype)
    return Value(em.builder.sub(ir.Constant(a.ir.type, 0), a.ir), a.dtype)


def _compare(em, e):
    dtype = promote(em.value_dtype(e.a), em.value_dtype(e.b))
    a = yield em.expr_step(e.a, dtype)
    b = yield em.expr_step(e.b, dtype)
    return Value(COMPARE_LOWERINGS[e.op](em, a.ir, b.ir, dtype), "bool")


def _logical(op):
    def lower(em, e):
        a = (yield em.expr_step(e.a, "bool")).ir
        if not em.has_effects(e.b):
            b = (yield em.expr_step(e.b, "bool")).ir
            return Value(em.builder.and_(a, b) if op == "and" else em.builder.or_(a, b), "bool")
        # the evaluator evaluates b only where a does not decide the result
        short = ir.Constant(I1, 0 if op == "and" else 1)
        arms = (lambda: _ir(em.expr_step(e.b, "bool")), lambda: short)
        if op == "or":
            arms = arms[::-1]
        return Value((yield em.branch_value(a, arms, "bool")), "bool")
    return lower


def _not(em, e):
    return Value(em.builder.not_((yield em.expr_step(e.a, "bool")).ir), "bool")


def _select(em, e):
    dtype = em.value_dtype(e)
    cond = (yield em.expr_step(e.cond, "bool")).ir
    if em.has_effects(e.true_value) or em.has_effects(e.false_value):
        arms = (lambda: _ir(em.expr_step(e.true_value, dtype)),
                lambda: _ir(em.expr_step(e.false_value, dtype)))
        return Value((yield em.branch_value(cond, arms, dtype)), dtype)
    t = yield em.expr_step(e.true_value, dtype)
    f = yield em.expr_step(e.false_value, dtype)
    return Value(em.builder.select(cond, t.ir, f.ir), dtype)


def _cast(em, e):
    return (yield em.expr_step(e.a, e.dtype))


def _call(em, e):
    dtype = em.value_dtype(e)
    args = []
    for a in e.args:
        args.append((yield em.expr_step(a, dtype)).ir)
    return Value(INTRINSIC_LOWERINGS[e.name](em, args, dtype), dtype)


def _unlowered(em, e):
    raise _ex.TegradError(f"kernel {em.kernel.name!r}: {type(e).__name__} {e} must be "
                          f"lowered to loops before code generation")


EXPR_LOWERINGS = {
    _ex.Const: _const,
    _ex.Var: _var,
    _n.Load: _load,
    _ex.Binary: _binary,
    _ex.Neg: _neg,
    _ex.Compare: _compare,
    _ex.And: _logical("and"),
    _ex.Or: _logical("or"),
    _ex.Not: _not,
    _ex.Select: _select,
    _ex.Cast: _cast,
    _ex.Call: _call,
    _ex.Read: _unlowered,
    _ex.Reduce: _unlowered,
}


# ---------------------------------------------------------------------------------------
# statement lowerings


def _for(em, s):
    def bounds():
        return em.expr(s.begin, "int64").ir, em.expr(s.end, "int64").ir
    begin, end = em.statement_exprs(bounds)

    def body(i):
        saved = em.env.get(s.var.name)
        em.env[s.var.name] = i
        em.stmt(s.body)
        _restore(em.env, s.var.name, saved)

    if (s.kind == "unrolled" and isinstance(begin, ir.Constant) and isinstance(end, ir.Constant)
            and len(range(begin.constant, end.constant, s.step)) <= UNROLL_LIMIT):
        for k in range(begin.constant, end.constant, s.step):
            body(Value(ir.Constant(I64, k), "int64"))
    elif s.kind == "parallel":
        em.emit_parallel_for(s, begin, end, body)
    else:
        # "vectorized" loops are left to LLVM's loop vectorizer
        em.emit_serial_for(s, begin, end, body)


def _restore(env, name, saved):
    if saved is None:
        env.pop(name, None)
    else:
        env[name] = saved


def _block(em, s):
    for child in s.stmts:
        if em.builder.block.is_terminated:
            break
        em.stmt(child)


def _if(em, s):
    cond = em.statement_exprs(lambda: em.expr(s.cond, "bool").ir)
    if s.likely and s.otherwise is not None and em.defer_rare:
        # the rare branch is not compiled: the kernel stops with RARE_BRANCH instead
        em.fail_unless(cond, RARE_BRANCH, _first_target(s.otherwise) or em.tensor)
        em.stmt(s.then)
        return
    bld = em.builder
    then_bb, merge = em.new_block("if.then"), em.new_block("if.end")
    else_bb = em.new_block("if.else") if s.otherwise is not None else merge
    bld.cbranch(cond, then_bb, else_bb)
    for bb, branch in ((then_bb, s.then), (else_bb, s.otherwise)):
        if branch is None:
            continue
        bld.position_at_end(bb)
        em.stmt(branch)
        if not bld.block.is_terminated:
            bld.branch(merge)
    bld.position_at_end(merge)


def _with_tensor(em, name, fn):
    saved, em.tensor = em.tensor, name
    try:
        return em.statement_exprs(fn)
    finally:
        em.tensor = saved


def _store(em, s):
    def emit():
        value = em.expr(s.value)
        em.store(s.buffer, em.address(s.buffer, s.indices), value)
    _with_tensor(em, s.buffer.name, emit)


def _accumulate(em, s):
    def emit():
        value = em.expr(s.value, s.buffer.dtype)
        address = em.address(s.buffer, s.indices)
        old = em.load(s.buffer, address)
        x, y, combined = s.reducer.combiner(s.buffer.dtype)
        saved = em.env.get(x.name), em.env.get(y.name)
        em.env[x.name], em.env[y.name] = old, value
        em.memo.append({})
        new = em.expr(combined)
        em.memo.pop()
        _restore(em.env, x.name, saved[0])
        _restore(em.env, y.name, saved[1])
        em.store(s.buffer, address, new)
    _with_tensor(em, s.buffer.name, emit)


def _let(em, s):
    value = _with_tensor(em, _first_target(s.body) or em.tensor, lambda: em.expr(s.value))
    saved = em.env.get(s.var.name)
    em.env[s.var.name] = value
    em.stmt(s.body)
    _restore(em.env, s.var.name, saved)


def _allocate(em, s):
    b = s.buffer
    if b not in em.pointers:
        at_entry = ir.IRBuilder(em.entry)
        em.pointers[b] = at_entry.alloca(memory_type(b.dtype), size=max(b.size, 1),
                                          name=llvm_name(b.name))
    em.stmt(s.body)


def _check(em, s):
    ok = em.statement_exprs(lambda: em.expr(s.cond, "bool").ir)
    em.fail_unless(ok, s.error, s.tensor, s.message)


def _matrix_product(em, s):
    """A call of the product's kernel emitted for ``s.spec`` (once per spec per module),
    packing into the kernel's packing space (it cannot fail: it allocates nothing)."""
    fn = em.gemms.get(s.spec)
    if fn is None:
        fn = emit_product(em.module, s.spec, name=f"{em.symbol}.gemm{len(em.gemms)}",
                          shared=em.shared_gemm, target=em.target)
        em.gemms[s.spec] = fn
    bld = em.builder
    args = [bld.gep(em.pointers[buf], [ir.Constant(I64, off)], inbounds=True,
                    source_etype=memory_type(buf.dtype))
            for buf, off in ((s.a, s.a_offset), (s.b, s.b_offset), (s.c, s.c_offset))]
    if em.task is not None:  # parallel.py keeps such loops serial: the space is not per task
        raise AssertionError(f"matrix product {s.c.name!r} inside a parallel loop's task")
    space = em.pointers[em.packing] if product_space_bytes(s.spec, em.threads, em.target) \
        else ir.Constant(PTR, None)
    bld.call(fn, args + [space, ir.Constant(I32, em.threads)])


STMT_LOWERINGS = {
    _n.For: _for,
    _n.Block: _block,
    _n.If: _if,
    _n.Store: _store,
    _n.Accumulate: _accumulate,
    _n.Let: _let,
    _n.Allocate: _allocate,
    _n.Check: _check,
    _n.MatrixProduct: _matrix_product,
}

__all__ = ["KernelModule", "PACKING_SPACE", "RARE_BRANCH", "emit_kernel", "EXPR_LOWERINGS",
           "STMT_LOWERINGS", "STACK_LIMIT_BYTES", "packing_space"]
