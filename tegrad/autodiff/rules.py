"""Forward-mode derivative rules, one table entry per node kind (and per binary op).

``RULES[node type](fd, e)`` returns the tangent of ``e`` given the forward-mode driver
``fd`` (``fd.tangent(sub)`` is the tangent of a sub-expression, ``fd.answer(e)`` the
value of ``e``, possibly a read of an already computed stage). Binary nodes dispatch on
``BINARY_RULES[op]``, intrinsic calls on :data:`tegrad.autodiff.intrinsic_rules.DERIVATIVES`;
the rule of reductions is registered by :mod:`tegrad.autodiff.reduce_rules` (it
dispatches on :data:`~tegrad.autodiff.reduce_rules.REDUCER_RULES`). A tangent is an
expression or the symbolic :data:`ZERO`.

Conventions (documented choices at points where the derivative does not exist):

- integer- and bool-typed expressions are not differentiated: their tangent is ZERO;
  comparisons, logical operators and ``floordiv`` have zero derivative;
- ``floor``, ``ceil``, ``round``, ``trunc`` and ``sign`` have zero derivative;
  ``abs'(0) = 0``;
- binary ``max(a, b)``/``min(a, b)`` at a tie ``a == b`` give half of the tangent to
  each operand (like ``torch.maximum``); against a constant, ``max(x, c)`` passes
  ``dx`` only where its result is not ``c`` (``x > c`` or NaN), so ``relu(x) = max(x,
  0)`` has ``relu'(0) = 0`` like ``torch.relu``, and its gradient can read the relu's
  output instead of its input (see ``_against_constant``); a relu written as
  ``x > 0 ? x : 0`` follows the select and also has ``relu'(0) = 0`` (its gradient, and
  a leaky relu's, also reads the output: see ``_select_condition``);
- ``select(c, a, b)`` differentiates each branch where it is taken (``c`` is constant);
- max/min *reductions* split the tangent equally among all tied positions (like JAX
  and ``torch.amax``), see :mod:`tegrad.autodiff.reduce_rules`.

>>> from tegrad.ir.expr import Var, Read
>>> x = Var("x", "float64")
>>> str(ForwardDiff(lambda leaf: Const(1.0, "float64") if leaf is x else ZERO).tangent(x * x))
'x + x'
"""
from __future__ import annotations

from tegrad.ir.errors import DifferentiationError
from tegrad.ir.expr import (And, Binary, Call, Cast, Compare, Const, Neg, Not, Or, Read, Reduce,
                            Select, TupleReduce, Var, call, compare,
                            structural_equal)
from tegrad.ir.mapper import NodeMemo, bottom_up
from tegrad.autodiff.intrinsic_rules import DERIVATIVES
from tegrad.autodiff.algebra import (ZERO, add, cast_to, choose, differentiable, div, mul, neg,
                                     sub, sum_all)


class ForwardDiff:
    """Forward-mode differentiation of expressions, memoised per node.

    ``seed(leaf)`` gives the tangent of a ``Read`` or ``Var`` leaf (or ZERO);
    ``answers`` maps ``id(node)`` to an expression to use for the node's value
    (e.g. the read ``Y[y]`` of the stage whose whole body is the node); ``reserved``
    holds variable names of the enclosing context that new reduce axes must avoid;
    ``tests`` maps ``id(node)`` of an extremum against a constant to an expression its
    comparison with that constant may test instead (:func:`bound_tests`).
    """

    def __init__(self, seed, answers=None, reserved=(), tests=None):
        self.seed = seed
        self.answers = answers or {}
        self.tests = tests or {}
        self.reserved = frozenset(reserved)
        self._memo = NodeMemo()

    def answer(self, e):
        """The value of ``e``: its replacement in ``answers``, or ``e`` itself."""
        return self.answers.get(id(e), e)

    def tested(self, e):
        """What a comparison of ``e`` with its constant bound may test: its entry in
        ``tests``, else its value."""
        found = self.tests.get(id(e))
        return self.answer(e) if found is None else found

    def tangent(self, e):
        """The tangent of ``e`` (an expression or ZERO).

        The tangents the rules will ask for (:data:`TANGENT_OPERANDS`) are computed
        first, children before parents on an explicit stack, so a rule finds its
        operands' tangents memoised and an expression of any depth needs no recursion.
        """
        hit = self._memo.get(e)
        if hit is not None:
            return hit
        return bottom_up(e, _tangent_operands, lambda node, _: self._tangent_here(node),
                         whole=self._known)

    def _known(self, e):
        return self._memo.get(e) is not None or not differentiable(e.dtype)

    def _tangent_here(self, e):
        hit = self._memo.get(e)
        if hit is not None:
            return hit
        if not differentiable(e.dtype):
            t = ZERO
        else:
            try:
                rule = RULES[type(e)]
            except KeyError:
                raise DifferentiationError(
                    f"no derivative rule for the node {e} ({type(e).__name__})") from None
            t = rule(self, e)
        self._memo[e] = t
        return t


RULES = {}
BINARY_RULES = {}

#: the sub-expressions whose tangents the rule of a node kind asks for
TANGENT_OPERANDS = {
    Binary: lambda e: (e.a, e.b), Neg: lambda e: (e.a,), Cast: lambda e: (e.a,),
    Select: lambda e: (e.true_value, e.false_value), Call: lambda e: e.args,
    Reduce: lambda e: (e.source,) if e.init is None else (e.source, e.init),
    TupleReduce: lambda e: e.sources,
}


def _tangent_operands(e):
    operands = TANGENT_OPERANDS.get(type(e))
    return () if operands is None else operands(e)


def rule(*kinds):
    """Register a rule for node types (``RULES``) or binary op names (``BINARY_RULES``)."""
    def register(fn):
        for kind in kinds:
            (BINARY_RULES if isinstance(kind, str) else RULES)[kind] = fn
        return fn
    return register


# --- leaves and nodes without derivative ----------------------------------------------

@rule(Const)
def _const(fd, e):
    return ZERO


@rule(Var, Read)
def _leaf(fd, e):
    return fd.seed(e)


@rule(Compare, And, Or, Not)
def _logical(fd, e):
    return ZERO  # bool-valued (never reached: bool is not differentiable)


# --- structural nodes -------------------------------------------------------------------

@rule(Neg)
def _neg(fd, e):
    return neg(fd.tangent(e.a))


@rule(Select)
def _select(fd, e):
    return choose(_select_condition(fd, e), fd.tangent(e.true_value),
                  fd.tangent(e.false_value), e.dtype)


def _select_condition(fd, e):
    """The condition of ``e = select(a op c, a, f)`` (``c`` a constant) tested on the value
    ``r`` of ``e`` where the driver has one and :data:`STAYS_OUT` says that ``f`` fails
    the test wherever ``a`` does: then ``r op c`` equals ``a op c`` (where it holds,
    ``r = a``; where not, ``r = f`` fails it too), so a leaky relu's gradient reads its
    output, not its input; else ``e``'s own condition."""
    cond, value = e.cond, fd.answer(e)
    if (value is e or type(cond) is not Compare or type(cond.b) is not Const
            or not structural_equal(e.true_value, cond.a)):
        return cond
    stays_out = STAYS_OUT.get(cond.op)
    if stays_out is None or not stays_out(e.false_value, cond.a, cond.b.value):
        return cond
    return Compare(cond.op, value, cond.b)


def _constant(f, test):
    return type(f) is Const and not isinstance(f.value, bool) and test(f.value)


def _scaled(f, a):
    """Whether ``f`` is ``a * k`` or ``k * a`` with ``k`` a constant >= 0 (not NaN)."""
    if type(f) is not Binary or f.op != "mul":
        return False
    k = f.b if structural_equal(f.a, a) else f.a if structural_equal(f.b, a) else None
    return k is not None and _constant(k, lambda v: v >= 0)


#: ``op -> stays_out(f, a, c)``: whether ``f op c`` is false wherever ``a op c`` is (``a``
#: at or below ``c`` for ``gt``, or NaN). ``a * k`` with ``k >= 0`` keeps the sign of
#: ``a`` or is NaN (0 * inf), but may round to 0, so it serves the strict tests against 0
STAYS_OUT = {
    "gt": lambda f, a, c: _constant(f, lambda v: v <= c) or (c == 0 and _scaled(f, a)),
    "lt": lambda f, a, c: _constant(f, lambda v: v >= c) or (c == 0 and _scaled(f, a)),
    "ge": lambda f, a, c: _constant(f, lambda v: v < c),
    "le": lambda f, a, c: _constant(f, lambda v: v > c),
}


@rule(Cast)
def _cast(fd, e):
    if not differentiable(e.a.dtype):
        return ZERO  # int -> float: the integer operand is constant
    return cast_to(fd.tangent(e.a), e.dtype)


@rule(Binary)
def _binary(fd, e):
    try:
        fn = BINARY_RULES[e.op]
    except KeyError:
        raise DifferentiationError(f"no derivative rule for the binary op {e.op!r} in {e}") \
            from None
    return fn(fd, e, fd.tangent(e.a), fd.tangent(e.b))


@rule(Call)
def _call(fd, e):
    try:
        partials = DERIVATIVES[e.name]
    except KeyError:
        raise DifferentiationError(
            f"the intrinsic {e.name!r} has no derivative rule (in {e}); register one with "
            f"tegrad.autodiff.intrinsic_rules.register_derivative") from None
    terms = []
    for arg, partial in zip(e.args, partials):
        g = fd.tangent(arg)
        if g is ZERO or partial is None:
            continue
        terms.append(partial(g, fd.answer(e), *e.args))
    return sum_all(terms)


# --- binary operators -------------------------------------------------------------------

@rule("add")
def _add(fd, e, da, db):
    return add(da, db)


@rule("sub")
def _sub(fd, e, da, db):
    return sub(da, db)


@rule("mul")
def _mul(fd, e, da, db):
    return add(mul(da, e.b), mul(e.a, db))


@rule("div")
def _div(fd, e, da, db):
    # d(a / b) = (da - (a / b) db) / b
    return div(sub(da, mul(fd.answer(e), db)), e.b)


@rule("floordiv")
def _floordiv(fd, e, da, db):
    return ZERO  # piecewise constant in a and b


@rule("floormod")
def _floormod(fd, e, da, db):
    # a % b = a - floor(a / b) * b
    return sub(da, mul(call("floor", e.a / e.b), db))


def _extremum(pick_a, clamped):
    def fn(fd, e, da, db):
        if da is ZERO and db is ZERO:
            return ZERO
        if _bound(e) is not None:
            return _against_constant(fd, e, da, db, clamped)
        half = mul(add(da, db), Const(0.5, e.dtype))
        return choose(pick_a(e.a, e.b), da,
                      choose(e.a == e.b, half, db, e.dtype), e.dtype)
    return fn


def _against_constant(fd, e, da, db, clamped):
    """The tangent of ``max(x, c)`` (``min(x, c)``) with ``c`` a constant: ``dx`` except
    where the result is the constant, ``x <= c`` (``x >= c``), the tie included (relu's
    derivative at 0 is 0, like ``torch.relu``, ``jax.nn.relu`` and ``tf.nn.relu``); a NaN
    ``x`` passes ``dx`` (its result is NaN, not ``c``: torch's threshold_backward).

    The condition reads the value ``r`` of the extremum where the driver has one (the
    read ``Y[y]`` of the stage whose whole body it is), so that a relu's gradient keeps
    the relu's output, not its input, alive: ``r <= c`` equals ``x <= c`` for every
    ``x``, with numpy's maximum (the evaluator's and the compiled code's: a NaN operand
    gives NaN), ``c`` on either side: ``x > c`` gives ``r = x > c``; ``x <= c`` gives
    ``r = c`` (up to the sign of a zero, which ``<=`` does not see); a NaN ``x`` gives a
    NaN ``r``, and both comparisons are false (likewise ``>=`` for min).
    """
    x, c = _bound(e)
    dx = da if x is e.a else db
    value = fd.tested(e)
    at_bound = compare(clamped, x if value is e else value, c)
    return choose(at_bound, ZERO, dx, e.dtype)


def _bound(e):
    """``(x, c)`` for ``e = max(x, c)`` or ``min(x, c)`` (``c`` a constant on either side),
    else None."""
    if type(e) is not Binary or e.op not in ("max", "min") or (type(e.a) is Const) == (
            type(e.b) is Const):
        return None
    return (e.b, e.a) if type(e.a) is Const else (e.a, e.b)


def bound_tests(body, value):
    """``{id(node): value}`` for the extremum a clip nests in ``body`` (``value``: the
    stage's value at the same point), so that its test too reads the stage's value.

    For ``r = min(max(x, lo), hi)`` with ``lo < hi``, ``r <= lo`` equals ``max(x, lo) <=
    lo``: ``x <= lo`` gives ``r = min(lo, hi) = lo``; ``x > lo`` gives ``r = min(x, hi) >
    lo``; a NaN ``x`` a NaN ``r``. Likewise ``r >= hi`` for ``max(min(x, hi), lo)``. (The
    outer extremum is the whole body: its test reads its value.)

    >>> import tegrad as tg
    >>> x = tg.placeholder((3,), name="x")
    >>> r = tg.placeholder((3,), name="r")
    >>> len(bound_tests(tg.min(tg.max(x[0], 0.0), 6.0), r[0]))
    1
    """
    outer = _bound(body)
    inner = None if outer is None else _bound(outer[0])
    if inner is None or outer[0].op == body.op:
        return {}
    c, bound = inner[1].value, outer[1].value
    inside = c < bound if body.op == "min" else c > bound
    return {id(outer[0]): value} if inside else {}


BINARY_RULES["max"] = _extremum(lambda a, b: a > b, "le")
BINARY_RULES["min"] = _extremum(lambda a, b: a < b, "ge")


__all__ = ["ForwardDiff", "RULES", "BINARY_RULES", "TANGENT_OPERANDS", "STAYS_OUT", "bound_tests",
           "rule"]
