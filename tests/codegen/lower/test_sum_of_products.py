"""A sum of products (a weight shared by several products: its gradient sums one product
per use) runs as one product per term into the output, the first writing it and the
others adding to it, whether autodiff writes it as a reduction or as a scatter."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import MatrixProduct


def _products(f):
    return [s for s in walk_stmts(f.kernel.body) if type(s) is MatrixProduct]


def _check(f, outputs, feed, dtype):
    got = f(*feed.values())
    want = tg.evaluate(outputs, feed)
    tol = 2e-4 if dtype == "float32" else 1e-11
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(terms=st.integers(2, 4), m=st.integers(20, 70), n=st.integers(20, 70),
       k=st.integers(8, 40), dtype=st.sampled_from(["float32", "float64"]),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_a_reduction_of_a_sum_of_products_runs_as_accumulating_products(
        terms, m, n, k, dtype, threads, seed):
    a = [tg.placeholder((k, m), dtype=dtype, name=f"a{s}") for s in range(terms)]
    b = [tg.placeholder((k, n), dtype=dtype, name=f"b{s}") for s in range(terms)]
    r = tg.reduce_axis((0, k), name="r")

    def body(i, j):
        total = a[0][r, i] * b[0][r, j]
        for s in range(1, terms):
            total = total + a[s][r, i] * b[s][r, j]
        return tg.sum(total, axis=r)
    y = tg.compute((m, n), body, name="y")
    rng = np.random.default_rng(seed)
    feed = {p: rng.standard_normal(p.shape).astype(dtype) for p in a + b}
    f = tg.build(a + b, [y], threads=threads)
    products = _products(f)
    assert len(products) == terms
    assert [p.spec.accumulate for p in products] == [False] + [True] * (terms - 1)
    _check(f, [y], feed, dtype)


@pytest.mark.parametrize("steps", [2, 5])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_gradient_of_a_weight_shared_over_steps_runs_as_products(steps, threads):
    # h_s = tanh(h_{s-1} W^T): dW sums one product per step (a scatter in reverse mode)
    batch, hidden = 24, 40
    w = tg.placeholder((hidden, hidden), dtype="float64", name="w")
    h0 = tg.placeholder((batch, hidden), dtype="float64", name="h0")
    h = h0
    for s in range(steps):
        d = tg.nn.dense(h, w)
        h = tg.compute((batch, hidden), lambda b, j, d=d: tg.tanh(d[b, j]), name=f"h{s}")
    head = tg.placeholder(h.shape, dtype="float64", name="head")
    (dw,) = tg.differentiate(h, [w], head=head)
    rng = np.random.default_rng(steps)
    feed = {w: rng.uniform(-0.3, 0.3, w.shape), h0: rng.uniform(-1, 1, h0.shape),
            head: rng.uniform(-1, 1, h.shape)}
    f = tg.build(list(feed), [dw], threads=threads)
    accumulating = [p for p in _products(f) if p.spec.accumulate]
    assert len(accumulating) == steps - 1
    _check(f, [dw], feed, "float64")
