"""Embedding lookup: rows of a table gathered by integer ids.

>>> import numpy as np, tegrad as tg
>>> table = tg.placeholder((3, 2), dtype="float64", name="table")
>>> ids = tg.placeholder((2,), dtype="int32", name="ids")
>>> tg.evaluate(embedding(table, ids), {table: np.arange(6.0).reshape(3, 2),
...                                    ids: np.array([2, 0], dtype="int32")}).tolist()
[[4.0, 5.0], [0.0, 1.0]]
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError
from tegrad.ir.tensor import compute
from tegrad.nn._util import check_tensor

__all__ = ["embedding"]


def embedding(table, ids):
    """``out[i..., d] = table[ids[i...], d]`` (PyTorch's ``F.embedding(ids, table)``).

    ``table`` is ``(V, D)`` float, ``ids`` an integer tensor of any shape with values in
    ``[0, V)``; the output is ``ids.shape + (D,)``. An id out of range makes evaluation
    and compiled code raise ``OutOfBoundsError`` naming the table (PyTorch raises too).
    The gradient of ``table`` is a scatter-add of the output gradient's rows at ``ids``
    (rows read several times accumulate), visiting each looked-up row once.
    """
    op = "embedding"
    check_tensor(table, op, "table", ndim=2)
    check_tensor(ids, op, "ids", float_only=False)
    if not _dt.is_int(ids.dtype):
        raise DTypeError(f"{op}: ids {ids.name!r} has dtype {ids.dtype}; integer row ids "
                         f"are needed")
    return compute(ids.shape + (table.shape[1],), lambda *i: table[ids[i[:-1]], i[-1]],
                   name=op)
