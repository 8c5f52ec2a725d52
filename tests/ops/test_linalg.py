"""matmul against explicit sums of products."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import ops


def _matmul_reference(a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.zeros(batch + (a.shape[-2], b.shape[-1]), dtype=np.result_type(a, b))
    for pos in np.ndindex(*batch):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-1]):
                out[pos + (i, j)] = sum(a[pos + (i, k)] * b[pos + (k, j)]
                                        for k in range(a.shape[-1]))
    return out


@pytest.mark.parametrize("shape_a,shape_b", [((2, 3), (3, 4)), ((1, 5), (5, 1)),
                                             ((3, 2, 3), (3, 3, 2)), ((2, 3, 4), (4, 5)),
                                             ((1, 2, 3), (4, 3, 1)), ((2, 1, 2, 3), (3, 3, 2))])
def test_matmul(shape_a, shape_b, rng, run):
    a, b = rng.normal(size=shape_a), rng.normal(size=shape_b)
    out = run(ops.matmul, a, b)
    np.testing.assert_allclose(out, _matmul_reference(a, b), rtol=1e-12, atol=1e-12)


def test_matmul_integers(run):
    a = np.arange(6, dtype="int32").reshape(2, 3)
    b = np.arange(6, dtype="int64").reshape(3, 2)
    out = run(ops.matmul, a, b)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, _matmul_reference(a.astype("int64"), b))


def test_matmul_errors():
    a = tg.placeholder((2, 3), name="a")
    with pytest.raises(tg.ShapeError, match=r"^matmul: the inner extents differ: tensor 'a' of "
                                            r"shape \(2, 3\) has 3 columns but tensor 'b' of shape "
                                            r"\(4, 2\) has 4 rows"):
        ops.matmul(a, tg.placeholder((4, 2), name="b"))
    with pytest.raises(tg.ShapeError, match=r"^matmul: b tensor 'v' of shape \(3,\) must have at "
                                            r"least 2 dimensions"):
        ops.matmul(a, tg.placeholder((3,), name="v"))
    with pytest.raises(tg.ShapeError, match=r"^matmul: cannot broadcast the batch dimensions of "
                                            r"tensor 'p' of shape \(2,\) with the batch dimensions "
                                            r"of tensor 'q' of shape \(3,\)"):
        ops.matmul(tg.placeholder((2, 2, 3), name="p"), tg.placeholder((3, 3, 2), name="q"))
    with pytest.raises(tg.DTypeError, match=r"^matmul: .*float32 and float64"):
        ops.matmul(a, tg.placeholder((3, 2), dtype="float64", name="d"))
    with pytest.raises(tg.TegradError, match=r"^matmul: a must be a tegrad Tensor"):
        ops.matmul(np.ones((2, 3)), a)
