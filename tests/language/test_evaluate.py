"""The reference evaluator against numpy, node kind by node kind."""
import math

import numpy as np
import pytest

import tegrad as tg
import tegrad.reference.evaluator as tg_evaluate

RNG = np.random.default_rng(0)


def _vec(n=7, dtype="float64", name="x"):
    return tg.placeholder((n,), dtype=dtype, name=name)


def _run(fn, values, dtype="float64"):
    x = _vec(len(values), dtype)
    y = tg.compute((len(values),), lambda i: fn(x[i]), name="y")
    return tg.evaluate(y, {x: np.asarray(values, dtype=dtype)})


UNARY = [
    (tg.exp, np.exp, [-2.0, -0.5, 0.0, 1.5]),
    (tg.log, np.log, [0.1, 1.0, 3.0]),
    (tg.sqrt, np.sqrt, [0.0, 0.25, 4.0]),
    (tg.tanh, np.tanh, [-3.0, 0.0, 0.7]),
    (tg.sigmoid, lambda v: 1 / (1 + np.exp(-v)), [-800.0, -2.0, 0.0, 3.0, 800.0]),
    (tg.sin, np.sin, [-1.0, 0.0, 2.0]),
    (tg.cos, np.cos, [-1.0, 0.0, 2.0]),
    (tg.erf, np.vectorize(math.erf), [-1.5, 0.0, 0.3, 2.0]),
    (tg.abs, np.abs, [-2.5, 0.0, 3.0]),
    (tg.sign, np.sign, [-2.5, 0.0, 3.0]),
    (tg.floor, np.floor, [-2.5, -0.5, 0.0, 1.7]),
    (tg.ceil, np.ceil, [-2.5, -0.5, 0.0, 1.2]),
    (tg.round, np.round, [-2.5, -1.5, -0.4, 0.5, 1.5, 2.5, 2.6]),
    (tg.trunc, np.trunc, [-2.7, -0.5, 0.0, 1.7]),
    (lambda v: -v, np.negative, [-1.0, 2.0]),
]


@pytest.mark.parametrize("fn, ref, values", UNARY, ids=[str(i) for i in range(len(UNARY))])
def test_unary_intrinsics(fn, ref, values):
    with np.errstate(over="ignore"):
        expected = ref(np.asarray(values))
    np.testing.assert_allclose(_run(fn, values), expected, rtol=1e-12, atol=1e-300)


def test_round_is_half_to_even():
    np.testing.assert_array_equal(_run(tg.round, [0.5, 1.5, 2.5, -0.5]), [0.0, 2.0, 2.0, -0.0])


def test_power_and_binary_arithmetic():
    a = RNG.uniform(0.5, 2.0, 6)
    b = RNG.uniform(-1.0, 1.0, 6)
    A, B = _vec(6, name="A"), _vec(6, name="B")
    cases = {
        "add": (lambda u, v: u + v, a + b), "sub": (lambda u, v: u - v, a - b),
        "mul": (lambda u, v: u * v, a * b), "div": (lambda u, v: u / v, a / b),
        "pow": (lambda u, v: tg.power(u, v), a ** b), "min": (tg.min, np.minimum(a, b)),
        "max": (tg.max, np.maximum(a, b)), "rsub": (lambda u, v: 1.0 - u, 1.0 - a),
        "rdiv": (lambda u, v: 2.0 / u, 2.0 / a), "pow2": (lambda u, v: u ** 2, a ** 2),
    }
    for name, (fn, expected) in cases.items():
        y = tg.compute((6,), lambda i: fn(A[i], B[i]), name=name)
        np.testing.assert_allclose(tg.evaluate(y, {A: a, B: b}), expected, rtol=1e-12,
                                   err_msg=name)


def test_floor_division_and_modulo_follow_python_on_negative_operands():
    pairs = [(a, b) for a in range(-9, 10) for b in (-4, -3, -2, 2, 3, 5)]
    n = len(pairs)
    A = tg.placeholder((n,), dtype="int32", name="A")
    B = tg.placeholder((n,), dtype="int32", name="B")
    q = tg.compute((n,), lambda i: A[i] // B[i], name="q")
    r = tg.compute((n,), lambda i: tg.floormod(A[i], B[i]), name="r")
    q2 = tg.compute((n,), lambda i: tg.floordiv(A[i], B[i]), name="q2")
    feed = {A: np.array([p[0] for p in pairs], dtype="int32"),
            B: np.array([p[1] for p in pairs], dtype="int32")}
    qv, rv, q2v = tg.evaluate([q, r, q2], feed)
    assert qv.tolist() == [a // b for a, b in pairs]
    assert rv.tolist() == [a % b for a, b in pairs]
    assert q2v.tolist() == qv.tolist()
    assert tg.evaluate(tg.compute((), lambda: tg.const(-7) // 2), {}) == -4
    assert tg.evaluate(tg.compute((), lambda: tg.const(-7) % 2), {}) == 1


def test_index_arithmetic_on_axes():
    y = tg.compute((5, 3), lambda i, j: (i - 7) // 2 * 10 + (i * 3 - j) % 4, name="y")
    expected = [[(i - 7) // 2 * 10 + (i * 3 - j) % 4 for j in range(3)] for i in range(5)]
    assert tg.evaluate(y, {}).tolist() == expected


def test_comparisons_logic_select_and_cast():
    a = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    x = _vec(5)
    ops = {
        "lt": (lambda v: v < 0.0, a < 0), "le": (lambda v: v <= 0.0, a <= 0),
        "gt": (lambda v: v > 0.0, a > 0), "ge": (lambda v: v >= 0.0, a >= 0),
        "eq": (lambda v: v == 0.0, a == 0), "ne": (lambda v: v != 0.0, a != 0),
        "and": (lambda v: (v > -2.0) & (v < 2.0), (a > -2) & (a < 2)),
        "or": (lambda v: (v < -1.0) | (v > 1.0), (a < -1) | (a > 1)),
        "not": (lambda v: ~(v > 0.0), ~(a > 0)),
        "all": (lambda v: tg.all(v > -2.0, v < 2.0, v != 0.0), (a > -2) & (a < 2) & (a != 0)),
        "any": (lambda v: tg.any(v < -1.0, v > 1.0), (a < -1) | (a > 1)),
    }
    for name, (fn, expected) in ops.items():
        y = tg.compute((5,), lambda i: fn(x[i]), name=name)
        assert y.dtype == "bool"
        np.testing.assert_array_equal(tg.evaluate(y, {x: a}), expected, err_msg=name)
    sel = tg.compute((5,), lambda i: tg.if_then_else(x[i] > 0.0, x[i] * 10.0, -x[i]), name="s")
    np.testing.assert_array_equal(tg.evaluate(sel, {x: a}), np.where(a > 0, a * 10, -a))
    c = tg.compute((5,), lambda i: tg.cast(x[i] * 1.5, "int32"), name="c")
    assert tg.evaluate(c, {x: a}).tolist() == [-3, -1, 0, 1, 3]
    assert tg.evaluate(c, {x: a}).dtype == np.int32
    f = tg.compute((5,), lambda i: tg.cast(i, "float32") / 2, name="f")
    assert tg.evaluate(f, {}).tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_all_and_any_of_nothing():
    assert bool(tg.evaluate(tg.compute((), lambda: tg.all()), {})) is True
    assert bool(tg.evaluate(tg.compute((), lambda: tg.any()), {})) is False


def test_select_evaluates_only_the_taken_branch():
    x = _vec(5)
    padded = tg.compute((9,), lambda i: tg.if_then_else(tg.all(i >= 2, i < 7), x[i - 2], 0.0),
                        name="padded")
    a = np.arange(1.0, 6.0)
    np.testing.assert_array_equal(tg.evaluate(padded, {x: a}), np.pad(a, 2))
    guarded = tg.compute((9,), lambda i: tg.if_then_else((i >= 2) & (x[tg.min(i, 4)] > 0.0),
                                                         1.0, 0.0), name="g")
    assert tg.evaluate(guarded, {x: a}).sum() == 7


def test_matmul_and_multi_axis_reductions():
    A = tg.placeholder((5, 4, 3), dtype="float64", name="A")
    B = tg.placeholder((4, 3, 6), dtype="float64", name="B")
    k = tg.reduce_axis((0, 4), name="k")
    l = tg.reduce_axis((0, 3), name="l")
    C = tg.compute((5, 6), lambda i, j: tg.sum(A[i, k, l] * B[k, l, j], axis=[k, l]), name="C")
    a, b = RNG.standard_normal((5, 4, 3)), RNG.standard_normal((4, 3, 6))
    np.testing.assert_allclose(tg.evaluate(C, {A: a, B: b}), np.einsum("ikl,klj->ij", a, b))
    for red, ref in [(tg.sum, np.sum), (tg.prod, np.prod), (tg.max, np.max), (tg.min, np.min)]:
        k2 = tg.reduce_axis((0, 4), name="k2")
        l2 = tg.reduce_axis((0, 3), name="l2")
        R = tg.compute((5,), lambda i: red(A[i, k2, l2], axis=[k2, l2]), name="R")
        np.testing.assert_allclose(tg.evaluate(R, {A: a}), ref(a, axis=(1, 2)), err_msg=red.name)


def test_reduction_with_where_and_init():
    x = _vec(6)
    a = np.array([3.0, -1.0, 4.0, 1.0, -5.0, 9.0])
    k = tg.reduce_axis((0, 6), name="k")
    s = tg.compute((), lambda: tg.sum(x[k], axis=k, where=k % 2 == 0, init=100.0), name="s")
    assert tg.evaluate(s, {x: a}) == pytest.approx(100 + 3 + 4 - 5)
    m = tg.compute((), lambda: tg.max(x[k], axis=k, where=x[k] < 4.0), name="m")
    assert tg.evaluate(m, {x: a}) == 3.0
    m0 = tg.compute((), lambda: tg.max(x[k], axis=k, where=k > 10), name="m0")
    assert tg.evaluate(m0, {x: a}) == -np.inf
    p = tg.compute((), lambda: tg.prod(x[k], axis=k, where=k < 3, init=2.0), name="p")
    assert tg.evaluate(p, {x: a}) == pytest.approx(2 * 3 * -1 * 4)
    # init may depend on the output axes
    y = tg.compute((3,), lambda i: tg.min(x[k], axis=k, init=x[i] - 10.0), name="y")
    np.testing.assert_array_equal(tg.evaluate(y, {x: a}), np.minimum(a[:3] - 10, a.min()))


def test_custom_reducers():
    x = _vec(6)
    a = np.array([3.0, -7.0, 4.0, 1.0, -5.0, 2.0])
    absmax = tg.comm_reducer(lambda u, v: tg.max(tg.abs(u), tg.abs(v)), lambda dt: 0.0,
                             name="absmax")
    k = tg.reduce_axis((0, 6), name="k")
    y = tg.compute((), lambda: absmax(x[k], axis=k), name="y")
    assert tg.evaluate(y, {x: a}) == 7.0
    norm = tg.comm_reducer(lambda u, v: tg.sqrt(u * u + v * v), lambda dt: 0.0, name="norm")
    z = tg.compute((), lambda: norm(x[k], axis=k, where=k != 1, init=2.0), name="z")
    assert tg.evaluate(z, {x: a}) == pytest.approx(math.sqrt(4 + 9 + 16 + 1 + 25 + 4))
    assert "absmax(x[k], k in [0, 6))" in tg.format(y)
    logsumexp = tg.comm_reducer(lambda u, v: tg.log(tg.exp(u) + tg.exp(v)),
                                lambda dt: -np.inf, name="lse")
    M = tg.placeholder((3, 4), dtype="float64", name="M")
    j = tg.reduce_axis((0, 4), name="j")
    l = tg.compute((3,), lambda i: logsumexp(M[i, j], axis=j), name="l")
    m = RNG.standard_normal((3, 4))
    np.testing.assert_allclose(tg.evaluate(l, {M: m}), np.log(np.exp(m).sum(1)))


def test_nested_reductions_and_reductions_inside_expressions():
    X = tg.placeholder((4, 5), dtype="float64", name="X")
    a = RNG.standard_normal((4, 5))
    k = tg.reduce_axis((0, 5), name="k")
    k2 = tg.reduce_axis((0, 5), name="k2")
    sm = tg.compute((4, 5), lambda i, j: tg.exp(X[i, j] - tg.max(X[i, k], axis=k))
                    / tg.sum(tg.exp(X[i, k2] - tg.max(X[i, k], axis=k)), axis=k2), name="sm")
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(tg.evaluate(sm, {X: a}), e / e.sum(1, keepdims=True))
    r = tg.reduce_axis((0, 4), name="r")
    c = tg.reduce_axis((0, 5), name="c")
    nested = tg.compute((), lambda: tg.max(tg.sum(X[r, c], axis=c), axis=r), name="nested")
    assert tg.evaluate(nested, {X: a}) == pytest.approx(a.sum(1).max())


def test_triangular_reduction_bounds():
    X = tg.placeholder((6,), dtype="float64", name="X")
    a = RNG.standard_normal(6)
    i_bound = tg.Var("i")
    k = tg.reduce_axis((0, i_bound + 1), name="k")
    cumsum = tg.compute((6,), lambda i: tg.sum(X[k], axis=k), name="cumsum")
    np.testing.assert_allclose(tg.evaluate(cumsum, {X: a}), np.cumsum(a))
    w = tg.reduce_axis((tg.max(i_bound - 1, 0), tg.min(i_bound + 2, 6)), name="w")
    window = tg.compute((6,), lambda i: tg.sum(X[w], axis=w), name="window")
    expected = [a[max(i - 1, 0):min(i + 2, 6)].sum() for i in range(6)]
    np.testing.assert_allclose(tg.evaluate(window, {X: a}), expected)


def test_scalar_compute_and_scalar_placeholder():
    s = tg.placeholder((), dtype="float64", name="s")
    x = _vec(4)
    k = tg.reduce_axis((0, 4), name="k")
    loss = tg.compute((), lambda: tg.sum(x[k] * s[()], axis=k), name="loss")
    assert loss.shape == ()
    out = tg.evaluate(loss, {x: np.arange(4.0), s: np.array(2.0)})
    assert out.shape == () and out == 12.0
    assert tg.evaluate(tg.compute((), lambda: tg.const(1.5, "float64")), {}) == 1.5


def test_scatter_add_accumulates_repeated_indices():
    I = tg.placeholder((6,), dtype="int32", name="I")
    g = tg.placeholder((6,), dtype="float64", name="g")
    base = tg.placeholder((4,), dtype="float64", name="base")
    H = tg.scatter_add((4,), (6,), lambda i: (I[i],), lambda i: g[i], name="H")
    H2 = tg.scatter_add((4,), (6,), lambda i: (I[i],), lambda i: g[i] * 2.0,
                        where=lambda i: i % 2 == 0, init=base, name="H2")
    idx = np.array([0, 3, 3, 1, 0, 3], dtype="int32")
    gv = np.arange(1.0, 7.0)
    h, h2 = tg.evaluate([H, H2], {I: idx, g: gv, base: np.ones(4)})
    expected = np.zeros(4)
    np.add.at(expected, idx, gv)
    np.testing.assert_array_equal(h, expected)
    expected2 = np.ones(4)
    np.add.at(expected2, idx[::2], 2 * gv[::2])
    np.testing.assert_array_equal(h2, expected2)
    assert "H[I[i]] += g[i] for i in [0, 6)" in tg.format(H)
    with pytest.raises(tg.OutOfBoundsError, match="H"):
        tg.evaluate(H, {I: np.array([0, 1, 2, 3, 4, 0], dtype="int32"), g: gv})


def test_chunked_evaluation_matches(monkeypatch):
    A = tg.placeholder((9, 5), dtype="float64", name="A")
    B = tg.placeholder((5, 4), dtype="float64", name="B")
    k = tg.reduce_axis((0, 5), name="k")
    C = tg.compute((9, 4), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = RNG.standard_normal((9, 5)), RNG.standard_normal((5, 4))
    monkeypatch.setattr(tg_evaluate, "CHUNK_ELEMENTS", 40)
    np.testing.assert_allclose(tg.evaluate(C, {A: a, B: b}), a @ b)


def test_multiple_outputs_and_dtypes_preserved():
    x = tg.placeholder((3,), dtype="float32", name="x")
    y = tg.compute((3,), lambda i: x[i] * 2, name="y")
    z = tg.compute((3,), lambda i: y[i] + x[i], name="z")
    out = tg.evaluate([y, z], {x: np.ones(3, dtype="float32")})
    assert isinstance(out, list) and len(out) == 2
    assert out[0].dtype == np.float32 and out[1].tolist() == [3.0, 3.0, 3.0]
    assert tg.evaluate(x, {x: np.ones(3, dtype="float32")}).tolist() == [1.0, 1.0, 1.0]


def test_feed_by_name_and_lists():
    x = tg.placeholder((3,), dtype="float64", name="x")
    y = tg.compute((3,), lambda i: x[i] + 1.0, name="y")
    assert tg.evaluate(y, {"x": [1.0, 2.0, 3.0]}).tolist() == [2.0, 3.0, 4.0]


def test_scatter_with_several_targets_accumulates_each():
    from tegrad.ir.tensor import ScatterOp, ScatterTarget, Tensor
    g = tg.placeholder((4,), dtype="float64", name="g")
    i = tg.Var("i")
    targets = [ScatterTarget((i,), g[i]),                        # out[i] += g[i]
               ScatterTarget((i + 1,), g[i] * 10.0, i < 3)]      # out[i + 1] += 10 g[i]
    axes = (tg.IterVar(i, tg.const(0), tg.const(4), "data"),)
    out = Tensor(ScatterOp("out", axes, targets, None), (5,), "float64", "out")
    gv = np.array([1.0, 2.0, 3.0, 4.0])
    expected = np.zeros(5)
    expected[:4] += gv
    expected[1:4] += 10 * gv[:3]
    np.testing.assert_array_equal(tg.evaluate(out, {g: gv}), expected)
    assert tg.format(out).splitlines()[-1] == (
        "out[i] += g[i]; out[i + 1] += g[i] * 10.0 if i < 3 for i in [0, 4)  "
        "(from 0, shape (5,))")
    # one pass over the domain: 4 points, 4 + 3 accumulations and 3 products
    c = tg.cost(out)
    assert (c.iterations, c.flops) == (4, 10)


def test_nested_reduction_with_no_active_point_in_its_outer_axis():
    # where the select holds (i == 0) k has no iterations, so j's extent is never needed
    A = tg.placeholder((4, 4), dtype="float64", name="A")

    def body(i):
        k = tg.reduce_axis((0, i), name="k")
        j = tg.reduce_axis((0, k), name="j")
        return tg.if_then_else(i < 1, tg.sum(A[k, j], axis=[k, j]), tg.const(2.0, "float64"))

    S = tg.compute((4,), body, name="S")
    assert tg.evaluate(S, {A: np.ones((4, 4))}).tolist() == [0.0, 2.0, 2.0, 2.0]


def test_a_reduction_nested_in_one_over_no_point_is_the_identity():
    x = tg.placeholder((4,), dtype="float64", name="x")
    n = tg.placeholder((), dtype="int32", name="n")
    k1 = tg.reduce_axis((0, n[()]), name="k1")
    k2 = tg.reduce_axis((0, k1 + 1), name="k2")
    y = tg.compute((), lambda: tg.sum(tg.sum(x[k2], axis=k2), axis=k1), name="y")
    xs = np.arange(4.0)
    assert tg.evaluate(y, {x: xs, n: 0}) == 0.0
    assert tg.evaluate(y, {x: xs, n: 3}) == 0.0 + 1.0 + 3.0
