"""broadcast_to, broadcast_to_like, collapse_sum_to and collapse_sum_like against numpy."""
import itertools

import numpy as np
import pytest

import tegrad as tg
from tegrad import ops

BROADCASTS = [((3, 1), (2, 3, 4)), ((5,), (2, 5)), ((), (3, 2)), ((1, 1), (1, 7)),
              ((2, 3), (2, 3))]


def _broadcast_reference(a, shape):
    """Element by element: each dimension of extent 1 is read at 0."""
    out = np.empty(shape, dtype=a.dtype)
    offset = len(shape) - a.ndim
    for idx in np.ndindex(*shape):
        out[idx] = a[tuple(0 if a.shape[d] == 1 else idx[offset + d] for d in range(a.ndim))]
    return out


@pytest.mark.parametrize("src,dst", BROADCASTS)
def test_broadcast_to(src, dst, rng, run):
    a = rng.normal(size=src)
    np.testing.assert_array_equal(run(lambda x: ops.broadcast_to(x, shape=dst), a),
                                  _broadcast_reference(a, dst))


@pytest.mark.parametrize("src,dst", BROADCASTS[:3])
def test_broadcast_to_like(src, dst, rng, run):
    a = rng.normal(size=src)
    b = np.zeros(dst, dtype="int32")
    np.testing.assert_array_equal(run(ops.broadcast_to_like, a, b), _broadcast_reference(a, dst))


def test_broadcast_to_errors():
    x = tg.placeholder((3, 2), name="x")
    with pytest.raises(tg.ShapeError, match=r"^broadcast_to: tensor 'x' of shape \(3, 2\) cannot "
                                            r"be broadcast to the shape \(3, 4\)"):
        ops.broadcast_to(x, (3, 4))
    with pytest.raises(tg.ShapeError, match=r"^broadcast_to: tensor 'x' .* to the shape \(2,\)"):
        ops.broadcast_to(x, (2,))
    with pytest.raises(tg.ShapeError, match=r"^broadcast_to: shape \(3, -1\) has the invalid"):
        ops.broadcast_to(x, (3, -1))
    with pytest.raises(tg.TegradError, match=r"^broadcast_to: x must be a tegrad Tensor"):
        ops.broadcast_to(np.ones(2), (2,))
    with pytest.raises(tg.TegradError, match=r"^broadcast_to_like: y must be a tegrad Tensor"):
        ops.broadcast_to_like(x, (3, 2))
    y = tg.placeholder((4, 4), name="y")
    with pytest.raises(tg.ShapeError, match=r"^broadcast_to_like: .*'x' .* to the shape \(4, 4\)"):
        ops.broadcast_to_like(x, y)


def _collapse_reference(a, shape):
    """Add every element of ``a`` into the element of ``shape`` it was broadcast from."""
    out = np.zeros(shape, dtype=a.dtype)
    offset = a.ndim - len(shape)
    for idx in np.ndindex(*a.shape):
        target = tuple(0 if shape[d] == 1 else idx[offset + d] for d in range(len(shape)))
        out[target] += a[idx]
    return out


COLLAPSES = [((2, 3, 4), (3, 1)), ((4, 3), (3,)), ((2, 3), ()), ((2, 1, 5), (1, 1, 5)),
             ((3, 2), (1, 2)), ((1, 4), (4,))]


@pytest.mark.parametrize("src,dst", COLLAPSES)
def test_collapse_sum_to(src, dst, rng, run):
    a = rng.normal(size=src)
    out = run(lambda x: ops.collapse_sum_to(x, shape=dst), a)
    assert out.shape == dst
    np.testing.assert_allclose(out, _collapse_reference(a, dst), rtol=1e-12)


@pytest.mark.parametrize("src,dst", COLLAPSES[:3])
def test_collapse_sum_like(src, dst, rng, run):
    a = rng.normal(size=src)
    target = np.zeros(dst)
    out = run(lambda x, t: ops.collapse_sum_like(x, target=t), a, target)
    np.testing.assert_allclose(out, _collapse_reference(a, dst), rtol=1e-12)


def test_collapse_sum_integers(run):
    a = np.arange(12, dtype="int32").reshape(3, 4)
    np.testing.assert_array_equal(run(lambda x: ops.collapse_sum_to(x, (3, 1)), a),
                                  [[6], [22], [38]])


def test_collapse_sum_to_same_shape_is_the_tensor_itself():
    x = tg.placeholder((2, 3), name="x")
    assert ops.collapse_sum_to(x, (2, 3)) is x
    assert ops.collapse_sum_like(x, tg.placeholder((2, 3), name="t")) is x


def test_collapse_sum_undoes_broadcast_for_every_pair():
    # the adjoint identity <broadcast(u), v> == <u, collapse_sum(v)> on a few shapes
    rng = np.random.default_rng(3)
    for src, dst in itertools.islice(BROADCASTS, 4):
        u = tg.placeholder(src, dtype="float64", name="u")
        v = tg.placeholder(dst, dtype="float64", name="v")
        uu, vv = rng.normal(size=src), rng.normal(size=dst)
        b, c = tg.evaluate([ops.broadcast_to(u, dst), ops.collapse_sum_like(v, u)],
                           {u: uu, v: vv})
        assert np.isclose(np.sum(b * vv), np.sum(uu * c))


def test_collapse_sum_errors():
    x = tg.placeholder((2, 3), name="x")
    with pytest.raises(tg.ShapeError, match=r"^collapse_sum_to: tensor 'x' of shape \(2, 3\) "
                                            r"cannot be summed to the shape \(4,\)"):
        ops.collapse_sum_to(x, (4,))
    with pytest.raises(tg.ShapeError, match=r"^collapse_sum_to: .*'x' .* shape \(1, 2, 3\)"):
        ops.collapse_sum_to(x, (1, 2, 3))
    with pytest.raises(tg.ShapeError, match=r"^collapse_sum_to: shape \(0,\) has the invalid"):
        ops.collapse_sum_to(x, (0,))
    t = tg.placeholder((2, 2), name="t")
    with pytest.raises(tg.ShapeError, match=r"^collapse_sum_like: .*'x' .* shape \(2, 2\)"):
        ops.collapse_sum_like(x, t)
    with pytest.raises(tg.TegradError, match=r"^collapse_sum_like: target must be a tegrad Tensor"):
        ops.collapse_sum_like(x, (2, 3))
