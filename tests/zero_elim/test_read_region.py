"""Adjoints are summed only over the points their consumers read.

A partial derivative that is NaN or infinite at a point no consumer reads (``1 / x`` at
``x = 0`` while the loss reads ``x`` in ``[1, N)``) multiplies an adjoint that is zero
there: the naive gradient is NaN everywhere it sums that product, the zero-eliminated
one must be the hand-written gradient (zero at unread points, finite elsewhere).
"""
import numpy as np
import pytest

import tegrad as tg
from tegrad.testing import check_grad

F64 = "float64"


def _sum(t, name="L"):
    axes = [tg.reduce_axis((0, n), name=f"r{d}") for d, n in enumerate(t.shape)]
    return tg.compute((), lambda: tg.sum(t[tuple(axes)], axis=axes), name=name)


def _divided_by_index(n, shift=0.0):
    """``L = sum_{i < n-1} f[i + 1]`` with ``f[x] = in[x] / (x + shift)``: with no shift,
    ``f[0]`` is ``in[0] / 0``, which the loss does not read."""
    inp = tg.placeholder((n,), dtype=F64, name="inp")
    f = tg.compute((n,), lambda x: inp[x] / (tg.cast(x, F64) + shift), name="f")
    g = tg.compute((n - 1,), lambda i: f[i + 1], name="g")
    return inp, _sum(g)


def test_partial_nan_where_no_consumer_reads():
    n = 9
    inp, L = _divided_by_index(n)
    res = tg.differentiate(L, [inp])
    feed = {inp: np.linspace(1.0, 2.0, n)}
    got = tg.evaluate(res[0], feed)
    hand = np.concatenate([[0.0], 1.0 / np.arange(1, n)])
    np.testing.assert_allclose(got, hand, rtol=1e-12)
    assert got[0] == 0.0
    with np.errstate(all="ignore"):
        naive = tg.evaluate(res.naive[0], feed)
        # 0 * (1 / 0) inside every element's sum: why the region matters
        assert np.all(np.isnan(naive))
        assert check_grad(L, [inp], feed=feed) < 1e-6


def test_restricted_gradient_equals_the_naive_one_where_it_is_finite():
    n = 9
    inp, L = _divided_by_index(n, shift=0.5)
    res = tg.differentiate(L, [inp])
    feed = {inp: np.linspace(1.0, 2.0, n)}
    got, naive = tg.evaluate([res[0], res.naive[0]], feed)
    np.testing.assert_allclose(got, naive, rtol=1e-12)
    assert got[0] == 0.0
    assert check_grad(L, [inp], feed=feed) < 1e-6


def test_partial_nan_read_by_the_loss_stays():
    # the loss reads f[0]: its gradient there is in[0]'s true (infinite) derivative
    n = 5
    inp = tg.placeholder((n,), dtype=F64, name="inp")
    f = tg.compute((n,), lambda x: inp[x] / tg.cast(x, F64), name="f")
    (d,) = tg.differentiate(_sum(f), [inp])
    with np.errstate(all="ignore"):
        got = tg.evaluate(d, {inp: np.ones(n)})
    assert not np.isfinite(got[0]) and np.all(np.isfinite(got[1:]))


def test_infinite_partial_on_an_unread_border_of_a_stencil():
    # f = log(in) over the whole image, the loss reads a 3x3 box sum of its interior;
    # in is 0 on the border (log' = 1/0 = inf there), which no consumer reads
    n = 6
    inp = tg.placeholder((n, n), dtype=F64, name="inp")
    w = tg.placeholder((3, 3), dtype=F64, name="w")
    f = tg.compute((n, n), lambda y, x: tg.log(inp[y, x]), name="f")
    ky, kx = tg.reduce_axis((0, 3), name="ky"), tg.reduce_axis((0, 3), name="kx")
    box = tg.compute((n - 4, n - 4), lambda y, x: tg.sum(
        f[y + ky + 1, x + kx + 1] * w[ky, kx], axis=[ky, kx]), name="box")
    # box reads f[y + ky + 1, x + kx + 1]: rows and columns 1 .. n-2
    rng = np.random.default_rng(0)
    image = np.zeros((n, n))
    image[1:-1, 1:-1] = rng.uniform(0.5, 2.0, (n - 2, n - 2))
    feed = {inp: image, w: rng.uniform(-1.0, 1.0, (3, 3))}
    res = tg.differentiate(_sum(box), [inp, w])
    with np.errstate(all="ignore"):
        got = tg.evaluate(list(res), feed)
    assert np.all(np.isfinite(got[0])) and np.all(np.isfinite(got[1]))
    hand = np.zeros((n, n))
    for y in range(n - 4):
        for x in range(n - 4):
            hand[y + 1:y + 4, x + 1:x + 4] += feed[w]
    hand[1:-1, 1:-1] /= image[1:-1, 1:-1]
    np.testing.assert_allclose(got[0], hand, rtol=1e-12, atol=1e-15)
    assert np.all(got[0][0] == 0) and np.all(got[0][:, -1] == 0)
    with np.errstate(all="ignore"):
        assert np.all(np.isnan(tg.evaluate(res.naive[0], feed)))
    # with a positive border every partial is finite: the naive gradient is the same
    image[0], image[-1], image[:, 0], image[:, -1] = 0.7, 0.8, 0.9, 1.1
    got, naive = tg.evaluate([res[0], res.naive[0]], feed)
    np.testing.assert_allclose(got, naive, rtol=1e-12, atol=1e-15)
    assert check_grad(_sum(box), [inp, w], feed=feed) < 1e-6


def _chain(n):
    """in -> a = sqrt(in) -> b = 2a -> c[i] = b[i + 2] (i < n - 2): in[0], in[1] unread."""
    inp = tg.placeholder((n,), dtype=F64, name="inp")
    a = tg.compute((n,), lambda x: tg.sqrt(inp[x]), name="a")
    b = tg.compute((n,), lambda x: a[x] * 2.0, name="b")
    c = tg.compute((n - 2,), lambda i: b[i + 2] * b[i + 2], name="c")
    return inp, c


def test_read_region_propagates_through_full_stages():
    n = 7
    inp, c = _chain(n)
    values = np.concatenate([[0.0, 0.0], np.linspace(0.5, 1.5, n - 2)])
    res = tg.differentiate(_sum(c), [inp])
    got = tg.evaluate(res[0], {inp: values})
    # L = sum 4 in[x] for x >= 2
    np.testing.assert_allclose(got, [0.0, 0.0] + [4.0] * (n - 2), rtol=1e-12)


def test_jacobian_rows_are_restricted_too():
    n = 6
    inp, c = _chain(n)
    values = np.concatenate([[0.0, 0.0], np.linspace(0.5, 1.5, n - 2)])
    J = tg.evaluate(tg.jacobian(c, inp), {inp: values})
    hand = np.zeros((n - 2, n))
    hand[np.arange(n - 2), np.arange(2, n)] = 4.0
    np.testing.assert_allclose(J, hand, rtol=1e-12)


@pytest.mark.parametrize("make", [_divided_by_index, lambda n: _chain(n)])
def test_restricting_costs_no_more(make):
    inp, out = make(8)
    out = out if out.shape == () else _sum(out)
    res = tg.differentiate(out, [inp])
    assert tg.cost(res[0]).iterations <= tg.cost(res.naive[0]).iterations
    assert tg.cost(res[0]).iterations <= 2 * tg.cost(out).iterations
