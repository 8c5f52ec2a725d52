"""The passes of zero elimination on hand-written naive gradients, with their costs."""
import io
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.expr import Reduce, Var
from tegrad.ir.tensor import ComputeOp, ScatterOp
from tegrad.zero_elim.domain import solve_term_domain
from tegrad.zero_elim.hoist import hoist_invariant_reductions
from tegrad.zero_elim.program import eliminate_zeros
from tegrad.zero_elim.terms import expand, merge_terms

F64 = "float64"
ONE, ZERO = tg.const(1.0, F64), tg.const(0.0, F64)
RNG = np.random.default_rng(3)


def _same_values(a, b, feed):
    va, vb = tg.evaluate([a, b], feed)
    np.testing.assert_allclose(va, vb, rtol=1e-12, atol=1e-14)


def test_expand_lifts_conditions_and_flattens_nested_sums():
    x = tg.placeholder((4, 5), dtype=F64, name="x")
    a, b = Var("a"), Var("b")
    y = tg.reduce_axis((0, 4), name="y")
    k = tg.reduce_axis((0, 5), name="k")
    e = tg.sum(x[y, 0] * tg.sum(tg.if_then_else(tg.all(y == a, k == b), ONE, ZERO) * x[y, k],
                                axis=k), axis=y)
    (term,) = expand(e)
    assert [ax.name for ax in term.axes] == ["y", "k"]
    assert [str(c) for c in term.conds] == ["y == a", "k == b"]
    assert str(term.value) == "x[y, 0] * x[y, k]"


def test_expand_splits_sums_and_selects_and_drops_zeros():
    x = tg.placeholder((4,), dtype=F64, name="x")
    i = Var("i")
    e = tg.if_then_else(i > 0, x[i] + x[0], ZERO) - x[1] * ZERO + x[2] / 2.0
    terms = expand(e)
    assert [str(t) for t in terms] == ["[i > 0] x[i]", "[i > 0] x[0]", "x[2] / 2.0"]
    # (a factor of a constant and terms with nothing to lift stays whole)
    w = tg.if_then_else(i > 0, x[i], ZERO)
    terms = expand((w + x[0]) * (1.0 - x[2] * x[2]) + x[3] * (x[1] - x[2]))
    assert [str(t) for t in terms] == ["[i > 0] x[i] * (1.0 - x[2] * x[2])",
                                       "x[0] * (1.0 - x[2] * x[2])", "x[3] * x[1]",
                                       "x[3] * -x[2]"]


def test_expanded_gradients_keep_plain_factors_whole():
    """Factors with nothing to lift are not multiplied out: tanh-GELU's and SiLU's
    gradients at large inputs (where tanh**2 and the sigmoid round to 1) are exactly 1
    in float32 and float64, as PyTorch's are (multiplied out, the leading 1 was lost in
    a sum of terms of the size of x**3: 0 or 2)."""
    import numpy as np
    from tegrad import nn
    for dtype, big in (("float32", [800.0, 1000.0, 3000.0, 2e7]),
                       ("float64", [6e5, 8e5, 1e6, 1e16])):
        x = tg.placeholder((4,), dtype=dtype, name="x")
        for f in (lambda v: nn.gelu(v, approximate="tanh"), nn.silu):
            (g,) = tg.differentiate(f(x), [x])
            values = np.array(big, dtype)
            assert tg.evaluate(g, {x: values}).tolist() == [1.0] * 4
            assert tg.build([x], [g], threads=1)(values)[0].tolist() == [1.0] * 4


def test_expand_renames_axes_that_would_be_captured():
    x = tg.placeholder((4,), dtype=F64, name="x")
    k = tg.reduce_axis((0, 4), name="k")
    # a product of two sums over axes named k: the flattened term needs two axes
    e = tg.sum(x[k], axis=k) * tg.sum(x[k] * 2.0, axis=k)
    (term,) = expand(e)
    assert len({ax.name for ax in term.axes}) == 2


def test_merge_terms_shares_loops_that_differ_in_data_conditions_only():
    x = tg.placeholder((4,), dtype=F64, name="x")
    k = tg.reduce_axis((0, 4), name="k")
    e = tg.sum(tg.if_then_else(x[k] > 0.0, x[k], ZERO), axis=k) + \
        tg.sum(tg.if_then_else(x[k] < -1.0, ONE, ZERO), axis=k)
    merged = merge_terms(expand(e))
    assert len(merged) == 1 and len(merged[0].axes) == 1


def test_simplify_term_solves_the_matmul_gradient():
    A, H = tg.placeholder((3, 4), name="A"), tg.placeholder((3, 5), name="H")
    B = tg.placeholder((4, 5), name="B")
    a, b = Var("a"), Var("b")
    y0, y1 = tg.reduce_axis((0, 3), name="y0"), tg.reduce_axis((0, 5), name="y1")
    k = tg.reduce_axis((0, 4), name="k")
    e = tg.sum(H[y0, y1] * tg.sum(tg.if_then_else(tg.all(y0 == a, k == b), 1.0, 0.0) * B[k, y1],
                                  axis=k), axis=[y0, y1])
    outer, term = solve_term_domain(expand(e)[0], {"a": (0, 3), "b": (0, 4)})
    assert outer == ()
    assert [ax.name for ax in term.axes] == ["y1"] and term.axes[0].extent.value == 5
    assert str(term.value) == "H[a, y1] * B[b, y1]"


def test_simplify_term_keeps_parameter_conditions_outside():
    x = tg.placeholder((8,), dtype=F64, name="x")
    y = tg.reduce_axis((0, 4), name="y")
    p = Var("p")
    e = tg.sum(tg.if_then_else(y * 2 + 1 == p, x[y], ZERO), axis=y)
    outer, term = solve_term_domain(expand(e)[0], {"p": (0, 8)})
    assert term.axes == () and str(term.value) == "x[(p + 1) // 2 - 1]"
    assert [str(c) for c in outer] == ["(p + 1) % 2 == 0"]


def test_simplify_term_empty_domain_is_zero():
    x = tg.placeholder((8,), dtype=F64, name="x")
    y = tg.reduce_axis((0, 4), name="y")
    p = Var("p")
    e = tg.sum(tg.if_then_else(tg.all(y * 2 == p, y * 2 == p + 1), x[y], ZERO), axis=y)
    assert solve_term_domain(expand(e)[0], {"p": (0, 8)}) is None


def _naive_strided_conv_gradient(L=11, K=3, stride=2, dilation=2, pad=1):
    Hc = tg.placeholder((_out_len(L, K, stride, dilation, pad),), dtype=F64, name="Hc")
    W = tg.placeholder((K,), dtype=F64, name="W")
    y = tg.reduce_axis((0, Hc.shape[0]), name="y")
    r = tg.reduce_axis((0, K), name="r")
    pos = y * stride + r * dilation - pad
    dX = tg.compute((L,), lambda p: tg.sum(Hc[y] * tg.sum(tg.if_then_else(
        tg.all(pos >= 0, pos < L), tg.if_then_else(pos == p, ONE, ZERO) * W[r], ZERO), axis=r),
        axis=y), name="dX")
    return dX, Hc, W


def _out_len(L, K, stride, dilation, pad):
    return (L + 2 * pad - dilation * (K - 1) - 1) // stride + 1


@pytest.mark.parametrize("stride, dilation, pad", [(1, 1, 1), (2, 1, 1), (2, 2, 1), (3, 2, 0)])
def test_strided_dilated_convolution_gradient_is_minimal(stride, dilation, pad):
    L, K = 11, 3
    dX, Hc, W = _naive_strided_conv_gradient(L, K, stride, dilation, pad)
    (opt,) = eliminate_zeros([dX])
    _same_values(dX, opt, {Hc: RNG.standard_normal(Hc.shape), W: RNG.standard_normal(K)})
    # the hand-written gather visits every (p, r) pair with an integer y in range once;
    # when the output has fewer points than the input, scattering over (y, r) is cheaper
    n_out = Hc.shape[0]
    pairs = sum(1 for p in range(L) for r in range(K)
                if (p + pad - r * dilation) % stride == 0
                and 0 <= (p + pad - r * dilation) // stride < n_out)
    assert tg.cost(opt).iterations == (n_out * K if n_out * K < L else L + pairs)
    assert tg.cost(dX).iterations > 5 * tg.cost(opt).iterations


def test_a_tensor_read_at_two_index_tuples_costs_one_pass():
    A = tg.placeholder((6, 6), dtype=F64, name="A")
    H = tg.placeholder((6, 6), dtype=F64, name="H")
    y = tg.compute((6, 6), lambda i, j: A[i, j] + A[j, i], name="y")
    res = tg.differentiate(y, [A], head=H)
    assert tg.cost(res[0]).iterations == 36  # not 36 * 36
    _same_values(res[0], res.naive[0], {A: RNG.standard_normal((6, 6)),
                                        H: RNG.standard_normal((6, 6))})


def test_data_dependent_read_becomes_a_scatter():
    X = tg.placeholder((10, 3), dtype=F64, name="X")
    I = tg.placeholder((7,), dtype="int32", name="I")
    y = tg.compute((7, 3), lambda i, j: X[I[i], j] * 2.0, name="y")
    res = tg.differentiate(y, [X])
    assert isinstance(res[0].op, ScatterOp)
    assert tg.cost(res[0]).iterations == 21  # the head's size, not 10 * 7 * 3
    _same_values(res[0], res.naive[0], {X: RNG.standard_normal((10, 3)),
                                        I: np.array([1, 9, 9, 0, 3, 1, 2], dtype="int32")})


def test_hoisting_moves_reductions_over_fewer_axes_into_stages():
    x = tg.placeholder((3, 4), dtype=F64, name="x")
    r = tg.reduce_axis((0, 4), name="r")
    t = tg.compute((3, 4), lambda i, j: x[i, j] / tg.sum(x[i, r], axis=r), name="t")
    body, stages = hoist_invariant_reductions("t", t.op.axes, t.op.body)
    assert len(stages) == 1 and stages[0].shape == (3,)
    assert not isinstance(body, Reduce)
    # a reduction whose reads are out of bounds for some of its axes' values stays
    s = tg.compute((3, 4), lambda i, j: tg.if_then_else(
        i >= 1, tg.sum(x[i - 1, r], axis=r), 0.0), name="s")
    body, stages = hoist_invariant_reductions("s", s.op.axes, s.op.body)
    assert stages == []


def test_max_pool_gradient_reads_a_tie_count_stage():
    x = tg.placeholder((1, 2, 8, 8), dtype=F64, name="x")
    y = tg.nn.max_pool2d(x, 2, stride=2)
    res = tg.differentiate(y, [x])
    names = [t.name for t in tg.topological_order([res[0]])]
    assert "max_pool2d_ties" in names
    # forward + tie count (same size) + one pass over x: no per-window loop left
    assert tg.cost(res[0]).iterations == 2 * tg.cost(y).iterations + x.size


def test_optimize_false_keeps_the_naive_gradient():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    B = tg.placeholder((4, 2), dtype=F64, name="B")
    k = tg.reduce_axis((0, 4), name="k")
    C = tg.compute((3, 2), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    naive = tg.differentiate(C, [A], optimize=False)
    assert naive.naive is None
    # every (i0, i1) sums over (i, j), and each (i, j) over k
    assert tg.cost(naive[0]).iterations == 3 * 4 * (1 + 3 * 2 * (1 + 4))
    optimised = tg.differentiate(C, [A])
    # dA[i0, i1] = sum_j B[i1, j] does not depend on i0: a stage over i1, read per point
    assert tg.cost(optimised[0]).iterations == 4 * (1 + 2) + 3 * 4


def test_explain_prints_both_versions_with_costs(capsys):
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    B = tg.placeholder((4, 2), dtype=F64, name="B")
    k = tg.reduce_axis((0, 4), name="k")
    C = tg.compute((3, 2), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    text = tg.differentiate(C, [A, B]).explain()
    # returned, not printed: a REPL shows it once, as text
    assert capsys.readouterr().out == ""
    assert repr(text) == str(text)
    sink = io.StringIO()
    assert tg.differentiate(C, [A, B]).explain(file=sink) == text
    assert sink.getvalue().strip() == text.strip()
    assert text.count("before zero elimination (iterations=") == 2
    assert "after zero elimination (iterations=24," in text
    assert "dA_r0[i1] = sum(B[i1, j], j in [0, 2))" in text
    naive = tg.differentiate(C, [A], optimize=False)[0]
    assert "after zero elimination" in tg.explain(naive)


def test_gradients_are_ordinary_tensors_again_differentiable():
    x = tg.placeholder((5,), dtype=F64, name="x")
    k = tg.reduce_axis((0, 5), name="k")
    loss = tg.compute((), lambda: tg.sum(tg.exp(x[k]) * x[k], axis=k), name="loss")
    (g,) = tg.differentiate(loss, [x])
    assert isinstance(g.op, ComputeOp)
    k2 = tg.reduce_axis((0, 5), name="k2")
    gsum = tg.compute((), lambda: tg.sum(g[k2], axis=k2), name="gsum")
    (h,) = tg.differentiate(gsum, [x])
    v = RNG.standard_normal(5)
    np.testing.assert_allclose(tg.evaluate(h, {x: v}), np.exp(v) * (v + 2))


def test_jacobian_is_zero_eliminated_too():
    x = tg.placeholder((5,), dtype=F64, name="x")
    y = tg.compute((5,), lambda i: x[i] * x[(i + 1) % 5], name="y")
    J = tg.jacobian(y, x)
    naive = tg.jacobian(y, x, optimize=False)
    _same_values(J, naive, {x: RNG.standard_normal(5)})
    assert tg.cost(J).iterations <= 2 * 5  # two nonzeros per row, not 5 * 5 * 5


@pytest.mark.parametrize("build", [
    lambda x: tg.ops.variance(x, axis=1),
    lambda x: tg.ops.variance(x, axis=None, unbiased=True),
    lambda x: tg.nn.batch_norm(x, None, None)[0],
    lambda x: tg.nn.softmax(x, axis=1),
], ids=["variance", "variance_unbiased", "batch_norm", "softmax"])
def test_stop_gradient_centring_keeps_second_derivatives_exact(build):
    # the gradient skips the paths that cancel; its own derivative must still be exact
    x = tg.placeholder((4, 3), dtype=F64, name="x")
    out = build(x)
    head = tg.placeholder(out.shape, dtype=F64, name="head")
    (g,) = tg.differentiate(out, [x], head=head)
    feed = {x: RNG.standard_normal((4, 3)), head: RNG.standard_normal(out.shape)}
    assert tg.testing.check_grad(g, [x], feed=feed, head="random", rng=2) < 1e-6


def test_bilinear_gradient_is_one_scatter_pass_and_differentiable_again():
    x = tg.placeholder((1, 1, 3, 4), dtype=F64, name="x")
    y = tg.nn.upsampling(x, 2, method="bilinear")
    head = tg.placeholder(y.shape, dtype=F64, name="head")
    (g,) = tg.differentiate(y, [x], head=head)
    assert any(isinstance(t.op, ScatterOp) and len(t.op.targets) > 1
               for t in tg.topological_order([g]))
    # about one visit per output point, not one per (output, tap) pair
    assert tg.cost(g).iterations < 2 * tg.cost(y).iterations
    feed = {x: RNG.standard_normal(x.shape), head: RNG.standard_normal(y.shape)}
    (naive,) = tg.differentiate(y, [x], head=head, optimize=False)
    _same_values(g, naive, feed)
    # the gradient is linear in head: its derivative with respect to head is the adjoint
    assert tg.testing.check_grad(g, [head], feed=feed, head="random", rng=4) < 1e-6


def _program(t):
    return {id(s) for s in tg.ir.graph.topological_order([t])}


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 5), st.integers(1, 7), st.sampled_from([0, 1]))
def test_a_row_max_under_stop_gradient_is_one_stage_with_no_adjoint(rows, cols, axis):
    # the softmax's stop_gradient(max_k x) is neither split into a reduction stage and
    # a copy nor given an adjoint: the gradient reads one stage of the maxima
    x = tg.placeholder((rows, cols), dtype=F64, name="x")
    y = tg.nn.log_softmax(x, axis=axis)
    (m,) = [t for t in tg.ir.graph.topological_order([y]) if t.name == "log_softmax_max"]
    res = tg.differentiate(y, [x], head=tg.placeholder(y.shape, dtype=F64, name="head"))
    names = [s.name for s in tg.ir.graph.topological_order([res[0]])]
    assert names.count("log_softmax_max") == 1 and m not in res.adjoints
    assert not any("_red" in name for name in names)
    assert tg.testing.check_grad(y, [x], head="random", rng=rows * 8 + cols) < 1e-6


@pytest.mark.parametrize("intrinsic", ["stop_gradient", "floor"])
def test_a_reduction_under_an_intrinsic_of_zero_derivative_stays_in_place(intrinsic):
    x = tg.placeholder((3, 5), dtype=F64, name="x")
    k = tg.reduce_axis((0, 5), name="k")
    cut = getattr(tg, intrinsic)
    y = tg.compute((3,), lambda i: x[i, 1] * cut(tg.sum(x[i, k] * x[i, k], axis=k)), name="y")
    head = tg.placeholder((3,), dtype=F64, name="head")
    (dx,) = res = tg.differentiate(y, [x], head=head)
    assert y not in res.adjoints or res.adjoints[y] is head
    assert len(tg.ir.graph.topological_order([dx])) == 3  # x, head and dx: no statistic
    xv, hv = RNG.standard_normal((3, 5)) * 2, RNG.standard_normal(3)
    want = np.zeros((3, 5))
    want[:, 1] = hv * getattr(np, intrinsic if intrinsic == "floor" else "asarray")(
        (xv * xv).sum(axis=1))
    np.testing.assert_allclose(tg.evaluate(dx, {x: xv, head: hv}), want, rtol=1e-12)
    compiled = tg.build([x, head], [y, dx])
    for got, expected in zip(compiled(xv, hv), tg.evaluate([y, dx], {x: xv, head: hv})):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("attrs", [dict(label_smoothing=0.1),
                                   dict(ignore_index=-100, label_smoothing=0.2),
                                   dict(reduction="none")])
def test_the_adjoints_asked_for_with_a_gradient_are_inlined_into_it(attrs):
    # reverse mode returns every adjoint as an output; an elementwise one (the adjoint of
    # a softmax's row sum, of the smoothing's row total) is still computed inline by the
    # gradient that reads it, and still returned with its values
    logits = tg.placeholder((4, 5, 3), dtype=F64, name="logits")
    labels = tg.placeholder((4, 3), dtype="int32", name="labels")
    loss = tg.nn.softmax_cross_entropy(logits, labels, **attrs)
    head = tg.placeholder(loss.shape, dtype=F64, name="head")
    res = tg.differentiate(loss, [logits], head=head)
    inner = {t: a for t, a in res.adjoints.items() if t is not loss and t is not logits}
    assert inner and not {id(a) for a in inner.values()} & _program(res[0])
    lv = RNG.integers(0, 5, (4, 3)).astype("int32")
    lv[1, 2] = -100 if "ignore_index" in attrs else lv[1, 2]
    feed = {logits: RNG.standard_normal((4, 5, 3)), labels: lv,
            head: RNG.standard_normal(loss.shape)}
    for t, a in inner.items():
        _same_values(a, res.naive.adjoints[t], feed)
    _same_values(res[0], res.naive[0], feed)


def _distinct_nodes(t):
    return len({id(n) for n in tg.ir.mapper.walk(t.op.body)})


@pytest.mark.parametrize("shift", [0, 1])
def test_inlining_a_chain_of_stages_each_read_twice_stays_linear(shift):
    # s_k[i] = s_{k-1}[i] * 0.5 + sin(s_{k-1}[i + shift]) * 0.25, every s_k inlined: as
    # a tree the last body holds 2^depth reads of x; inlining maps a stage read again at
    # equal indices to the node of its first read, so with equal indices the body is a
    # chain (and with shifted ones, one node per distinct index)
    from tegrad.zero_elim.inline import inline_stages

    def chain(depth):
        x = tg.placeholder((depth + 4,), dtype=F64, name="x")
        s, inner = x, []
        for k in range(depth):
            p, n = s, depth + 4 - (k + 1) * shift
            s = tg.compute((n,), lambda i: p[i] * 0.5 + tg.sin(p[i + shift]) * 0.25,
                           name=f"s{k}")
            inner.append(s)
        (out,) = inline_stages([s], {id(t) for t in inner[:-1]})
        return x, s, out

    sizes = {}
    for depth in (12, 24):
        x, s, out = chain(depth)
        assert _program(out) == {id(x), id(out)}
        sizes[depth] = _distinct_nodes(out)
        _same_values(s, out, {x: RNG.uniform(-1, 1, x.shape)})
    assert sizes[24] <= 5 * sizes[12]
