"""Numpy broadcasting: the shared shape rule and index map, broadcast_to and collapse_sum.

Shapes are aligned at their trailing dimensions; two extents agree when they are equal
or one of them is 1, and the result takes the larger. A tensor is read at the output
index in every dimension except its broadcast ones (extent 1 against a larger output
extent), which it reads at 0.

>>> import tegrad as tg
>>> x = tg.placeholder((3, 1), name="x")
>>> y = broadcast_to(x, (2, 3, 4))
>>> print(tg.format(y).splitlines()[-1])
broadcast_to[ax0, ax1, ax2] = x[ax1, 0]
"""
from __future__ import annotations

from tegrad.ir import reduction as _red
from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.tensor import Tensor, compute
from tegrad.ir.reduction import reduce_axis
from tegrad.ops._common import check_shape, check_tensor, is_number, operator

__all__ = ["broadcast_to", "broadcast_to_like", "collapse_sum_to", "collapse_sum_like"]


def broadcast_shape(operands):
    """The broadcast shape of ``operands``, a list of ``(label, shape)`` pairs.

    >>> broadcast_shape([("x", (3, 1)), ("y", (4,))])
    (3, 4)
    """
    ndim = max((len(shape) for _, shape in operands), default=0)
    out = []
    for d in range(-ndim, 0):
        extent, owner = 1, None
        for label, shape in operands:
            if len(shape) < -d or shape[d] == 1:
                continue
            if extent == 1:
                extent, owner = shape[d], (label, shape)
            elif shape[d] != extent:
                first_label, first_shape = owner
                raise ShapeError(
                    f"cannot broadcast {first_label} of shape {first_shape} with {label} of "
                    f"shape {shape}: extents {extent} and {shape[d]} differ in dimension "
                    f"{ndim + d} of the result (counting from the left of the longest shape)")
        out.append(extent)
    return tuple(out)


def broadcast_index(shape, out_shape, index):
    """The index at which a tensor of ``shape`` is read for the output index ``index``."""
    offset = len(out_shape) - len(shape)
    return tuple(0 if extent == 1 and out_shape[offset + d] != 1 else index[offset + d]
                 for d, extent in enumerate(shape))


def broadcast_compute(name, operands, build):
    """A stage ``build(*elements)`` over the broadcast shape of ``operands``.

    ``operands`` is a list of ``(what, value)`` pairs; a value is a tensor (its element
    is a read at the broadcast index) or a Python number (passed to ``build`` as is, so
    that it takes the dtype of the expression it meets). At least one must be a tensor.
    """
    shapes = []
    for what, value in operands:
        if isinstance(value, Tensor):
            shapes.append((f"{what} tensor {value.name!r}", value.shape))
        elif not is_number(value):
            raise TegradError(f"{what} must be a tegrad Tensor or a number, got "
                              f"{type(value).__name__} {value!r}")
    if not shapes:
        raise TegradError("needs at least one tensor operand, got only numbers "
                          f"{tuple(v for _, v in operands)!r}")
    out_shape = broadcast_shape(shapes)

    def element(value, index):
        if isinstance(value, Tensor):
            return value[broadcast_index(value.shape, out_shape, index)]
        return value

    return compute(out_shape, lambda *i: build(*[element(v, i) for _, v in operands]),
                   name=name)


def _broadcasts_to(shape, target):
    """True when ``shape`` broadcasts to exactly ``target``."""
    try:
        return broadcast_shape([("shape", shape), ("target", target)]) == target
    except ShapeError:
        return False


@operator
def broadcast_to(x, shape):
    """Broadcast ``x`` to ``shape`` (numpy rules): ``out[..., i, j] = x[i or 0, j or 0]``.

    ``shape`` must have at least ``x.ndim`` dimensions, and each extent of ``x`` must be
    1 or the extent of ``shape`` it is aligned with (from the right).
    """
    check_tensor(x)
    shape = check_shape(shape)
    if not _broadcasts_to(x.shape, shape):
        raise ShapeError(f"tensor {x.name!r} of shape {x.shape} cannot be broadcast to the "
                         f"shape {shape}")
    return compute(shape, lambda *i: x[broadcast_index(x.shape, shape, i)], name="broadcast_to")


@operator
def broadcast_to_like(x, y):
    """``broadcast_to(x, y.shape)``; only the shape of ``y`` is used."""
    check_tensor(x)
    check_tensor(y, "y")
    return broadcast_to(x, y.shape)


@operator
def collapse_sum_to(x, shape):
    """Sum ``x`` down to ``shape``, undoing a broadcast: the adjoint of ``broadcast_to``.

    ``shape`` must broadcast to ``x.shape``. The result sums ``x`` over its leading
    dimensions that ``shape`` lacks and over the dimensions where ``shape`` has extent 1
    and ``x`` does not::

        out[j] = sum(x[r, j], r)            # x (4, 3) to shape (3,)
        out[i, 0] = sum(x[i, r], r)         # x (2, 3) to shape (2, 1)

    When there is nothing to sum (``shape == x.shape``), ``x`` itself is returned, so
    gradients of non-broadcasting operators get no extra stage (as in Relay, where
    ``collapse_sum_like`` of equal shapes is the identity).
    """
    check_tensor(x)
    shape = check_shape(shape)
    if not _broadcasts_to(shape, x.shape):
        raise ShapeError(f"tensor {x.name!r} of shape {x.shape} cannot be summed to the "
                         f"shape {shape}: that shape does not broadcast to {x.shape}")
    if shape == x.shape:
        return x
    offset = x.ndim - len(shape)
    summed = [d for d in range(x.ndim)
              if d < offset or (shape[d - offset] == 1 and x.shape[d] != 1)]

    def fcompute(*index):
        raxes = {d: reduce_axis((0, x.shape[d]), name=f"r{n}") for n, d in enumerate(summed)}
        read = []
        for d in range(x.ndim):
            if d in raxes:
                read.append(raxes[d])
            elif shape[d - offset] == 1:
                read.append(0)
            else:
                read.append(index[d - offset])
        return _red.sum(x[tuple(read)], axis=list(raxes.values()))

    return compute(shape, fcompute, name="collapse_sum")


@operator
def collapse_sum_like(x, target):
    """``collapse_sum_to(x, target.shape)``: sum a broadcast ``x`` back to ``target``'s shape.

    What the gradient of every broadcasting operator needs: the gradient of ``a + b``
    with respect to ``b`` is ``collapse_sum_like(head, b)``.
    """
    check_tensor(x)
    check_tensor(target, "target")
    return collapse_sum_to(x, target.shape)
