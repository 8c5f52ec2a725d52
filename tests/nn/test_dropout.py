"""dropout: the seeded counter-based mask (evaluated and compiled alike, for any threads
and schedule; its statistics; seeds and streams), its gradient, an explicit mask, a
training step feeding a new seed each call, and the argument errors."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.ir.philox import philox_bits
from tegrad.testing import check_grad


def _ph(shape, name, dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def _seed_input(dtype="int64"):
    return tg.placeholder((), dtype=dtype, name="seed")


def _kept(rate, shape, seed, stream=0):
    """The mask from dropout of ones: True where an element is kept."""
    x = _ph(shape, "x")
    out = tg.evaluate(nn.dropout(x, rate, seed=seed, stream=stream), {x: np.ones(shape)})
    assert np.allclose(out[out != 0], 1 / (1 - rate))
    return out != 0


def test_mask_is_philox_of_seed_stream_and_flat_position():
    # an independent formula: the cipher in numpy, its top 24 bits as a float32 uniform
    shape, rate, seed, stream = (3, 4, 5), 0.3, 17, 2
    raw = philox_bits(np.uint64(seed), np.uint64(stream), np.arange(60, dtype=np.uint64))
    u = (raw >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
    expected = (u >= np.float32(rate)).reshape(shape)
    np.testing.assert_array_equal(_kept(rate, shape, seed, stream), expected)


@st.composite
def cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 8), min_size=1, max_size=4)))
    rate = draw(st.sampled_from([0.1, 0.5, 0.75]))
    seed = draw(st.integers(-2 ** 63, 2 ** 63 - 1))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    seed_is_input = draw(st.booleans())
    return shape, rate, seed, dtype, seed_is_input


@settings(max_examples=10, deadline=None)
@given(cases(), st.sampled_from([1, 2]))
def test_compiled_equals_evaluated_bit_for_bit(case, threads):
    shape, rate, seed, dtype, seed_is_input = case
    x, s = _ph(shape, "x", dtype), _seed_input()
    y = nn.dropout(x, rate, seed=s if seed_is_input else seed)
    xv = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    sv = np.array(seed, dtype=np.int64)
    inputs, values = ([x, s], [xv, sv]) if seed_is_input else ([x], [xv])
    expected = tg.evaluate(y, dict(zip(inputs, values)))
    (got,) = tg.build(inputs, [y], threads=threads)(*values)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("schedule", [{"dropout": {"order": ["ax1", "ax0"]}},
                                      {"dropout": {"split": {"ax1": 8}, "parallel": "ax0"}},
                                      {"dropout": "none"}])
def test_mask_is_independent_of_the_schedule(schedule):
    x, s = _ph((6, 50), "x", "float32"), _seed_input()
    y = nn.dropout(x, 0.4, seed=s)
    xv = np.random.default_rng(2).standard_normal((6, 50)).astype("float32")
    sv = np.array(123456789, dtype=np.int64)
    expected = tg.evaluate(y, {x: xv, s: sv})
    (got,) = tg.build([x, s], [y], threads=2, schedule=schedule)(xv, sv)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("seed", [0, 7, -3])
def test_fraction_dropped_is_within_a_binomial_bound(rate, seed):
    kept = _kept(rate, (4, 5, 20, 20), seed)
    n = kept.size
    # within 5 standard deviations of the binomial's mean
    assert abs(kept.sum() - n * (1 - rate)) < 5 * math.sqrt(n * rate * (1 - rate))
    flat = kept.ravel().astype(float)
    for lag in (1, 20, 400):
        assert abs(np.corrcoef(flat[:-lag], flat[lag:])[0, 1]) < 5 / math.sqrt(n)


def test_seed_and_stream_choose_the_mask():
    shape = (6, 50)
    a, b = _kept(0.5, shape, 3), _kept(0.5, shape, 3)
    np.testing.assert_array_equal(a, b)
    others = [_kept(0.5, shape, 4), _kept(0.5, shape, 3, stream=1), _kept(0.5, shape, 2 ** 40 + 3)]
    for other in others:
        assert not np.array_equal(a, other)
        # and not a shifted copy: about half the elements agree at every shift
        fa, fo = a.ravel(), other.ravel()
        assert all(abs(np.mean(fa[k:] == fo[:fa.size - k]) - 0.5) < 0.15 for k in range(4))


def test_seed_input_gives_the_mask_of_that_int():
    x, s = _ph((5, 7), "x"), _seed_input("int32")
    xv = np.random.default_rng(3).standard_normal((5, 7))
    fed = tg.evaluate(nn.dropout(x, 0.5, seed=s), {x: xv, s: np.array(-42, dtype=np.int32)})
    np.testing.assert_array_equal(fed, tg.evaluate(nn.dropout(x, 0.5, seed=-42), {x: xv}))


@pytest.mark.parametrize("seed_is_input", [False, True])
def test_gradient_is_the_mask_times_the_scale(seed_is_input):
    shape, rate = (3, 4, 5), 0.4
    x, s, h = _ph(shape, "x"), _seed_input(), _ph(shape, "h")
    seed = s if seed_is_input else 11
    feed = {s: np.array(11)}
    y = nn.dropout(x, rate, seed=seed)
    # the mask is fixed by the seed: finite differences see the same mask
    assert check_grad(y, [x], feed=feed, head="random", rng=4) < 1e-6
    rng = np.random.default_rng(5)
    xv, hv = rng.standard_normal(shape), rng.standard_normal(shape)
    (dx,) = tg.differentiate(y, [x], head=h)
    scaled = _kept(rate, shape, 11) / (1 - rate)
    np.testing.assert_array_equal(tg.evaluate(dx, {**feed, x: xv, h: hv}), hv * scaled)
    (got,) = tg.build([x, s, h], [dx], threads=2)(xv, np.array(11), hv)
    np.testing.assert_array_equal(got, hv * scaled)


def test_values_and_gradient_match_pytorch_for_the_same_mask(rng):
    shape, rate = (4, 6), 0.25
    x = _ph(shape, "x")
    kept = _kept(rate, shape, 8)
    xv, hv = rng.standard_normal(shape), rng.standard_normal(shape)
    xt = torch.tensor(xv, requires_grad=True)
    # PyTorch's dropout scales the kept elements by 1 / (1 - p)
    yt = xt * torch.tensor(kept, dtype=torch.float64) / (1 - rate)
    yt.backward(torch.tensor(hv))
    y = nn.dropout(x, rate, seed=8)
    np.testing.assert_allclose(tg.evaluate(y, {x: xv}), yt.detach().numpy(), rtol=1e-15)
    h = _ph(shape, "h")
    (dx,) = tg.differentiate(y, [x], head=h)
    np.testing.assert_allclose(tg.evaluate(dx, {x: xv, h: hv}), xt.grad.numpy(), rtol=1e-15)


def test_rate_zero_and_evaluation_mode_return_x():
    x = _ph((2, 3), "x")
    assert nn.dropout(x, 0.0, seed=3) is x
    assert nn.dropout(x, 0.5, seed=3, training=False) is x
    assert nn.dropout(x, 0.5, mask=_ph((2, 3), "m"), training=False) is x


def test_train_step_with_a_new_seed_each_call():
    n, k = 8, 5
    x, t, w, s = _ph((n, k), "x"), _ph((n,), "t"), _ph((k,), "w"), _seed_input()
    h = nn.dropout(x, 0.5, seed=s)
    r = tg.reduce_axis((0, k), name="r")
    pred = tg.compute((n,), lambda i: tg.sum(h[i, r] * w[r], axis=r), name="pred")
    b = tg.reduce_axis((0, n), name="b")
    loss = tg.compute((), lambda: tg.sum((pred[b] - t[b]) ** 2, axis=b), name="loss")
    lr = 0.01
    step = tg.train_step(loss, [w], optimizer=tg.optim.sgd(lr), inputs=[x, t, s],
                         init={"w": np.linspace(-1, 1, k)})
    (dw,) = tg.differentiate(loss, [w])
    rng = np.random.default_rng(6)
    xv, tv = rng.standard_normal((n, k)), rng.standard_normal(n)
    losses = []
    for seed in (1, 2, 3, 2):
        wv = step.params["w"].copy()
        feed = {x: xv, t: tv, w: wv, s: np.array(seed)}
        want_loss, want_grad = tg.evaluate([loss, dw], feed)
        losses.append(step(xv, tv, np.array(seed)))
        np.testing.assert_allclose(losses[-1], want_loss, rtol=1e-12)
        np.testing.assert_allclose(step.params["w"], wv - lr * want_grad, rtol=1e-12, atol=1e-14)
    # each seed drops different inputs, so the losses differ
    assert len(set(losses[:3])) == 3


def test_explicit_mask(rng):
    for shape, mshape, rate in [((3, 4), (3, 4), 0.5), ((2, 3, 2, 2), (2, 3, 1, 1), 0.25),
                                ((4,), (4,), 0.0)]:
        x, m = _ph(shape, "x"), _ph(mshape, "m")
        v = rng.standard_normal(shape)
        mv = (rng.uniform(size=mshape) > 0.5).astype("float64")
        out = tg.evaluate(nn.dropout(x, rate=rate, mask=m), {x: v, m: mv})
        np.testing.assert_allclose(out, v * np.broadcast_to(mv, shape) / (1 - rate))


def test_random_mask_is_an_ordinary_expression():
    x = _ph((2, 3), "x")
    y = nn.dropout(x, 0.5, seed=1)
    assert tg.placeholders([y]) == [x]
    assert {t.name for t in tg.topological_order([y])} == {"x", "dropout_mask", "dropout"}


@pytest.mark.parametrize("rate", [1.0, 1.5, -0.1, float("nan")])
def test_rate_outside_zero_one_is_an_error(rate):
    x = _ph((2, 3), "x")
    with pytest.raises(tg.TegradError, match=r"dropout of 'x': rate must be in \[0, 1\), got"):
        nn.dropout(x, rate)


def test_argument_errors():
    x = _ph((2, 3), "x")
    with pytest.raises(tg.TegradError, match="dropout of 'x': seed must be an int or a 0-d "
                                             "integer tensor"):
        nn.dropout(x, 0.5, seed=1.5)
    with pytest.raises(tg.TegradError, match="dropout of 'x': seed must be an int"):
        nn.dropout(x, 0.5, seed=_ph((1,), "s", "int64"))
    with pytest.raises(tg.DTypeError, match="dropout of 'x': seed 's' has dtype float64"):
        nn.dropout(x, 0.5, seed=_ph((), "s"))
    with pytest.raises(tg.TegradError, match="dropout of 'x': stream must be an int"):
        nn.dropout(x, 0.5, stream="a")
    with pytest.raises(tg.TegradError, match="dropout of 'x': training must be True or False"):
        nn.dropout(x, 0.5, training=1)
    with pytest.raises(tg.ShapeError, match="dropout: mask 'm' of shape \\(3, 2\\) does not "
                                            "match x 'x'"):
        nn.dropout(x, 0.5, mask=_ph((3, 2), "m"))
    with pytest.raises(tg.DTypeError, match="dropout: mask 'mi' has dtype int32"):
        nn.dropout(x, 0.5, mask=_ph((2, 3), "mi", "int32"))
    with pytest.raises(tg.DTypeError, match="dropout: x 'xi' has dtype int32"):
        nn.dropout(_ph((2,), "xi", "int32"), 0.5)
