"""``computed_once`` merges every stage that computes what another computes, chains of
merges included, in one pass.

A training step's gradient holds its own copies of forward stages in other forms (a
variance whose reduction zero elimination hoisted into a stage of its own); once the
copy of a convolution merges with the forward one, the copy's variance reads the same
tensors as the forward's, and then the normalised values, the ReLU and the next
convolution can merge too. Each link of such a chain used to need another pass (a ResNet
block's step ran a convolution twice; a 16-step GRU's step kept 56 stages too many).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import MatrixProduct
from tegrad.codegen.lower.dedupe import computed_once

F64 = "float64"


def _stage_count(outputs):
    return len(tg.topological_order(outputs))


def _products(f):
    return [s for s in walk_stmts(f.kernel.body) if type(s) is MatrixProduct]


def _conv_bn_relu_step(batch, channels, size):
    """A ResNet basic block's training step (two 3x3 convolutions, training batch norm)
    with a random output gradient."""
    x = tg.placeholder((batch, channels, size, size), dtype=F64, name="x")
    w1 = tg.placeholder((channels, channels, 3, 3), dtype=F64, name="w1")
    w2 = tg.placeholder((channels, channels, 3, 3), dtype=F64, name="w2")
    g = tg.placeholder((channels,), dtype=F64, name="g")
    b = tg.placeholder((channels,), dtype=F64, name="b")
    h = nn.relu(nn.batch_norm(nn.conv2d(x, w1, padding=1), g, b)[0])
    y = nn.relu(nn.batch_norm(nn.conv2d(h, w2, padding=1), g, b)[0] + x)
    head = tg.placeholder(y.shape, dtype=F64, name="head")
    inputs = [x, w1, w2, g, b, head]
    return inputs, [y, *tg.differentiate(y, [x, w1, w2, g, b], head=head)]


@pytest.mark.parametrize("batch, channels, size", [(2, 3, 5), (3, 4, 6)])
def test_a_resnet_block_step_runs_each_convolution_once(batch, channels, size):
    # forward: 2 convolutions; gradient: the input's and the weights' of each, 4
    inputs, outputs = _conv_bn_relu_step(batch, channels, size)
    f = tg.build(inputs, outputs)
    assert len(_products(f)) == 6, f.schedule
    rng = np.random.default_rng(batch)
    feed = {t: rng.standard_normal(t.shape) for t in inputs}
    for got, want in zip(f(*[feed[t] for t in inputs]), tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def _recurrence(steps, batch, hidden):
    """``h_t = tanh(h_{t-1} W^T + b + x_t)``, the loss a random weighting of the last."""
    xs = tg.placeholder((steps, batch, hidden), dtype=F64, name="xs")
    w = tg.placeholder((hidden, hidden), dtype=F64, name="w")
    b = tg.placeholder((hidden,), dtype=F64, name="b")
    h = tg.compute((batch, hidden), lambda i, j: xs[0, i, j] * 0.5, name="h0")
    for t in range(1, steps):
        d = nn.dense(h, w, b)
        h = tg.compute((batch, hidden), lambda i, j, d=d, t=t: tg.tanh(d[i, j] + xs[t, i, j]),
                       name=f"h{t}")
    head = tg.placeholder(h.shape, dtype=F64, name="head")
    return [xs, w, b, head], [h, *tg.differentiate(h, [xs, w, b], head=head)]


def test_a_recurrence_step_computes_each_forward_product_once():
    steps = 6
    inputs, outputs = _recurrence(steps, 4, 5)
    f = tg.build(inputs, outputs)
    # the products of h_{t-1} and w: once each (forward; the gradient reuses them)
    forward = [p for p in _products(f)
               if sorted(n[:1] for n in (p.a.name, p.b.name)) == ["h", "w"]]
    assert len(forward) == steps - 1, f.schedule
    rng = np.random.default_rng(0)
    feed = {t: rng.standard_normal(t.shape) * 0.5 for t in inputs}
    for got, want in zip(f(*[feed[t] for t in inputs]), tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("program", ["resnet", "recurrence"])
def test_one_pass_leaves_nothing_to_merge(program):
    _, outputs = (_conv_bn_relu_step(2, 3, 5) if program == "resnet"
                  else _recurrence(8, 3, 4))
    once = computed_once(outputs)
    twice = computed_once(once)
    assert _stage_count(twice) == _stage_count(once) < _stage_count(outputs)
    # and what it merged computes what the program computes
    rng = np.random.default_rng(1)
    feed = {t: rng.standard_normal(t.shape) * 0.5 for t in tg.placeholders(outputs)}
    for got, want in zip(tg.evaluate(once, feed), tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@settings(max_examples=6, deadline=None)
@given(st.integers(2, 5), st.integers(1, 3), st.integers(2, 4), st.integers(0, 2**31 - 1))
def test_computed_once_of_drawn_recurrences_is_a_fixpoint_and_keeps_values(
        steps, batch, hidden, seed):
    _, outputs = _recurrence(steps, batch, hidden)
    once = computed_once(outputs)
    assert _stage_count(computed_once(once)) == _stage_count(once)
    rng = np.random.default_rng(seed)
    feed = {t: rng.standard_normal(t.shape) * 0.5 for t in tg.placeholders(outputs)}
    for got, want in zip(tg.evaluate(once, feed), tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
