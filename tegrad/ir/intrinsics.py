"""The table of intrinsic functions: one entry per intrinsic, keyed by name.

Each entry holds the numpy implementation used by the reference evaluator and the
dtypes it accepts; differentiation rules live beside them in ``DERIVATIVES`` (see
:mod:`tegrad.autodiff.rules`), so adding an intrinsic touches this table only.

>>> INTRINSICS["exp"].numpy(np.array([0.0]))
array([1.])
"""
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir import expr as _ex


@dataclass(frozen=True)
class Intrinsic:
    name: str
    arity: int
    numpy: Callable
    #: "float": float operands only; "number": integer or float operands
    domain: str = "float"

    def accepts(self, dtype):
        if self.domain == "float":
            return _dt.is_float(dtype)
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

#: derivative rules, one entry per intrinsic (JAX ``defjvp`` style): a tuple with one
#: rule per argument, ``rule(g, ans, *args)`` giving the tangent contributed by that
#: argument's tangent ``g`` (``ans`` is the call itself); ``None`` is the symbolic zero
#: (piecewise-constant functions). Used by :mod:`tegrad.autodiff.rules`; an intrinsic
#: without an entry is not differentiable.
DERIVATIVES = {}


def register_intrinsic(name, arity, numpy_fn, domain="float"):
    """Add an intrinsic to the table; ``tegrad.call(name, ...)`` can then build it."""
    INTRINSICS[name] = Intrinsic(name, arity, numpy_fn, domain)
    return INTRINSICS[name]


def register_derivative(name, *rules):
    """Give the intrinsic ``name`` one derivative rule per argument (None: zero)."""
    if len(rules) != INTRINSICS[name].arity:
        raise ValueError(f"{name} takes {INTRINSICS[name].arity} argument(s), "
                         f"got {len(rules)} derivative rule(s)")
    DERIVATIVES[name] = tuple(rules)


def _zero_if(cond, value):
    """``cond ? 0 : value``: masks a partial derivative where its formula is 0 * inf."""
    return _ex.select(cond, _ex.Const(0, value.dtype), value)


def _pow_dbase(g, ans, a, b):
    # b * a**(b - 1), taken as 0 where b == 0 (also at a == 0, where a**-1 is inf)
    return g * _zero_if(b == 0, b * _ex.call("pow", a, b - 1))


def _pow_dexponent(g, ans, a, b):
    # a**b * log(a), taken as 0 at a == 0 (the limit from the right for b > 0)
    return g * _zero_if(a == 0, ans * _ex.call("log", a))


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


register_intrinsic("exp", 1, np.exp)
register_derivative("exp", lambda g, ans, x: g * ans)
register_intrinsic("log", 1, np.log)
register_derivative("log", lambda g, ans, x: g / x)
register_intrinsic("sqrt", 1, np.sqrt)
register_derivative("sqrt", lambda g, ans, x: g / (ans * 2))
register_intrinsic("tanh", 1, np.tanh)
register_derivative("tanh", lambda g, ans, x: g * (1 - ans * ans))
register_intrinsic("sigmoid", 1, _sigmoid)
register_derivative("sigmoid", lambda g, ans, x: g * (ans * (1 - ans)))
register_intrinsic("sin", 1, np.sin)
register_derivative("sin", lambda g, ans, x: g * _ex.call("cos", x))
register_intrinsic("cos", 1, np.cos)
register_derivative("cos", lambda g, ans, x: -(g * _ex.call("sin", x)))
register_intrinsic("erf", 1, _erf)
register_derivative("erf", lambda g, ans, x: g * (_ex.call("exp", -(x * x)) * _TWO_OVER_SQRT_PI))
register_intrinsic("pow", 2, _power, domain="number")
register_derivative("pow", _pow_dbase, _pow_dexponent)
register_intrinsic("abs", 1, np.abs, domain="number")
# abs'(0) = 0 (sign(0) = 0), like JAX and PyTorch
register_derivative("abs", lambda g, ans, x: g * _ex.call("sign", x))
register_intrinsic("sign", 1, np.sign, domain="number")
register_derivative("sign", None)
register_intrinsic("floor", 1, np.floor)
register_derivative("floor", None)
register_intrinsic("ceil", 1, np.ceil)
register_derivative("ceil", None)
# half to even, like numpy and PyTorch
register_intrinsic("round", 1, np.round)
register_derivative("round", None)
register_intrinsic("trunc", 1, np.trunc)
# identity whose derivative is zero: for terms the value does not depend on, such as the
# maximum subtracted inside a softmax for stability
register_intrinsic("stop_gradient", 1, lambda x: x, domain="number")
register_derivative("trunc", None)

register_derivative("stop_gradient", None)
