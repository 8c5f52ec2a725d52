"""The statement order that keeps fewer temporaries alive (codegen/lower/memory_order.py).

On random kernel bodies: the reordered kernel computes the same outputs as the original
(the loop-IR interpreter, bit for bit), its peak of live temporaries is never higher, and
the storage plan of the reordered body never overlaps two buffers alive at one
statement. On compiled programs (a chain of products differentiated with respect to
every weight, whose activation gradients the reordering frees early): values equal to
``tg.evaluate`` on 1 and 2 threads, and a smaller workspace than in the original order.
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.expr import Const, Var
from tegrad.codegen.loops.mapper import buffers_of
from tegrad.codegen.loops.nodes import Block, Buffer, For, Kernel, Load, Store
from tegrad.codegen.llvm.kernel_buffers import buffer_bytes, live_ranges, plan_storage
from tegrad.codegen.lower.memory_order import memory_order, peak_bytes
from tegrad.codegen.lower.program import lower_program

from support.compare import built_twice_equals_evaluator, same_in_interpreter

I = Var("i", "int64")


@st.composite
def kernels(draw):
    """A kernel of 3-14 statements over 2 inputs, 1-3 outputs and 1-8 temporaries of
    4-64 elements; each statement a loop writing one non-input buffer from up to three
    others (read at the loop's index, or reversed, so order matters)."""
    n = 4
    inputs = [Buffer(f"x{k}", (n,), "float64", "input") for k in range(2)]
    outputs = [Buffer(f"y{k}", (n,), "float64", "output")
               for k in range(draw(st.integers(1, 3)))]
    temps = [Buffer(f"t{k}", (n,), "float64")
             for k in range(draw(st.integers(1, 8)))]
    written = list(inputs)
    stmts = []
    for _ in range(draw(st.integers(3, 14))):
        target = draw(st.sampled_from(outputs + temps))
        value = Const(float(draw(st.integers(1, 3))), "float64")
        for b in draw(st.lists(st.sampled_from(written), max_size=3)):
            index = I if draw(st.booleans()) else Const(n - 1, "int64") - I
            value = value * 0.5 + Load(b, (index,))
        stmts.append(For(I, Const(0, "int64"), Const(n, "int64"), Store(target, (I,), value)))
        written.append(target)
    for y in outputs:  # every output written, last
        stmts.append(For(I, Const(0, "int64"), Const(n, "int64"),
                         Store(y, (I,), Load(y, (I,)) + Load(temps[0], (I,)))))
    return Kernel("k", tuple(inputs + outputs), tuple(temps), Block(tuple(stmts)))


@settings(max_examples=80, deadline=None)
@given(kernels(), st.integers(0, 2 ** 31))
def test_reordered_kernel_computes_the_same_and_peaks_no_higher(kernel, seed):
    reordered = same_in_interpreter(kernel, memory_order, seed)
    stmts = kernel.body.stmts
    assert sorted(map(id, reordered.body.stmts)) == sorted(map(id, stmts))
    nbytes = {b.name: buffer_bytes(b) for b in kernel.temps}

    def used(body):
        return [_names(s) & nbytes.keys() for s in body.stmts]

    before = peak_bytes(range(len(stmts)), used(kernel.body), nbytes)
    after = peak_bytes(range(len(stmts)), used(reordered.body), nbytes)
    assert after <= before
    if reordered is not kernel:
        assert after < before
    # the plan of the reordered body shares memory only between disjoint lifetimes
    plan = plan_storage(reordered.body, list(kernel.temps))
    ranges = live_ranges(reordered.body, list(kernel.temps))
    for a in kernel.temps:
        for b in kernel.temps:
            if a is not b and plan.sharing(a, b) and not plan.one_chain(a, b):
                assert ranges[a][1] < ranges[b][0] or ranges[b][1] < ranges[a][0]


def _names(stmt):
    used, _ = buffers_of(stmt)
    return {b.name for b in used}


def _weights_chain(depth, size, dtype):
    """``x @ w0 @ ... @ w{depth-1}`` weighted by ``g`` and summed, differentiated with
    respect to every weight: lowering computes each weight's gradient after the whole
    backward pass, so every activation gradient stays alive to the end unless reordered."""
    x = tg.placeholder((size, size), dtype=dtype, name="x")
    ws = [tg.placeholder((size, size), dtype=dtype, name=f"w{k}") for k in range(depth)]
    g = tg.placeholder((size, size), dtype=dtype, name="g")
    h = x
    for k, w in enumerate(ws):
        r = tg.reduce_axis((0, size), name=f"r{k}")
        h = tg.compute((size, size), lambda i, j, h=h, w=w, r=r:
                       tg.tanh(tg.sum(h[i, r] * w[r, j], axis=r)), name=f"h{k}")
    r, c = tg.reduce_axis((0, size), name="ri"), tg.reduce_axis((0, size), name="rj")
    loss = tg.compute((), lambda: tg.sum(h[r, c] * g[r, c], axis=[r, c]), name="loss")
    return [x, *ws, g], [loss, *tg.differentiate(loss, ws)]


@pytest.mark.parametrize("threads", [1, 2])
@given(depth=st.integers(3, 5), size=st.integers(9, 40),
       dtype=st.sampled_from(["float32", "float64"]))
@settings(max_examples=4, deadline=None)
def test_compiled_reordered_step_equals_the_evaluator_in_less_workspace(
        threads, depth, size, dtype):
    inputs, outputs = _weights_chain(depth, size, dtype)
    kernel = lower_program(inputs, outputs, name="chain", contractions=True)
    reordered = memory_order(kernel)
    temps = list(kernel.temps)
    assert plan_storage(reordered.body, temps).nbytes <= plan_storage(kernel.body, temps).nbytes
    built_twice_equals_evaluator(inputs, outputs, depth * 1000 + size, dtype, threads)


def test_weight_gradients_move_next_to_their_activation_gradients():
    """A chain of 5 products: a weight's gradient runs once its activation gradient
    exists, so that gradient dies before the next is made: the workspace (11 temporaries
    of 32 KB in the original order) holds at least one temporary less."""
    inputs, outputs = _weights_chain(5, 64, "float64")
    kernel = lower_program(inputs, outputs, name="chain", contractions=True)
    temps = list(kernel.temps)
    reordered = memory_order(kernel)
    assert reordered is not kernel
    before = plan_storage(kernel.body, temps).nbytes
    after = plan_storage(reordered.body, temps).nbytes
    assert after <= before - 64 * 64 * 8, (before, after)
