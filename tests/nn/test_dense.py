"""dense and bias_add against numpy."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn


def _ph(shape, name, dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def _dense_ref(v, wv, bv):
    out = np.zeros(v.shape[:-1] + (wv.shape[0],))
    for idx in np.ndindex(out.shape):
        out[idx] = sum(v[idx[:-1] + (k,)] * wv[idx[-1], k] for k in range(v.shape[-1]))
        if bv is not None:
            out[idx] += bv[idx[-1]] if bv.size > 1 else bv[0]
    return out


@pytest.mark.parametrize("xshape,units,bias", [((3, 5), 4, None), ((2, 3, 5), 7, 7),
                                               ((5,), 2, 1), ((1, 1), 1, 1)])
def test_dense(rng, xshape, units, bias):
    x, w = _ph(xshape, "x"), _ph((units, xshape[-1]), "w")
    feed = {x: rng.standard_normal(xshape), w: rng.standard_normal((units, xshape[-1]))}
    b = None
    if bias is not None:
        b = _ph((bias,), "b")
        feed[b] = rng.standard_normal(bias)
    y = nn.dense(x, w, bias=b)
    assert y.shape == xshape[:-1] + (units,) and y.name == "dense"
    ref = _dense_ref(feed[x], feed[w], None if b is None else feed[b])
    assert np.allclose(tg.evaluate(y, feed), ref)


def test_dense_is_one_stage():
    x, w, b = _ph((2, 3), "x"), _ph((4, 3), "w"), _ph((4,), "b")
    assert {t.name for t in tg.topological_order([nn.dense(x, w, b)])} == {"x", "w", "b",
                                                                          "dense"}


def test_dense_errors():
    x = _ph((2, 3), "x")
    with pytest.raises(tg.ShapeError, match="dense: weight 'w' of shape \\(4, 5\\) expects 5 "
                                            "input feature.*'x'.*has 3"):
        nn.dense(x, _ph((4, 5), "w"))
    with pytest.raises(tg.ShapeError, match="dense: weight 'w1' must have 2 dimension"):
        nn.dense(x, _ph((3,), "w1"))
    with pytest.raises(tg.ShapeError, match="dense: bias 'b' has shape \\(3,\\).*4 channel"):
        nn.dense(x, _ph((4, 3), "w"), _ph((3,), "b"))
    with pytest.raises(tg.DTypeError, match="dense: weight 'w32' has dtype float32"):
        nn.dense(x, _ph((4, 3), "w32", "float32"))
    with pytest.raises(tg.ShapeError, match="dense: x 's' is a scalar"):
        nn.dense(_ph((), "s"), _ph((4, 3), "w"))


@pytest.mark.parametrize("shape,axis,n", [((2, 3, 4, 5), 1, 3), ((2, 3, 4), -1, 4),
                                          ((3, 2), 0, 1), ((5,), 0, 5)])
def test_bias_add(rng, shape, axis, n):
    x, b = _ph(shape, "x"), _ph((n,), "b")
    v, bv = rng.standard_normal(shape), rng.standard_normal(n)
    ref = v.copy()
    for idx in np.ndindex(shape):
        ref[idx] += bv[idx[axis] if n > 1 else 0]
    assert np.allclose(tg.evaluate(nn.bias_add(x, b, axis=axis), {x: v, b: bv}), ref)


def test_bias_add_errors():
    x = _ph((2, 3, 4), "x")
    with pytest.raises(tg.ShapeError, match="bias_add: bias 'b' has shape \\(4,\\), but 'x' "
                                            "has 3 channel"):
        nn.bias_add(x, _ph((4,), "b"))
    with pytest.raises(tg.TegradError, match="bias_add: axis 3 is out of range"):
        nn.bias_add(x, _ph((4,), "b"), axis=3)
    with pytest.raises(tg.TegradError, match="bias_add: bias must be a tegrad Tensor"):
        nn.bias_add(x, [1.0, 2.0, 3.0])
