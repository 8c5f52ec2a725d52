"""Reads through an invertible affine index map get gathers, not scatters.

``blur[x] = in[x] + in[x + 1]`` must give ``din[x] = dblur[x] + dblur[x - 1]``, each
term guarded by the consumer's domain: one pass over ``din`` writing each point once.
A slice that writes at most half of its input keeps its scatter.
"""
import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.graph import topological_order
from tegrad.ir.tensor import ComputeOp, ScatterOp
from tegrad.testing import check_grad

F64 = "float64"


def _stages(g, res):
    forward = {id(t) for t in res.forward}
    return [t for t in topological_order([g]) if id(t) not in forward]


def _check(out, inputs, feed, rng):
    head = tg.placeholder(out.shape, dtype=F64, name="head")
    res = tg.differentiate(out, inputs, head=head)
    feed = {**feed, head: rng.uniform(-1.0, 1.0, out.shape)}
    for g, naive in zip(res, res.naive):
        np.testing.assert_allclose(tg.evaluate(g, feed), tg.evaluate(naive, feed),
                                   rtol=1e-12, atol=1e-14)
    assert check_grad(out, inputs, feed={k: v for k, v in feed.items() if k is not head},
                      head=feed[head]) < 1e-6
    return res, feed


def test_blur_gradient_is_one_gather():
    n = 9
    rng = np.random.default_rng(0)
    inp = tg.placeholder((n,), dtype=F64, name="inp")
    blur = tg.compute((n - 1,), lambda x: inp[x] + inp[x + 1], name="blur")
    res, feed = _check(blur, [inp], {inp: rng.uniform(-1, 1, n)}, rng)
    (din,) = res
    assert isinstance(din.op, ComputeOp)
    assert not any(isinstance(t.op, ScatterOp) for t in _stages(din, res))
    # one point per element of din, no loop inside
    assert tg.cost(din).iterations == n
    h = feed[res.head]
    hand = np.concatenate([h, [0.0]]) + np.concatenate([[0.0], h])
    np.testing.assert_allclose(tg.evaluate(din, feed), hand, rtol=1e-12)


def test_blur_inside_a_program():
    # a 3-tap blur of an intermediate: the adjoint of the intermediate is a gather
    n = 10
    rng = np.random.default_rng(1)
    inp = tg.placeholder((n,), dtype=F64, name="inp")
    sq = tg.compute((n,), lambda x: inp[x] * inp[x], name="sq")
    blur = tg.compute((n - 2,), lambda x: sq[x] - 2.0 * sq[x + 1] + sq[x + 2], name="blur")
    res, _ = _check(blur, [inp], {inp: rng.uniform(-1, 1, n)}, rng)
    for t in _stages(res[0], res):
        assert not isinstance(t.op, ScatterOp), tg.format(t)


def test_transposed_and_sheared_shifts_are_gathers():
    rng = np.random.default_rng(2)
    a = tg.placeholder((6, 6), dtype=F64, name="a")
    # a[y + 2, x] and a[x + 1, y]: a shift, and a transpose plus a shift
    t = tg.compute((4, 5), lambda y, x: a[y + 2, x] * a[x + 1, y], name="t")
    b = tg.placeholder((7, 4), dtype=F64, name="b")
    # b[x + y, y]: a shear (unimodular, not a permutation)
    s = tg.compute((4, 4), lambda x, y: b[x + y, y] * 3.0, name="s")
    for out, inp in ((t, a), (s, b)):
        res, _ = _check(out, [inp], {inp: rng.uniform(-1, 1, inp.shape)}, rng)
        assert isinstance(res[0].op, ComputeOp), tg.format(res[0])
        assert tg.cost(res[0]).iterations == inp.size


@pytest.mark.parametrize("begin, end", [(4, 8), (0, 3)])
def test_a_slice_of_at_most_half_keeps_its_scatter(begin, end):
    rng = np.random.default_rng(3)
    x = tg.placeholder((8, 3), dtype=F64, name="x")
    out = tg.ops.strided_slice(x, [begin, 0], [end, 3])
    res, _ = _check(out, [x], {x: rng.uniform(-1, 1, (8, 3))}, rng)
    assert isinstance(res[0].op, ScatterOp)
    assert tg.cost(res[0]).iterations == out.size


def test_a_slice_of_most_of_its_input_is_a_gather():
    rng = np.random.default_rng(4)
    x = tg.placeholder((8, 3), dtype=F64, name="x")
    out = tg.ops.strided_slice(x, [1, 0], [8, 3])
    res, _ = _check(out, [x], {x: rng.uniform(-1, 1, (8, 3))}, rng)
    assert isinstance(res[0].op, ComputeOp)
    assert tg.cost(res[0]).iterations == x.size


@pytest.mark.parametrize("width", [3, 8])
def test_the_adjoint_of_a_stacked_tensor_read_per_step_is_one_pass(width):
    # each step's read pins the step axis to a constant: the terms are slices of the
    # adjoint, scattered each to its own slice (one pass over the stacked tensor), not
    # a sum of one guarded term per step and read evaluated at every point (its compiled
    # flops grew as steps^2); the compiled gradient's flops grow linearly in the steps
    rng = np.random.default_rng(width)
    flops = {}
    for steps in (4, 8):
        x = tg.placeholder((steps, 2, 2 * width), dtype=F64, name="x")
        h0 = tg.placeholder((2, width), dtype=F64, name="h0")
        gi = tg.compute(x.shape, lambda s, b, j: x[s, b, j] * 1.5, name="gi")
        h = h0
        for s in range(steps):
            prev = h
            h = tg.compute((2, width), lambda b, j, s=s, prev=prev: tg.tanh(
                gi[s, b, j] + prev[b, j] * gi[s, b, width + j]), name=f"h{s}")
        head = tg.placeholder(h.shape, dtype=F64, name="head")
        res = tg.differentiate(h, [x], head=head)
        (dx,) = res
        feed = {x: rng.uniform(-1, 1, x.shape), h0: rng.uniform(-1, 1, h0.shape),
                head: rng.uniform(-1, 1, h.shape)}
        want = tg.evaluate(res.naive[0], feed)
        f = tg.build([x, h0, head], [dx], profile=True)
        np.testing.assert_allclose(f(*feed.values())[0], want, rtol=1e-12, atol=1e-14)
        flops[steps] = sum(row.flops for row in f.profile().rows)
    assert flops[8] <= 2.3 * flops[4], flops
