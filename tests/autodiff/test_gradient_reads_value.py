"""Gradients that test a stage's own value instead of its input.

``max(x, c)`` / ``min(x, c)`` against a constant: the derivative passes ``dx`` except
where the result is ``c`` (``x <= c`` for max, ``x >= c`` for min; NaN passes), and a
stage whose whole body is such an extremum (a relu) answers the condition with its own
value, so its gradient reads the relu's output and not the pre-activation. Likewise a
stage ``select(a op c, a, f)`` whose ``f`` fails the test wherever ``a`` does (a leaky
relu, a relu written as a select) tests its own value, and so does a clip's inner bound.

Random programs (hypothesis: shapes, where the extremum sits, its side and bound, float32
and float64, inputs exactly at the bound and NaN) are compared with the same condition
written on the pre-activation (bit for bit, evaluator and compiled code on 1 and 2
threads), with the former tie rule (half the tangent at ``x == c``) away from the ties,
with float64 finite differences away from the kinks, and with PyTorch's relu.
"""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn, ops
from tegrad.ir.stages import is_placeholder
from tegrad.testing import check_grad

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))

#: where the extremum sits in the stage ``y``: its whole body (the stage's value answers
#: the condition), inside a product (no answer: the condition reads the operand), or the
#: outer bound of a clip
PLACES = ("whole", "inside", "clip")


def _extremum(op, e, c, left):
    c = tg.const(c, e.dtype)
    fn = tg.max if op == "max" else tg.min
    return fn(c, e) if left else fn(e, c)


def _program(shape, dtype, op, c, left, place):
    """``pre = x + b`` (a stage), ``y = f(pre)`` with the extremum placed per ``place``."""
    x = tg.placeholder(shape, dtype=dtype, name="x")
    b = tg.placeholder(shape, dtype=dtype, name="b")
    pre = tg.compute(shape, lambda *i: x[i] + b[i], name="pre")
    if place == "whole":
        y = tg.compute(shape, lambda *i: _extremum(op, pre[i], c, left), name="y")
    elif place == "inside":
        y = tg.compute(shape, lambda *i: _extremum(op, pre[i], c, left) * 3.0, name="y")
    else:
        other = "min" if op == "max" else "max"
        far = c + 10.0 if op == "max" else c - 10.0
        y = tg.compute(shape, lambda *i: _extremum(op, _extremum(other, pre[i], far, left),
                                                   c, left), name="y")
    return x, b, pre, y


def _scale(place):
    return 3.0 if place == "inside" else 1.0


def _expected(op, pre, c, place, head, rule):
    """The gradient for ``x`` written on the pre-activation: ``rule="bound"`` the
    convention under test, ``rule="half"`` the former one (half the tangent at a tie)."""
    inner = np.ones_like(pre)
    if place == "clip":  # the inner bound (10 beyond c) is never reached by the values
        inner = np.where(pre >= c + 10.0 if op == "max" else pre <= c - 10.0, 0, 1)
    beyond = pre > c if op == "max" else pre < c
    if rule == "bound":
        passes = np.where((pre <= c) if op == "max" else (pre >= c), 0.0, 1.0)
    else:
        passes = np.where(beyond, 1.0, np.where(pre == c, 0.5, 0.0))
    return (head * passes * inner * _scale(place)).astype(pre.dtype)


@st.composite
def _cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    op = draw(st.sampled_from(["max", "min"]))
    c = draw(st.sampled_from([0.0, -0.5, 1.25]))
    left = draw(st.booleans())
    place = draw(st.sampled_from(PLACES))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    # a third of the pre-activations exactly at the bound, a few NaN, the rest around it
    xv = rng.uniform(c - 2, c + 2, n)
    xv[rng.random(n) < 1 / 3] = c
    xv[rng.random(n) < 0.15] = np.nan
    bv = np.where(rng.random(n) < 0.5, 0.0, rng.uniform(-1, 1, n))
    xv = np.where(bv == 0.0, xv, xv - bv)  # x + b lands at the drawn value (or near it)
    head = rng.uniform(-1, 1, n)
    arrays = [a.reshape(shape).astype(dtype) for a in (xv, bv, head)]
    return shape, dtype, op, c, left, place, arrays


def _gradients(case):
    shape, dtype, op, c, left, place, (xv, bv, hv) = case
    x, b, pre, y = _program(shape, dtype, op, c, left, place)
    head = tg.placeholder(shape, dtype=dtype, name="head")
    dx, db = tg.differentiate(y, [x, b], head=head)
    return (x, b, head, pre, dx, db), (xv, bv, hv)


@settings(max_examples=60, **SETTINGS)
@given(case=_cases())
def test_gradient_passes_except_at_the_bound(case):
    shape, dtype, op, c, left, place, _ = case
    (x, b, head, pre, dx, db), feeds = _gradients(case)
    gx, gb, pv = tg.evaluate([dx, db, pre], dict(zip((x, b, head), feeds)))
    np.testing.assert_array_equal(gx, _expected(op, pv, c, place, feeds[2], "bound"))
    np.testing.assert_array_equal(gb, gx)
    # the former rule differs only at exact ties and NaN (where it gave 0)
    former = _expected(op, pv, c, place, feeds[2], "half")
    away = (pv != c) & ~np.isnan(pv)
    np.testing.assert_array_equal(gx[away], former[away])


@settings(max_examples=8, **SETTINGS)
@given(case=_cases())
def test_compiled_gradient_equals_the_evaluator(case):
    (x, b, head, pre, dx, db), feeds = _gradients(case)
    want = tg.evaluate([dx, db], dict(zip((x, b, head), feeds)))
    for threads in (1, 2):
        got = tg.build([x, b, head], [dx, db], threads=threads)(*feeds)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@settings(max_examples=15, **SETTINGS)
@given(case=_cases())
def test_finite_differences_away_from_the_kinks(case):
    shape, _, op, c, left, place, _ = case
    x, b, pre, y = _program(shape, "float64", op, c, left, place)
    rng = np.random.default_rng(len(shape))
    # at least 0.1 from the bound (and from the clip's far bound)
    v = c + rng.choice([-1, 1], shape) * rng.uniform(0.1, 2.0, shape)
    feed = {x: v, b: np.zeros(shape)}
    assert check_grad(y, [x, b], feed=feed, head="random", rng=0, rtol=1e-6,
                      atol=1e-8) < 1e-6


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@settings(max_examples=10, **SETTINGS)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple),
       seed=st.integers(0, 2**16))
def test_relu_gradient_equals_torch_at_zero_and_nan(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    v = rng.uniform(-1, 1, shape)
    v[rng.random(shape) < 0.3] = 0.0
    v[rng.random(shape) < 0.1] = np.nan
    v[rng.random(shape) < 0.1] = -0.0
    v, hv = v.astype(dtype), rng.uniform(-1, 1, shape).astype(dtype)
    x = tg.placeholder(shape, dtype=dtype, name="x")
    head = tg.placeholder(shape, dtype=dtype, name="head")
    y = nn.relu(x)
    (dx,) = tg.differentiate(y, [x], head=head)
    (dmin,) = tg.differentiate(tg.compute(shape, lambda *i: tg.min(x[i], 0.0), name="m"),
                               [x], head=head)
    got, got_min = tg.evaluate([dx, dmin], {x: v, head: hv})
    xt = torch.tensor(v, requires_grad=True)
    torch.relu(xt).backward(torch.tensor(hv))
    np.testing.assert_array_equal(got, xt.grad.numpy())
    # min(x, 0) = -relu(-x): the same convention on the other side
    xt.grad = None
    (-torch.relu(-xt)).backward(torch.tensor(hv))
    np.testing.assert_array_equal(got_min, xt.grad.numpy())


def _gradient_stages(grads):
    """The stages of the gradient program but the (normalised) forward ones it reads."""
    forward_ids = {id(t) for t in tg.topological_order(grads.forward)}
    return [t for t in tg.topological_order(list(grads))
            if id(t) not in forward_ids and not is_placeholder(t)]


def _reads(stage):
    return {t.name for t in stage.op.input_tensors()}


@pytest.mark.parametrize("bias", [False, True])
def test_relu_gradient_reads_the_output_not_the_pre_activation(bias):
    x = tg.placeholder((8, 6), name="x")
    w = tg.placeholder((5, 6), name="w")
    bv = tg.placeholder((5,), name="bias") if bias else None
    pre = nn.dense(x, w, bv)
    y = nn.relu(pre)
    head = tg.placeholder(y.shape, name="head")
    grads = tg.differentiate(y, [x, w] + ([bv] if bias else []), head=head)
    stages = _gradient_stages(grads)
    readers = [t.name for t in stages if pre.name in _reads(t)]
    assert not readers, f"gradient stages {readers} read the pre-activation {pre.name!r}"
    assert any(y.name in _reads(t) for t in stages)


def test_exp_gradient_reads_the_stage_not_its_input():
    x = tg.placeholder((4, 3), dtype="float64", name="x")
    pre = tg.compute((4, 3), lambda i, j: x[i, j] * 2.0, name="pre")
    y = tg.compute((4, 3), lambda i, j: tg.exp(pre[i, j]), name="y")
    head = tg.placeholder(y.shape, dtype="float64", name="head")
    grads = tg.differentiate(y, [x], head=head)
    (dx,), stages = grads, _gradient_stages(grads)
    assert not any("exp(" in str(t.op.body) for t in stages)
    assert not any(pre.name in _reads(t) for t in stages)
    xv, hv = np.linspace(-1, 1, 12).reshape(4, 3), np.ones((4, 3))
    np.testing.assert_allclose(tg.evaluate(dx, {x: xv, head: hv}), 2 * np.exp(2 * xv),
                               rtol=1e-12)


#: false branches of ``select(a op c, a, f)``: a constant at some offset from ``c``, or
#: ``a * k`` (whose value stays out of the test only against 0 with ``k >= 0``)
FALSE_BRANCHES = [("const", -1.0), ("const", 0.0), ("const", 1.0), ("scaled", 0.0),
                  ("scaled", 0.01), ("scaled", 2.0), ("scaled", -0.5)]


def _select_program(shape, dtype, op, c, branch, whole):
    x = tg.placeholder(shape, dtype=dtype, name="x")
    pre = tg.compute(shape, lambda *i: x[i] * 1.5, name="pre")
    kind, k = branch
    test = {"gt": lambda a: a > c, "lt": lambda a: a < c, "ge": lambda a: a >= c,
            "le": lambda a: a <= c}[op]

    def body(*i):
        a = pre[i]
        f = tg.const(c + k, dtype) if kind == "const" else a * k
        s = tg.if_then_else(test(a), a, f)
        return s if whole else s * 2.0
    return x, pre, tg.compute(shape, body, name="y")


@st.composite
def _select_cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    op = draw(st.sampled_from(["gt", "lt", "ge", "le"]))
    c = draw(st.sampled_from([0.0, 0.75]))
    branch = draw(st.sampled_from(FALSE_BRANCHES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n = int(np.prod(shape))
    v = rng.uniform(-2, 2, n)
    v[rng.random(n) < 0.3] = c / 1.5  # pre = 1.5 x lands exactly on the bound
    v[rng.random(n) < 0.1] = np.nan
    v[rng.random(n) < 0.1] = 1e-300 if dtype == "float64" else 1e-40  # a * k underflows
    v[rng.random(n) < 0.1] = -1e-300 if dtype == "float64" else -1e-40
    arrays = [a.reshape(shape).astype(dtype) for a in (v, rng.uniform(-1, 1, n))]
    return shape, dtype, op, c, branch, arrays


@settings(max_examples=60, **SETTINGS)
@given(case=_select_cases(), whole=st.booleans())
def test_select_gradient_tests_the_value(case, whole):
    shape, dtype, op, c, branch, (xv, hv) = case
    x, pre, y = _select_program(shape, dtype, op, c, branch, whole)
    head = tg.placeholder(shape, dtype=dtype, name="head")
    (dx,) = tg.differentiate(y, [x], head=head)
    got, pv = tg.evaluate([dx, pre], {x: xv, head: hv})
    test = {"gt": np.greater, "lt": np.less, "ge": np.greater_equal, "le": np.less_equal}[op]
    kind, k = branch
    # the derivative of select(a op c, a, f) written on the pre-activation a = 1.5 x
    d_false = np.zeros_like(pv) if kind == "const" else np.full_like(pv, k)
    scale = 1.0 if whole else 2.0
    want = (hv * scale) * np.where(test(pv, c), 1.0, d_false).astype(dtype) * 1.5
    np.testing.assert_allclose(got, want, rtol=2e-7 if dtype == "float32" else 1e-15,
                               atol=0)
    assert np.array_equal(got == 0, want == 0)


@settings(max_examples=6, **SETTINGS)
@given(case=_select_cases())
def test_compiled_select_gradient_equals_the_evaluator(case):
    shape, dtype, op, c, branch, (xv, hv) = case
    x, _, y = _select_program(shape, dtype, op, c, branch, True)
    head = tg.placeholder(shape, dtype=dtype, name="head")
    (dx,) = tg.differentiate(y, [x], head=head)
    want = tg.evaluate(dx, {x: xv, head: hv})
    for threads in (1, 2):
        (got,) = tg.build([x, head], [dx], threads=threads)(xv, hv)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("alpha, reads_output", [(0.01, True), (0.0, True), (-0.2, False)])
def test_leaky_relu_gradient_reads_the_output_when_alpha_keeps_the_sign(alpha, reads_output):
    x = tg.placeholder((8, 6), name="x")
    w = tg.placeholder((5, 6), name="w")
    pre = nn.dense(x, w)
    y = nn.leaky_relu(pre, alpha=alpha)
    head = tg.placeholder(y.shape, name="head")
    grads = tg.differentiate(y, [x, w], head=head)
    stages = _gradient_stages(grads)
    assert any(pre.name in _reads(t) for t in stages) is not reads_output
    assert any(y.name in _reads(t) for t in stages) is reads_output


@settings(max_examples=25, **SETTINGS)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
       dtype=st.sampled_from(["float32", "float64"]),
       bounds=st.sampled_from([(0.0, 6.0), (-1.0, 1.0), (0.5, 0.5), (None, 2.0),
                               (-2.0, None)]),
       seed=st.integers(0, 2**16))
def test_clip_gradient_equals_torch_hardtanh_and_reads_only_the_output(shape, dtype, bounds,
                                                                      seed):
    lo, hi = bounds
    rng = np.random.default_rng(seed)
    v = rng.uniform(-3, 7, shape)
    for bound in bounds:
        if bound is not None:
            v[rng.random(shape) < 0.2] = bound / 2  # pre = 2 x lands on the bound
    v[rng.random(shape) < 0.1] = np.nan
    v, hv = v.astype(dtype), rng.uniform(-1, 1, shape).astype(dtype)
    x = tg.placeholder(shape, dtype=dtype, name="x")
    pre = tg.compute(shape, lambda *i: x[i] * 2.0, name="pre")
    y = ops.clip(pre, lo, hi)
    head = tg.placeholder(shape, dtype=dtype, name="head")
    grads = tg.differentiate(y, [x], head=head)
    got = tg.evaluate(grads[0], {x: v, head: hv})
    xt = torch.tensor(v, requires_grad=True)
    low, high = (-np.inf if lo is None else lo), (np.inf if hi is None else hi)
    torch.nn.functional.hardtanh(xt * 2.0, low, high).backward(torch.tensor(hv))
    # torch's hardtanh passes a NaN's gradient in its scalar loop only (0 from its vector
    # loop, 16 elements at a time): at NaN the convention of relu (pass) is checked
    nan = np.isnan(v)
    np.testing.assert_array_equal(got[~nan], xt.grad.numpy()[~nan])
    np.testing.assert_array_equal(got[nan], (hv * 2)[nan])
    # the value decides both bounds unless they coincide (then the clip is constant)
    readers = {name for t in _gradient_stages(grads) for name in _reads(t)}
    assert ("pre" in readers) is (lo == hi)
