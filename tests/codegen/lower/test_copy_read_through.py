"""Copies (reshapes, transposes, slices) read by products are read through: the product
reads the copied tensor at the copy's element offsets, and the copy's stage is gone.
Results against tg.evaluate; gradients against finite differences."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn, ops
from tegrad.codegen.lower.product_plans import detect_contraction
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import MatrixProduct, Store
from tegrad.ir.errors import TegradError

from support.compare import check_build, feed_of


def stores_to(f):
    """The names of the buffers a compiled function's loops store to."""
    return {s.buffer.name for s in walk_stmts(f.kernel.body) if type(s) is Store}


def product_operands(f):
    return {b.name for s in walk_stmts(f.kernel.body) if type(s) is MatrixProduct
            for b in (s.a, s.b)}


def test_a_flatten_between_a_conv_and_a_dense_is_read_through_both_ways():
    x = tg.placeholder((8, 3, 12, 12), name="x")
    labels = tg.placeholder((8,), dtype="int64", name="labels")
    wc = tg.placeholder((6, 3, 3, 3), name="wc")
    wd = tg.placeholder((10, 6 * 10 * 10), name="wd")
    loss = nn.softmax_cross_entropy(nn.dense(ops.flatten(nn.conv2d(x, wc)), wd), labels)
    grads = tg.differentiate(loss, [wc, wd])
    arrays = feed_of([x, wc, wd])
    arrays.insert(1, np.random.default_rng(1).integers(0, 10, 8))
    f = check_build([x, labels, wc, wd], [loss, *grads], arrays, rtol=2e-4)
    # no loop copies the conv's output into the flat layout, nor the gradient back
    assert not {"flatten", "dconv2d"} & stores_to(f)
    assert "conv2d" in product_operands(f) and "dflatten" in product_operands(f)
    assert all(b.name not in ("flatten", "dconv2d") for b in f.kernel.temps)


def test_a_transposed_operand_is_read_with_its_strides():
    a = tg.placeholder((40, 24), dtype="float64", name="a")
    b = tg.placeholder((40, 33), dtype="float64", name="b")
    out = ops.matmul(ops.transpose(a), b)
    f = check_build([a, b], [out], feed_of([a, b]), rtol=1e-12)
    assert not f.kernel.temps and not stores_to(f) - {"matmul"}
    assert product_operands(f) == {"a", "b"}


def test_the_offset_of_an_unravelled_read_is_affine():
    x = tg.placeholder((4, 6, 10), name="x")
    w = tg.placeholder((60, 5), name="w")
    k = tg.reduce_axis((0, 60), name="k")
    through = tg.compute((4, 5), lambda i, j: tg.sum(x[i, k // 10, k % 10] * w[k, j], axis=k))
    c = detect_contraction(through)
    assert c is not None and c.a.tensor is x
    assert c.a.strides == {"i": 60, "k": 1} and c.a.offset == 0


def test_an_offset_that_is_not_affine_keeps_the_copy():
    x = tg.placeholder((6, 8), dtype="float64", name="x")
    # the transpose is computed inside the reshape, which stays: x's offset would be
    # 8*((12i + k) % 6) + (12i + k) // 6
    flat = ops.reshape(ops.transpose(x), (4, 12))
    w = tg.placeholder((12, 20), dtype="float64", name="w")
    f = check_build([x, w], [ops.matmul(flat, w)], feed_of([x, w]), rtol=1e-12)
    assert stores_to(f) == {"reshape"} and product_operands(f) == {"reshape", "w"}
    k = tg.reduce_axis((0, 12), name="k")
    mixed = tg.compute((2, 7), lambda i, j: tg.sum(x[k % 3, k // 3] * w[k % 6, j], axis=k))
    assert detect_contraction(mixed) is None


def test_a_copy_that_reads_outside_its_tensor_is_not_read_through():
    x = tg.placeholder((10, 8), dtype="float64", name="x")
    shifted = tg.compute((10, 8), lambda i, j: x[i + 1, j], name="shifted")
    w = tg.placeholder((8, 20), dtype="float64", name="w")
    f = tg.build([x, w], [ops.matmul(shifted, w)])
    assert "shifted" in stores_to(f)
    with pytest.raises(TegradError, match="shifted|x"):
        f(*feed_of([x, w]))


def test_a_copy_read_by_another_stage_too_is_kept():
    x = tg.placeholder((6, 5, 4), dtype="float64", name="x")
    flat = ops.reshape(x, (6, 20))
    w = tg.placeholder((20, 9), dtype="float64", name="w")
    out = ops.matmul(flat, w)
    other = ops.exp(flat)
    f = check_build([x, w], [out, other], feed_of([x, w]), rtol=1e-12)
    assert "reshape" in stores_to(f)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 5), min_size=2, max_size=4), st.integers(1, 9),
       st.sampled_from(["float32", "float64"]), st.booleans())
def test_property_a_reshape_into_a_product_equals_the_evaluator(shape, n, dtype, grad):
    shape = tuple(shape)
    x = tg.placeholder(shape, dtype=dtype, name="x")
    rows = shape[0]
    flat = ops.reshape(x, (rows, -1))
    w = tg.placeholder((flat.shape[1], n), dtype=dtype, name="w")
    out = ops.matmul(flat, w)
    rtol = 1e-4 if dtype == "float32" else 1e-12
    outputs = [out]
    if grad:
        outputs.append(tg.differentiate(ops.sum(ops.multiply(out, out)), [x, w]))
    check_build([x, w], outputs, feed_of([x, w]), rtol=rtol)


def test_the_read_through_gradient_agrees_with_finite_differences():
    x = tg.placeholder((3, 2, 4, 5), dtype="float64", name="x")
    w = tg.placeholder((7, 40), dtype="float64", name="w")
    loss = ops.sum(ops.tanh(nn.dense(ops.flatten(x), w)))
    gx, gw = tg.differentiate(loss, [x, w])
    f = tg.build([x, w], [loss, gx, gw])
    xv, wv = feed_of([x, w], seed=4)
    _, got_x, got_w = f(xv, wv)
    eps = 1e-6
    for arr, got in ((xv, got_x), (wv, got_w)):
        for idx in [(0,) * arr.ndim, tuple(s - 1 for s in arr.shape)]:
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args_p = (plus, wv) if arr is xv else (xv, plus)
            args_m = (minus, wv) if arr is xv else (xv, minus)
            fd = (f(*args_p)[0] - f(*args_m)[0]) / (2 * eps)
            np.testing.assert_allclose(got[idx], fd, rtol=1e-6, atol=1e-9)


def test_a_head_times_a_stage_of_ones_is_read_as_the_head():
    # d sum(y * h) / dy is a stage of ones times h: inlined, 1.0 * h is h (exact for every
    # value), and the stage that only renames h is read through by both its readers
    x = tg.placeholder((6, 50), name="x")
    h = tg.placeholder((6, 50), name="h")
    y = nn.softmax(x)
    grads = tg.differentiate(ops.sum(ops.multiply(y, h)), [x])
    f = tg.build([x, h], [y, *grads])
    assert "1.0 *" not in f.loops and "dsoftmax" not in stores_to(f)
    assert "dsoftmax[" not in f.loops
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 50)).astype("float32")
    head = rng.standard_normal((6, 50)).astype("float32")
    head[0, :4] = [np.nan, np.inf, -0.0, -np.inf]
    want = tg.evaluate([y, *grads], {x: a, h: head})
    for got, w in zip(f(a, head), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_an_alias_of_an_output_or_an_input_keeps_the_values():
    x = tg.placeholder((4, 5), dtype="float64", name="x")
    same = tg.compute((4, 5), lambda i, j: x[i, j], name="same")
    twice = tg.compute((4, 5), lambda i, j: same[i, j] + same[i, 4 - j], name="twice")
    k = tg.reduce_axis((0, 5), name="k")
    rows = tg.compute((4,), lambda i: tg.sum(same[i, k] * same[i, k], axis=k), name="rows")
    f = tg.build([x], [twice, rows, same])
    a = np.random.default_rng(4).standard_normal((4, 5))
    for got, w in zip(f(a), tg.evaluate([twice, rows, same], {x: a})):
        np.testing.assert_allclose(got, w, rtol=1e-12)
    g = tg.build([x], [twice, rows])
    assert "same" not in stores_to(g) and "same[" not in g.loops
    for got, w in zip(g(a), tg.evaluate([twice, rows], {x: a})):
        np.testing.assert_allclose(got, w, rtol=1e-12)
