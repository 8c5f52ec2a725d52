"""Each schedule transformation on its own: the transformed kernel, run by the loop-IR
interpreter, equals ``tg.evaluate`` (sizes that do not divide the factors included), and
transformations that would change the result are refused."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import UNROLL_LIMIT, For
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule import (compute_at, fuse, inline_stage, parallelize, reorder, split,
                                     unroll, vectorize)
from tegrad.codegen.schedule.common import ScheduleError

F64 = "float64"


def feed_of(inputs, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for t in inputs:
        if t.dtype == "int32":
            out[t] = rng.integers(0, t.shape[0] if False else 3, t.shape).astype("int32")
        else:
            out[t] = rng.standard_normal(t.shape)
    return out


def assert_matches(kernel, inputs, outputs, feed=None):
    feed = feed or feed_of(inputs)
    got, _ = run(kernel, [feed[t] for t in inputs])
    for g, w in zip(got, tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def loop_names(kernel):
    return [s.var.name for s in walk_stmts(kernel.body) if type(s) is For]


def elementwise(n, m):
    A = tg.placeholder((n, m), dtype=F64, name="A")
    B = tg.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return [A], [B]


def matmul(n, m, p):
    A = tg.placeholder((n, p), dtype=F64, name="A")
    W = tg.placeholder((p, m), dtype=F64, name="W")
    k = tg.reduce_axis((0, p), name="k")
    C = tg.compute((n, m), lambda i, j: tg.sum(A[i, k] * W[k, j], axis=k), name="C")
    return [A, W], [C]


def triangular(n):
    A = tg.placeholder((n, n), dtype=F64, name="A")
    k = tg.reduce_axis((0, n), name="k")
    T = tg.compute((n,), lambda i: tg.sum(A[i, k], axis=k, where=k <= i), name="T")
    return [A], [T]


def strided(n):
    A = tg.placeholder((n,), dtype=F64, name="A")
    k = tg.reduce_axis((0, n), name="k")
    S = tg.compute((3,), lambda i: tg.sum(A[k], axis=k, where=k % 3 == i), name="S")
    return [A], [S]


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 9), st.integers(2, 6), st.integers(1, 5),
       st.sampled_from(["guard", "loop"]), st.sampled_from(["i", "j", "k"]))
def test_split_preserves_every_iteration(n, m, factor, tail, loop):
    inputs, outputs = matmul(n, m, 5)
    kernel = split(lower_program(inputs, outputs), loop=loop, factor=factor, tail=tail)
    assert f"{loop}_i" in loop_names(kernel)
    assert_matches(kernel, inputs, outputs)


@pytest.mark.parametrize("program, loop", [(triangular(7), "k"), (strided(11), "k")])
@pytest.mark.parametrize("tail", ["guard", "loop"])
def test_split_of_loops_with_variable_bounds_and_strides(program, loop, tail):
    inputs, outputs = program
    kernel = lower_program(inputs, outputs)
    for factor in (2, 3, 4):
        assert_matches(split(kernel, loop=loop, factor=factor, tail=tail), inputs, outputs)


def test_split_twice_and_bad_factor():
    inputs, outputs = elementwise(10, 3)
    kernel = split(split(lower_program(inputs, outputs), loop="i", factor=4), loop="i_i",
                   factor=3, tail="loop")
    assert_matches(kernel, inputs, outputs)
    with pytest.raises(ScheduleError, match="factor"):
        split(kernel, loop="j", factor=0)
    with pytest.raises(ScheduleError, match="no loop"):
        split(kernel, loop="nope", factor=2)


@pytest.mark.parametrize("n, m", [(3, 4), (5, 1), (2, 6)])
def test_reorder_and_fuse(n, m):
    inputs, outputs = matmul(n, m + 1, 3)
    kernel = lower_program(inputs, outputs)
    swapped = reorder(kernel, loops=("j", "i"))
    assert loop_names(swapped)[:2] == ["j", "i"]
    assert_matches(swapped, inputs, outputs)
    fused = fuse(kernel, outer="i", inner="j")
    assert "i_j" in loop_names(fused) and "i" not in loop_names(fused)
    assert_matches(fused, inputs, outputs)
    assert_matches(fuse(swapped, outer="j", inner="i"), inputs, outputs)


def test_reorder_refuses_a_nest_that_is_not_perfect_or_dependent():
    inputs, outputs = matmul(3, 4, 5)
    kernel = lower_program(inputs, outputs)
    with pytest.raises(ScheduleError, match="perfectly nested"):
        reorder(kernel, loops=("j", "k"))
    # a running prefix: iteration i reads what iteration i - 1 wrote
    A = tg.placeholder((4, 3), dtype=F64, name="A")
    B = tg.compute((4, 3), lambda i, j: A[i, j] * 2.0, name="B")
    kernel = lower_program([A], [B])
    from tegrad.codegen.loops.nodes import Block, Kernel, Load, Store
    loop = kernel.body
    body = loop.body.body
    prefix = Store(body.buffer, (loop.var, loop.body.var),
                   Load(body.buffer, (loop.body.var, loop.var)) + 1.0)
    bad = Kernel(kernel.name, kernel.args, kernel.temps,
                 type(loop)(loop.var, loop.begin, loop.end,
                            type(loop.body)(loop.body.var, loop.body.begin, loop.body.end,
                                            Block((body, prefix)))))
    with pytest.raises(ScheduleError, match="read"):
        reorder(bad, loops=("j", "i"))


def test_unroll_and_vectorize_mark_constant_loops_only():
    inputs, outputs = matmul(3, 8, 4)
    kernel = vectorize(unroll(lower_program(inputs, outputs), loop="k"), loop="j")
    kinds = {s.var.name: s.kind for s in walk_stmts(kernel.body) if type(s) is For}
    assert kinds == {"i": "serial", "j": "vectorized", "k": "unrolled"}
    assert_matches(kernel, inputs, outputs)
    inputs, outputs = triangular(5)
    with pytest.raises(ScheduleError, match="trip count"):
        vectorize(lower_program(inputs, outputs), loop="k")
    # after a split with a tail loop, the inner loop has a constant trip count
    kernel = vectorize(split(lower_program(inputs, outputs), loop="k", factor=2, tail="loop"),
                       loop="k_i")
    assert_matches(kernel, inputs, outputs)


def test_parallelize_independent_loops_and_refuse_races():
    inputs, outputs = matmul(4, 3, 5)
    kernel = lower_program(inputs, outputs)
    par = parallelize(kernel, loop="i")
    assert [s.kind for s in walk_stmts(par.body) if type(s) is For][0] == "parallel"
    assert_matches(par, inputs, outputs)
    assert_matches(parallelize(kernel, loop="j"), inputs, outputs)
    with pytest.raises(ScheduleError, match="same element"):
        parallelize(kernel, loop="k")
    I = tg.placeholder((6,), dtype="int32", name="I")
    g = tg.placeholder((6,), dtype=F64, name="g")
    H = tg.scatter_add((3,), (6,), lambda p: (I[p],), lambda p: g[p], name="H")
    with pytest.raises(ScheduleError, match="same element"):
        parallelize(lower_program([I, g], [H]), loop="p")


def two_stages(n):
    A = tg.placeholder((n, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 4), name="k")
    E = tg.compute((n, 4), lambda i, j: tg.exp(A[i, j]), name="E")
    S = tg.compute((n,), lambda i: tg.sum(E[i, k] * E[i, 3 - k], axis=k), name="S")
    return [A], [S]


@pytest.mark.parametrize("n", [1, 3])
def test_inline_stage(n):
    inputs, outputs = two_stages(n)
    kernel = lower_program(inputs, outputs)
    assert [b.name for b in kernel.temps] == ["E"]
    inlined = inline_stage(kernel, stage="E")
    assert inlined.temps == () and len(loop_names(inlined)) == (2 if n > 1 else 1)
    assert_matches(inlined, inputs, outputs)
    with pytest.raises(ScheduleError, match="no temporary"):
        inline_stage(kernel, stage="S")


def test_inline_stage_refuses_a_reduction():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 4), name="k")
    R = tg.compute((3,), lambda i: tg.sum(A[i, k], axis=k), name="R")
    out = tg.compute((3, 3), lambda i, j: R[i] * R[j], name="out")
    with pytest.raises(ScheduleError, match="one store"):
        inline_stage(lower_program([A], [out]), stage="R")


@pytest.mark.parametrize("n", [1, 4])
def test_compute_at(n):
    inputs, outputs = two_stages(n)
    kernel = lower_program(inputs, outputs)
    consumer = [s.var.name for s in walk_stmts(kernel.body) if type(s) is For][-2] \
        if n > 1 else None
    if consumer is None:
        with pytest.raises(ScheduleError):
            compute_at(kernel, stage="E", loop="k")
        return
    moved = compute_at(kernel, stage="E", loop=consumer)
    assert len(moved.body.stmts if hasattr(moved.body, "stmts") else [moved.body]) == 1
    assert_matches(moved, inputs, outputs)
    with pytest.raises(ScheduleError, match="read"):
        compute_at(kernel, stage="E", loop="k")


@pytest.mark.parametrize("extent", [UNROLL_LIMIT - 1, UNROLL_LIMIT, UNROLL_LIMIT + 1, 200])
def test_unroll_refuses_a_loop_longer_than_the_backend_unrolls(extent):
    """A loop of more than UNROLL_LIMIT iterations was marked "unrolled", printed so, and
    emitted as a plain loop; it is refused when scheduled, and a split makes it fit."""
    inputs, outputs = matmul(2, 3, extent)  # k runs over the extent
    kernel = lower_program(inputs, outputs)
    if extent <= UNROLL_LIMIT:
        kernel = unroll(kernel, loop="k")
        assert {s.var.name: s.kind for s in walk_stmts(kernel.body)
                if type(s) is For}["k"] == "unrolled"
    else:
        with pytest.raises(ScheduleError, match=f"{extent} iterations"):
            unroll(kernel, loop="k")
        kernel = unroll(split(kernel, loop="k", factor=8, tail="loop"), loop="k_i")
    assert_matches(kernel, inputs, outputs)
    if extent > UNROLL_LIMIT:  # through tg.build's schedule= too
        with pytest.raises(tg.TegradError, match="split it first"):
            tg.build(inputs, outputs, schedule={outputs[0].name: {"unroll": "k"}})
