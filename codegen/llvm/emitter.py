"""The state and services of a kernel's emission (:class:`KernelEmitter`): the LLVM
module, the buffers' pointers, the values of variables in scope, memoised values
(:class:`ValueMemo`), the error codes, and what the lowering tables call: expressions
(:meth:`KernelEmitter.expr`), element addresses with their bounds checks, loads and
stores, serial and parallel loops, failure exits. :mod:`.emit` lays out the module's
functions around it.

>>> from tegrad.codegen.loops.nodes import Block, Buffer, Kernel
>>> em = KernelEmitter(Kernel("k", (Buffer("x", (2,), "float32", "input"),), (), Block(())),
...                    None, None, 1)
>>> codes = [em.error_code("division_by_zero", t) for t in ("t", "u", "t")]
>>> em.symbol, codes
('tegrad.k', [1, 2, 1])
"""
from __future__ import annotations

from types import GeneratorType

from llvmlite import ir

from tegrad.ir import expr as _ex
from tegrad.ir.mapper import bottom_up, children, run
from tegrad.codegen.kernels.irutil import forced_vectorisation, loop_without_vectorisation
from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import walk_expr, walk_stmts
from tegrad.codegen.tuning import MIN_VECTOR_TRIP, VECTORIZE_LIMIT
from tegrad.codegen.llvm.conversions import convert
from tegrad.codegen.llvm.expressions import DTYPE_OPERANDS, DTYPE_RULES, EXPR_LOWERINGS
from tegrad.codegen.llvm.kernel_buffers import (in_place_kernel, large_locals, packing_space,
                                                plan_storage)
from tegrad.codegen.llvm.names import llvm_name
from tegrad.codegen.llvm.parallel import emit_parallel_loop
from tegrad.codegen.llvm.statements import STMT_LOWERINGS
from tegrad.codegen.llvm.types import I1, I32, I64, Value, memory_type, register_type

_TYPE_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}
_INTRINSIC_ARITY = {"llvm.copysign": 2, "llvm.pow": 2}


def vector_marked(body):
    """The loops of ``body`` marked ``vectorized``, in the order that numbers them (their
    loop ids' ``tegrad.vector.<n>``: pre-order)."""
    return [s for s in walk_stmts(body) if type(s) is _n.For and s.kind == "vectorized"]


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


class KernelEmitter:
    """Emits a kernel's statements into the function being emitted (the lowering tables
    call its services); holds the module, buffers and error codes of the whole kernel."""

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
        self.extra = tuple(large_locals(kernel.body)) + (
            (self.packing,) if self.packing is not None else ())
        self.buffers = tuple(kernel.args) + tuple(kernel.temps) + self.extra
        #: where the runtime's storage (or an export's workspace) holds the buffers after
        #: the arguments: those of disjoint lifetimes share memory
        self.storage = plan_storage(kernel.body, self.buffers[len(kernel.args):],
                                    self.packing, in_place=not check_bounds)
        # a temporary written over another in place is emitted as that one: one pointer
        # to their memory, never two that a function would declare noalias (none when
        # every index is checked: a check names the buffer it reads)
        kernel = self.kernel = in_place_kernel(kernel, self.storage)
        self.errors = []
        #: the status codes the function being emitted may return
        self.codes = set()
        self.env = {}
        self.pointers = {}
        self.memo = ValueMemo()
        self.effects = {}
        self.tensor = kernel.name
        self._blocks = 0
        #: the number of each loop marked vectorized (by identity), as its loop id names it
        self.vector_numbers = {id(s): n for n, s in enumerate(vector_marked(kernel.body))}

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
        code = self.errors.index(key) + 1
        self.codes.add(code)
        return code

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
            return type(node) not in DTYPE_OPERANDS or remembered(node) is not None

        def combine(node, kids):
            hit = remembered(node)
            if hit is not None:
                return hit[1]
            out = DTYPE_RULES[type(node)](self, node, kids) \
                if type(node) in DTYPE_RULES else node.dtype
            self.memo.put(("dtype", id(node)), (node, out))
            return out
        return bottom_up(e, lambda node: DTYPE_OPERANDS[type(node)](node), combine,
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
        """``s`` as a loop; one marked ``vectorized`` forced through LLVM's loop
        vectoriser and named so that the optimised IR says whether it was vectorised
        (:func:`~tegrad.codegen.kernels.irutil.forced_vectorisation`: the schedule marks
        no loop whose body is too large for it); any other kept from the vectoriser when
        its body has more than :data:`VECTORIZE_LIMIT` instructions."""
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
        if s.kind == "vectorized":
            # named, not forced, when every access is checked (a loop that may stop the
            # kernel is not vectorised) or when it has fewer than MIN_VECTOR_TRIP
            # iterations (the vector accumulators' last halving step: LLVM declines it
            # forced, then flattens it into straight-line code): forcing would only make
            # LLVM print a remark
            short = isinstance(begin, ir.Constant) and isinstance(end, ir.Constant) and \
                len(range(begin.constant, end.constant, s.step)) < MIN_VECTOR_TRIP
            back.set_metadata("llvm.loop", forced_vectorisation(
                self.module, self.vector_numbers[id(s)],
                force=not (self.check_bounds or short)))
        elif sum(len(bb.instructions)
                 for bb in [loop] + self.function.blocks[first_inner:]) > VECTORIZE_LIMIT:
            back.set_metadata("llvm.loop", loop_without_vectorisation(self.module))
        bld.position_at_end(done)

    def emit_parallel_for(self, s, begin, end, body):
        """The one place a parallel loop is emitted: as tasks of the native pool."""
        emit_parallel_loop(self, s, begin, end, body)
