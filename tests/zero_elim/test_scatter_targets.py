"""A scatter built by zero elimination writes each index once per condition: terms that
write the same indices under the same condition are one target whose value is their sum.

A derivative expanded into terms (``tanh' = 1 - tanh**2``) gives terms of opposite sign
that cancel where tanh saturates. As separate targets each was accumulated on its own,
so the reference evaluator (target after target) and compiled code (point after point)
added partial sums of up to 1e10 in different orders and disagreed by their rounding,
on a gradient that is exactly zero (the random-program fuzzer found it in a product
reduction's gradient). Summed in one target, the terms cancel exactly at each point.
"""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.expr import structural_equal
from tegrad.ir.graph import topological_order

F64 = "float64"


def _program(extent, scale):
    """``s[i, j] = prod_{k <= i} (tanh(a[j // 4, i % 3] * a[i // 2, k] * scale) / 2 + 1)``:
    the gradient of ``a`` scatters through the non-invertible ``[j // 4, i % 3]``."""
    a = tg.placeholder((16, 64), dtype=F64, name="a")
    k = tg.reduce_axis((0, extent), name="k")
    s = tg.compute((24, 40), lambda i, j: tg.prod(
        tg.tanh(a[j // 4, i % 3] * a[i // 2, k] * scale) * 0.5 + 1.0, axis=k, where=k <= i),
        name="s")
    return a, s


def _scatter_targets(t):
    return [(s.name, s.op.targets) for s in topological_order(t)
            if type(s.op).__name__ == "ScatterOp"]


def _gradient(extent, scale):
    a, s = _program(extent, scale)
    head = tg.placeholder(s.shape, dtype=F64, name="head")
    (da,) = tg.differentiate(s, [a], head=head)
    return a, s, head, da


def test_the_gradient_scatters_each_index_and_condition_once():
    _, _, _, da = _gradient(24, 1.0)
    scatters = _scatter_targets(da)
    assert scatters, "the gradient no longer scatters: the test must find another program"
    for name, targets in scatters:
        for m, first in enumerate(targets):
            for second in targets[m + 1:]:
                assert not (structural_equal(first.indices, second.indices)
                            and structural_equal(first.where, second.where)), name


@settings(max_examples=5, deadline=None)
@given(st.integers(1, 60), st.floats(20.0, 60.0), st.integers(0, 2**31 - 1))
def test_a_saturated_tanh_gives_an_exactly_zero_gradient_evaluated_and_compiled(
        extent, scale, seed):
    # a in [1, 2] and scale >= 20: every tanh argument is over 19.1, where tanh rounds to
    # 1.0 and its derivative 1 - tanh**2 is exactly 0, so the whole gradient is 0
    a, _, head, da = _gradient(extent, scale)
    rng = np.random.default_rng(seed)
    feed = {a: rng.uniform(1.0, 2.0, a.shape), head: rng.uniform(-1.0, 1.0, head.shape)}
    assert not np.any(tg.evaluate(da, feed))
    assert not np.any(tg.build([a, head], [da])(feed[a], feed[head])[0])


@settings(max_examples=4, deadline=None)
@given(st.integers(1, 12), st.floats(0.2, 2.0), st.integers(0, 2**31 - 1))
def test_the_gradient_equals_finite_differences_and_compiles_to_the_same_values(
        extent, scale, seed):
    a, s, head, da = _gradient(extent, scale)
    rng = np.random.default_rng(seed)
    av, hv = rng.uniform(-1.0, 1.0, a.shape), rng.uniform(-1.0, 1.0, head.shape)
    got = tg.evaluate(da, {a: av, head: hv})
    compiled = tg.build([a, head], [da])(av, hv)[0]
    np.testing.assert_allclose(compiled, got, rtol=1e-10, atol=1e-12)
    direction = rng.standard_normal(a.shape)
    eps = 1e-6
    plus = tg.evaluate(s, {a: av + eps * direction})
    minus = tg.evaluate(s, {a: av - eps * direction})
    numeric = float(np.sum((plus - minus) * hv)) / (2 * eps)
    analytic = float(np.sum(got * direction))
    assert abs(numeric - analytic) <= 1e-6 + 1e-6 * abs(analytic)
