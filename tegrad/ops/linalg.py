"""Matrix products.

>>> import tegrad as tg
>>> a = tg.placeholder((2, 3), name="a")
>>> b = tg.placeholder((3, 4), name="b")
>>> print(tg.format(matmul(a, b)).splitlines()[-1])
matmul[ax0, ax1] = sum(a[ax0, rk] * b[rk, ax1], rk in [0, 3))
"""
from __future__ import annotations

from tegrad.ir import reduction as _red
from tegrad.ir.errors import ShapeError
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.tensor import compute
from tegrad.ops._common import check_tensor, operator
from tegrad.ops.broadcast import broadcast_index, broadcast_shape

__all__ = ["matmul"]


@operator
def matmul(a, b):
    """The matrix product ``out[..., i, j] = sum(a[..., i, k] * b[..., k, j], k)``.

    ``a`` is ``(..., m, k)`` and ``b`` is ``(..., k, n)``, both at least 2-D. Leading
    (batch) dimensions broadcast like numpy's ``matmul``, so ``(B, m, k) @ (k, n)`` and
    ``(B, m, k) @ (1, k, n)`` work. The operands need one dtype (integer dtypes widen).
    """
    check_tensor(a, "a")
    check_tensor(b, "b")
    for what, t in (("a", a), ("b", b)):
        if t.ndim < 2:
            raise ShapeError(f"{what} tensor {t.name!r} of shape {t.shape} must have at least "
                             f"2 dimensions; use expand_dims for vectors")
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ShapeError(f"the inner extents differ: tensor {a.name!r} of shape {a.shape} "
                         f"has {k} columns but tensor {b.name!r} of shape {b.shape} has {k2} "
                         f"rows")
    batch = broadcast_shape([(f"the batch dimensions of tensor {a.name!r}", a.shape[:-2]),
                             (f"the batch dimensions of tensor {b.name!r}", b.shape[:-2])])

    def fcompute(*index):
        rk = reduce_axis((0, k), name="rk")
        outer, i, j = index[:-2], index[-2], index[-1]
        at_a = broadcast_index(a.shape[:-2], batch, outer) + (i, rk)
        at_b = broadcast_index(b.shape[:-2], batch, outer) + (rk, j)
        return _red.sum(a[at_a] * b[at_b], axis=rk)

    return compute(batch + (m, n), fcompute, name="matmul")
