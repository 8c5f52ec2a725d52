"""The expression IR: immutable, hashable nodes with structural equality.

Nodes are frozen dataclasses. Two nodes built the same way hash alike, and
``structural_equal`` compares them field by field; tensors inside reads compare by
identity. Python's ``==`` on expressions builds an ``eq`` comparison node, whose truth
value is the structural equality of its operands (as in TVM), so expressions can key
dicts:

>>> from tegrad.ir.expr import Var
>>> i = Var("i")
>>> {i + 1: "x"}[i + 1]
'x'

Variables are identified by name and dtype. Compute axes are named after the lambda's
parameters, reduce axes by the user (or uniquely when unnamed); transformations that
introduce variables pick names that do not occur in the expression.
"""
from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass, fields
from typing import Optional

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError, IndexingError, TegradError
from tegrad.ir.intrinsics import INTRINSICS

# ---------------------------------------------------------------------------------------
# structural identity


class Node:
    """Base of IR nodes: structural hashing (cached) and equality over dataclass fields."""

    __slots__ = ()

    @classmethod
    def _field_names(cls):
        names = cls.__dict__.get("_cached_field_names")
        if names is None:
            names = tuple(f.name for f in fields(cls))
            cls._cached_field_names = names
        return names

    def children_values(self):
        return tuple(getattr(self, name) for name in self._field_names())

    def __hash__(self):
        h = self.__dict__.get("_hash")
        return _structural_hash(self) if h is None else h


def _node_values(node):
    """The field values of ``node`` with tuples flattened, tagged so shapes hash apart."""
    out = []
    for v in node.children_values():
        if type(v) is tuple:
            out.append(("tuple", len(v)))
            out.extend(v)
        else:
            out.append(v)
    return out


def _structural_hash(root):
    """Hash ``root`` and every sub-node not hashed yet, children first (no recursion)."""
    stack = [root]
    while stack:
        node = stack[-1]
        if "_hash" in node.__dict__:
            stack.pop()
            continue
        values = _node_values(node)
        pending = [v for v in values if isinstance(v, Node) and "_hash" not in v.__dict__]
        if pending:
            stack.extend(pending)
            continue
        h = hash((type(node).__name__,) + tuple(
            v.__dict__["_hash"] if isinstance(v, Node) else hash(v) for v in values))
        object.__setattr__(node, "_hash", h)
        stack.pop()
    return root.__dict__["_hash"]


def structural_equal(a, b):
    """True when ``a`` and ``b`` are the same expression tree (compared without recursion).

    >>> from tegrad.ir.expr import Var
    >>> structural_equal(Var("i") * 2, Var("i") * 2)
    True
    """
    if a is b:  # the common case (a memo hit on the very node): no set to build
        return True
    stack = [(a, b)]
    compared = set()  # pairs of nodes found equal or being compared: shared ones once
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if isinstance(x, Node) or isinstance(y, Node):
            if type(x) is not type(y) or hash(x) != hash(y):
                return False
            if (id(x), id(y)) in compared:
                continue
            compared.add((id(x), id(y)))
            stack.extend(zip(x.children_values(), y.children_values()))
        elif isinstance(x, tuple) or isinstance(y, tuple):
            if not (isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y)):
                return False
            stack.extend(zip(x, y))
        elif type(x) is not type(y) or x != y:
            return False
    return True


class TensorLike:
    """Base of the objects a :class:`Read` reads (tensors).

    Declared here so that expressions recognise a tensor without importing
    :mod:`tegrad.ir.tensor`, which builds on this module.
    """

    __slots__ = ()


#: how ``str()`` renders expressions and tensors: :mod:`tegrad.ir.printer` (above this
#: module, imported with the package) installs its functions here
TEXT = {"expr": lambda e: object.__repr__(e), "tensor": lambda t: object.__repr__(t)}


# ---------------------------------------------------------------------------------------
# operator overloading, shared by expressions and iteration variables


def as_expr(value, dtype=None):
    """Convert a Python number, numpy scalar or IterVar into an expression.

    ``dtype`` is the dtype of the expression the value is combined with, if any.
    """
    if isinstance(value, Expr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, complex):
        if isinstance(value, np.generic):
            value = value.item()
        if dtype is None:
            return Const(value, _dt.python_scalar_dtype(value), weak=True)
        return Const(value, _dt.promote_python_scalar(value, dtype))
    if isinstance(value, TensorLike):
        raise TegradError(
            f"tensor {value.name!r} used as a scalar expression; read an element with "
            f"{value.name}[...]")
    raise TegradError(f"cannot use {value!r} of type {type(value).__name__} as an expression")


def as_expr_pair(a, b):
    """Convert two operands; a bare number or weakly typed side takes the other's dtype."""
    a_is = isinstance(a, (Expr, IterVar))
    b_is = isinstance(b, (Expr, IterVar))
    if a_is and not b_is:
        a = as_expr(a)
        return a, as_expr(b, a.dtype)
    if b_is and not a_is:
        b = as_expr(b)
        return as_expr(a, b.dtype), b
    a, b = as_expr(a), as_expr(b)
    if a.dtype != b.dtype:
        if is_weak(a) and not is_weak(b):
            a = retype(a, b.dtype)
        elif is_weak(b) and not is_weak(a):
            b = retype(b, a.dtype)
    return a, b


def is_weak(e):
    """True for expressions built from Python numbers only (``c ? 1.0 : 0.0``)."""
    t = type(e)
    if t is Const:
        return e.weak
    if t is Select:
        return is_weak(e.true_value) and is_weak(e.false_value)
    if t is Neg:
        return is_weak(e.a)
    if t is Binary:
        return is_weak(e.a) and is_weak(e.b)
    return False


def retype(e, dtype):
    """A weakly typed expression given ``dtype`` (a float literal never becomes an int)."""
    if e.dtype == dtype or not is_weak(e):
        return e
    t = type(e)
    if t is Const:
        return Const(e.value, _dt.promote_python_scalar(e.value, dtype))
    if t is Select:
        return Select(e.cond, retype(e.true_value, dtype), retype(e.false_value, dtype), dtype)
    if t is Neg:
        return Neg(retype(e.a, dtype), dtype)
    return Binary(e.op, retype(e.a, dtype), retype(e.b, dtype), dtype)


class ExprOps:
    """Python operators that build expression nodes."""

    __slots__ = ()

    def __add__(self, other): return binary("add", self, other)
    def __radd__(self, other): return binary("add", other, self)
    def __sub__(self, other): return binary("sub", self, other)
    def __rsub__(self, other): return binary("sub", other, self)
    def __mul__(self, other): return binary("mul", self, other)
    def __rmul__(self, other): return binary("mul", other, self)
    def __truediv__(self, other): return binary("div", self, other)
    def __rtruediv__(self, other): return binary("div", other, self)
    def __floordiv__(self, other): return binary("floordiv", self, other)
    def __rfloordiv__(self, other): return binary("floordiv", other, self)
    def __mod__(self, other): return binary("floormod", self, other)
    def __rmod__(self, other): return binary("floormod", other, self)
    def __pow__(self, other): return call("pow", self, other)
    def __rpow__(self, other): return call("pow", other, self)
    def __neg__(self): return neg(self)
    def __pos__(self): return as_expr(self)
    def __lt__(self, other): return compare("lt", self, other)
    def __le__(self, other): return compare("le", self, other)
    def __gt__(self, other): return compare("gt", self, other)
    def __ge__(self, other): return compare("ge", self, other)
    def __eq__(self, other): return compare("eq", self, other)
    def __ne__(self, other): return compare("ne", self, other)
    def __and__(self, other): return logical_and(self, other)
    def __rand__(self, other): return logical_and(other, self)
    def __or__(self, other): return logical_or(self, other)
    def __ror__(self, other): return logical_or(other, self)
    def __invert__(self): return logical_not(self)
    def __abs__(self): return call("abs", self)

    def __round__(self, ndigits=None):
        if ndigits is not None:
            raise TegradError(f"round({self}, {ndigits!r}): only rounding to an integer value "
                              f"is supported (tg.round)")
        return call("round", self)

    def _not_a_number(self, *args):
        raise TegradError(
            f"the expression {self} was used as a Python number (by math.exp, float(), "
            f"int(), an index into a list, ...); it has no value when the program is built: "
            f"use the tegrad functions on expressions (tg.exp, tg.log, tg.sqrt, tg.floor, "
            f"tg.cast, ...)")

    __float__ = __int__ = __index__ = __complex__ = _not_a_number

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # numpy scalars combined with an expression (np.float32(2) * x[i]) build nodes;
        # any other numpy function is an error naming the tegrad one
        fn = _NUMPY_OPERATORS.get(ufunc.__name__)
        if fn is None or method != "__call__" or kwargs:
            raise TegradError(
                f"numpy's {ufunc.__name__} was applied to the expression "
                f"{next(x for x in inputs if isinstance(x, ExprOps))}; numpy functions do not "
                f"take expressions: use the tegrad function (tg.{ufunc.__name__}, ...)")
        args = []
        for x in inputs:
            if isinstance(x, np.ndarray) and x.ndim == 0:
                x = x[()]
            if isinstance(x, np.ndarray):
                raise TegradError(f"a numpy array of shape {x.shape} was combined with the "
                                  f"expression {self}; feed arrays through placeholders")
            args.append(x.item() if isinstance(x, np.generic) else x)
        return fn(*args)

    def __bool__(self):
        raise TegradError(
            f"the truth value of the expression {self} is not known when the program is "
            f"built; use tg.if_then_else, tg.all or tg.any instead of if/and/or")

    __hash__ = Node.__hash__

    def __str__(self):
        return TEXT["expr"](self)

    def __repr__(self):
        return f"<{type(self).__name__} {self}>"


_NUMPY_OPERATORS = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "true_divide": operator.truediv, "floor_divide": operator.floordiv,
    "remainder": operator.mod, "power": operator.pow, "negative": operator.neg,
    "absolute": operator.abs, "less": operator.lt, "less_equal": operator.le,
    "greater": operator.gt, "greater_equal": operator.ge, "equal": operator.eq,
    "not_equal": operator.ne,
}


# ---------------------------------------------------------------------------------------
# nodes


class Expr(ExprOps, Node):
    """Base class of scalar expressions; every expression has a ``dtype``."""

    __slots__ = ()


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    """A typed constant. ``Const(2, "float32")`` holds the Python float 2.0."""

    value: object
    dtype: str
    #: a bare Python number: it takes the dtype of what it is combined with (weak type)
    weak: bool = False

    def __post_init__(self):
        dtype = _dt.canonical_dtype(self.dtype)
        object.__setattr__(self, "dtype", dtype)
        value = self.value.item() if isinstance(self.value, np.generic) else self.value
        if isinstance(value, complex) or not isinstance(value, numbers.Number):
            raise DTypeError(f"the constant {value!r} of type {type(value).__name__} is not a "
                             f"real number; a {dtype} constant needs an int, float or bool")
        if _dt.is_float(dtype):
            value = float(value)
        elif _dt.is_bool(dtype):
            value = bool(value)
        else:
            if isinstance(value, float) and not value.is_integer():
                raise DTypeError(f"the float {value!r} is not a valid {dtype} constant")
            value = int(value)
            if not _dt.min_value(dtype) <= value <= _dt.max_value(dtype):
                raise DTypeError(f"the integer {value} does not fit the dtype {dtype}; use a "
                                 f"wider dtype (tg.cast)")
        object.__setattr__(self, "value", value)


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A named integer variable: a compute axis, a reduce axis, or a free parameter."""

    name: str
    dtype: str = _dt.INDEX_DTYPE


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    """``a op b`` for op in add, sub, mul, div, floordiv, floormod, min, max."""

    op: str
    a: Expr
    b: Expr
    dtype: str


def may_divide_by_zero(e):
    """``e`` is an integer ``//`` or ``%`` whose divisor is not a nonzero constant: its
    evaluation can fail (the evaluator raises; compiled code checks the divisor).

    >>> may_divide_by_zero(Var("i") // 4), may_divide_by_zero(Var("i") // Var("j"))
    (False, True)
    """
    return (type(e) is Binary and e.op in ("floordiv", "floormod")
            and not _dt.is_float(e.dtype) and not (type(e.b) is Const and e.b.value != 0))


@dataclass(frozen=True, eq=False, repr=False)
class Neg(Expr):
    """``-a``."""

    a: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Compare(Expr):
    """``a op b`` for op in lt, le, gt, ge, eq, ne; dtype bool.

    Its truth value (``bool(x == y)``) is the structural (in)equality of the operands.
    """

    op: str
    a: Expr
    b: Expr
    dtype: str = "bool"

    def __bool__(self):
        if self.op == "eq":
            return structural_equal(self.a, self.b)
        if self.op == "ne":
            return not structural_equal(self.a, self.b)
        return ExprOps.__bool__(self)


@dataclass(frozen=True, eq=False, repr=False)
class And(Expr):
    a: Expr
    b: Expr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Or(Expr):
    a: Expr
    b: Expr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``cond ? true_value : false_value``; only the chosen branch is evaluated."""

    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    """Conversion of ``a`` to ``dtype`` (floats to integers truncate toward zero)."""

    a: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """An intrinsic call such as ``exp(x)``; see :mod:`tegrad.intrinsics`."""

    name: str
    args: tuple
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Read(Expr):
    """``tensor[indices]``; tensors compare by identity."""

    tensor: object
    indices: tuple
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class IterVar(ExprOps, Node):
    """A variable with the range ``[lo, lo + extent)``; ``kind`` is "data" or "reduce".

    Bounds are expressions, so a reduction may have bounds that depend on outer
    variables (non-rectangular domains). In arithmetic an IterVar stands for its var.
    """

    var: Var
    lo: Expr
    extent: Expr
    kind: str = "reduce"

    @property
    def name(self):
        return self.var.name

    @property
    def dtype(self):
        return self.var.dtype

    @property
    def hi(self):
        return fold_bound(self.lo + self.extent)

    def __repr__(self):
        return f"<IterVar {self.var.name} in [{self.lo}, {self.hi})>"

    __str__ = __repr__
    __hash__ = Node.__hash__


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """``reducer(source for axes in their ranges if where)``, combined with ``init``.

    ``where`` (bool) masks points of the reduction domain; ``init`` (or the reducer's
    identity when None) is the starting value, combined once with the reduced value.
    """

    reducer: object
    source: Expr
    axes: tuple
    where: Optional[Expr]
    init: Optional[Expr]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class TupleReduce(Expr):
    """Component ``index`` of the reduction of the tuple ``sources`` by a tuple reducer.

    ``reducer(sources for axes in their ranges if where)`` folds tuples: its combine
    takes two tuples of partial results and returns one (argmax with its value folds
    ``(index, value)`` pairs). One node per component, all alike but for ``index``:
    ``tg.compute`` makes each the whole body of its own output stage, and the lowering
    computes the stages of one tuple reduction in one loop nest. Only as a stage's whole
    body (no ``init``: start from the reducer's identity tuple).
    """

    reducer: object
    sources: tuple
    axes: tuple
    where: Optional[Expr]
    index: int
    dtype: str

    def component(self, index):
        """The node of component ``index`` of the same tuple reduction."""
        if index == self.index:
            return self
        return TupleReduce(self.reducer, self.sources, self.axes, self.where, index,
                           self.sources[index].dtype)


#: the node kinds that reduce over axes of their own
REDUCTIONS = (Reduce, TupleReduce)


# ---------------------------------------------------------------------------------------
# builders with dtype checking

BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")


def binary(op, a, b):
    """Build ``a op b`` (``op`` in ``BINARY_OPS``) after checking and unifying dtypes."""
    if op not in BINARY_OPS:
        raise TegradError(f"unknown binary operation {op!r}")
    a, b = as_expr_pair(a, b)
    dtype = _dt.unify_dtypes(a.dtype, b.dtype, lambda: f"{op}({a}, {b})")
    if _dt.is_bool(dtype):
        raise DTypeError(f"arithmetic {op} on bool operands in {op}({a}, {b}); use tg.cast")
    if op == "div" and not _dt.is_float(dtype):
        raise DTypeError(
            f"true division of integer expressions in {a} / {b}; use // (floor division) "
            f"or tg.cast to a float dtype")
    return Binary(op, a, b, dtype)


def neg(a):
    a = as_expr(a)
    if _dt.is_bool(a.dtype):
        raise DTypeError(f"negation of the bool expression {a}; use ~ for logical not")
    return Neg(a, a.dtype)


def compare(op, a, b):
    """Build ``a op b`` (``op`` in ``COMPARE_OPS``), a bool expression."""
    if op not in COMPARE_OPS:
        raise TegradError(f"unknown comparison {op!r}")
    a, b = as_expr_pair(a, b)
    _dt.unify_dtypes(a.dtype, b.dtype, lambda: f"{op}({a}, {b})")
    return Compare(op, a, b)


def _as_bool(value, what):
    if isinstance(value, (bool, np.bool_)):
        return Const(bool(value), "bool")
    e = as_expr(value)
    if not _dt.is_bool(e.dtype):
        raise DTypeError(f"{what} needs a bool condition, got {e} of dtype {e.dtype}")
    return e


def logical_and(a, b):
    return And(_as_bool(a, "logical and"), _as_bool(b, "logical and"))


def logical_or(a, b):
    return Or(_as_bool(a, "logical or"), _as_bool(b, "logical or"))


def logical_not(a):
    return Not(_as_bool(a, "logical not"))


def select(cond, true_value, false_value):
    """``cond ? true_value : false_value`` (``tg.if_then_else``)."""
    cond = _as_bool(cond, "if_then_else")
    t, f = as_expr_pair(true_value, false_value)
    dtype = _dt.unify_dtypes(t.dtype, f.dtype, lambda: f"if_then_else({cond}, {t}, {f})")
    if t.dtype != dtype:
        t = Cast(t, dtype)
    if f.dtype != dtype:
        f = Cast(f, dtype)
    return Select(cond, t, f, dtype)


def cast(value, dtype):
    """Convert ``value`` to ``dtype``; a cast to the same dtype returns ``value``."""
    dtype = _dt.canonical_dtype(dtype)
    e = as_expr(value) if not isinstance(value, (numbers.Number, np.generic)) else None
    if e is None:
        return Const(value, dtype)
    return e if e.dtype == dtype else Cast(e, dtype)


def call(name, *args):
    """Build a call of the intrinsic ``name`` (checked against the intrinsic table)."""
    try:
        intrinsic = INTRINSICS[name]
    except KeyError:
        raise TegradError(f"unknown intrinsic {name!r}") from None
    if len(args) != intrinsic.arity:
        raise TegradError(f"{name} takes {intrinsic.arity} argument(s), got {len(args)}")
    if len(args) == 2:
        exprs = as_expr_pair(*args)
    else:
        exprs = tuple(as_expr(a) for a in args)
    dtype = exprs[0].dtype
    for e in exprs[1:]:
        dtype = _dt.unify_dtypes(dtype, e.dtype, lambda: f"{name}({', '.join(map(str, exprs))})")
    if not intrinsic.accepts(dtype):
        raise DTypeError(f"{name} is not defined for {dtype} operands (in {name}"
                         f"({', '.join(map(str, exprs))}))")
    return Call(name, tuple(exprs), dtype)


def read(tensor, indices):
    """Build ``tensor[indices]`` after checking the number and dtype of the indices."""
    if not isinstance(indices, tuple):
        indices = (indices,)
    if len(indices) == 1 and indices[0] is Ellipsis and len(tensor.shape) == 0:
        indices = ()
    if len(indices) != len(tensor.shape):
        raise IndexingError(
            f"tensor {tensor.name!r} of shape {tensor.shape} read with {len(indices)} "
            f"index(es); it needs {len(tensor.shape)}")
    exprs = []
    for pos, index in enumerate(indices):
        if isinstance(index, slice) or index is Ellipsis or index is None:
            raise IndexingError(
                f"tensor {tensor.name!r}: index {pos} is {index!r}; only scalar integer "
                f"expressions index a tensor")
        if isinstance(index, (float, np.floating)):
            raise IndexingError(f"tensor {tensor.name!r}: index {pos} is the float {index!r}")
        e = as_expr(index)
        if not _dt.is_int(e.dtype):
            raise IndexingError(
                f"tensor {tensor.name!r}: index {pos} ({e}) has dtype {e.dtype}; indices "
                f"must be integers (use tg.cast)")
        exprs.append(e)
    return Read(tensor, tuple(exprs), tensor.dtype)


def fold_bound(e):
    """Fold constant integer arithmetic in a range bound (``0 + 8 -> 8``)."""
    if isinstance(e, Binary) and isinstance(e.a, Const) and isinstance(e.b, Const):
        if e.op == "add":
            return Const(e.a.value + e.b.value, e.dtype)
        if e.op == "sub":
            return Const(e.a.value - e.b.value, e.dtype)
    if isinstance(e, Binary) and e.op == "add" and isinstance(e.a, Const) and e.a.value == 0:
        return e.b
    return e
