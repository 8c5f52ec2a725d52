"""tegrad: tensor expressions, their gradients, and native code for both.

>>> import numpy as np, tegrad as tg
>>> A = tg.placeholder((2, 3), dtype="float64", name="A")
>>> B = tg.placeholder((3, 2), dtype="float64", name="B")
>>> k = tg.reduce_axis((0, 3), name="k")
>>> C = tg.compute((2, 2), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> tg.evaluate(C, {A: np.ones((2, 3)), B: np.ones((3, 2))}).tolist()
[[3.0, 3.0], [3.0, 3.0]]
"""
from tegrad.ir import dtypes
from tegrad.ir.builders import (abs, acos, acosh, all, any, asin, asinh, atan, atan2, atanh,
                                call, cast, ceil, const, cos, cosh, erf, exp, expm1, floor,
                                floordiv, floormod, if_then_else, log, log1p, max_value, min_value,
                                power, round, sigmoid, sign, sin, sinh, sqrt, stop_gradient, tan,
                                tanh, trunc)
from tegrad.ir.errors import (BufferTooLargeError, DifferentiationError, DTypeError, FeedError,
                              ImmutableError, IndexingError, OutOfBoundsError, ScopeError,
                              ShapeError, TegradError)
from tegrad.ir.random import random_uniform
from tegrad.reference.evaluator import evaluate
from tegrad.reference.memory import set_memory_limit
from tegrad.ir.expr import Expr, IterVar, Var, structural_equal
from tegrad.ir.graph import placeholders, topological_order
from tegrad.ir.printer import format_tensor as format
from tegrad.ir.reduction import Reducer, comm_reducer, max, min, prod, reduce_axis, sum
from tegrad.ir.tensor import Tensor, compute, placeholder, scan, scatter_add

__version__ = "0.1.0"

from tegrad import autodiff, nn, ops  # noqa: E402  (operator library and differentiation)
from tegrad import optim  # noqa: E402  (optimizers as tensor expressions)
from tegrad.pipeline import DifferentiationResult, differentiate, jacobian  # noqa: E402
from tegrad import testing  # noqa: E402
from tegrad.analysis.cost import Cost, cost  # noqa: E402
from tegrad.zero_elim.explain import explain  # noqa: E402
from tegrad.zero_elim.program import eliminate_zeros  # noqa: E402
from tegrad.codegen import build, clear_cache, export  # noqa: E402
from tegrad.train import TrainStep, train_step  # noqa: E402  (a whole compiled training step)
