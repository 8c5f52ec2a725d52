"""Scan stages compile to one sequential loop per line and agree with tg.evaluate."""
import numpy as np
import pytest

import tegrad as tg

LSE = tg.comm_reducer(lambda a, b: tg.max(a, b) + tg.log(1.0 + tg.exp(tg.min(a, b) - tg.max(a, b))),
                      lambda dt: tg.min_value(dt), name="lse")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_prefix_and_suffix_scans_of_every_reducer_along_every_axis(dtype):
    x = tg.placeholder((3, 5), dtype=dtype, name="x")
    outs = [tg.scan((3, 5), lambda i, a: x[i, a] * 2.0, red, axis=axis, reverse=rev)
            for red in (tg.sum, tg.prod, tg.max, tg.min, LSE)
            for axis in (0, 1) for rev in (False, True)]
    xv = np.random.default_rng(0).standard_normal((3, 5)).astype(dtype)
    got = tg.build([x], outs)(xv)
    want = tg.evaluate(outs, {x: xv})
    rtol = 1e-12 if dtype == "float64" else 1e-5
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol)


def test_custom_reducer_gradient_compiles():
    x = tg.placeholder((4, 6), dtype="float64", name="x")
    k = tg.reduce_axis((0, 6), name="k")
    y = tg.compute((4,), lambda i: LSE(x[i, k], axis=k), name="y")
    res = tg.differentiate(y, [x])
    xv = np.random.default_rng(1).standard_normal((4, 6))
    (dx,) = tg.build([x], res)(xv)
    np.testing.assert_allclose(dx, tg.evaluate(res.result, {x: xv})[0], rtol=1e-12)
    # the gradient of logsumexp is the softmax
    e = np.exp(xv - xv.max(axis=1, keepdims=True))
    np.testing.assert_allclose(dx, e / e.sum(axis=1, keepdims=True), rtol=1e-9)
