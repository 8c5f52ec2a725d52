"""softmax_cross_entropy, binary_cross_entropy and mse_loss against numpy."""
import math

import numpy as np
import pytest

import tegrad as tg
from tegrad import nn


def _ph(shape, name, dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def cross_entropy_ref(logits, labels):
    total = 0.0
    for row, label in zip(logits, labels):
        top = max(row)
        total += top + math.log(sum(math.exp(v - top) for v in row)) - row[label]
    return total / len(labels)


@pytest.mark.parametrize("n,k,label_dtype", [(4, 5, "int32"), (1, 3, "int64"), (3, 1, "int32")])
def test_softmax_cross_entropy(rng, n, k, label_dtype):
    logits, labels = _ph((n, k), "logits"), _ph((n,), "labels", label_dtype)
    lv = rng.standard_normal((n, k)) * 4
    yv = rng.integers(0, k, n).astype(label_dtype)
    loss = nn.softmax_cross_entropy(logits, labels)
    assert loss.shape == () and loss.name == "softmax_cross_entropy"
    out = tg.evaluate(loss, {logits: lv, labels: yv})
    assert np.isclose(out, cross_entropy_ref(lv, yv))


def test_softmax_cross_entropy_is_stable():
    logits, labels = _ph((2, 3), "logits"), _ph((2,), "labels", "int32")
    lv = np.array([[1000.0, 0.0, -1000.0], [-500.0, 500.0, 0.0]])
    out = tg.evaluate(nn.softmax_cross_entropy(logits, labels),
                      {logits: lv, labels: np.array([2, 1], dtype="int32")})
    assert np.isclose(out, (2000.0 + 0.0) / 2)


def test_softmax_cross_entropy_label_out_of_range():
    logits, labels = _ph((2, 3), "logits"), _ph((2,), "labels", "int32")
    loss = nn.softmax_cross_entropy(logits, labels)
    with pytest.raises(tg.OutOfBoundsError, match="logits"):
        tg.evaluate(loss, {logits: np.zeros((2, 3)), labels: np.array([0, 3], dtype="int32")})


def test_softmax_cross_entropy_errors():
    logits = _ph((4, 3), "logits")
    with pytest.raises(tg.DTypeError, match="softmax_cross_entropy: labels 'fl' has dtype "
                                            "float64; integer class ids"):
        nn.softmax_cross_entropy(logits, _ph((4,), "fl"))
    with pytest.raises(tg.ShapeError, match="softmax_cross_entropy: labels 'y' has 3 entries but "
                                            "logits 'logits' has a batch of 4"):
        nn.softmax_cross_entropy(logits, _ph((3,), "y", "int32"))
    with pytest.raises(tg.ShapeError, match="softmax_cross_entropy: labels 'y2' must have 1 dim"):
        nn.softmax_cross_entropy(logits, _ph((4, 1), "y2", "int32"))
    with pytest.raises(tg.ShapeError, match="softmax_cross_entropy: labels 'y' must have 2 dim"):
        nn.softmax_cross_entropy(_ph((4, 3, 1), "l3"), _ph((4,), "y", "int32"))
    with pytest.raises(tg.ShapeError, match="softmax_cross_entropy: logits 'l1' must have 2 dim"):
        nn.softmax_cross_entropy(_ph((4,), "l1"), _ph((4,), "y", "int32"))


def bce_ref(p, t):
    terms = [-(tv * max(math.log(pv) if pv > 0 else -math.inf, -100.0)
               + (1 - tv) * max(math.log(1 - pv) if pv < 1 else -math.inf, -100.0))
             for pv, tv in zip(p.ravel(), t.ravel())]
    return sum(terms) / len(terms)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 2), ()])
def test_binary_cross_entropy(rng, shape):
    p, t = _ph(shape, "p"), _ph(shape, "t")
    pv, tv = rng.uniform(0.01, 0.99, shape), rng.uniform(0, 1, shape)
    out = tg.evaluate(nn.binary_cross_entropy(p, t), {p: pv, t: tv})
    assert np.isclose(out, bce_ref(np.atleast_1d(pv), np.atleast_1d(tv)))


def test_binary_cross_entropy_clamps_the_log():
    p, t = _ph((4,), "p"), _ph((4,), "t")
    pv, tv = np.array([0.0, 1.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0, 1.0])
    out = tg.evaluate(nn.binary_cross_entropy(p, t), {p: pv, t: tv})
    assert np.isfinite(out) and np.isclose(out, 50.0)


def test_binary_cross_entropy_errors():
    p = _ph((2, 3), "p")
    with pytest.raises(tg.ShapeError, match="binary_cross_entropy: probs 'p' has shape \\(2, 3\\) "
                                            "but targets 't' has shape \\(3, 2\\)"):
        nn.binary_cross_entropy(p, _ph((3, 2), "t"))
    with pytest.raises(tg.DTypeError, match="binary_cross_entropy: targets 't32' has dtype "
                                            "float32"):
        nn.binary_cross_entropy(p, _ph((2, 3), "t32", "float32"))


@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), ()])
def test_mse_loss(rng, shape):
    a, b = _ph(shape, "a"), _ph(shape, "b")
    av, bv = rng.standard_normal(shape), rng.standard_normal(shape)
    loss = nn.mse_loss(a, b)
    assert loss.shape == () and tg.topological_order([loss])[-1] is loss
    diffs = (np.atleast_1d(av) - np.atleast_1d(bv)).ravel()
    assert np.isclose(tg.evaluate(loss, {a: av, b: bv}), sum(d * d for d in diffs) / diffs.size)


def test_mse_loss_float32(rng):
    a, b = _ph((3, 3), "a", "float32"), _ph((3, 3), "b", "float32")
    av = rng.standard_normal((3, 3)).astype("float32")
    out = tg.evaluate(nn.mse_loss(a, b), {a: av, b: np.zeros((3, 3), "float32")})
    assert out.dtype == np.float32 and np.isclose(out, np.mean(av ** 2), rtol=1e-5)


def test_mse_loss_errors():
    with pytest.raises(tg.ShapeError, match="mse_loss: a 'a' has shape \\(3,\\) but b 'b' has "
                                            "shape \\(3, 1\\)"):
        nn.mse_loss(_ph((3,), "a"), _ph((3, 1), "b"))
    with pytest.raises(tg.DTypeError, match="mse_loss: a 'ai' has dtype int32"):
        nn.mse_loss(_ph((3,), "ai", "int32"), _ph((3,), "b"))
    with pytest.raises(tg.TegradError, match="mse_loss: b must be a tegrad Tensor"):
        nn.mse_loss(_ph((3,), "a"), 0.0)
