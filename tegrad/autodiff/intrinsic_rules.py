"""Derivative rules of the intrinsics, one entry per intrinsic (JAX ``defjvp`` style).

``DERIVATIVES[name]`` is a tuple with one rule per argument: ``rule(g, ans, *args)``
gives the tangent contributed by that argument's tangent ``g`` (``ans`` is the call
itself); ``None`` is the symbolic zero (piecewise-constant functions). Used by
:mod:`tegrad.autodiff.rules`; an intrinsic without an entry is not differentiable, and
the completeness test names it.

>>> from tegrad.ir.expr import Var
>>> x, g = Var("x", "float64"), Var("g", "float64")
>>> str(DERIVATIVES["sin"][0](g, None, x))
'g * cos(x)'
"""
import math

from tegrad.ir.expr import Call, Const, call, select
from tegrad.ir.intrinsics import INTRINSICS

DERIVATIVES = {}


def register_derivative(name, *rules):
    """Give the intrinsic ``name`` one derivative rule per argument (None: zero)."""
    if len(rules) != INTRINSICS[name].arity:
        raise ValueError(f"{name} takes {INTRINSICS[name].arity} argument(s), "
                         f"got {len(rules)} derivative rule(s)")
    DERIVATIVES[name] = tuple(rules)


def has_zero_derivative(e):
    """Whether ``e`` is a call of an intrinsic whose derivative is zero in every argument
    (``stop_gradient``, ``floor``, ...): no gradient flows through it into what it reads.

    >>> from tegrad.ir.expr import Var
    >>> x = Var("x", "float64")
    >>> has_zero_derivative(call("stop_gradient", x)), has_zero_derivative(call("exp", x))
    (True, False)
    """
    rules = DERIVATIVES.get(e.name) if type(e) is Call else None
    return bool(rules) and all(rule is None for rule in rules)


def _zero_if(cond, value):
    """``cond ? 0 : value``: masks a partial derivative where its formula is 0 * inf."""
    return select(cond, Const(0, value.dtype), value)


def _pow_dbase(g, ans, a, b):
    # b * a**(b - 1), taken as 0 where b == 0 (also at a == 0, where a**-1 is inf)
    return g * _zero_if(b == 0, b * call("pow", a, b - 1))


def _pow_dexponent(g, ans, a, b):
    # a**b * log(a), taken as 0 at a == 0 (the limit from the right for b > 0)
    return g * _zero_if(a == 0, ans * call("log", a))


def _atan2_dy(g, ans, y, x):
    # d/dy atan2(y, x) = x / (x^2 + y^2)
    return g * x / (x * x + y * y)


def _atan2_dx(g, ans, y, x):
    # d/dx atan2(y, x) = -y / (x^2 + y^2)
    return -(g * y / (x * x + y * y))


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

register_derivative("exp", lambda g, ans, x: g * ans)
register_derivative("log", lambda g, ans, x: g / x)
register_derivative("sqrt", lambda g, ans, x: g / (ans * 2))
register_derivative("tanh", lambda g, ans, x: g * (1 - ans * ans))
register_derivative("sigmoid", lambda g, ans, x: g * (ans * (1 - ans)))
register_derivative("sin", lambda g, ans, x: g * call("cos", x))
register_derivative("cos", lambda g, ans, x: -(g * call("sin", x)))
register_derivative("erf", lambda g, ans, x: g * (call("exp", -(x * x)) * _TWO_OVER_SQRT_PI))
register_derivative("pow", _pow_dbase, _pow_dexponent)
# tan' = 1 + tan^2 reuses the value (no cos, no division)
register_derivative("tan", lambda g, ans, x: g * (ans * ans + 1))
register_derivative("asin", lambda g, ans, x: g / call("sqrt", (1 - x) * (1 + x)))
register_derivative("acos", lambda g, ans, x: -(g / call("sqrt", (1 - x) * (1 + x))))
register_derivative("atan", lambda g, ans, x: g / (x * x + 1))
register_derivative("atan2", _atan2_dy, _atan2_dx)
register_derivative("sinh", lambda g, ans, x: g * call("cosh", x))
register_derivative("cosh", lambda g, ans, x: g * call("sinh", x))
register_derivative("asinh", lambda g, ans, x: g / call("sqrt", x * x + 1))
# (x - 1)(x + 1) and (1 - x)(1 + x) rather than x^2 - 1: exact near |x| = 1
register_derivative("acosh", lambda g, ans, x: g / call("sqrt", (x - 1) * (x + 1)))
register_derivative("atanh", lambda g, ans, x: g / ((1 - x) * (1 + x)))
register_derivative("log1p", lambda g, ans, x: g / (x + 1))
register_derivative("expm1", lambda g, ans, x: g * (ans + 1))
# abs'(0) = 0 (sign(0) = 0), like JAX and PyTorch
register_derivative("abs", lambda g, ans, x: g * call("sign", x))
register_derivative("sign", None)
register_derivative("floor", None)
register_derivative("ceil", None)
register_derivative("round", None)
register_derivative("trunc", None)
register_derivative("stop_gradient", None)
# random bits of integer arguments: a constant of whatever it scales (dropout's mask)
register_derivative("philox", None, None, None)

__all__ = ["DERIVATIVES", "has_zero_derivative", "register_derivative"]
