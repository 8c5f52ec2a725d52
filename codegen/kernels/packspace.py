"""Packing space: the scratch memory of a product's tasks, in a buffer its caller owns.

A gemm's task packs panels of ``B`` into memory of its own. Nothing is allocated inside
the kernel: the caller passes one buffer (a kernel's large local buffer, so the JIT's
storage or an exported library's workspace) of :func:`space_bytes` bytes, laid out as

    [up to 63 bytes of slack][claim word, its own 64-byte line][slot 0][slot 1]...

``slots`` slots of ``slot_bytes`` each (a multiple of 64, so every slot starts on a
cache line). The claim word has bit ``s`` set while a task uses slot ``s``: a task
claims the lowest free bit with a compare-and-swap (:func:`emit_claim`) and clears it
when done (:func:`emit_release`).

The invariant that makes this race-free and wait-free: no more tasks of one call run at
once than there are slots. The product's entry zeroes the claim word
(:func:`emit_init`) and asks the pool for at most ``slots`` threads; the pool runs at
most that many ``fn(ctx, begin, end)`` calls at a time, and a product never runs inside
another fork-join's task (the emitter keeps such loops serial), so a task that reads the
claim word sees a free bit among the first ``slots`` (the others hold at most ``slots -
1``). No free bit would mean that invariant broke: the task traps rather than share a slot.

>>> space_bytes(slot_bytes=1024, threads=2)
2176
>>> space_bytes(slot_bytes=1024, threads=1000) == 128 + 64 * 1024  # the pool's most
True
"""
from __future__ import annotations

import llvmlite.ir as ir

from tegrad.codegen.kernels import fork_join
from tegrad.codegen.kernels.irutil import I1, I64, declare, i64

#: the alignment of the claim word and of every slot (a cache line)
LINE = 64
#: the claim word is one i64: a bit per thread the pool can run
assert fork_join.MAX_THREADS <= 64


def slots(threads):
    """Slots for a call on ``threads`` threads: the pool never runs more than
    :data:`~.fork_join.MAX_THREADS` at once.

    >>> slots(1), slots(3), slots(500)
    (1, 3, 64)
    """
    return max(1, min(int(threads), fork_join.MAX_THREADS))


def round_to_line(nbytes):
    """``nbytes`` rounded up to a whole number of cache lines.

    >>> round_to_line(1), round_to_line(128)
    (64, 128)
    """
    return -(-int(nbytes) // LINE) * LINE


def space_bytes(*, slot_bytes, threads):
    """The bytes of a packing space of :func:`slots` ``(threads)`` slots of
    ``slot_bytes`` (a multiple of :data:`LINE`; 0: the product packs nothing, 0 bytes)."""
    if not slot_bytes:
        return 0
    return LINE + LINE + slots(threads) * slot_bytes  # slack to align, the claim word


def emit_init(b, space):
    """In a product's entry: the claim word of ``space`` (an ``i8*``), set to 0 (no slot
    in use) before the call's tasks start (the pool's fork-join publishes the store)."""
    aligned = b.and_(b.add(b.ptrtoint(space, I64), i64(LINE - 1)), i64(-LINE))
    claims = b.inttoptr(aligned, I64.as_pointer())
    b.store(i64(0), claims)
    return claims


def emit_claim(b, fn, claims, n_slots, slot_bytes, elt_ptr):
    """In a task, before it packs: claim a free slot of ``claims`` among the first
    ``n_slots`` (an i64 in ``[1, 64]``). Returns ``(bit, slot)``: the claimed bit (for
    :func:`emit_release`) and the slot's start as an ``elt_ptr``."""
    module = fn.module
    trap = declare(module, "llvm.trap", ir.FunctionType(ir.VoidType(), []))
    cttz = declare(module, "llvm.cttz.i64", ir.FunctionType(I64, [I64, I1]))
    ours = b.lshr(i64(-1), b.sub(i64(64), n_slots))  # the low n_slots bits
    retry, attempt = fn.append_basic_block("claim"), fn.append_basic_block("claim.try")
    broken, claimed = fn.append_basic_block("claim.none"), fn.append_basic_block("claimed")
    b.branch(retry)
    b.position_at_end(retry)
    held = b.load_atomic(claims, "monotonic", 8)
    free = b.and_(b.xor(held, i64(-1)), ours)
    b.cbranch(b.icmp_unsigned("==", free, i64(0)), broken, attempt)
    b.position_at_end(broken)  # more concurrent tasks than slots: see the module docstring
    b.call(trap, [])
    b.unreachable()
    b.position_at_end(attempt)
    bit = b.and_(free, b.neg(free))
    # acquire: the slot's last user released it after its last access (emit_release)
    swapped = b.cmpxchg(claims, held, b.or_(held, bit), "acquire", "monotonic")
    b.cbranch(b.extract_value(swapped, 1), claimed, retry)  # another task won: look again
    b.position_at_end(claimed)
    index = b.call(cttz, [bit, ir.Constant(I1, 1)])
    start = b.add(b.ptrtoint(claims, I64), b.add(i64(LINE), b.mul(index, slot_bytes)))
    return bit, b.inttoptr(start, elt_ptr)


def emit_release(b, claims, bit):
    """At the end of the task: free the slot ``bit`` (release: its packing is done)."""
    b.atomic_rmw("and", claims, b.xor(bit, i64(-1)), "release")


__all__ = ["LINE", "emit_claim", "emit_init", "emit_release", "round_to_line",
           "slots", "space_bytes"]
