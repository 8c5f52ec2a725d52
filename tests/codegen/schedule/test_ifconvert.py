"""A stored select's arms that load are computed ahead of the store when that cannot fail
(:mod:`tegrad.codegen.schedule.ifconvert`): the same values, no branch; an arm whose load
only its condition keeps in bounds stays a branch."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Let, Store
from tegrad.codegen.loops.mapper import loads
from tegrad.ir.expr import Select


def _branching_stores(kernel):
    """The names of the buffers stored with a select one of whose arms (or their
    selects' arms) loads: emitted as a branch."""
    def branches(e):
        return type(e) is Select and any(loads(a) or branches(a)
                                         for a in (e.true_value, e.false_value))
    return {s.buffer.name for s in walk_stmts(kernel.body)
            if type(s) is Store and branches(s.value)}


def _bound_arms(kernel):
    return {s.var.name for s in walk_stmts(kernel.body) if type(s) is Let}


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(2, 40), m=st.integers(1, 9), shift=st.integers(1, 3),
       dtype=st.sampled_from(["float32", "float64"]), threads=st.sampled_from([1, 2]),
       seed=st.integers(0, 2 ** 31 - 1))
def test_selects_of_loads_equal_the_evaluator(n, m, shift, dtype, threads, seed):
    rng = np.random.default_rng(seed)
    x = tg.placeholder((n, m), dtype=dtype, name="x")
    y = tg.placeholder((n, m), dtype=dtype, name="y")
    # in bounds everywhere: computed ahead
    inside = tg.compute((n, m), lambda i, j: tg.if_then_else(
        x[i, j] <= 0, tg.if_then_else(y[i, j] > x[i, j], y[i, j] * 2.0, x[i, 0]), y[i, j] - 1.0),
        name="inside")
    # x[i - shift] is in bounds only where the condition holds: a branch still
    shifted = tg.compute((n, m), lambda i, j: tg.if_then_else(
        i >= shift, x[i - shift, j], y[i, j]), name="shifted")
    f = tg.build([x, y], [inside, shifted], threads=threads)
    xs = rng.standard_normal((n, m)).astype(dtype)
    xs[rng.random((n, m)) < 0.2] = 0.0
    ys = rng.standard_normal((n, m)).astype(dtype)
    got = f(xs, ys)
    want = tg.evaluate([inside, shifted], {x: xs, y: ys})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    branching = _branching_stores(f._executable.kernel)
    assert "inside" not in branching
    assert "shifted" in branching


def test_a_relu_gradient_through_max_pool_does_not_branch():
    # relu's gradient reads relu's output: r <= 0 ? 0 : (pool's gradient), whose arm
    # loads; computed ahead, the store is a choice of values (it branched on every element)
    rng = np.random.default_rng(0)
    x = tg.placeholder((4, 3, 8, 8), name="x")
    w = tg.placeholder((3, 3, 3, 3), name="w")
    g = tg.placeholder((4, 3, 4, 4), name="g")
    out = nn.max_pool2d(nn.relu(nn.conv2d(x, w, padding=1)), 2)
    dw, dx = tg.differentiate(out, [w, x], head=g)
    f = tg.build([x, w, g], [dw, dx], threads=1)
    arrays = [rng.standard_normal(p.shape).astype("float32") for p in (x, w, g)]
    for got, want in zip(f(*arrays), tg.evaluate([dw, dx], dict(zip((x, w, g), arrays)))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    kernel = f._executable.kernel
    assert not _branching_stores(kernel), _branching_stores(kernel)
    assert any(name.endswith("_arm") or "_arm_" in name for name in _bound_arms(kernel))
    assert "select made unguarded" in str(f.schedule)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_schedule_replays_with_the_selects_computed_ahead(threads):
    x = tg.placeholder((33, 5), name="x")
    r = tg.compute((33, 5), lambda i, j: tg.if_then_else(
        x[i, j] > 0, x[i, j] * x[i, 0], -x[i, j]), name="r")
    f = tg.build([x], [r], threads=threads)
    again = tg.build([x], [r], threads=threads, schedule=f.schedule)
    a = np.random.default_rng(1).standard_normal((33, 5)).astype("float32")
    np.testing.assert_array_equal(f(a)[0], again(a)[0])
    np.testing.assert_array_equal(f(a)[0], tg.evaluate(r, {x: a}))
    assert again.loops == f.loops
    assert "r: guarded accumulation or select made unguarded" in str(f.schedule)
