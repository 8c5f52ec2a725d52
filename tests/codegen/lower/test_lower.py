"""Lowering of every stage kind and domain shape, run by the loop-IR interpreter against
``tg.evaluate``, with the points visited equal to ``tg.cost``'s iterations, and the loop
structure promised: affine conditions are loop bounds and strides (no per-iteration
branch), single-trip loops are lets, data-dependent indices and divisions are checked."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.graph import topological_order
from tegrad.ir.tensor import ScatterOp, ScatterTarget, scatter_stage
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Accumulate, Allocate, Check, For, If, Let
from tegrad.codegen.loops.printer import format_kernel
from tegrad.codegen.lower.program import lower_program, prepare

F64 = "float64"


def x(shape, name="x", dtype=F64):
    return tg.placeholder(shape, dtype=dtype, name=name)


def evaluate_both(inputs, outputs, feed=None, seed=0):
    rng = np.random.default_rng(seed)
    feed = dict(feed or {})
    for t in inputs:
        if t not in feed:
            feed[t] = rng.standard_normal(t.shape).astype(t.dtype)
    kernel = lower_program(inputs, outputs)
    got, iterations = run(kernel, [feed[t] for t in inputs])
    for t, g, w in zip(outputs, got, tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{t.name}\n{format_kernel(kernel)}")
    prepared = prepare(outputs)
    fills = sum(t.size for t in topological_order(prepared) if isinstance(t.op, ScatterOp))
    return kernel, iterations, tg.cost(prepared).iterations, fills


def kinds(kernel, node_type):
    return [s for s in walk_stmts(kernel.body) if type(s) is node_type]


def per_point_branches(kernel):
    """Ifs that guard no loop: a condition tested at every point of the innermost loops
    (an If around a reduction's loops runs once per outer point)."""
    return [s for s in kinds(kernel, If) if not any(type(n) is For for n in walk_stmts(s))]


def _reduce_cases():
    A = x((5, 6))
    cases = {}
    absmax = tg.comm_reducer(lambda a, b: tg.max(tg.abs(a), tg.abs(b)), lambda d: 0.0,
                             name="absmax")
    for name, reducer in [("sum", tg.sum), ("prod", tg.prod), ("max", tg.max),
                          ("min", tg.min), ("absmax", absmax)]:
        k = tg.reduce_axis((0, 6), name="k")
        cases[name] = ([A], [tg.compute((5,), lambda i: reducer(A[i, k], axis=k), name="R")])
        k2 = tg.reduce_axis((0, 6), name="k")
        cases[name + "_where_init"] = ([A], [tg.compute(
            (5,), lambda i: reducer(A[i, k2], axis=k2, where=k2 <= i, init=A[i, 0] * 0.5),
            name="R")])
    return cases


@pytest.mark.parametrize("name, case", sorted(_reduce_cases().items()))
def test_every_reducer_with_where_and_init(name, case):
    kernel, iterations, cost, _ = evaluate_both(*case)
    assert iterations == cost
    # a body that is one reduction accumulates straight into the output, no branch
    assert kinds(kernel, Accumulate) and not kinds(kernel, If) and not kinds(kernel, Allocate)


def test_reduction_inside_an_expression_uses_a_local_accumulator():
    A = x((4, 5))
    k = tg.reduce_axis((0, 5), name="k")
    out = tg.compute((4,), lambda i: tg.exp(tg.sum(A[i, k], axis=k)) + A[i, 0], name="out")
    kernel, iterations, cost, _ = evaluate_both([A], [out])
    assert iterations == cost == 4 + 20
    (alloc,) = kinds(kernel, Allocate)
    assert alloc.buffer.shape == () and alloc.buffer.scope == "local"


def test_triangular_and_moving_domains_are_loop_bounds():
    A = x((6, 6))
    k = tg.reduce_axis((0, 6), name="k")
    tri = tg.compute((6,), lambda i: tg.sum(A[i, k], axis=k, where=tg.all(k >= 1, k < i)),
                     name="tri")
    m = tg.reduce_axis((0, 3), name="m")
    r = tg.reduce_axis((0, 6), name="r")
    band = tg.compute((6,), lambda i: tg.sum(A[i, r], axis=r, where=tg.all(r >= i - 1, r <= i + 1)),
                      name="band")
    shift = tg.compute((6, 3), lambda i, j: tg.max(A[i, m + j], axis=m, where=m + j < 6),
                       name="shift")
    kernel, iterations, cost, _ = evaluate_both([A], [tri, band, shift])
    assert iterations == cost
    assert not kinds(kernel, If)


@pytest.mark.parametrize("stride, dilation", [(2, 1), (2, 2), (3, 1), (1, 2)])
def test_strided_and_dilated_convolution_gradient_bounds_not_branches(stride, dilation):
    X, W = x((1, 2, 7, 7)), x((3, 2, 3, 3), "w")
    y = tg.nn.conv2d(X, W, stride=stride, dilation=dilation, padding=1)
    head = x(y.shape, "head")
    res = tg.differentiate(y, [X, W], head=head)
    kernel, iterations, cost, fills = evaluate_both([X, W, head], [y] + list(res))
    assert iterations == cost + fills
    assert not per_point_branches(kernel)


def test_floordiv_and_mod_of_loop_variables_become_strides_and_lets():
    A = x((12,))
    k = tg.reduce_axis((0, 12), name="k")
    # k % 4 == i and k // 4 == 1: one point, a let
    one = tg.compute((4,), lambda i: tg.sum(A[k], axis=k, where=tg.all(k % 4 == i, k // 4 == 1)),
                     name="one")
    every = tg.compute((4,), lambda i: tg.sum(A[k], axis=k, where=k % 4 == i), name="every")
    kernel, iterations, cost, _ = evaluate_both([A], [one, every])
    assert iterations == cost == 4 + 4 + 4 + 12
    assert kinds(kernel, Let) and any(s.step == 4 for s in kinds(kernel, For))
    assert not kinds(kernel, If)


def test_take_checks_its_data_dependent_index():
    table, idx = x((5, 3), "table"), x((4,), "idx", "int32")
    out = tg.compute((4, 3), lambda i, j: table[idx[i], j], name="out")
    good = {idx: np.array([0, 4, 2, 4], dtype="int32")}
    kernel, iterations, cost, _ = evaluate_both([table, idx], [out], good)
    (check,) = kinds(kernel, Check)
    assert (check.error, check.tensor, check.indexed, check.stage) == (
        "index_out_of_range", "idx", "table", "out")
    with pytest.raises(tg.OutOfBoundsError, match="'idx': index out of range: .* 'table' "
                                                  "\\(in stage 'out'\\)"):
        run(kernel, [np.zeros((5, 3)), np.array([0, 5, 0, 0], dtype="int32")])


def test_a_check_under_a_select_only_where_it_is_taken():
    table, idx = x((5,), "table"), x((4,), "idx", "int32")
    out = tg.compute((4,), lambda i: tg.if_then_else(idx[i] >= 0, table[idx[i] % 5], 0.0) +
                     tg.if_then_else(idx[i] < 5, table[tg.max(idx[i], 0)], 1.0), name="out")
    feed = {idx: np.array([-3, 9, 2, 4], dtype="int32")}
    evaluate_both([table, idx], [out], feed)


def test_integer_division_by_a_variable_is_checked():
    a, b = x((4,), "a", "int32"), x((4,), "b", "int32")
    q = tg.compute((4,), lambda i: a[i] // b[i] + a[i] % 3, name="q")
    feed = {a: np.array([7, -7, 3, 0], dtype="int32"), b: np.array([2, 2, -4, 5], dtype="int32")}
    kernel, _, _, _ = evaluate_both([a, b], [q], feed)
    checks = kinds(kernel, Check)
    assert [(c.error, c.tensor, c.stage) for c in checks] == [("division_by_zero", "b", "q")]
    with pytest.raises(tg.TegradError, match="'b': integer division by zero.*'q'"):
        run(kernel, [feed[a], np.array([1, 0, 1, 1], dtype="int32")])


def test_scatter_with_data_dependent_targets_and_init():
    idx, g, base = x((6,), "idx", "int32"), x((6, 2), "g"), x((3, 2), "base")
    H = tg.scatter_add((3, 2), (6, 2), lambda p, c: (idx[p], c), lambda p, c: g[p, c] * 2.0,
                       where=lambda p, c: p % 2 == 0, init=base, name="H")
    feed = {idx: np.array([0, 2, 2, 1, 0, 2], dtype="int32")}
    kernel, iterations, cost, fills = evaluate_both([idx, g, base], [H], feed)
    assert iterations == cost + fills
    assert [(c.tensor, c.indexed) for c in kinds(kernel, Check)] == [("idx", "H")]
    assert any(s.step == 2 for s in kinds(kernel, For))  # p % 2 == 0 is a stride
    with pytest.raises(tg.OutOfBoundsError, match="H"):
        run(kernel, [np.array([0, 0, 3, 0, 0, 0], dtype="int32"), np.ones((6, 2)),
                     np.ones((3, 2))])


def test_multi_target_scatter_of_a_bilinear_resize_gradient():
    X = x((1, 1, 3, 4))
    y = tg.nn.resize(X, (5, 7), method="bilinear")
    head = x(y.shape, "head")
    res = tg.differentiate(y, [X], head=head)
    scatters = [t for t in topological_order(list(res)) if isinstance(t.op, ScatterOp)]
    assert any(len(t.op.targets) > 1 for t in scatters)
    kernel, iterations, cost, fills = evaluate_both([X, head], [y] + list(res))
    assert iterations == cost + fills - sum(
        t.size for t in scatters if t.op.init is not None)


def test_read_once_elementwise_stages_are_inlined_others_are_temps():
    A = x((4, 3))
    e = tg.compute((4, 3), lambda i, j: tg.exp(A[i, j]), name="e")
    once = tg.compute((4, 3), lambda i, j: e[i, j] + 1.0, name="once")
    t = tg.compute((4, 3), lambda i, j: tg.tanh(A[i, j]), name="t")
    twice = tg.compute((4, 3), lambda i, j: t[i, j] * t[i, 2 - j], name="twice")
    kernel, iterations, cost, _ = evaluate_both([A], [once, twice])
    assert [b.name for b in kernel.temps] == ["t"]
    assert iterations == cost == 3 * 12


def test_arguments_inputs_then_outputs_in_order_and_output_copies():
    A, B = x((2, 3), "A"), x((3,), "B")
    s = tg.compute((2, 3), lambda i, j: A[i, j] + B[j], name="s")
    kernel, _, _, _ = evaluate_both([B, A], [s, A, s])
    assert [(b.name, b.scope) for b in kernel.args] == [
        ("B", "input"), ("A", "input"), ("s", "output"), ("A_1", "output"), ("s_1", "output")]


def test_scalar_stages_and_unit_extents_have_no_loops():
    A = x((1, 4))
    k = tg.reduce_axis((0, 4), name="k")
    total = tg.compute((), lambda: tg.sum(A[0, k], axis=k), name="total")
    row = tg.compute((1, 1), lambda i, j: A[i, j] * 2.0, name="row")
    kernel, iterations, cost, _ = evaluate_both([A], [total, row])
    assert iterations == cost == 1 + 4 + 1
    assert [s.var.name for s in kinds(kernel, For)] == ["k"]


def test_errors_name_the_tensor():
    A, B = x((2,), "A"), x((2,), "B")
    s = tg.compute((2,), lambda i: A[i] + B[i], name="s")
    with pytest.raises(tg.TegradError, match="'B'"):
        lower_program([A], [s])
    with pytest.raises(tg.TegradError, match="'s' is not a placeholder"):
        lower_program([s], [s])


def test_data_dependent_reduction_extent_checks_the_reads_it_drives():
    A, L = x((4, 5), "A"), x((4,), "L", "int32")

    def ragged(i):
        k = tg.reduce_axis((0, L[i]), name="k")
        return tg.sum(A[i, k], axis=k)

    S = tg.compute((4,), ragged, name="S")
    feed = {L: np.array([0, 5, 2, 3], dtype="int32")}
    kernel = lower_program([A, L], [S])
    a = np.random.default_rng(1).standard_normal((4, 5))
    (got,), iterations = run(kernel, [a, feed[L]])
    np.testing.assert_allclose(got, tg.evaluate(S, {A: a, L: feed[L]}), rtol=1e-12)
    # (tg.cost cannot count a domain whose extent is loaded)
    assert iterations == 4 + 10
    assert [(c.tensor, c.indexed) for c in kinds(kernel, Check)] == [("L", "A")]
    with pytest.raises(tg.OutOfBoundsError, match="'L'.*'A'"):
        run(kernel, [np.ones((4, 5)), np.array([0, 6, 0, 0], dtype="int32")])


@pytest.mark.parametrize("local", [False, True])
def test_init_combines_with_the_reduced_value_even_over_an_empty_domain(local):
    """``init`` is combined with the reduction (from the identity), as the evaluator does:
    for absmax over no points the result is ``|init|``, not ``init``."""
    A = x((4, 3))
    absmax = tg.comm_reducer(lambda a, b: tg.max(tg.abs(a), tg.abs(b)), lambda d: 0.0,
                             name="absmax")
    k = tg.reduce_axis((0, 3), name="k")

    def body(i):
        r = absmax(A[i, k], axis=k, where=k < i, init=A[i, 0] - 5.0)  # empty at i == 0
        return r + 0.0 * A[i, 1] if local else r

    out = tg.compute((4,), body, name="out")
    kernel, iterations, cost, _ = evaluate_both([A], [out])
    assert iterations == cost


def test_reduction_under_a_data_condition_is_tested_only_where_the_outer_guard_holds():
    # the gradient of a max over a moving window: its reduction sits under a data test
    # (x[i0, i0] == s0[i0, 0]) that reads s0 in bounds only where i0 == i1 && 0 >= i0
    a = x((2, 2))

    def window_max(i, j):
        k = tg.reduce_axis((i, i + 2), name="k0")
        return tg.max(a[i, i], axis=k)

    s0 = tg.compute((1, 1), window_max, name="s0")
    head = x((1, 1), "head")
    outputs = [s0] + list(tg.differentiate(s0, [a], head=head))
    kernel, _, _, _ = evaluate_both([a, head], outputs)
    f = tg.build([a, head], outputs)
    feed = {a: np.arange(4.0).reshape(2, 2), head: np.ones((1, 1))}
    for g, w in zip(f(feed[a], feed[head]), tg.evaluate(outputs, feed)):
        np.testing.assert_array_equal(g, w)


def test_reductions_under_conditions_visit_what_cost_counts():
    A = x((6, 6))

    def red(i, name):
        k = tg.reduce_axis((0, 6), name=name)
        return tg.sum(A[i, k], axis=k, where=k % 2 != tg.cast(i % 2, "int32"))

    out = tg.compute((6,), lambda i: tg.if_then_else(
        tg.all(i >= 1, i <= 3), 0.0, red(i, "a")) + tg.if_then_else(
        i % 3 != 1, red(i, "b"), 1.0) + tg.cast(tg.all(i < 2, red(i, "c") > 0.0), F64), name="out")
    kernel, iterations, cost, _ = evaluate_both([A], [out])
    assert iterations == cost


def test_a_reduction_bound_fixed_by_a_unit_stage_axis_is_a_let():
    A = x((6, 6))
    k = tg.reduce_axis((0, 2), name="k")
    one = tg.compute((1, 4), lambda i, j: tg.sum(A[j, k], axis=k, where=k <= i), name="one")
    kernel, iterations, cost, _ = evaluate_both([A], [one])
    assert iterations == cost == 4 + 4
    assert kinds(kernel, Let) and not kinds(kernel, If)


def test_scatter_targets_with_different_conditions_visit_their_union_once():
    g = tg.placeholder((8, 3), dtype=F64, name="g")
    h = tg.scatter_add((8,), (8, 3), lambda p, c: (p,), lambda p, c: g[p, c],
                       where=lambda p, c: p < 5, name="h")
    p, c = (ax.var for ax in h.op.axes)
    targets = [h.op.targets[0], ScatterTarget((7 - p,), g[p, c] * 2.0, tg.all(p >= 3, c <= 1)),
               ScatterTarget((p // 2,), g[p, c], p % 2 == 0)]
    both = scatter_stage("h", (8,), h.op.axes, targets)
    kernel, iterations, cost, fills = evaluate_both([g], [both])
    union = sum(1 for p in range(8) for c in range(3) if p < 5 or (p >= 3 and c <= 1) or p % 2 == 0)
    assert iterations - fills == cost == union
    assert not per_point_branches(kernel)
