"""Gradients of custom reducers: correct, and linear in the reduction's length."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.graph import topological_order
from tegrad.ir.tensor import ScanOp
from tegrad.testing import check_grad

F64 = "float64"
LSE = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                      lambda dtype: tg.min_value(dtype), name="LSE")
LSE_DECLARED = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                               lambda dtype: tg.min_value(dtype), name="LSE_d",
                               derivative=lambda x, y: tg.exp(x - y))
PROD = tg.comm_reducer(lambda a, b: a * b, lambda dtype: 1.0, name="myprod")
SOFTPLUS_MAX = tg.comm_reducer(lambda a, b: a + b + a * b * 0.1, lambda dtype: 0.0, name="mix")


def _scans(tensors):
    return [t for t in topological_order(list(tensors)) if isinstance(t.op, ScanOp)]


@pytest.mark.parametrize("reducer", [LSE, LSE_DECLARED, PROD, SOFTPLUS_MAX])
def test_custom_reducer_gradient_matches_finite_differences(reducer):
    x = tg.placeholder((3, 6), dtype=F64, name="x")
    k = tg.reduce_axis((0, 6), name="k")
    y = tg.compute((3,), lambda i: reducer(x[i, k] * 0.5, axis=k), name="y")
    assert check_grad(y, [x], head="random", rng=2) < 1e-5


@pytest.mark.parametrize("reducer", [LSE, LSE_DECLARED, PROD, SOFTPLUS_MAX])
def test_where_init_and_several_axes(reducer):
    x = tg.placeholder((2, 3, 4), dtype=F64, name="x")
    s = tg.placeholder((2,), dtype=F64, name="s")
    k, m = tg.reduce_axis((1, 3), name="k"), tg.reduce_axis((0, 4), name="m")
    y = tg.compute((2,), lambda i: reducer(x[i, k, m] * 0.5, axis=[k, m], where=k + m != 3,
                                           init=s[i]), name="y")
    res = tg.differentiate(y, [x, s])
    assert len(_scans(res)) == (0 if reducer is LSE_DECLARED else 2)
    assert check_grad(y, [x, s], head="random", rng=3) < 1e-5


def test_custom_reducer_gradient_is_linear_in_the_reduction_length():
    ratios = []
    for n in (4, 16, 64, 256):
        x = tg.placeholder((2, n), dtype=F64, name="x")
        k = tg.reduce_axis((0, n), name="k")
        y = tg.compute((2,), lambda i: LSE(x[i, k], axis=k), name="y")
        head = tg.placeholder((2,), dtype=F64, name="head")
        (dx,) = tg.differentiate(y, [x], head=head)
        # a prefix scan, a suffix scan and dx: 3 points per element of x
        assert tg.cost(dx).iterations == 3 * 2 * n
        ratios.append(tg.cost(dx).iterations / tg.cost(y).iterations)
    assert max(ratios) < 3


def test_a_declared_derivative_reads_only_the_forward_value():
    x = tg.placeholder((2, 64), dtype=F64, name="x")
    k = tg.reduce_axis((0, 64), name="k")
    y = tg.compute((2,), lambda i: LSE_DECLARED(x[i, k], axis=k), name="y")
    (dx,) = tg.differentiate(y, [x])
    assert not _scans([dx])
    # the forward reduction (2 + 128) and dx (128)
    assert tg.cost(dx).iterations == 2 + 128 + 128
    xs = np.random.default_rng(0).standard_normal((2, 64))
    softmax = np.exp(xs - np.log(np.exp(xs).sum(axis=1, keepdims=True)))
    np.testing.assert_allclose(tg.evaluate(dx, {x: xs}), softmax, rtol=1e-12)


def test_a_product_reducer_over_a_symmetric_read():
    A = tg.placeholder((10, 10), dtype=F64, name="A")
    k = tg.reduce_axis((0, 10), name="k")
    y = tg.compute((10,), lambda i: PROD(A[i, k] + A[k, i], axis=k), name="y")
    head = tg.placeholder((10,), dtype=F64, name="head")
    (dA,) = tg.differentiate(y, [A], head=head)
    # two scans over (i, q) and dA: 3 * 100 (the quadratic gradient costs 2,100)
    assert tg.cost(dA).iterations == 300
    a = np.random.default_rng(1).uniform(0.5, 1.5, (10, 10))
    assert check_grad(y, [A], feed={A: a}, head="random", rng=1) < 1e-5


def test_a_reduction_over_a_single_point_has_no_statistics_stages():
    x = tg.placeholder((1, 2, 6, 6), dtype=F64, name="x")
    out = tg.nn.max_pool2d(x, 1)
    head = tg.placeholder(out.shape, dtype=F64, name="head")
    (dx,) = tg.differentiate(out, [x], head=head)
    assert tg.cost(dx).iterations == x.size  # dx = head, as a person writes it
    assert check_grad(out, [x], head="random", rng=0) < 1e-6
    k = tg.reduce_axis((0, 1), name="k")
    y = tg.compute((4,), lambda i: PROD(x[0, 0, i, k] * 2.0, axis=k, init=x[0, 0, i, 5]),
                   name="y")
    (dy,) = tg.differentiate(y, [x])
    assert not _scans([dy])
    assert check_grad(y, [x], head="random", rng=0) < 1e-6


def test_a_declared_derivative_must_take_two_arguments():
    with pytest.raises(tg.TegradError, match=r"'bad'.*derivative must take 2"):
        tg.comm_reducer(lambda a, b: a + b, lambda dtype: 0.0, name="bad",
                        derivative=lambda x: x)


@pytest.mark.parametrize("reducer", [LSE, PROD])
def test_second_order_through_the_scans(reducer):
    x = tg.placeholder((2, 4), dtype=F64, name="x")
    k = tg.reduce_axis((0, 4), name="k")
    y = tg.compute((2,), lambda i: reducer(x[i, k] * 0.5, axis=k), name="y")
    (dx,) = tg.differentiate(y, [x])
    assert len(_scans([dx])) == 2
    assert check_grad(dx, [x], head="random", rng=0) < 1e-5
    res = tg.differentiate(dx, [x])
    xs = np.random.default_rng(4).standard_normal((2, 4))
    np.testing.assert_allclose(tg.evaluate(res[0], {x: xs}),
                               tg.evaluate(res.naive[0], {x: xs}), rtol=1e-10, atol=1e-12)
