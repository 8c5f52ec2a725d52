"""Adjoint accumulation over whole programs, the API and its errors."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.testing import check_grad, check_vjp

F64 = "float64"


def _rng(seed=0):
    return np.random.default_rng(seed)


def test_tensor_used_twice_sum():
    A = tg.placeholder((3, 3), dtype=F64, name="A")
    B = tg.compute((3, 3), lambda i, j: A[i, j] + A[j, i], name="B")
    (dA,) = tg.differentiate(B, [A])
    assert np.allclose(tg.evaluate(dA, {A: np.zeros((3, 3))}), 2.0)
    assert check_grad(B, [A], head="random", rng=0) < 1e-6


def test_tensor_used_twice_product():
    A = tg.placeholder((3, 3), dtype=F64, name="A")
    B = tg.compute((3, 3), lambda i, j: A[i, j] * A[j, i], name="B")
    a = _rng().normal(size=(3, 3))
    h = _rng(1).normal(size=(3, 3))
    H = tg.placeholder((3, 3), dtype=F64, name="H")
    (dA,) = tg.differentiate(B, [A], head=H)
    expected = h * a.T + h.T * a.T
    assert np.allclose(tg.evaluate(dA, {A: a, H: h}), expected)


def test_diamond_gets_one_adjoint_stage_summing_both_paths():
    x = tg.placeholder((4,), dtype=F64, name="x")
    a = tg.compute((4,), lambda i: tg.exp(x[i]), name="a")
    b = tg.compute((4,), lambda i: a[i] * 2.0, name="b")
    c = tg.compute((4,), lambda i: tg.sin(a[i]), name="c")
    d = tg.compute((4,), lambda i: b[i] * c[i], name="d")
    res = tg.differentiate(d, [x])
    da = res.adjoints[a]
    read = set(tg.ir.mapper.tensors_read(da.op.body))
    assert {res.adjoints[b], res.adjoints[c]} <= read
    assert res.adjoints[b] is not res.adjoints[c]
    assert check_grad(d, [x], head="random", rng=0) < 1e-6


def test_unreachable_input_gets_zeros():
    x = tg.placeholder((3,), dtype=F64, name="x")
    w = tg.placeholder((2, 5), dtype=F64, name="w")
    y = tg.compute((3,), lambda i: x[i] * x[i], name="y")
    dx, dw = tg.differentiate(y, [x, w])
    assert dw.shape == (2, 5) and dw.dtype == F64
    assert np.all(tg.evaluate(dw, {}) == 0)


def test_default_inputs_are_the_float_placeholders():
    idx = tg.placeholder((3,), dtype="int32", name="idx")
    x = tg.placeholder((4,), dtype=F64, name="x")
    y = tg.compute((3,), lambda i: x[idx[i]], name="y")
    res = tg.differentiate(y)
    assert res.inputs == [x]
    got = tg.evaluate(res[0], {x: np.arange(4.0), idx: np.array([1, 1, 3], "int32")})
    assert got.tolist() == [0.0, 2.0, 0.0, 1.0]


@pytest.mark.parametrize("optimize", [True, False])
def test_integer_input_has_no_gradient(optimize):
    x = tg.placeholder((4, 3), dtype=F64, name="x")
    labels = tg.placeholder((4,), dtype="int32", name="labels")
    loss = tg.nn.softmax_cross_entropy(x, labels)
    for inputs in ([labels], [x, labels], labels):
        with pytest.raises(tg.DifferentiationError,
                           match="'labels'.*int32.*only floating-point inputs"):
            tg.differentiate(loss, inputs, optimize=optimize)
    with pytest.raises(tg.DifferentiationError, match="jacobian.*'labels'.*floating-point"):
        tg.jacobian(loss, labels, optimize=optimize)
    # an integer tensor computed from floats is no input either
    q = tg.compute((4, 3), lambda i, j: tg.cast(x[i, j] * 4.0, "int32"), name="q")
    y = tg.compute((4, 3), lambda i, j: x[i, j] * tg.cast(q[i, j], F64), name="y")
    with pytest.raises(tg.DifferentiationError, match="'q'"):
        tg.differentiate(y, [x, q], optimize=optimize)


def test_reduction_with_where_and_init():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    c = tg.placeholder((3,), dtype=F64, name="c")
    k = tg.reduce_axis((0, 4), name="k")
    y = tg.compute((3,), lambda i: tg.sum(A[i, k] * A[i, k], axis=k, where=k > i, init=c[i] * 3),
                   name="y")
    assert check_grad(y, [A, c], head="random", rng=0) < 1e-6
    for red in (tg.prod, tg.max, tg.min):
        y = tg.compute((3,), lambda i: red(A[i, k], axis=k, where=k != i, init=c[i]), name="y")
        assert check_grad(y, [A, c], head="random", rng=1) < 1e-6


def test_reduction_with_ragged_bounds():
    A = tg.placeholder((4, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 4), name="k")
    y = tg.compute((4,), lambda i: tg.exp(tg.sum(A[i, k], axis=k, where=k <= i)), name="y")
    assert check_grad(y, [A], head="random", rng=0) < 1e-6


def test_custom_reducer_with_where_and_init():
    softplus_sum = tg.comm_reducer(lambda a, b: a + b + a * b,
                                   lambda dtype: tg.const(0.0, dtype), name="mix")
    A = tg.placeholder((2, 3), dtype=F64, name="A")
    c = tg.placeholder((2,), dtype=F64, name="c")
    k = tg.reduce_axis((0, 3), name="k")
    y = tg.compute((2,), lambda i: softplus_sum(A[i, k], axis=k, where=k != 1, init=c[i]),
                   name="y")
    feed = {A: _rng().uniform(0.1, 0.5, (2, 3)), c: _rng(1).uniform(0.1, 0.5, 2)}
    assert check_grad(y, [A, c], feed=feed, head="random", rng=0) < 1e-6


def test_custom_reducer_without_rule_raises_naming_the_node():
    tg.ir.intrinsics.register_intrinsic("mystery", 1, np.cbrt)
    try:
        odd = tg.comm_reducer(lambda a, b: tg.call("mystery", a) + b,
                              lambda dtype: tg.const(0.0, dtype), name="odd")
        A = tg.placeholder((2, 3), dtype=F64, name="A")
        k = tg.reduce_axis((0, 3), name="k")
        y = tg.compute((2,), lambda i: odd(A[i, k], axis=k), name="y")
        with pytest.raises(tg.TegradError, match="mystery"):
            tg.differentiate(y, [A])
    finally:
        del tg.ir.intrinsics.INTRINSICS["mystery"]


@pytest.mark.parametrize("red", ["max", "min"])
def test_extremum_reduction_ties_split_equally(red):
    A = tg.placeholder((2, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 4), name="k")
    fn = tg.max if red == "max" else tg.min
    y = tg.compute((2,), lambda i: fn(A[i, k], axis=k), name="y")
    (dA,) = tg.differentiate(y, [A])
    s = 1.0 if red == "max" else -1.0
    a = s * np.array([[1.0, 3.0, 3.0, 3.0], [2.0, 0.0, 2.0, -1.0]])
    g = tg.evaluate(dA, {A: a})
    assert np.allclose(g, [[0, 1 / 3, 1 / 3, 1 / 3], [0.5, 0, 0.5, 0]])


@pytest.mark.parametrize("threads", [1, 2])
def test_a_nan_in_a_max_pool_window_takes_its_gradient(threads):
    """A window holding NaNs pools to NaN (numpy's max), and its gradient flows to the
    NaNs, split among them, as PyTorch's max_pool2d sends it to its NaN (not zeros that
    hide the NaN); other windows are unchanged."""
    import torch
    rng = np.random.default_rng(3)
    v = rng.standard_normal((2, 3, 6, 8))
    v[0, 0, 0, 1] = np.nan
    v[1, 2, 4, 4] = v[1, 2, 5, 5] = np.nan  # two in one window: half each
    v[0, 1, 2, 3] = np.inf
    x = tg.placeholder(v.shape, dtype=F64, name="x")
    y = tg.nn.max_pool2d(x, 2)
    head = rng.standard_normal(y.shape)
    h = tg.placeholder(y.shape, dtype=F64, name="h")
    (g,) = tg.differentiate(y, [x], head=h)
    want = tg.evaluate(g, {x: v, h: head})
    got = tg.build([x, h], [g], threads=threads)(v, head)[0]
    np.testing.assert_array_equal(got, want)
    X = torch.tensor(v, requires_grad=True)
    torch.nn.functional.max_pool2d(X, 2).backward(torch.tensor(head))
    single = np.ones(v.shape, bool)
    single[1, 2, 4:6, 4:6] = False
    np.testing.assert_allclose(want[single], X.grad.numpy()[single], rtol=1e-12)
    assert want[1, 2, 4, 4] == want[1, 2, 5, 5] == head[1, 2, 2, 2] / 2
    assert want[1, 2, 4, 5] == want[1, 2, 5, 4] == 0.0


def test_extremum_reduction_tie_with_init_counts_init():
    A = tg.placeholder((3,), dtype=F64, name="A")
    c = tg.placeholder((), dtype=F64, name="c")
    k = tg.reduce_axis((0, 3), name="k")
    y = tg.compute((), lambda: tg.max(A[k], axis=k, init=c[()]), name="y")
    dA, dc = tg.differentiate(y, [A, c])
    got = tg.evaluate([dA, dc], {A: np.array([1.0, 2.0, 0.0]), c: np.array(2.0)})
    assert got[0].tolist() == [0.0, 0.5, 0.0] and float(got[1]) == 0.5


def test_extremum_ties_are_counted_in_int32():
    # a count is exact and cheap in integers (float adds are a slower chain)
    A = tg.placeholder((3, 4), name="A")
    k = tg.reduce_axis((0, 4), name="k")
    y = tg.compute((3,), lambda i: tg.max(A[i, k], axis=k), name="y")
    (dA,) = tg.differentiate(y, [A])
    ties = [t for t in tg.topological_order([dA]) if t.name == "y_ties"]
    assert len(ties) == 1 and ties[0].dtype == "int32"
    a = np.array([[1, 2, 2, 0], [5, 5, 5, 5], [0, 0, 0, 1]], np.float32)
    expected = (a == a.max(axis=1, keepdims=True)) / (a == a.max(axis=1, keepdims=True)).sum(
        axis=1, keepdims=True)
    assert np.array_equal(tg.evaluate(dA, {A: a}), expected.astype(np.float32))
    assert np.array_equal(tg.build([A], [dA])(a)[0], expected.astype(np.float32))


def test_nested_reductions_are_hoisted_and_differentiated():
    A = tg.placeholder((2, 3, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 3), name="k")
    m = tg.reduce_axis((0, 4), name="m")
    y = tg.compute((2,), lambda i: tg.sum(tg.max(A[i, k, m], axis=m) * 2.0, axis=k) + 1.0,
                   name="y")
    assert check_grad(y, [A], head="random", rng=0) < 1e-6
    (y2,), mapping = tg.autodiff.normalize.normalize([y])
    stages = [t.name for t in tg.topological_order(y2)]
    assert stages == ["A", "y_red0_red0", "y_red0", "y"]


def test_reduction_under_a_select_is_not_hoisted():
    A = tg.placeholder((3, 2), dtype=F64, name="A")
    k = tg.reduce_axis((0, 2), name="k")
    y = tg.compute((4,), lambda i: tg.if_then_else(
        i >= 1, tg.prod(A[i - 1, k], axis=k), tg.const(0.0, F64)), name="y")
    (y2,), _ = tg.autodiff.normalize.normalize([y])
    assert y2 is y
    assert check_grad(y, [A], head="random", rng=0) < 1e-6


def test_scatter_add_value_and_init():
    I = tg.placeholder((5,), dtype="int32", name="I")
    g = tg.placeholder((5,), dtype=F64, name="g")
    b = tg.placeholder((3,), dtype=F64, name="b")
    base = tg.compute((3,), lambda j: b[j] * b[j], name="base")
    S = tg.scatter_add((3,), (5,), lambda i: (I[i],), lambda i: g[i] * b[I[i]],
                       where=lambda i: i != 2, init=base, name="S")
    out = tg.compute((3,), lambda j: tg.exp(S[j]), name="out")
    feed = {I: np.array([0, 2, 2, 1, 0], "int32")}
    assert check_grad(out, [g, b], feed=feed, head="random", rng=0) < 1e-6


def test_manual_override_matches_automatic_and_is_called():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    B = tg.placeholder((4, 2), dtype=F64, name="B")
    k = tg.reduce_axis((0, 4), name="k")
    C = tg.compute((3, 2), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = tg.compute((3, 2), lambda i, j: tg.tanh(C[i, j]), name="D")
    calls = []

    def matmul_grad_a(out, inp, head):
        calls.append((out, inp, head))
        n = tg.reduce_axis((0, 2), name="n")
        return tg.compute((3, 4), lambda i, kk: tg.sum(head[i, n] * B[kk, n], axis=n),
                          name="dA_manual")

    auto = tg.differentiate(D, [A, B])
    man = tg.differentiate(D, [A, B], manual={(C, A): matmul_grad_a})
    assert len(calls) == 1 and calls[0][0] is C and calls[0][1] is A
    # the override receives the adjoint of C as built; zero elimination then rewrites it
    assert calls[0][2] is man.naive.adjoints[C]
    feed = {A: _rng().normal(size=(3, 4)), B: _rng(1).normal(size=(4, 2))}
    for x, y in zip(tg.evaluate(auto.result, feed), tg.evaluate(man.result, feed)):
        assert np.allclose(x, y)


def test_manual_override_of_unused_pair_is_an_error():
    A = tg.placeholder((3,), dtype=F64, name="A")
    B = tg.compute((3,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(tg.TegradError, match="manual"):
        tg.differentiate(B, [A], manual={(A, B): lambda o, i, h: h})


def test_second_derivative_against_finite_differences_of_gradient():
    x = tg.placeholder((3,), dtype=F64, name="x")
    k = tg.reduce_axis((0, 3), name="k")
    f = tg.compute((), lambda: tg.sum(tg.sin(x[k]) * x[(k + 1) % 3] * x[k], axis=k), name="f")
    (g,) = tg.differentiate(f, [x])
    # Hessian-vector product through a second differentiation, checked by finite
    # differences of the gradient itself
    assert check_grad(g, [x], head="random", rng=0) < 1e-6
    v = tg.placeholder((3,), dtype=F64, name="v")
    (hv,) = tg.differentiate(g, [x], head=v)
    xv = _rng().normal(size=3)
    vv = _rng(1).normal(size=3)
    eps = 1e-6
    num = (tg.evaluate(g, {x: xv + eps * vv}) - tg.evaluate(g, {x: xv - eps * vv})) / (2 * eps)
    # the Hessian is symmetric: H v == v^T H
    assert np.allclose(tg.evaluate(hv, {x: xv, v: vv}), num, rtol=1e-6, atol=1e-8)


def test_second_derivative_through_matmul_and_max_reduction():
    A = tg.placeholder((2, 3), dtype=F64, name="A")
    k = tg.reduce_axis((0, 3), name="k")
    s = tg.compute((2,), lambda i: tg.max(tg.exp(A[i, k]), axis=k), name="s")
    r = tg.reduce_axis((0, 2), name="r")
    L = tg.compute((), lambda: tg.sum(s[r] * s[r], axis=r), name="L")
    (gA,) = tg.differentiate(L, [A])
    assert check_grad(gA, [A], head="random", rng=0) < 1e-6


def test_default_head_is_gradient_of_sum_not_a_jacobian():
    x = tg.placeholder((3,), dtype=F64, name="x")
    y = tg.compute((4, 3), lambda i, j: x[j] * tg.cast(i, F64), name="y")
    (dx,) = tg.differentiate(y, [x])
    assert dx.shape == (3,)
    assert tg.evaluate(dx, {x: np.zeros(3)}).tolist() == [6.0, 6.0, 6.0]
    # the default head is the constant 1 inline: no stage of the gradient has y's shape
    assert all(t.shape != y.shape for t in tg.topological_order([dx]))


def test_head_given():
    x = tg.placeholder((3,), dtype=F64, name="x")
    y = tg.compute((3,), lambda i: x[i] * x[i], name="y")
    H = tg.placeholder((3,), dtype=F64, name="H")
    res = tg.differentiate(y, x, head=H)
    assert res.adjoints[y] is H and res.head is H
    got = tg.evaluate(res[0], {x: np.array([1.0, 2.0, 3.0]), H: np.array([1.0, 0.0, -1.0])})
    assert got.tolist() == [2.0, 0.0, -6.0]


def test_jacobian_shape_and_values():
    x = tg.placeholder((3,), dtype=F64, name="x")
    W = tg.placeholder((2, 3), dtype=F64, name="W")
    k = tg.reduce_axis((0, 3), name="k")
    y = tg.compute((2,), lambda i: tg.sum(W[i, k] * x[k], axis=k), name="y")
    z = tg.compute((2,), lambda i: tg.tanh(y[i]), name="z")
    J = tg.jacobian(z, x)
    assert J.shape == (2, 3)
    w = _rng().normal(size=(2, 3))
    xv = _rng(1).normal(size=3)
    expected = (1 - np.tanh(w @ xv) ** 2)[:, None] * w
    assert np.allclose(tg.evaluate(J, {x: xv, W: w}), expected)
    assert tg.jacobian(z, W).shape == (2, 2, 3)
    assert tg.jacobian(x, x).shape == (3, 3)
    assert np.all(tg.evaluate(tg.jacobian(x, x), {}) == np.eye(3))


def test_inputs_default_and_single_tensor_and_adjoints():
    x = tg.placeholder((3,), dtype=F64, name="x")
    w = tg.placeholder((3,), dtype=F64, name="w")
    h = tg.compute((3,), lambda i: x[i] * w[i], name="h")
    y = tg.compute((3,), lambda i: tg.exp(h[i]), name="y")
    res = tg.differentiate(y)
    assert res.inputs == [x, w] and len(res) == 2
    dx, dw = res
    assert res.result == [dx, dw]
    assert set(res.adjoints) == {x, w, h, y}
    assert tg.differentiate(y, w)[0].shape == (3,)
    # differentiating with respect to an intermediate tensor
    (dh,) = tg.differentiate(y, [h])
    assert np.allclose(tg.evaluate(dh, {x: np.zeros(3), w: np.zeros(3)}), 1.0)


def test_gradient_structure_is_sum_over_consumer_axes_of_head_times_selects():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    B = tg.placeholder((4, 2), dtype=F64, name="B")
    k = tg.reduce_axis((0, 4), name="k")
    C = tg.compute((3, 2), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    H = tg.placeholder((3, 2), dtype=F64, name="H")
    dA, dB = tg.differentiate(C, [A, B], head=H, optimize=False)
    assert str(dA.op.body) == ("sum(H[i, j] * sum(((i == i0 && k == i1) ? 1.0 : 0.0) * "
                               "B[k, j], k in [0, 4)), i in [0, 3), j in [0, 2))")
    assert [ax.name for ax in dA.op.axes] == ["i0", "i1"]


def test_gradient_can_be_evaluated_and_differentiated_again():
    x = tg.placeholder((2,), dtype=F64, name="x")
    y = tg.compute((2,), lambda i: x[i] ** 3.0, name="y")
    (g,) = tg.differentiate(y, [x])
    (gg,) = tg.differentiate(g, [x])
    assert np.allclose(tg.evaluate(gg, {x: np.array([1.0, 2.0])}), [6.0, 12.0])


def test_errors():
    x = tg.placeholder((3,), dtype=F64, name="x")
    y = tg.compute((3,), lambda i: x[i] * 2.0, name="y")
    with pytest.raises(tg.TegradError, match="not a tensor"):
        tg.differentiate(y, [x, 3])
    with pytest.raises(tg.TegradError, match="must be a tensor"):
        tg.differentiate(np.ones(3), [x])
    with pytest.raises(tg.ShapeError, match="shape"):
        tg.differentiate(y, [x], head=tg.placeholder((4,), dtype=F64))
    with pytest.raises(tg.DTypeError, match="dtype"):
        tg.differentiate(y, [x], head=tg.placeholder((3,), dtype="float32"))
    with pytest.raises(tg.TegradError, match="head"):
        tg.differentiate(y, [x], head=np.ones(3))
    yi = tg.compute((3,), lambda i: tg.cast(x[i], "int32"), name="yi")
    with pytest.raises(tg.DTypeError, match="yi"):
        tg.differentiate(yi, [x])
    with pytest.raises(tg.TegradError, match="manual"):
        tg.differentiate(y, [x], manual={"y": lambda o, i, h: h})


def test_check_grad_detects_a_wrong_gradient():
    x = tg.placeholder((3,), dtype=F64, name="x")
    y = tg.compute((3,), lambda i: x[i] * x[i], name="y")
    wrong = {(y, x): lambda out, inp, head: tg.compute((3,), lambda i: head[i] * x[i],
                                                        name="wrong")}
    import tegrad.testing as tt
    original = tt._gradients

    def patched(output, inputs, feed, head_value):
        h = tg.placeholder(output.shape, output.dtype, name="h")
        grads = tg.differentiate(output, inputs, head=h, manual=wrong).result
        return [np.asarray(v) for v in tg.evaluate(grads, {**feed, h: head_value})]

    tt._gradients = patched
    try:
        with pytest.raises(AssertionError, match="'x' at"):
            check_grad(y, [x], rng=0)
        with pytest.raises(AssertionError):
            check_vjp(y, [x], rng=0)
    finally:
        tt._gradients = original


def test_check_vjp_passes_on_a_program():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 4), name="k")
    y = tg.compute((3,), lambda i: tg.log(tg.sum(tg.exp(A[i, k]), axis=k)), name="y")
    assert check_vjp(y, [A], rng=0) < 1e-6


def test_check_grad_needs_placeholders_and_int_feeds():
    x = tg.placeholder((3,), dtype=F64, name="x")
    I = tg.placeholder((3,), dtype="int32", name="I")
    y = tg.compute((3,), lambda i: x[I[i]], name="y")
    with pytest.raises(tg.FeedError, match="'I'"):
        check_grad(y, [x])
    assert check_grad(y, [x], feed={I: np.array([0, 0, 2], "int32")}) < 1e-6
    with pytest.raises(tg.TegradError, match="placeholders"):
        check_grad(y, [y])


def test_check_grad_runs_float32_programs_in_float64():
    x = tg.placeholder((2, 3), name="x")
    I = tg.placeholder((2,), dtype="int32", name="I")
    k = tg.reduce_axis((0, 3), name="k")
    y = tg.compute((2,), lambda i: tg.log(tg.sum(tg.exp(x[i, k]), axis=k)) - x[i, I[i]],
                   name="y")
    feed = {I: np.array([2, 0], "int32"), x: np.ones((2, 3), "float32")}
    assert check_grad(y, [x], feed=feed, head="random", rng=0) < 1e-6
    assert check_vjp(y, [x], feed=feed, rng=0) < 1e-6
    (y64,), mapping = tg.testing.as_float64([y])
    assert y64.dtype == F64 and mapping[x].dtype == F64 and mapping[I] is I


def _tanh_of_matmul():
    x = tg.placeholder((3, 4), dtype="float64", name="x")
    w = tg.placeholder((4, 2), dtype="float64", name="w")
    k = tg.reduce_axis((0, 4), name="k")
    y1 = tg.compute((3, 2), lambda i, j: tg.tanh(tg.sum(x[i, k] * w[k, j], axis=k)), name="y1")
    loss = tg.compute((3, 2), lambda i, j: y1[i, j] * y1[i, j], name="loss")
    rng = np.random.default_rng(3)
    return x, w, y1, loss, {x: rng.standard_normal((3, 4)), w: rng.standard_normal((4, 2))}


def test_manual_override_of_a_stage_whose_reduction_sits_inside_an_expression():
    x, w, y1, loss, feed = _tanh_of_matmul()

    def marker(out, inp, head):
        # a recognisable value: it must appear in the gradient as it is
        return tg.compute(inp.shape, lambda i, m: tg.const(7.0, "float64"),
                          name="marker")

    res = tg.differentiate(loss, [x, w], manual={(y1, x): marker})
    assert tg.evaluate(res[0], feed).tolist() == [[7.0] * 4] * 3
    # the other input's gradient is untouched by the override
    np.testing.assert_allclose(tg.evaluate(res[1], feed),
                               tg.evaluate(tg.differentiate(loss, [w])[0], feed))
    (direct,) = tg.differentiate(y1, [x], manual={(y1, x): marker})
    assert tg.evaluate(direct, feed).tolist() == [[7.0] * 4] * 3


def test_manual_override_with_the_true_vjp_gives_the_true_gradient():
    x, w, y1, loss, feed = _tanh_of_matmul()
    calls = []

    def vjp(out, inp, head):
        calls.append((out, inp))
        j = tg.reduce_axis((0, 2), name="j")
        return tg.compute((3, 4), lambda i, m: tg.sum(
            head[i, j] * (1.0 - out[i, j] * out[i, j]) * w[m, j], axis=j), name="dx_manual")

    res = tg.differentiate(loss, [x, w], manual={(y1, x): vjp})
    assert calls == [(y1, x)]
    # central finite differences of sum(loss) with respect to x
    numeric = np.zeros(x.shape)
    for pos in np.ndindex(*x.shape):
        shifted = {}
        for sign in (1, -1):
            xs = feed[x].copy()
            xs[pos] += sign * 1e-6
            shifted[sign] = tg.evaluate(loss, {x: xs, w: feed[w]}).sum()
        numeric[pos] = (shifted[1] - shifted[-1]) / 2e-6
    np.testing.assert_allclose(tg.evaluate(res[0], feed), numeric, rtol=1e-6, atol=1e-8)
