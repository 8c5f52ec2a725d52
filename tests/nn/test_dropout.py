"""dropout with a mask input and with the seeded hash mask."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn


def _ph(shape, name, dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


@pytest.mark.parametrize("shape,mshape,rate", [((3, 4), (3, 4), 0.5),
                                               ((2, 3, 2, 2), (2, 3, 1, 1), 0.25),
                                               ((4,), (4,), 0.0)])
def test_dropout_with_mask(rng, shape, mshape, rate):
    x, m = _ph(shape, "x"), _ph(mshape, "m")
    v = rng.standard_normal(shape)
    mv = (rng.uniform(size=mshape) > 0.5).astype("float64")
    out = tg.evaluate(nn.dropout(x, rate=rate, mask=m), {x: v, m: mv})
    ref = np.empty(shape)
    for idx in np.ndindex(shape):
        midx = tuple(i if s > 1 else 0 for i, s in zip(idx, mshape))
        ref[idx] = v[idx] * mv[midx] / (1 - rate)
    assert np.allclose(out, ref)


def test_dropout_rate_one_drops_everything():
    x, m = _ph((3,), "x"), _ph((3,), "m")
    out = tg.evaluate([nn.dropout(x, 1.0, mask=m), nn.dropout(x, 1.0)],
                      {x: np.ones(3), m: np.ones(3)})
    assert all(np.array_equal(o, np.zeros(3)) for o in out)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
def test_seeded_mask_statistics(rate):
    shape = (4, 5, 10, 10)
    x = _ph(shape, "x")
    out = tg.evaluate(nn.dropout(x, rate=rate, seed=7), {x: np.ones(shape)})
    kept = out != 0
    assert np.allclose(out[kept], 1 / (1 - rate))
    n = kept.size
    # binomial: within 4 standard deviations of the expected number of kept elements
    assert abs(kept.sum() - n * (1 - rate)) < 4 * np.sqrt(n * rate * (1 - rate))
    flat = kept.ravel().astype(float)
    assert abs(np.corrcoef(flat[:-1], flat[1:])[0, 1]) < 0.1


def test_seeded_mask_is_deterministic_and_depends_on_seed(rng):
    x = _ph((6, 50), "x")
    v = rng.standard_normal((6, 50))
    a, b, c = tg.evaluate([nn.dropout(x, 0.5, seed=3), nn.dropout(x, 0.5, seed=3),
                           nn.dropout(x, 0.5, seed=4)], {x: v})
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.allclose(a[a != 0], 2 * v[a != 0])
    # neighbouring seeds are not shifted copies of each other
    ka, kc = (a != 0).ravel(), (c != 0).ravel()
    assert all(np.mean(ka[s:] == kc[:ka.size - s]) < 0.75 for s in range(4))


def test_seeded_mask_is_an_ordinary_expression():
    x = _ph((2, 3), "x")
    y = nn.dropout(x, 0.5, seed=1)
    assert tg.placeholders([y]) == [x]
    assert {t.name for t in tg.topological_order([y])} == {"x", "dropout_mask", "dropout"}


def test_dropout_errors():
    x = _ph((2, 3), "x")
    with pytest.raises(tg.TegradError, match="dropout: rate must be in \\[0, 1\\], got 1.5"):
        nn.dropout(x, 1.5)
    with pytest.raises(tg.TegradError, match="dropout: rate must be in \\[0, 1\\], got -0.1"):
        nn.dropout(x, -0.1)
    with pytest.raises(tg.ShapeError, match="dropout: mask 'm' of shape \\(3, 2\\) does not "
                                            "match x 'x'"):
        nn.dropout(x, 0.5, mask=_ph((3, 2), "m"))
    with pytest.raises(tg.DTypeError, match="dropout: mask 'mi' has dtype int32"):
        nn.dropout(x, 0.5, mask=_ph((2, 3), "mi", "int32"))
    with pytest.raises(tg.TegradError, match="dropout: seed must be an integer"):
        nn.dropout(x, 0.5, seed=1.5)
