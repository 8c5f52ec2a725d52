"""Tensor operators (elementwise, shape manipulation, reductions, indexing) as computes.

The operators of deep-learning compilers (Relay's operator levels), each an ordinary
compute stage named after the operator, so everything built from them can be
differentiated, optimised and compiled. Operators take and return tensors, accept
Python numbers for attributes, and raise :class:`tegrad.TegradError` subclasses whose
messages start with the operator's name.

>>> import numpy as np, tegrad as tg
>>> from tegrad import ops
>>> x = tg.placeholder((2, 3), dtype="float64", name="x")
>>> y = ops.sum(ops.multiply(x, 2.0), axis=-1)
>>> tg.evaluate(y, {x: np.ones((2, 3))}).tolist()
[6.0, 6.0]

Modules: :mod:`.elementwise` (unary, cast, clip, filled tensors), :mod:`.binary`
(broadcasting arithmetic and comparisons, where), :mod:`.broadcast` (broadcast_to,
collapse_sum), :mod:`.shape` (reshape and friends, transpose, concatenate),
:mod:`.slicing` (strided_slice, slice_like, split, pad), :mod:`.layout`,
:mod:`.indexing` (take, one_hot), :mod:`.reduce`, :mod:`.tuple_reduce` (an extremum with
its index, a mean with its variance, in one pass) and :mod:`.linalg`.
"""
from tegrad.ops import (binary, broadcast, elementwise, indexing, layout, linalg, reduce, shape,
                        slicing, tuple_reduce)
from tegrad.ops.binary import *  # noqa: F401,F403
from tegrad.ops.broadcast import *  # noqa: F401,F403
from tegrad.ops.elementwise import *  # noqa: F401,F403
from tegrad.ops.indexing import *  # noqa: F401,F403
from tegrad.ops.layout import *  # noqa: F401,F403
from tegrad.ops.linalg import *  # noqa: F401,F403
from tegrad.ops.reduce import *  # noqa: F401,F403
from tegrad.ops.shape import *  # noqa: F401,F403
from tegrad.ops.slicing import *  # noqa: F401,F403
from tegrad.ops.tuple_reduce import *  # noqa: F401,F403
from tegrad.ops import methods  # noqa: E402,F401  (installs the tensors' array operators)

__all__ = (elementwise.__all__ + binary.__all__ + broadcast.__all__ + shape.__all__
           + slicing.__all__ + layout.__all__ + indexing.__all__ + reduce.__all__
           + linalg.__all__ + tuple_reduce.__all__)
