"""take and one_hot against numpy."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import ops


@pytest.mark.parametrize("mode", ["clip", "wrap"])
@pytest.mark.parametrize("shape,index_shape,axis", [((5, 3), (4,), 0), ((2, 3, 4), (2, 2), -1),
                                                    ((3, 4), (3,), None), ((7,), (), 0),
                                                    ((2, 5, 3), (1, 3, 1), 1)])
def test_take(shape, index_shape, axis, mode, rng, run):
    a = rng.normal(size=shape)
    extent = a.size if axis is None else shape[axis]
    idx = rng.integers(-2 * extent, 2 * extent, size=index_shape).astype("int32")
    out = run(lambda x, i: ops.take(x, indices=i, axis=axis, mode=mode), a, idx)
    np.testing.assert_array_equal(out, np.take(a, idx, axis=axis, mode=mode))


def test_take_fast_and_int64_indices(rng, run):
    a = rng.normal(size=(4, 3))
    idx = np.array([[3, 0], [1, 1]], dtype="int64")
    np.testing.assert_array_equal(run(lambda x, i: ops.take(x, i, axis=0, mode="fast"), a, idx),
                                  np.take(a, idx, axis=0))
    np.testing.assert_array_equal(run(lambda x, i: ops.take(x, i, mode="clip"), a, idx * 4),
                                  np.take(a, idx * 4, mode="clip"))


def test_take_fast_out_of_range_fails_at_evaluation(run):
    with pytest.raises(tg.OutOfBoundsError):
        run(lambda x, i: ops.take(x, i, axis=0, mode="fast"), np.zeros(3),
            np.array([3], dtype="int32"))


def test_take_errors():
    x = tg.placeholder((3, 4), name="x")
    i = tg.placeholder((2,), dtype="int32", name="i")
    f = tg.placeholder((2,), name="f")
    with pytest.raises(tg.DTypeError, match=r"^take: indices tensor 'f' has dtype float32; "
                                            r"indices must be integers"):
        ops.take(x, f)
    with pytest.raises(tg.TegradError, match=r"^take: mode 'raise' is not one of clip, wrap, fast"):
        ops.take(x, i, mode="raise")
    with pytest.raises(tg.ShapeError, match=r"^take: axis 2 is out of range for tensor 'x'"):
        ops.take(x, i, axis=2)
    with pytest.raises(tg.TegradError, match=r"^take: indices must be a tegrad Tensor, got list"):
        ops.take(x, [0, 1])


def _one_hot_reference(idx, depth, axis, on, off):
    out = np.full(idx.shape + (depth,), off)
    for pos in np.ndindex(*idx.shape):
        if 0 <= idx[pos] < depth:
            out[pos + (idx[pos],)] = on
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("index_shape,depth,axis", [((4,), 3, -1), ((2, 3), 5, 0), ((2, 3), 2, 1),
                                                    ((), 4, -1), ((3, 1), 3, -2)])
def test_one_hot(index_shape, depth, axis, rng, run):
    idx = rng.integers(-1, depth + 1, size=index_shape).astype("int32")
    out = run(lambda i: ops.one_hot(i, depth=depth, axis=axis), idx)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, _one_hot_reference(idx, depth, axis, 1.0, 0.0))


def test_one_hot_values_and_dtype(run):
    idx = np.array([0, 2, 5, -1], dtype="int64")
    out = run(lambda i: ops.one_hot(i, 3, on_value=7, off_value=-1, dtype="int32"), idx)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, _one_hot_reference(idx, 3, -1, 7, -1))


def test_one_hot_errors():
    i = tg.placeholder((2, 3), dtype="int32", name="labels")
    with pytest.raises(tg.TegradError, match=r"^one_hot: depth must be positive, got 0"):
        ops.one_hot(i, 0)
    with pytest.raises(tg.ShapeError, match=r"^one_hot: axis 3 is out of range for tensor 'labels' "
                                            r"of shape \(2, 3\) \(valid: -3 to 2\)"):
        ops.one_hot(i, 4, axis=3)
    with pytest.raises(tg.DTypeError, match=r"^one_hot: the float 0.5 is not a valid int32"):
        ops.one_hot(i, 4, on_value=0.5, dtype="int32")
    with pytest.raises(tg.TegradError, match=r"^one_hot: off_value must be a number, got None"):
        ops.one_hot(i, 4, off_value=None)
    with pytest.raises(tg.DTypeError, match=r"^one_hot: indices tensor 'p' has dtype float32"):
        ops.one_hot(tg.placeholder((2,), name="p"), 3)
