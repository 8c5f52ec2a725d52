"""reshape, reshape_like, transpose, squeeze, expand_dims, flatten and concatenate."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import ops


def _row_major(a, shape):
    """Reshape by copying the elements one by one in row-major order."""
    flat = [a[idx] for idx in np.ndindex(*a.shape)]
    out = np.empty(shape, dtype=a.dtype)
    for value, idx in zip(flat, np.ndindex(*shape)):
        out[idx] = value
    return out


RESHAPES = [((2, 3, 4), (6, -1), (6, 4)), ((2, 3, 4), (4, 3, 2), (4, 3, 2)),
            ((6,), (1, 2, 1, 3), (1, 2, 1, 3)), ((3, 5), (-1,), (15,)), ((1, 1), (), ()),
            ((), (1, 1), (1, 1)), ((4, 6), (3, 8), (3, 8)), ((2, 6, 5), (3, 4, 5), (3, 4, 5))]


@pytest.mark.parametrize("src,newshape,expected", RESHAPES)
def test_reshape(src, newshape, expected, rng, run):
    a = rng.normal(size=src)
    out = run(lambda x: ops.reshape(x, shape=newshape), a)
    assert out.shape == expected
    np.testing.assert_array_equal(out, _row_major(a, expected))


def test_reshape_uses_simple_index_expressions():
    x = tg.placeholder((2, 3, 4), name="x")
    last = tg.format(ops.reshape(x, (2, 12))).splitlines()[-1]
    assert last == "reshape[ax0, ax1] = x[ax0, ax1 // 4, ax1 % 4]"


def test_reshape_errors():
    x = tg.placeholder((2, 3), name="x")
    with pytest.raises(tg.ShapeError, match=r"^reshape: tensor 'x' of shape \(2, 3\) \(6 "
                                            r"elements\) cannot be reshaped to \(4,\)"):
        ops.reshape(x, (4,))
    with pytest.raises(tg.ShapeError, match=r"^reshape: .*'x'.*6 is not a multiple of 4"):
        ops.reshape(x, (4, -1))
    with pytest.raises(tg.ShapeError, match=r"^reshape: shape \(-1, -1\) has more than one"):
        ops.reshape(x, (-1, -1))
    with pytest.raises(tg.ShapeError, match=r"^reshape: shape \(0, 6\) has the invalid extent"):
        ops.reshape(x, (0, 6))
    with pytest.raises(tg.TegradError, match=r"^reshape: x must be a tegrad Tensor"):
        ops.reshape([1, 2], (2,))


def test_reshape_like(rng, run):
    a = rng.normal(size=(3, 4))
    np.testing.assert_array_equal(run(ops.reshape_like, a, np.zeros((2, 6), "int32")),
                                  _row_major(a, (2, 6)))
    np.testing.assert_array_equal(run(ops.reshape_like, a, np.zeros((12, 1))),
                                  _row_major(a, (12, 1)))
    x, y = tg.placeholder((3, 4), name="x"), tg.placeholder((5,), name="y")
    with pytest.raises(tg.ShapeError, match=r"^reshape_like: tensor 'x' of shape \(3, 4\) has 12 "
                                            r"elements but tensor 'y' of shape \(5,\) has 5"):
        ops.reshape_like(x, y)
    with pytest.raises(tg.TegradError, match=r"^reshape_like: y must be a tegrad Tensor"):
        ops.reshape_like(x, (12,))


@pytest.mark.parametrize("shape,axes", [((2, 3, 4), None), ((2, 3, 4), (1, 2, 0)),
                                        ((2, 3, 4), (-1, 0, -2)), ((5,), None), ((3, 1), [1, 0])])
def test_transpose(shape, axes, rng, run):
    a = rng.normal(size=shape)
    perm = tuple(reversed(range(a.ndim))) if axes is None else tuple(p % a.ndim for p in axes)
    expected = np.empty(tuple(shape[p] for p in perm))
    for idx in np.ndindex(*expected.shape):
        src = [0] * a.ndim
        for d, p in enumerate(perm):
            src[p] = idx[d]
        expected[idx] = a[tuple(src)]
    np.testing.assert_array_equal(run(lambda x: ops.transpose(x, axes=axes), a), expected)


def test_transpose_errors():
    x = tg.placeholder((2, 3, 4), name="x")
    with pytest.raises(tg.ShapeError, match=r"^transpose: axes \(0, 0, 1\) is not a permutation "
                                            r"of the 3 dimension\(s\) of tensor 'x'"):
        ops.transpose(x, (0, 0, 1))
    with pytest.raises(tg.ShapeError, match=r"^transpose: axes \(1, 0\) is not a permutation"):
        ops.transpose(x, (1, 0))
    with pytest.raises(tg.ShapeError, match=r"^transpose: axes entry 3 is out of range for tensor "
                                            r"'x' of shape \(2, 3, 4\)"):
        ops.transpose(x, (0, 1, 3))
    with pytest.raises(tg.TegradError, match=r"^transpose: axes must be a sequence"):
        ops.transpose(x, 1)


@pytest.mark.parametrize("shape,axis,expected", [
    ((1, 3, 1, 2), None, (3, 2)), ((1, 3, 1, 2), 2, (1, 3, 2)), ((1, 3, 1, 2), (0, -2), (3, 2)),
    ((1, 1), None, ()), ((4,), (), (4,))])
def test_squeeze(shape, axis, expected, rng, run):
    a = rng.normal(size=shape)
    out = run(lambda x: ops.squeeze(x, axis=axis), a)
    assert out.shape == expected
    np.testing.assert_array_equal(out.ravel(), a.ravel())


def test_squeeze_errors():
    x = tg.placeholder((1, 3), name="x")
    with pytest.raises(tg.ShapeError, match=r"^squeeze: cannot squeeze dimension 1 of tensor 'x' "
                                            r"of shape \(1, 3\): its extent is 3"):
        ops.squeeze(x, 1)
    with pytest.raises(tg.ShapeError, match=r"^squeeze: axis 2 is out of range for tensor 'x'"):
        ops.squeeze(x, 2)
    with pytest.raises(tg.ShapeError, match=r"^squeeze: axis \(0, -2\) names an axis of tensor 'x'"
                                            r" twice"):
        ops.squeeze(x, (0, -2))


@pytest.mark.parametrize("shape,axis,num,expected", [
    ((2, 3), 0, 1, (1, 2, 3)), ((2, 3), -1, 2, (2, 3, 1, 1)), ((2, 3), 1, 1, (2, 1, 3)),
    ((2, 3), -3, 1, (1, 2, 3)), ((), 0, 3, (1, 1, 1)), ((5,), 1, 0, (5,))])
def test_expand_dims(shape, axis, num, expected, rng, run):
    a = rng.normal(size=shape)
    out = run(lambda x: ops.expand_dims(x, axis=axis, num=num), a)
    assert out.shape == expected
    np.testing.assert_array_equal(out.ravel(), a.ravel())


def test_expand_dims_errors():
    x = tg.placeholder((2, 3), name="x")
    with pytest.raises(tg.ShapeError, match=r"^expand_dims: axis 3 is out of range for tensor 'x' "
                                            r"of shape \(2, 3\) \(valid: -3 to 2\)"):
        ops.expand_dims(x, 3)
    with pytest.raises(tg.ShapeError, match=r"^expand_dims: axis -4 is out of range"):
        ops.expand_dims(x, -4)
    with pytest.raises(tg.TegradError, match=r"^expand_dims: num must be non-negative, got -1"):
        ops.expand_dims(x, 0, num=-1)
    with pytest.raises(tg.TegradError, match=r"^expand_dims: axis must be an integer, got 0.5"):
        ops.expand_dims(x, 0.5)


@pytest.mark.parametrize("shape", [(2, 3, 4), (3,), (1, 5, 1, 2)])
def test_flatten(shape, rng, run):
    a = rng.normal(size=shape)
    out = run(ops.flatten, a)
    rest = int(np.prod(shape[1:]))
    assert out.shape == (shape[0], rest)
    np.testing.assert_array_equal(out, _row_major(a, (shape[0], rest)))


def test_flatten_errors():
    with pytest.raises(tg.ShapeError, match=r"^flatten: tensor 's' is a scalar"):
        ops.flatten(tg.placeholder((), name="s"))
    with pytest.raises(tg.TegradError, match=r"^flatten: x must be a tegrad Tensor"):
        ops.flatten(None)


@pytest.mark.parametrize("shapes,axis", [([(2, 3), (4, 3)], 0), ([(2, 1), (2, 3), (2, 2)], -1),
                                         ([(3, 2, 2)], 1), ([(1, 2, 3), (1, 5, 3), (1, 1, 3)], 1)])
def test_concatenate(shapes, axis, rng, ph):
    arrays = [rng.normal(size=s) for s in shapes]
    tensors = [ph(a, f"t{n}") for n, a in enumerate(arrays)]
    out = tg.evaluate(ops.concatenate(tensors, axis=axis), dict(zip(tensors, arrays)))
    axis %= len(shapes[0])
    # reference: walk along the axis, taking each piece's slices in turn
    pieces = [np.take(a, k, axis=axis) for a in arrays for k in range(a.shape[axis])]
    expected = np.stack(pieces, axis=axis)
    np.testing.assert_array_equal(out, expected)


def test_concatenate_integers(ph):
    a, b = np.arange(3, dtype="int64"), np.arange(10, 12, dtype="int64")
    ta, tb = ph(a, "a"), ph(b, "b")
    np.testing.assert_array_equal(tg.evaluate(ops.concatenate((ta, tb, ta)), {ta: a, tb: b}),
                                  [0, 1, 2, 10, 11, 0, 1, 2])


def test_concatenate_errors():
    a = tg.placeholder((2, 3), name="a")
    b = tg.placeholder((2, 4), name="b")
    c = tg.placeholder((2, 3), dtype="float64", name="c")
    with pytest.raises(tg.ShapeError, match=r"^concatenate: tensor 'b' of shape \(2, 4\) does not "
                                            r"match tensor 'a' of shape \(2, 3\) outside axis 0"):
        ops.concatenate([a, b], axis=0)
    with pytest.raises(tg.DTypeError, match=r"^concatenate: tensor 'c' has dtype float64 but "
                                            r"tensor 'a' has dtype float32"):
        ops.concatenate([a, c])
    with pytest.raises(tg.ShapeError, match=r"^concatenate: axis 2 is out of range for tensor 'a'"):
        ops.concatenate([a, a], axis=2)
    with pytest.raises(tg.TegradError, match=r"^concatenate: tensors is empty"):
        ops.concatenate([])
    with pytest.raises(tg.TegradError, match=r"^concatenate: tensors must be a list of tensors"):
        ops.concatenate(a)
    with pytest.raises(tg.TegradError, match=r"^concatenate: tensors\[1\] must be a tegrad Tensor"):
        ops.concatenate([a, 1.0])
    with pytest.raises(tg.ShapeError, match=r"^concatenate: tensor 's' is a scalar"):
        ops.concatenate([tg.placeholder((), name="s")])
    with pytest.raises(tg.ShapeError, match=r"^concatenate: tensor 'd' of shape \(2, 3, 1\) does "
                                            r"not match"):
        ops.concatenate([a, tg.placeholder((2, 3, 1), name="d")], axis=1)
