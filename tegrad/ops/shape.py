"""Shape manipulation: reshape and its special cases, transpose, concatenate.

A reshape reads the input at the row-major position of the output element. To keep the
index expressions simple, the shapes are first cut into groups of dimensions with
equal products (``(2, 3, 4) -> (6, 4)`` is the group ``(2, 3) -> (6,)`` and the identity
on 4), and extents of 1 are left out: only dimensions that really merge or split get
``//`` and ``%`` by constants.

>>> import tegrad as tg
>>> x = tg.placeholder((2, 3, 4), name="x")
>>> print(tg.format(reshape(x, (6, -1))).splitlines()[-1])
reshape[ax0, ax1] = x[ax0 // 3, ax0 % 3, ax1]
"""
from __future__ import annotations

from tegrad.ir.errors import DTypeError, ShapeError, TegradError
from tegrad.ir.expr import select
from tegrad.ir.tensor import Tensor, compute
from tegrad.ops._common import (check_int, check_shape, check_tensor, normalize_axes,
                                tensor_axis, numel, operator, ravel, unravel)

__all__ = ["reshape", "reshape_like", "transpose", "squeeze", "expand_dims", "flatten",
           "concatenate"]


def _groups(in_shape, out_shape):
    """Pairs ``(input dims, output dims)`` of equal products, extents of 1 left out."""
    ins = [d for d, e in enumerate(in_shape) if e != 1]
    outs = [d for d, e in enumerate(out_shape) if e != 1]
    groups, i, j = [], 0, 0
    while i < len(ins):
        gin, gout = [ins[i]], [outs[j]]
        pin, pout = in_shape[ins[i]], out_shape[outs[j]]
        i, j = i + 1, j + 1
        while pin != pout:
            if pin < pout:
                gin.append(ins[i])
                pin *= in_shape[ins[i]]
                i += 1
            else:
                gout.append(outs[j])
                pout *= out_shape[outs[j]]
                j += 1
        groups.append((gin, gout))
    return groups


def reshape_index(in_shape, out_shape, index):
    """The input index of the output element ``index`` of a row-major reshape."""
    read = [0] * len(in_shape)
    for gin, gout in _groups(in_shape, out_shape):
        flat = ravel([index[d] for d in gout], [out_shape[d] for d in gout])
        for d, e in zip(gin, unravel(flat, [in_shape[d] for d in gin])):
            read[d] = e
    return tuple(read)


def reshaped(x, shape, name):
    """The stage reading ``x`` in row-major order into ``shape`` (same element count)."""
    return compute(shape, lambda *i: x[reshape_index(x.shape, shape, i)], name=name)


def _infer_shape(x, shape):
    shape = check_shape(shape, "shape", allow_infer=True)
    unknown = [d for d, e in enumerate(shape) if e == -1]
    if len(unknown) > 1:
        raise ShapeError(f"shape {shape} has more than one -1")
    known = numel(e for e in shape if e != -1)
    if unknown:
        if x.size % known:
            raise ShapeError(f"tensor {x.name!r} of shape {x.shape} ({x.size} elements) "
                             f"cannot be reshaped to {shape}: {x.size} is not a multiple "
                             f"of {known}")
        shape = tuple(x.size // known if e == -1 else e for e in shape)
    if numel(shape) != x.size:
        raise ShapeError(f"tensor {x.name!r} of shape {x.shape} ({x.size} elements) cannot "
                         f"be reshaped to {shape} ({numel(shape)} elements)")
    return shape


@operator
def reshape(x, shape):
    """``x`` with its elements in row-major order arranged in ``shape``.

    ``out[i...] = x[unravel(ravel(i, shape), x.shape)]``. One extent may be -1: it is
    inferred from the number of elements (numpy's rule; Relay's special codes 0, -2, -3
    and -4 are not supported, as extents must be positive).
    """
    check_tensor(x)
    return reshaped(x, _infer_shape(x, shape), "reshape")


@operator
def reshape_like(x, y):
    """``reshape(x, y.shape)``; only the shape of ``y`` is used."""
    check_tensor(x)
    check_tensor(y, "y")
    if x.size != y.size:
        raise ShapeError(f"tensor {x.name!r} of shape {x.shape} has {x.size} elements but "
                         f"tensor {y.name!r} of shape {y.shape} has {y.size}")
    return reshaped(x, y.shape, "reshape_like")


@operator
def transpose(x, axes=None):
    """Permute the dimensions: ``out[i_0, ..., i_n] = x[j]`` with ``j[axes[d]] = i_d``.

    ``out.shape[d] = x.shape[axes[d]]``; ``axes`` is a permutation of the dimensions
    (negative entries count from the end) and defaults to reversing them, like numpy.
    """
    check_tensor(x)
    if axes is None:
        perm = tuple(reversed(range(x.ndim)))
    else:
        if not isinstance(axes, (tuple, list)):
            raise TegradError(f"axes must be a sequence of integers, got {axes!r}")
        perm = tuple(tensor_axis(a, x, what="axes entry") for a in axes)
        if sorted(perm) != list(range(x.ndim)):
            raise ShapeError(f"axes {tuple(axes)} is not a permutation of the {x.ndim} "
                             f"dimension(s) of tensor {x.name!r} of shape {x.shape}")
    shape = tuple(x.shape[p] for p in perm)

    def fcompute(*index):
        read = [None] * x.ndim
        for d, p in enumerate(perm):
            read[p] = index[d]
        return x[tuple(read)]

    return compute(shape, fcompute, name="transpose")


@operator
def squeeze(x, axis=None):
    """Remove dimensions of extent 1: all of them, or those listed in ``axis``.

    ``axis`` is None, an int or a sequence of ints (negative ones count from the end);
    each listed dimension must have extent 1. Squeezing every dimension gives a scalar
    tensor of shape ``()``.
    """
    check_tensor(x)
    if axis is None:
        drop = {d for d, e in enumerate(x.shape) if e == 1}
    else:
        drop = set(normalize_axes(axis, x))
        for d in sorted(drop):
            if x.shape[d] != 1:
                raise ShapeError(f"cannot squeeze dimension {d} of tensor {x.name!r} of "
                                 f"shape {x.shape}: its extent is {x.shape[d]}, not 1")
    shape = tuple(e for d, e in enumerate(x.shape) if d not in drop)
    return reshaped(x, shape, "squeeze")


@operator
def expand_dims(x, axis, num=1):
    """Insert ``num`` dimensions of extent 1 at position ``axis``.

    ``axis`` is in ``[-ndim - 1, ndim]``; a negative one counts from the end, -1 meaning
    after the last dimension (Relay's convention). ``num=0`` gives a copy.
    """
    check_tensor(x)
    axis = tensor_axis(axis, x, extra=1)
    num = check_int(num, "num", minimum=0)
    shape = x.shape[:axis] + (1,) * num + x.shape[axis:]
    return reshaped(x, shape, "expand_dims")


@operator
def flatten(x):
    """Keep the first dimension and merge the others (Relay's ``batch_flatten``).

    ``out[n, f] = x[n, unravel(f, x.shape[1:])]``, of shape ``(N, prod(x.shape[1:]))``;
    a 1-D ``x`` gives ``(N, 1)``.
    """
    check_tensor(x)
    if x.ndim == 0:
        raise ShapeError(f"tensor {x.name!r} is a scalar; flatten needs a first (batch) "
                         f"dimension")
    return reshaped(x, (x.shape[0], numel(x.shape[1:])), "flatten")


@operator
def concatenate(tensors, axis=0):
    """Join tensors along ``axis``: ``out[..., i, ...] = t_k[..., i - o_k, ...]``.

    ``o_k`` is the offset of tensor ``k`` (the sum of the extents before it); the
    element is a chain of selects ``i < o_1 ? t_0[...] : i < o_2 ? t_1[...] : ...``.
    All tensors need one dtype and equal extents outside ``axis``.
    """
    if isinstance(tensors, Tensor) or not isinstance(tensors, (tuple, list)):
        raise TegradError(f"tensors must be a list of tensors, got {tensors!r}")
    if not tensors:
        raise TegradError("tensors is empty; give at least one tensor")
    for n, t in enumerate(tensors):
        check_tensor(t, f"tensors[{n}]")
    first = tensors[0]
    if first.ndim == 0:
        raise ShapeError(f"tensor {first.name!r} is a scalar; scalars cannot be concatenated")
    axis = tensor_axis(axis, first)
    for t in tensors[1:]:
        if t.dtype != first.dtype:
            raise DTypeError(f"tensor {t.name!r} has dtype {t.dtype} but tensor "
                             f"{first.name!r} has dtype {first.dtype}; cast one of them")
        if t.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(
                zip(t.shape, first.shape)) if d != axis):
            raise ShapeError(f"tensor {t.name!r} of shape {t.shape} does not match tensor "
                             f"{first.name!r} of shape {first.shape} outside axis {axis}")
    offsets = [0]
    for t in tensors:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = first.shape[:axis] + (offsets[-1],) + first.shape[axis + 1:]

    def fcompute(*index):
        i = index[axis]

        def piece(k):
            shifted = i if offsets[k] == 0 else i - offsets[k]
            return tensors[k][index[:axis] + (shifted,) + index[axis + 1:]]

        out = piece(len(tensors) - 1)
        for k in range(len(tensors) - 2, -1, -1):
            out = select(i < offsets[k + 1], piece(k), out)
        return out

    return compute(shape, fcompute, name="concatenate")
