"""The automatic schedule keeps every result equal to ``tg.evaluate``: random programs and
the operator library (forward and gradient), run by the loop-IR interpreter after
:func:`auto_schedule` (with 2 vector lanes, so that tiny shapes get vector accumulators
too) and compiled; and each choice it makes shows where it should."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn, ops
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import loads as loads_in, walk_stmts
from tegrad.codegen.loops.nodes import Accumulate, Allocate, Block, For, Load, Store
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule.auto import auto_schedule
from tegrad.codegen.schedule.fusion import statements
from tegrad.ir.errors import DifferentiationError

from support.compiled_programs import programs, with_gradient

F64 = "float64"


def two_lanes(dtype):
    return 2


def check_scheduled(inputs, outputs, feed, rtol=1e-9):
    kernel, record = auto_schedule(lower_program(inputs, outputs), lanes_of=two_lanes)
    got, _ = run(kernel, [feed[t] for t in inputs])
    for t, g, w in zip(outputs, got, tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=t.name)
    return kernel, record


@settings(max_examples=40, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(large=False), st.integers(0, 2**31 - 1))
def test_random_program_and_gradient_scheduled_equal_evaluator(program, seed):
    # small programs only: the loop-IR interpreter runs them in Python, where a large one
    # takes minutes; the large ones go through the same schedule compiled, in
    # test_random_programs_compiled.py
    check_scheduled(*with_gradient(program, seed))


def test_operator_and_gradient_scheduled_equal_evaluator(operator_name, operator_case):
    case, out = operator_case
    outputs = [out]
    if case.inputs:
        try:
            outputs += list(tg.differentiate(out, case.inputs))
        except DifferentiationError:
            pass
    inputs = list(case.feed)
    check_scheduled(inputs, outputs, case.feed)


def loops_of(kernel):
    return {s.var.name: s for s in walk_stmts(kernel.body) if type(s) is For}


def softmax_ce(n, k, dtype=F64):
    logits = tg.placeholder((n, k), dtype=dtype, name="logits")
    labels = tg.placeholder((n,), dtype="int32", name="labels")
    loss = nn.softmax_cross_entropy(logits, labels)
    return [logits, labels], [loss] + list(tg.differentiate(loss, [logits]))


def test_softmax_cross_entropy_runs_in_one_loop_over_rows():
    inputs, outputs = softmax_ce(5, 12)
    rng = np.random.default_rng(0)
    feed = {inputs[0]: rng.standard_normal((5, 12)),
            inputs[1]: rng.integers(0, 12, 5).astype("int32")}
    kernel, record = check_scheduled(inputs, outputs, feed)
    plain = lower_program(inputs, outputs)
    row_loops = [s for s in statements(kernel.body) if type(s) is For]
    assert len(statements(kernel.body)) < len(statements(plain.body))
    # the row max, the row sum and the gradient share one loop over rows
    biggest = max(record.fused, key=len)
    assert "dlogits" in biggest and any("max" in n for n in biggest)
    assert row_loops


def test_tiny_taps_are_unrolled_inside_the_vectorized_stride_one_axis():
    """A window of a few taps stays inside the loop over the output's stride-1 axis,
    unrolled: each output element is written once, its taps summed in registers (with
    the window outside, every tap reads and writes the whole row again)."""
    A = tg.placeholder((3, 20), dtype=F64, name="A")
    r = tg.reduce_axis((0, 3), name="r")
    B = tg.compute((3, 18), lambda i, j: tg.sum(A[i, j + r] * A[i, r], axis=r), name="B")
    feed = {A: np.random.default_rng(1).standard_normal((3, 20))}
    kernel, record = check_scheduled([A], [B], feed)
    loops = loops_of(kernel)
    assert loops["r"].kind == "unrolled"
    assert loops["j"].kind == "vectorized"
    assert any(m is loops["r"] for m in walk_stmts(loops["j"].body))
    assert not any("moved innermost" in n for n in record.notes[0])


def test_moving_tiny_bounds_become_constant_and_guarded():
    x = tg.placeholder((1, 2, 6, 7), dtype=F64, name="x")
    y = nn.avg_pool2d(x, 3, stride=1, padding=1)
    feed = {x: np.random.default_rng(2).standard_normal(x.shape)}
    kernel, record = check_scheduled([x], [y, *tg.differentiate(y, [x])], feed)
    assert any("tiny bounds made constant" in n for ns in record.notes.values() for n in ns)


def test_matmul_runs_k_outside_j():
    A = tg.placeholder((5, 7), dtype=F64, name="A")
    W = tg.placeholder((7, 9), dtype=F64, name="W")
    k = tg.reduce_axis((0, 7), name="k")
    C = tg.compute((5, 9), lambda i, j: tg.sum(A[i, k] * W[k, j], axis=k), name="C")
    rng = np.random.default_rng(3)
    kernel, _ = check_scheduled([A, W], [C], {A: rng.standard_normal((5, 7)),
                                               W: rng.standard_normal((7, 9))})
    loops = loops_of(kernel)
    assert loops["k"].body.var.name == "j" and loops["k"].body.kind == "vectorized"


@pytest.mark.parametrize("reducer", [tg.sum, tg.max, tg.min])
@pytest.mark.parametrize("special", [None, np.nan, np.inf, -np.inf])
def test_vector_accumulators_keep_nan_inf_and_extrema_exact(reducer, special):
    A = tg.placeholder((3, 37), dtype="float32", name="A")
    k = tg.reduce_axis((0, 37), name="k")
    S = tg.compute((3,), lambda i: reducer(A[i, k], axis=k), name="S")
    a = np.random.default_rng(4).standard_normal((3, 37)).astype("float32")
    if special is not None:
        a[1, 20] = special
    kernel, record = auto_schedule(lower_program([A], [S]), lanes_of=lambda d: 8)
    # 37 elements: two vectors of 8 lanes, then a tail of 5
    assert record.notes[0] == ("k: vector accumulators (16 lanes)",)
    assert any(type(s) is Allocate and s.buffer.shape == (16,) for s in walk_stmts(kernel.body))
    want = tg.evaluate([S], {A: a})[0]
    for got in (run(kernel, [a])[0][0], tg.build([A], [S])(a)[0]):
        if reducer is tg.sum:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(got, want)


def test_row_sum_keeps_vector_accumulators_beside_a_fused_elementwise_store():
    # a row sum and an elementwise stage over the same rows share their loops (as the
    # softmax gradient's row sum and its scaled head did)
    A = tg.placeholder((5, 70), dtype="float32", name="A")
    k = tg.reduce_axis((0, 70), name="k")
    S = tg.compute((5,), lambda i: tg.sum(tg.exp(A[i, k]), axis=k), name="S")
    B = tg.compute((5, 70), lambda i, j: A[i, j] * 3.0, name="B")
    C = tg.compute((5, 70), lambda i, j: B[i, j] / S[i] + B[i, 69 - j], name="C")
    kernel, record = auto_schedule(lower_program([A], [S, C]), lanes_of=lambda d: 8)
    fused = [m for m in walk_stmts(kernel.body) if type(m) is For and m.kind == "vectorized"
             and any(type(n) is Store for n in walk_stmts(m.body))
             and any(type(n) is Accumulate for n in walk_stmts(m.body))]
    assert fused, "no vectorised loop both accumulates in lanes and stores"
    a = np.random.default_rng(10).standard_normal((5, 70)).astype("float32")
    want = tg.evaluate([S, C], {A: a})
    for got in (run(kernel, [a])[0], tg.build([A], [S, C])(a)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reducer", [tg.sum, tg.max])
def test_whole_vectors_after_the_interleaved_lanes_run_in_the_first_lanes(reducer):
    # 100 elements with 4 x 8 interleaved lanes: 3 x 32, then 0 leftover vectors of 8
    # and a tail of 4; 120: 3 x 32, then 3 vectors of 8 into the first lanes, no tail
    for n, extra, tail in ((100, 0, 4), (120, 24, 0), (125, 24, 5)):
        A = tg.placeholder((3, n), dtype=F64, name="A")
        k = tg.reduce_axis((0, n), name="k")
        S = tg.compute((3,), lambda i: reducer(A[i, k], axis=k), name="S")
        a = np.random.default_rng(n).standard_normal((3, n))
        a[1, n - 1] = np.nan if reducer is tg.max else a[1, n - 1]
        kernel, _ = check_scheduled([A], [S], {A: a})
        kernel, _ = auto_schedule(lower_program([A], [S]), lanes_of=lambda d: 8)
        loops = [m for m in walk_stmts(kernel.body) if type(m) is For]
        halving = [m.end.value for m in loops if m.kind == "vectorized"
                   and type(m.body) is Accumulate and type(m.body.value) is Load
                   and m.body.value.buffer is m.body.buffer]
        vector = [m.end.value for m in loops if m.kind == "vectorized"]
        # the 32 lanes are combined as a tree: halves into halves down to two lanes
        assert vector == [32] + ([extra] if extra else []) + [16, 8, 4, 2]
        assert halving == [16, 8, 4, 2]
        assert any(m.var.name == "k" for m in loops) == bool(tail)
        (got,), _ = run(kernel, [a])
        np.testing.assert_allclose(got, tg.evaluate([S], {A: a})[0], rtol=1e-12)


@pytest.mark.parametrize("reducer", [tg.sum, tg.max])
def test_lanes_live_across_the_outer_reductions_of_the_same_output(reducer):
    # a weight gradient's sum over images and rows, then along a row: the lanes are set
    # and combined once per output, around the image and row loops (with a tail of 3)
    A = tg.placeholder((5, 6, 4, 35), dtype=F64, name="A")
    n, r, k = (tg.reduce_axis((0, e), name=v) for e, v in ((5, "n"), (4, "r"), (35, "k")))
    S = tg.compute((6,), lambda i: reducer(A[n, i, r, k], axis=[n, r, k]), name="S")
    feed = {A: np.random.default_rng(7).standard_normal((5, 6, 4, 35))}
    kernel, record = check_scheduled([A], [S], feed, rtol=1e-12)
    (lanes,) = [m for m in walk_stmts(kernel.body) if type(m) is Allocate]
    inside = {m.var.name for m in walk_stmts(lanes.body) if type(m) is For}
    assert {"n", "r"} <= inside  # the reductions over n and r run inside the lanes' life
    f = tg.build([A], [S])
    np.testing.assert_allclose(f(feed[A])[0], tg.evaluate([S], feed)[0], rtol=1e-12)


def test_reduction_across_rows_gets_no_vector_accumulators():
    A = tg.placeholder((40, 3), dtype=F64, name="A")
    k = tg.reduce_axis((0, 40), name="k")
    S = tg.compute((3,), lambda j: tg.sum(A[k, j], axis=k), name="S")
    _, record = auto_schedule(lower_program([A], [S]), lanes_of=lambda d: 4)
    assert not any("vector accumulators" in n for n in record.notes.get(0, ()))


def test_duplicate_row_max_and_sum_of_softmax_gradient_are_computed_once():
    inputs, outputs = softmax_ce(4, 32, "float32")  # rows of whole vectors: no tail loops
    f = tg.build(inputs, outputs)
    plain = tg.build(inputs, outputs, schedule="none")
    assert f.loops.count("exp(") == 2 <= plain.loops.count("exp(")
    # the row max and the row sum, once each
    assert len(f.kernel.temps) == 2 <= len(plain.kernel.temps)


def test_compiled_float32_pipeline_equals_evaluator_on_sizes_not_dividing_lanes():
    inputs, outputs = softmax_ce(7, 1003, "float32")
    rng = np.random.default_rng(5)
    feed = {inputs[0]: rng.standard_normal((7, 1003)).astype("float32"),
            inputs[1]: rng.integers(0, 1003, 7).astype("int32")}
    f = tg.build(inputs, outputs)
    for got, want in zip(f(*[feed[t] for t in inputs]), tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "fused" in f.schedule and "vector accumulators" in f.schedule


def test_vector_accumulators_on_a_reduction_whose_bounds_move():
    A = tg.placeholder((5, 40), dtype=F64, name="A")
    k = tg.reduce_axis((0, 40), name="k")  # runs over [7 i, 40): a trip count known late
    S = tg.compute((5,), lambda i: tg.sum(A[i, k], axis=k, where=k >= i * 7), name="S")
    feed = {A: np.random.default_rng(6).standard_normal((5, 40))}
    kernel, record = check_scheduled([A], [S], feed)
    assert any("vector accumulators" in n for n in record.notes[0])


def test_pooling_gradient_loses_its_divisions_and_branches():
    x = tg.placeholder((2, 3, 8, 8), dtype=F64, name="x")
    y = nn.max_pool2d(x, 2, stride=2)
    feed = {x: np.random.default_rng(7).standard_normal(x.shape)}
    kernel, record = check_scheduled([x], [y, *tg.differentiate(y, [x])], feed)
    notes = [n for ns in record.notes.values() for n in ns]
    assert any("split by its divisor" in n for n in notes)
    text = tg.build([x], [y, *tg.differentiate(y, [x])]).loops
    assert "//" not in text and "if (" not in text


def test_unguarded_accumulation_keeps_a_negative_zero():
    A = tg.placeholder((3, 9), dtype=F64, name="A")
    k = tg.reduce_axis((0, 9), name="k")
    S = tg.compute((3,), lambda i: tg.sum(A[i, k], axis=k, where=A[i, k] > 0.5,
                                          init=A[i, 0] * 0.0 - 0.0), name="S")
    a = -np.abs(np.random.default_rng(8).standard_normal((3, 9)))  # every guard false
    a[1, 3] = 2.0
    want = tg.evaluate([S], {A: a})[0]
    for got in (run(auto_schedule(lower_program([A], [S]), lanes_of=two_lanes)[0], [a])[0][0],
                tg.build([A], [S])(a)[0]):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_accumulations_at_a_let_of_the_loop_body_keep_their_loop():
    # for k: { let j = 0; S[i, j] += A[i, k] }: the lanes' combination would run after
    # the loop, outside the let binding j, so the loop keeps its sequential accumulation
    from tegrad.codegen.loops.mapper import free_variables
    from tegrad.codegen.loops.nodes import Accumulate, Buffer, Kernel, Let, Load, Store
    from tegrad.codegen.schedule.accumulators import vector_accumulators
    from tegrad.ir.expr import Const, Var
    A = Buffer("A", (2, 32), "float64", "input")
    S = Buffer("S", (2, 1), "float64", "output")
    i, j, k = (Var(n, "int64") for n in "ijk")
    zero = Const(0, "int64")
    body = For(i, zero, Const(2, "int64"), Block((
        Store(S, (i, zero), Const(0.0, "float64")),
        For(k, zero, Const(32, "int64"),
            Let(j, zero, Accumulate(S, (i, j), Load(A, (i, k)), tg.sum))))))
    kernel = Kernel("k", (A, S), (), body)
    scheduled, loops = vector_accumulators(kernel, lanes_of=lambda dtype: 4)
    assert not free_variables(scheduled.body) and loops == ()
    a = np.random.default_rng(0).standard_normal((2, 32))
    np.testing.assert_allclose(run(scheduled, [a])[0][0], a.sum(axis=1, keepdims=True))


def test_a_reshape_copy_runs_over_the_source_axes_without_divisions():
    x = tg.placeholder((3, 5, 6, 4), dtype=F64, name="x")
    flat = ops.flatten(ops.multiply(x, x))
    feed = {x: np.random.default_rng(9).standard_normal(x.shape)}
    kernel, record = check_scheduled([x], [flat], feed)
    text = tg.build([x], [flat]).loops
    assert "//" not in text and "%" not in text
    notes = [n for ns in record.notes.values() for n in ns]
    assert any("split by its divisor" in n for n in notes)
    # the divisors 24 and 4 of the flat index: three loops, of 5, 6 and 4
    trips = sorted(s.end.value for s in walk_stmts(kernel.body) if type(s) is For)
    assert trips == [3, 4, 5, 6]


@pytest.mark.parametrize("batch, inner, outer", [(64, 256, 128), (7, 33, 5), (1, 16, 24)])
def test_a_dense_layers_forward_product_is_computed_once_with_its_gradient(batch, inner,
                                                                           outer):
    """``dense = sum_k x * w + b`` and the gradient's own ``dense_red0 = sum_k x * w``: the
    forward body reads a stage holding its product, merged with the gradient's, so a
    training step runs one forward product, not two; values as the evaluator's."""
    from tegrad.codegen.loops.nodes import MatrixProduct
    x = tg.placeholder((batch, inner), dtype=F64, name="x")
    w = tg.placeholder((outer, inner), dtype=F64, name="w")
    b = tg.placeholder((outer,), dtype=F64, name="b")
    y = nn.relu(nn.dense(x, w, b))
    head = tg.placeholder(y.shape, dtype=F64, name="head")
    outputs = [y, *tg.differentiate(y, [x, w, b], head=head)]
    inputs = [x, w, b, head]
    f = tg.build(inputs, outputs)
    rng = np.random.default_rng(batch)
    feed = {t: rng.standard_normal(t.shape) for t in inputs}
    for got, want in zip(f(*[feed[t] for t in inputs]), tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)

    def reads_x_and_w(s):
        if type(s) is MatrixProduct:
            return {s.a.name, s.b.name} == {"x", "w"}
        if type(s) is Accumulate:
            names = {n.buffer.name for n in loads_in(s.value)}
            return {"x", "w"} <= names
        return False
    forward = [s for s in walk_stmts(f.kernel.body) if reads_x_and_w(s)]
    assert len(forward) == 1, f.loops


def test_a_reduction_under_a_select_is_not_computed_apart():
    """Only reductions every element evaluates are split off: one under a select may be
    skipped where its condition is false (its reads may even be out of range there)."""
    from tegrad.codegen.lower.dedupe import computed_once
    x = tg.placeholder((6, 5), dtype=F64, name="x")
    k1, k2 = tg.reduce_axis((0, 5), name="k"), tg.reduce_axis((0, 5), name="k")
    whole = tg.compute((6,), lambda i: tg.sum(x[i, k1], axis=k1), name="whole")
    guarded = tg.compute((6,), lambda i: tg.if_then_else(x[i, 0] > 0, tg.sum(x[i, k2], axis=k2),
                                                         x[i, 1]), name="guarded")
    out = computed_once([whole, guarded])
    assert "guarded_red" not in tg.format(out)
    k3 = tg.reduce_axis((0, 5), name="k")
    plus = tg.compute((6,), lambda i: tg.sum(x[i, k3], axis=k3) + x[i, 1], name="plus")
    out = computed_once([whole, plus])
    assert "plus[i] = whole[i] + x[i, 1]" in tg.format(out)
