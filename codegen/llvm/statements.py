"""The lowering of each loop-IR statement kind to LLVM IR (:data:`STMT_LOWERINGS`).

A lowering ``f(em, s)`` gets the kernel's emitter (:class:`.emitter.KernelEmitter`) and
emits ``s`` at its builder's position: loops (unrolled, serial, or as tasks of the thread
pool), branches, stores and accumulations, local buffers, checks, and the calls of the
matrix products' kernels.

>>> from tegrad.codegen.loops import nodes as n
>>> set(STMT_LOWERINGS) == set(n.Stmt.__subclasses__())
True
"""
from __future__ import annotations

from llvmlite import ir

from tegrad.codegen.kernels.product import emit_product, product_space_bytes
from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import walk_expr, walk_stmts
from tegrad.codegen.tuning import UNROLL_LIMIT
from tegrad.codegen.llvm.names import llvm_name
from tegrad.codegen.llvm.types import I32, I64, PTR, Value, memory_type

#: the status kind of a kernel stopped where a deferred rare branch would run
RARE_BRANCH = "rare_branch"


def first_target(stmt):
    """The name of the first buffer ``stmt`` writes (names errors raised inside it)."""
    for s in walk_stmts(stmt):
        if isinstance(s, (_n.Store, _n.Accumulate)):
            return s.buffer.name
    return None


def _effect_free(stmt):
    """Whether ``stmt`` is loops and blocks with nothing inside (a copy dropped by the
    storage plan, :mod:`tegrad.codegen.lower.copy_views`) and bounds read from no
    buffer (a loaded bound would be checked)."""
    for node in walk_stmts(stmt):
        if type(node) is _n.For:
            if any(type(x) is _n.Load for e in (node.begin, node.end) for x in walk_expr(e)):
                return False
        elif type(node) is not _n.Block:
            return False
    return True


def _for(em, s):
    if _effect_free(s):
        return  # (its loop id is simply absent: an unvectorised loop is not reported)

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
        # a "vectorized" loop is forced through LLVM's loop vectoriser (emit_serial_for)
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
        em.fail_unless(cond, RARE_BRANCH, first_target(s.otherwise) or em.tensor)
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
    value = _with_tensor(em, first_target(s.body) or em.tensor, lambda: em.expr(s.value))
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
