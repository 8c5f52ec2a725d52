"""Reducers (sum, prod, max, min and user-defined commutative reducers) and reduce axes.

>>> import tegrad as tg
>>> A = tg.placeholder((4, 8), name="A")
>>> k = tg.reduce_axis((0, 8), name="k")
>>> S = tg.compute((4,), lambda i: tg.sum(A[i, k], axis=k), name="S")
"""
from __future__ import annotations

import inspect
import itertools
import numbers

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError, ScopeError, ShapeError, TegradError
from tegrad.ir.expr import (Const, Expr, IterVar, Reduce, TupleReduce, Var, as_expr, binary,
                            retype, select)
from tegrad.ir.mapper import free_var_names, reduce_axis_names

_axis_counter = itertools.count()


def reduce_axis(dom, name=None):
    """A reduction variable ranging over ``[dom[0], dom[1])``.

    >>> k = reduce_axis((0, 16), name="k")
    >>> k.extent.value
    16
    """
    if isinstance(dom, range):
        if dom.step != 1:
            raise ShapeError(f"reduce_axis {name!r}: only unit-step ranges, got {dom}")
        dom = (dom.start, dom.stop)
    if isinstance(dom, numbers.Integral):
        dom = (0, dom)
    if not (isinstance(dom, (tuple, list)) and len(dom) == 2):
        raise ShapeError(f"reduce_axis {name!r}: expected (begin, end), got {dom!r}")
    lo, hi = dom
    for bound in (lo, hi):
        if isinstance(bound, bool) or not isinstance(bound, (numbers.Integral, Expr, IterVar)):
            raise ShapeError(f"reduce_axis {name!r}: bounds must be integers, got {dom!r}")
    if name is None:
        name = f"rk{next(_axis_counter)}"
    if not isinstance(name, str) or not name.isidentifier():
        raise TegradError(f"reduce_axis: name must be an identifier, got {name!r}")
    if isinstance(lo, numbers.Integral) and isinstance(hi, numbers.Integral):
        limit = _dt.max_value(_dt.INDEX_DTYPE)
        if not (-limit <= lo <= limit and -limit <= hi <= limit and hi - lo <= limit):
            raise ShapeError(f"reduce_axis {name!r}: the range {dom!r} does not fit the "
                             f"{_dt.INDEX_DTYPE} axis variables")
        if hi < lo:
            raise ShapeError(f"reduce_axis {name!r}: end {hi} is before begin {lo}")
        return IterVar(Var(name), Const(int(lo), _dt.INDEX_DTYPE),
                       Const(int(hi) - int(lo), _dt.INDEX_DTYPE), "reduce")
    lo_e, hi_e = as_expr(lo), as_expr(hi)
    return IterVar(Var(name), lo_e, binary("sub", hi_e, lo_e), "reduce")


class Reducer:
    """A commutative, associative combination with an identity, usable like ``tg.sum``.

    ``combine(a, b)`` builds the expression combining two partial results and
    ``identity(dtype)`` gives the neutral element; ``derivative(x, y)``, when given, is
    the partial derivative ``dY/dx`` of a reduction's value ``y`` with respect to one of
    its elements ``x``. Reducers compare by identity.

    A reducer of tuples reduces a tuple of sources (``argmax((k, x[i, k]), axis=k)``):
    ``combine(a, b)`` then takes two tuples and returns one, ``identity(*dtypes)``
    takes one dtype per component and returns a tuple, and ``derivative(x, y)`` (x an
    element tuple, y the result tuple) returns, per component ``j`` of the result, the
    tuple of ``dY_j/dx_c`` over the components ``c`` of the element (0 where none).
    """

    def __init__(self, name, combine, identity, numpy_reduce=None, derivative=None):
        self.name = name
        self._combine = combine
        self._identity = identity
        self.numpy_reduce = numpy_reduce
        self.derivative = derivative
        self._combiners = {}

    def __repr__(self):
        return f"<Reducer {self.name}>"

    def identity(self, dtype):
        """The neutral element as a ``Const`` of ``dtype``."""
        try:
            value = self._identity(dtype)
        except TypeError as err:
            raise TegradError(f"reducer {self.name!r}: identity({dtype!r}) failed ({err}); "
                              f"a reducer of tuples reduces a tuple of sources") from None
        if isinstance(value, tuple):
            raise TegradError(f"reducer {self.name!r}: identity({dtype!r}) returned a "
                              f"tuple; a reducer of tuples reduces a tuple of sources")
        return value if isinstance(value, Const) else Const(value, dtype)

    def combine(self, a, b):
        """The expression combining partial results ``a`` and ``b``."""
        out = as_expr(self._combine(a, b))
        return out

    def combiner(self, dtype):
        """``(x, y, combine(x, y))`` with fresh variables of ``dtype``: the symbolic combiner."""
        if dtype not in self._combiners:
            x, y = Var("_rx", dtype), Var("_ry", dtype)
            try:
                body = self.combine(x, y)
            except (TypeError, IndexError) as err:
                raise TegradError(f"reducer {self.name!r}: combine(a, b) failed on two "
                                  f"{dtype} expressions ({err}); a reducer of tuples "
                                  f"reduces a tuple of sources") from None
            if body.dtype != dtype:
                raise DTypeError(f"reducer {self.name!r}: combining two {dtype} values gives "
                                 f"{body.dtype}")
            self._combiners[dtype] = (x, y, body)
        return self._combiners[dtype]

    def tuple_combiner(self, dtypes):
        """``(xs, ys, bodies)``: tuples of fresh variables of ``dtypes`` and the components
        of ``combine(xs, ys)``, checked (one per component, of its dtype)."""
        key = tuple(dtypes)
        if key not in self._combiners:
            n = len(key)
            xs = tuple(Var(f"_rx{j}", d) for j, d in enumerate(key))
            ys = tuple(Var(f"_ry{j}", d) for j, d in enumerate(key))
            try:
                out = self._combine(xs, ys)
            except (TypeError, IndexError, TegradError) as err:
                raise TegradError(f"reducer {self.name!r}: combine(a, b) failed on two "
                                  f"{n}-tuples of {', '.join(key)} ({err}); a reducer of "
                                  f"tuples takes and returns tuples") from None
            if not isinstance(out, (tuple, list)) or len(out) != n:
                raise TegradError(f"reducer {self.name!r}: combine of two {n}-tuples "
                                  f"returned {_shown(out)}; it must return a tuple of {n} "
                                  f"expressions, one per component")
            bodies = []
            for j, (o, d) in enumerate(zip(out, key)):
                try:
                    e = retype(as_expr(o, d), d)
                except TegradError as err:
                    raise TegradError(f"reducer {self.name!r}: component {j} of combine: "
                                      f"{err}") from None
                if e.dtype != d:
                    raise DTypeError(f"reducer {self.name!r}: component {j} of combine has "
                                     f"dtype {e.dtype}, but the sources' component {j} is {d}")
                bodies.append(e)
            self._combiners[key] = (xs, ys, tuple(bodies))
        return self._combiners[key]

    def tuple_identity(self, dtypes):
        """The neutral tuple: one ``Const`` per component, of ``dtypes``, checked."""
        n = len(dtypes)
        try:
            values = self._identity(*dtypes)
        except TypeError as err:
            raise TegradError(f"reducer {self.name!r}: identity must take one dtype per "
                              f"component, identity({', '.join(map(repr, dtypes))}), and "
                              f"failed so ({err})") from None
        if not isinstance(values, (tuple, list)) or len(values) != n:
            raise TegradError(f"reducer {self.name!r}: identity of {n} components returned "
                              f"{_shown(values)}; it must return a tuple of {n} values")
        out = []
        for j, (v, d) in enumerate(zip(values, dtypes)):
            c = v if isinstance(v, Const) else Const(v, d)
            if c.dtype != d:
                raise DTypeError(f"reducer {self.name!r}: component {j} of the identity has "
                                 f"dtype {c.dtype}, but the sources' component {j} is {d}")
            out.append(c)
        return tuple(out)

    def __call__(self, expr, axis=None, where=None, init=None):
        """Reduce ``expr`` over ``axis`` (a reduce axis or a list of them); a tuple of
        expressions gives the tuple of the components of their reduction."""
        if isinstance(expr, (tuple, list)):
            return make_tuple_reduce(self, expr, axis, where, init)
        return make_reduce(self, expr, axis, where, init)


def _shown(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _axes_tuple(reducer, axis):
    if axis is None:
        raise TegradError(f"{reducer.name}: the reduction needs axis= (a reduce_axis or a list)")
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    names = set()
    for ax in axes:
        if not isinstance(ax, IterVar):
            raise TegradError(f"{reducer.name}: axis {ax!r} is not a reduce_axis")
        if ax.kind != "reduce":
            raise ScopeError(f"{reducer.name}: {ax.name!r} is an axis of a compute, not a "
                             f"reduce_axis")
        if ax.name in names:
            raise ScopeError(f"{reducer.name}: reduce axis {ax.name!r} given twice")
        names.add(ax.name)
    return axes


def _checked_where(reducer, where):
    if where is None:
        return None
    if isinstance(where, (bool, np.bool_)):
        where = Const(bool(where), "bool")
    where = as_expr(where)
    if not _dt.is_bool(where.dtype):
        raise DTypeError(f"{reducer.name}: where= needs a bool condition, got {where} "
                         f"of dtype {where.dtype}")
    return where


def _checked_source(reducer, expr, axes):
    source = as_expr(expr)
    if _dt.is_bool(source.dtype):
        raise DTypeError(f"{reducer.name}: cannot reduce the bool expression {source}; cast it")
    inner = reduce_axis_names(source)
    for ax in axes:
        if ax.name in inner:
            raise ScopeError(f"{reducer.name}: reduce axis {ax.name!r} is already reduced "
                             f"inside {source}")
    return source


def make_reduce(reducer, expr, axis, where=None, init=None):
    """Build a ``Reduce`` node, checking dtypes and nesting."""
    axes = _axes_tuple(reducer, axis)
    source = _checked_source(reducer, expr, axes)
    where = _checked_where(reducer, where)
    if init is not None:
        init = retype(as_expr(init, source.dtype), source.dtype)
        if init.dtype != source.dtype:
            raise DTypeError(f"{reducer.name}: init {init} has dtype {init.dtype} but the "
                             f"reduced expression has {source.dtype}")
        for ax in axes:
            if ax.name in free_var_names(init):
                raise ScopeError(f"{reducer.name}: init {init} uses the reduce axis {ax.name!r}")
    reducer.combiner(source.dtype)  # validates the combiner for this dtype
    if not axes:
        # a reduction over no axes is its one value: where ? source : identity, then init
        value = source if where is None else select(where, source, reducer.identity(source.dtype))
        return value if init is None else reducer.combine(init, value)
    return Reduce(reducer, source, axes, where, init, source.dtype)


def make_tuple_reduce(reducer, exprs, axis, where=None, init=None):
    """The components of the reduction of the tuple ``exprs``: a tuple of
    :class:`~tegrad.ir.expr.TupleReduce` nodes, one per component (checked: the combine
    and identity give one value of each component's dtype).

    >>> import tegrad as tg
    >>> x = tg.placeholder((4,), dtype="float64", name="x")
    >>> k = reduce_axis((0, 4), name="k")
    >>> both = comm_reducer(lambda a, b: (a[0] + b[0], tg.max(a[1], b[1])),
    ...                     lambda t0, t1: (0.0, -float("inf")), name="sum_max")
    >>> [str(c) for c in both((x[k], x[k]), axis=k)]
    ['sum_max((x[k], x[k]), k in [0, 4))[0]', 'sum_max((x[k], x[k]), k in [0, 4))[1]']
    """
    if init is not None:
        raise TegradError(f"{reducer.name}: a reduction of a tuple takes no init (it starts "
                          f"from the reducer's identity)")
    exprs = tuple(exprs)
    if not exprs:
        raise TegradError(f"{reducer.name}: the tuple of sources is empty")
    axes = _axes_tuple(reducer, axis)
    sources = tuple(_checked_source(reducer, e, axes) for e in exprs)
    where = _checked_where(reducer, where)
    dtypes = tuple(s.dtype for s in sources)
    reducer.tuple_combiner(dtypes)  # validates the combiner and identity for these dtypes
    identity = reducer.tuple_identity(dtypes)
    if not axes:
        # over no axes: the one element (where it holds, else the identity)
        return tuple(s if where is None else select(where, s, c)
                     for s, c in zip(sources, identity))
    return tuple(TupleReduce(reducer, sources, axes, where, j, s.dtype)
                 for j, s in enumerate(sources))


def _float_extreme(dtype, sign):
    if _dt.is_float(dtype):
        return sign * float("inf")
    return _dt.max_value(dtype) if sign > 0 else _dt.min_value(dtype)


class _ExtremumReducer(Reducer):
    """``max``/``min``: a reducer when given axes, the binary function of two expressions.

    ``tg.max(expr, axis=k, where=None, init=None)`` reduces; ``tg.max(a, b)`` is the
    larger of two expressions.
    """

    def __call__(self, expr, *args, axis=None, where=None, init=None):
        if args and not isinstance(args[0], (IterVar, list, tuple)):
            if len(args) != 1 or axis is not None or where is not None or init is not None:
                raise TegradError(f"tg.{self.name}(a, b) takes exactly two expressions")
            return binary(self.name, expr, args[0])
        if args:
            if len(args) > 1 or axis is not None:
                raise TegradError(f"tg.{self.name}: give the reduce axes once")
            axis = args[0]
        return make_reduce(self, expr, axis, where, init)


sum = Reducer("sum", lambda a, b: binary("add", a, b), lambda dtype: 0, np.sum)
prod = Reducer("prod", lambda a, b: binary("mul", a, b), lambda dtype: 1, np.prod)
max = _ExtremumReducer("max", lambda a, b: binary("max", a, b),
                       lambda dtype: _float_extreme(dtype, -1), np.max)
min = _ExtremumReducer("min", lambda a, b: binary("min", a, b),
                       lambda dtype: _float_extreme(dtype, +1), np.min)

BUILTIN_REDUCERS = {"sum": sum, "prod": prod, "max": max, "min": min}


def comm_reducer(combine, identity, name="reducer", derivative=None):
    """A user-defined commutative reducer, usable like ``tg.sum``.

    ``combine(a, b)`` builds the combination of two expressions; ``identity(dtype)``
    returns the neutral element. For a reducer of tuples (see :class:`Reducer`),
    ``combine`` takes and returns tuples and ``identity(*dtypes)`` returns a tuple.
    ``derivative(x, y)``, optional, builds the partial derivative of a reduction's value
    ``y`` with respect to one element ``x`` (for a log-sum-exp, ``tg.exp(x - y)``):
    gradients then read the forward value only; without it they combine exclusive
    prefix and suffix scans (still linear time), or, for a reducer of tuples, reduce the
    other points for each one (quadratic time).

    >>> import tegrad as tg
    >>> absmax = tg.comm_reducer(lambda a, b: tg.max(tg.abs(a), tg.abs(b)),
    ...                          lambda dtype: 0.0, name="absmax")
    >>> argmax = tg.comm_reducer(
    ...     lambda a, b: (tg.if_then_else(a[1] >= b[1], a[0], b[0]), tg.max(a[1], b[1])),
    ...     lambda t0, t1: (-1, tg.min_value(t1)), name="argmax")
    >>> x = tg.placeholder((2, 3), name="x")
    >>> k = tg.reduce_axis((0, 3), name="k")
    >>> idx, val = tg.compute((2,), lambda i: argmax((k, x[i, k]), axis=k))
    >>> idx.dtype, val.dtype
    ('int32', 'float32')
    """
    if not callable(combine) or not callable(identity):
        raise TegradError("comm_reducer needs a callable combine(a, b) and identity(dtype)")
    _check_arity(name, "combine", combine, 2, "combine(a, b)")
    _check_takes_dtypes(name, identity)
    if derivative is not None:
        if not callable(derivative):
            raise TegradError(f"comm_reducer {name!r}: derivative must be a callable "
                              f"derivative(x, y), got {derivative!r}")
        _check_arity(name, "derivative", derivative, 2, "derivative(x, y)")
    return Reducer(name, combine, identity, derivative=derivative)


def _check_takes_dtypes(name, identity):
    """``identity`` takes one dtype, or one per component of a tuple (at least one)."""
    try:
        params = inspect.signature(identity).parameters.values()
    except (TypeError, ValueError):
        return
    if not any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in params):
        raise TegradError(f"comm_reducer {name!r}: identity must take 1 dtype (or one per "
                          f"component of a tuple), as identity(dtype), but its signature "
                          f"is identity{inspect.signature(identity)}")


def _check_arity(name, what, fn, n, form):
    """``fn`` must accept ``n`` positional arguments (when its signature is known)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*([None] * n))
    except TypeError:
        raise TegradError(f"comm_reducer {name!r}: {what} must take {n} argument(s), as "
                          f"{form}, but its signature is {what}{signature}") from None


__all__ = ["reduce_axis", "Reducer", "sum", "prod", "max", "min", "comm_reducer",
           "make_tuple_reduce"]
