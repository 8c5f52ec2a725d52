"""The normalisation pass: reductions hoisted into their own stages."""
import numpy as np

import tegrad as tg
from tegrad.autodiff.normalize import normalize
from tegrad.testing import check_grad

F64 = "float64"


def _lines(t):
    return tg.format(t).splitlines()


def test_program_without_nested_reductions_is_kept():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 4), name="k")
    s = tg.compute((3,), lambda i: tg.sum(A[i, k], axis=k), name="s")
    y = tg.compute((3,), lambda i: tg.exp(s[i]), name="y")
    (y2,), mapping = normalize([y])
    assert y2 is y and mapping == {}


def test_equal_reductions_share_one_stage():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 4), name="k")
    y = tg.compute((3,), lambda i: tg.sum(A[i, k], axis=k) * tg.sum(A[i, k], axis=k), name="y")
    (y2,), _ = normalize([y])
    assert _lines(y2)[1:] == ["y_red0[i] = sum(A[i, k], k in [0, 4))",
                              "y[i] = y_red0[i] * y_red0[i]"]
    assert check_grad(y, [A], head="random", rng=0) < 1e-6


def test_shifted_reduce_ranges_index_the_stage_from_zero():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    m = tg.reduce_axis((1, 4), name="m")
    n = tg.reduce_axis((1, 3), name="n")
    y = tg.compute((2,), lambda i: tg.sum(
        tg.exp(tg.max(A[n, m] * tg.cast(i + 1, F64), axis=m)), axis=n), name="y")
    (y2,), _ = normalize([y])
    assert _lines(y2)[1:] == ["y_red0[i, n] = max(A[n + 1, m] * float64(i + 1), m in [1, 4))",
                              "y[i] = sum(exp(y_red0[i, n - 1]), n in [1, 3))"]
    assert check_grad(y, [A], head="random", rng=0) < 1e-6


def test_reduction_in_init_is_hoisted():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    c = tg.placeholder((3,), dtype=F64, name="c")
    k = tg.reduce_axis((0, 4), name="k")
    y = tg.compute((3,), lambda i: tg.max(A[i, k], axis=k,
                                          init=tg.sum(A[i, k] * c[i], axis=k) * 0.2), name="y")
    (y2,), _ = normalize([y])
    assert _lines(y2)[-1] == "y[i] = max(A[i, k], k in [0, 4), init y_red0[i] * 0.2)"
    assert check_grad(y, [A, c], head="random", rng=0) < 1e-6


def test_consumers_of_rebuilt_stages_are_rebuilt_and_adjoints_keyed_by_originals():
    A = tg.placeholder((3, 4), dtype=F64, name="A")
    k = tg.reduce_axis((0, 4), name="k")
    s = tg.compute((3,), lambda i: tg.log(tg.sum(tg.exp(A[i, k]), axis=k)), name="s")
    y = tg.compute((3,), lambda i: s[i] * 2.0, name="y")
    (y2,), mapping = normalize([y])
    assert y2 is not y and id(s) in mapping
    assert [t.name for t in tg.topological_order(y2)] == ["A", "s_red0", "s", "y"]
    res = tg.differentiate(y, [A])
    assert set(res.adjoints) == {A, s, y}
    assert check_grad(y, [A], head="random", rng=0) < 1e-6


def test_scatter_output_and_its_jacobian():
    I = tg.placeholder((4,), dtype="int32", name="I")
    g = tg.placeholder((4,), dtype=F64, name="g")
    S = tg.scatter_add((3,), (4,), lambda p: (I[p],), lambda p: g[p] * g[p], name="S")
    feed = {I: np.array([0, 2, 2, 1], "int32")}
    assert check_grad(S, [g], feed=feed, head="random", rng=0) < 1e-6
    J = tg.evaluate(tg.jacobian(S, g), {**feed, g: np.arange(4.0)})
    assert J.tolist() == [[0, 0, 0, 0], [0, 0, 0, 6], [0, 2, 4, 0]]
