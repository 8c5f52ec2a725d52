"""The table of intrinsic functions: one entry per intrinsic, keyed by name.

Each entry holds the numpy implementation used by the reference evaluator and the
dtypes it accepts. An intrinsic also needs a derivative rule
(:mod:`tegrad.autodiff.intrinsic_rules`) and an LLVM lowering (:mod:`tegrad.codegen`);
their completeness tests list what is missing.

>>> INTRINSICS["exp"].numpy(np.array([0.0]))
array([1.])
"""
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.philox import philox_bits


@dataclass(frozen=True)
class Intrinsic:
    name: str
    arity: int
    numpy: Callable
    #: "float": float operands only; "number": integer or float operands; "uint64":
    #: uint64 operands only (bit manipulation, wrapping as numpy's uint64 arithmetic)
    domain: str = "float"

    def accepts(self, dtype):
        if self.domain == "float":
            return _dt.is_float(dtype)
        if self.domain == "uint64":
            return dtype == "uint64"
        return _dt.is_float(dtype) or _dt.is_int(dtype)


def _sigmoid(x):
    # exp of a non-positive argument only, so neither branch overflows
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(np.result_type(x), copy=False)


_erf_scalar = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x):
    x = np.asarray(x)
    return _erf_scalar(x).astype(x.dtype, copy=False)


def _power(a, b):
    return np.power(a, b)


INTRINSICS = {}


def register_intrinsic(name, arity, numpy_fn, domain="float"):
    """Add an intrinsic to the table; ``tegrad.call(name, ...)`` can then build it."""
    INTRINSICS[name] = Intrinsic(name, arity, numpy_fn, domain)
    return INTRINSICS[name]


register_intrinsic("exp", 1, np.exp)
register_intrinsic("log", 1, np.log)
register_intrinsic("sqrt", 1, np.sqrt)
register_intrinsic("tanh", 1, np.tanh)
register_intrinsic("sigmoid", 1, _sigmoid)
register_intrinsic("sin", 1, np.sin)
register_intrinsic("cos", 1, np.cos)
register_intrinsic("erf", 1, _erf)
register_intrinsic("tan", 1, np.tan)
register_intrinsic("asin", 1, np.arcsin)
register_intrinsic("acos", 1, np.arccos)
register_intrinsic("atan", 1, np.arctan)
# atan2(y, x): the angle of the point (x, y), numpy's argument order
register_intrinsic("atan2", 2, np.arctan2)
register_intrinsic("sinh", 1, np.sinh)
register_intrinsic("cosh", 1, np.cosh)
register_intrinsic("asinh", 1, np.arcsinh)
register_intrinsic("acosh", 1, np.arccosh)
register_intrinsic("atanh", 1, np.arctanh)
# log(1 + x) and exp(x) - 1 without the cancellation near x = 0
register_intrinsic("log1p", 1, np.log1p)
register_intrinsic("expm1", 1, np.expm1)
register_intrinsic("pow", 2, _power, domain="number")
register_intrinsic("abs", 1, np.abs, domain="number")
register_intrinsic("sign", 1, np.sign, domain="number")
register_intrinsic("floor", 1, np.floor)
register_intrinsic("ceil", 1, np.ceil)
# half to even, like numpy and PyTorch
register_intrinsic("round", 1, np.round)
register_intrinsic("trunc", 1, np.trunc)
# the identity, with derivative zero: for terms the value does not depend on, such as
# the maximum subtracted inside a softmax for stability
register_intrinsic("stop_gradient", 1, lambda x: x, domain="number")

# philox(key, counter_high, counter_low): 64 random bits, Philox-4x32-10 of the 128-bit
# counter under the 64-bit key (tegrad.ir.philox); tg.random_uniform builds on it
register_intrinsic("philox", 3, philox_bits, domain="uint64")
