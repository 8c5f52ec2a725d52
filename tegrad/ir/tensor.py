"""Tensors and the stages that define them: placeholders, computes, scatter-adds, scans.

A :class:`Tensor` is the single output of an operation (``tensor.op``). Tensors compare
and hash by identity; their definitions are immutable.

>>> import tegrad as tg
>>> A = tg.placeholder((3, 4), name="A")
>>> B = tg.compute((4, 3), lambda i, j: A[j, i] * 2, name="B")
>>> B.shape
(4, 3)
"""
from __future__ import annotations

import inspect
import itertools
import numbers
from dataclasses import dataclass

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import (DTypeError, ImmutableError, IndexingError, ScopeError, ShapeError,
                              TegradError)
from tegrad.ir.expr import (TEXT, Const, IterVar, Reduce, TensorLike, TupleReduce, Var, as_expr,
                            read, retype)
from tegrad.ir.mapper import (all_var_names, free_var_names, fresh_name,
                              substitute, tensors_read, walk)
from tegrad.ir.reduction import Reducer

_name_counter = itertools.count()


#: the largest extent of a dimension: axis variables are INDEX_DTYPE integers
MAX_EXTENT = _dt.max_value(_dt.INDEX_DTYPE)
#: the largest number of elements of a tensor (element counts are int64)
MAX_SIZE = 2**63 - 1


def _check_shape(shape, name):
    """The one shape rule of every tensor kind: a tuple of integers in [1, MAX_EXTENT]."""
    if isinstance(shape, (numbers.Integral, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"tensor {name!r}: shape must be a tuple of positive integers, "
                         f"got {shape!r}")
    out = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (numbers.Integral, np.integer)):
            raise ShapeError(f"tensor {name!r}: shape {tuple(shape)!r} has the non-integer "
                             f"extent {d!r}")
        if d <= 0:
            raise ShapeError(f"tensor {name!r}: shape {tuple(shape)!r} has the non-positive "
                             f"extent {d}")
        if d > MAX_EXTENT:
            raise ShapeError(f"tensor {name!r}: shape {tuple(shape)!r} has the extent {d}, "
                             f"more than {MAX_EXTENT} (axes are {_dt.INDEX_DTYPE} variables)")
        out.append(int(d))
    size = 1
    for d in out:
        size *= d
    if size > MAX_SIZE:
        raise ShapeError(f"tensor {name!r}: shape {tuple(out)!r} has {size} elements, more "
                         f"than {MAX_SIZE}")
    return tuple(out)


def _check_name(name, default):
    if name is None:
        return f"{default}{next(_name_counter)}"
    if not isinstance(name, str) or not name:
        raise TegradError(f"tensor names must be non-empty strings, got {name!r}")
    return name


#: the array operators and methods of tensors (``x * 2``, ``x.sum(axis=1)``): name ->
#: function of the tensor and the call's arguments. :mod:`tegrad.ops.methods` fills it
#: when the package loads, as the IR does not import the operator library.
ARRAY_METHODS = {}


def _array_method(name):
    """The method ``name`` of tensors: a call of ``ARRAY_METHODS[name]``."""
    def method(self, *args, **kwargs):
        try:
            fn = ARRAY_METHODS[name]
        except KeyError:
            raise TegradError(f"tensor {self.name!r}: {name} is not available (the operator "
                              f"table of tegrad.ops.methods is not loaded)") from None
        return fn(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"The array method ``{name}`` (see :mod:`tegrad.ops.methods`)."
    return method


class Tensor(TensorLike):
    """A multi-dimensional array defined by ``op``; ``t[i, j]`` reads an element.

    Attributes: ``shape`` (tuple of ints), ``dtype`` (str), ``name``, ``op``.
    """

    __slots__ = ("op", "shape", "dtype", "name")

    def __init__(self, op, shape, dtype, name):
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "name", name)

    def __setattr__(self, key, value):
        raise ImmutableError(f"tensor {self.name!r} is immutable; build a new tensor "
                             f"instead of setting {key!r}")

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __getitem__(self, indices):
        return read(self, indices)

    def __len__(self):
        if not self.shape:
            raise IndexingError(f"scalar tensor {self.name!r} has no length")
        return self.shape[0]

    def __iter__(self):
        raise IndexingError(f"tensor {self.name!r} is not iterable; index it with t[i, j]")

    def __bool__(self):
        # a comparison of tensors is a tensor of truth values, known only when the program
        # runs: ``if t > 0:`` must not quietly take one branch
        raise TegradError(
            f"the truth value of tensor {self.name!r} is not known when the program is "
            f"built; use tg.if_then_else, or compare with `is None` for an optional tensor")

    def __array__(self, dtype=None, copy=None):
        raise TegradError(
            f"tensor {self.name!r} has no values until the program runs: evaluate it "
            f"(tg.evaluate) or build it (tg.build), then use the arrays returned")

    def __repr__(self):
        return f"Tensor({self.name}, shape={self.shape}, dtype={self.dtype})"

    def __str__(self):
        return TEXT["tensor"](self)

    @property
    def inputs(self):
        """The tensors this tensor's stage reads directly."""
        return self.op.input_tensors()

    # The operators and methods of arrays, each a call into tegrad.ops through
    # ARRAY_METHODS. ``==`` and ``!=`` are left out: tensors compare by identity, as keys
    # of feeds and of adjoints. ``t[i, j]`` stays a read (an expression), not a slice.
    # numpy defers to these methods (``array * t`` calls ``t.__rmul__``).
    __array_ufunc__ = None

    __add__ = _array_method("__add__")
    __radd__ = _array_method("__radd__")
    __sub__ = _array_method("__sub__")
    __rsub__ = _array_method("__rsub__")
    __mul__ = _array_method("__mul__")
    __rmul__ = _array_method("__rmul__")
    __truediv__ = _array_method("__truediv__")
    __rtruediv__ = _array_method("__rtruediv__")
    __floordiv__ = _array_method("__floordiv__")
    __rfloordiv__ = _array_method("__rfloordiv__")
    __mod__ = _array_method("__mod__")
    __rmod__ = _array_method("__rmod__")
    __pow__ = _array_method("__pow__")
    __rpow__ = _array_method("__rpow__")
    __matmul__ = _array_method("__matmul__")
    __rmatmul__ = _array_method("__rmatmul__")
    __neg__ = _array_method("__neg__")
    __abs__ = _array_method("__abs__")
    __lt__ = _array_method("__lt__")
    __le__ = _array_method("__le__")
    __gt__ = _array_method("__gt__")
    __ge__ = _array_method("__ge__")
    T = property(_array_method("T"))
    sum = _array_method("sum")
    mean = _array_method("mean")
    max = _array_method("max")
    min = _array_method("min")
    reshape = _array_method("reshape")
    transpose = _array_method("transpose")
    astype = _array_method("astype")


class _Frozen:
    """Immutable after construction: a stage is rebuilt, never edited in place."""

    __slots__ = ()

    def _init(self, **fields):
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key, value):
        self.__delattr__(key)

    def __delattr__(self, key):
        raise ImmutableError(f"{type(self).__name__} of {getattr(self, 'name', '?')!r} is "
                             f"immutable; build a new stage (tegrad.ir.tensor.compute_stage, "
                             f"scatter_stage, scan_stage)")


class PlaceholderOp(_Frozen):
    """An input of the program, fed at evaluation time."""

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name, shape, dtype):
        self._init(name=name, shape=shape, dtype=dtype)

    def input_tensors(self):
        return []


class ComputeOp(_Frozen):
    """``output[axes] = body``: the body is an expression of the axes' variables."""

    __slots__ = ("name", "axes", "body", "_inputs")

    def __init__(self, name, axes, body):
        self._init(name=name, axes=tuple(axes), body=body)

    def input_tensors(self):
        # found once (the op never changes): a program's passes ask again and again
        if not hasattr(self, "_inputs"):
            object.__setattr__(self, "_inputs", tuple(
                tensors_read(self.body) + [t for ax in self.axes for t in tensors_read(ax.extent)]))
        return list(self._inputs)


class ScatterTarget(_Frozen):
    """One accumulation of a scatter: ``output[indices] += value`` where ``where`` holds."""

    __slots__ = ("indices", "value", "where")

    def __init__(self, indices, value, where=None):
        self._init(indices=tuple(indices), value=value, where=where)

    def exprs(self):
        """The target's expressions: its indices, its value, and its condition if any."""
        return list(self.indices) + [self.value] + ([self.where] if self.where is not None else [])

    def rebuilt(self, exprs):
        """The target with :meth:`exprs` replaced by ``exprs`` (same order)."""
        n = len(self.indices)
        return ScatterTarget(exprs[:n], exprs[n], exprs[n + 1] if self.where is not None else None)


class ScatterOp(_Frozen):
    """``output = init; for each point of axes, for each target: output[indices] += value``.

    The stage gradients of data-dependent reads need (``dX[I[i]] += head[i]``), and the
    one a person writes for a bilinear resize (four accumulations per output point):
    the iteration domain is ``axes``; each :class:`ScatterTarget` has index, value and
    condition expressions of its variables; ``init`` is a tensor of the output's shape,
    or None for zeros.
    """

    __slots__ = ("name", "axes", "targets", "init")

    def __init__(self, name, axes, targets, init):
        self._init(name=name, axes=tuple(axes), targets=tuple(targets), init=init)

    def exprs(self):
        """Every expression of every target, in order."""
        return [e for target in self.targets for e in target.exprs()]

    def input_tensors(self):
        out = {}
        for e in self.exprs():
            for t in tensors_read(e):
                out.setdefault(id(t), t)
        if self.init is not None:
            out.setdefault(id(self.init), self.init)
        return list(out.values())


class ScanOp(_Frozen):
    """An exclusive scan: ``output[..., a, ...] = reducer(source[..., a', ...] for a' < a)``.

    ``axes`` are the output's axes (as a compute's), ``axis`` the position of the
    scanned one, ``source`` an expression of the axes' variables and ``reducer`` a
    commutative reducer. A prefix scan (``reverse=False``) combines the points before
    ``a``, a suffix scan (``reverse=True``) those after it; the first point of a scan
    line holds the reducer's identity. The stage is run as one sequential loop along
    ``axis`` per line (``acc = identity; for a: out[a] = acc; acc = combine(acc,
    source[a])``), vectorised over the other axes; its cost is one point per element.
    Gradients of custom reducers read a prefix and a suffix scan to get, for every
    element, the reduction of all the others in linear time.
    """

    __slots__ = ("name", "axes", "axis", "reducer", "source", "reverse")

    def __init__(self, name, axes, axis, reducer, source, reverse=False):
        self._init(name=name, axes=tuple(axes), axis=axis, reducer=reducer, source=source,
                   reverse=reverse)

    def input_tensors(self):
        return tensors_read(self.source)

    def as_reduce(self, taken=()):
        """The scan as an equivalent (quadratic) reduction over a fresh axis ``a'``.

        Points ``a' < a`` (``a' > a`` when reversed) of the scanned axis; used where a
        scan must be treated as an ordinary compute body (differentiating through it).
        """
        ax = self.axes[self.axis]
        fresh = fresh_name(ax.name + "_s", set(taken) | all_var_names(self.source)
                           | {a.name for a in self.axes})
        if self.reverse:
            lo = ax.var + 1
            extent = ax.extent - lo
        else:
            lo, extent = Const(0, _dt.INDEX_DTYPE), ax.var
        other = IterVar(Var(fresh), lo, extent, "reduce")
        source = substitute(self.source, {ax.name: other.var})
        return Reduce(self.reducer, source, (other,), None, None, self.source.dtype)


def _domain_shape(stage_kind, name, axes):
    """The extents of a stage's data axes (each ``[0, extent)`` with a constant extent)."""
    shape = []
    for ax in axes:
        if not (isinstance(ax, IterVar) and ax.kind == "data" and type(ax.lo) is Const
                and ax.lo.value == 0 and type(ax.extent) is Const and ax.extent.value > 0):
            raise ShapeError(f"{stage_kind} {name!r}: the axis {ax!r} is not a data axis "
                             f"[0, extent) with a positive constant extent")
        shape.append(ax.extent.value)
    return tuple(shape)


def compute_stage(name, axes, body):
    """The tensor ``name[axes] = body``, checked like :func:`compute`.

    The one constructor of compute stages: :func:`compute` and every pass that builds or
    rebuilds a stage from axes and a body go through it.

    >>> A = placeholder((3,), name="A")
    >>> B = compute((3,), lambda i: A[i] + 1.0, name="B")
    >>> str(compute_stage("C", B.op.axes, B.op.body * 2.0).op.body)
    '(A[i] + 1.0) * 2.0'
    """
    name = _check_name(name, "compute")
    axes = tuple(axes)
    shape = _domain_shape("compute", name, axes)
    try:
        body = as_expr(body)
    except TegradError as err:
        raise TegradError(f"compute {name!r}: {err}") from None
    _check_scope("compute", name, body, [ax.name for ax in axes], "the body", tuple_root=True)
    return Tensor(ComputeOp(name, axes, body), shape, body.dtype, name)


def with_tensors_replaced(t, body):
    """The compute stage ``t`` with ``body`` for its body, where ``body`` is ``t``'s body
    with some of its reads reading other tensors, each read keeping its indices and dtype
    (see :func:`tegrad.ir.rewrite.retarget`). Such a body has the variables, reductions
    and dtype of ``t``'s, so what :func:`compute_stage` checks holds already and is not
    checked again (a rewrite of a program retargets every stage downstream of a change).

    >>> A, A2 = placeholder((3,), name="A"), placeholder((3,), name="A2")
    >>> B = compute((3,), lambda i: A[i] + 1.0, name="B")
    >>> str(with_tensors_replaced(B, A2[B.op.axes[0].var] + 1.0).op.body)
    'A2[i] + 1.0'
    """
    return Tensor(ComputeOp(t.name, t.op.axes, body), t.shape, body.dtype, t.name)


def scatter_stage(name, shape, axes, targets, init=None):
    """The tensor ``name = init (or zeros); name[t.indices] += t.value for each point of
    axes, for each target t where t.where holds``, checked like :func:`scatter_add`.

    The one constructor of scatter stages (see :func:`compute_stage`).
    """
    name = _check_name(name, "scatter")
    shape = _check_shape(shape, name)
    axes = tuple(axes)
    _domain_shape("scatter_add", name, axes)
    names = [ax.name for ax in axes]
    targets = tuple(targets)
    if not targets:
        raise TegradError(f"scatter_add {name!r}: a scatter needs at least one target")
    dtype = targets[0].value.dtype
    for target in targets:
        if len(target.indices) != len(shape):
            raise IndexingError(f"scatter_add {name!r}: index gives {len(target.indices)} "
                                f"index(es) for an output of shape {shape}")
        for pos, i in enumerate(target.indices):
            if not _dt.is_int(i.dtype):
                raise IndexingError(f"scatter_add {name!r}: index {pos} ({i}) is not an "
                                    f"integer")
        if target.value.dtype != dtype:
            raise DTypeError(f"scatter_add {name!r}: values of dtypes {dtype} and "
                             f"{target.value.dtype}")
        if target.where is not None and not _dt.is_bool(target.where.dtype):
            raise DTypeError(f"scatter_add {name!r}: where must be a bool condition")
        for what, e in [("the index", i) for i in target.indices] + [("the value", target.value)] \
                + ([("the condition", target.where)] if target.where is not None else []):
            _check_scope("scatter_add", name, e, names, what)
    if init is not None:
        if not isinstance(init, Tensor) or init.shape != shape or init.dtype != dtype:
            raise ShapeError(f"scatter_add {name!r}: init must be a {dtype} tensor of "
                             f"shape {shape}")
    return Tensor(ScatterOp(name, axes, targets, init), shape, dtype, name)

def scan_stage(name, axes, axis, reducer, source, reverse=False):
    """The exclusive scan ``name[axes] = reducer(source at the points of axes[axis] before
    (after, if reverse) this one)``, checked like :func:`scan`.

    The one constructor of scan stages (see :func:`compute_stage`).
    """
    name = _check_name(name, "scan")
    axes = tuple(axes)
    shape = _domain_shape("scan", name, axes)
    if not isinstance(reducer, Reducer):
        raise TegradError(f"scan {name!r}: the reducer must be a tg reducer (tg.sum, "
                          f"tg.comm_reducer(...)), got {reducer!r}")
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) \
            or not -len(shape) <= axis < len(shape):
        raise ShapeError(f"scan {name!r}: axis {axis!r} is not an axis of the shape {shape}")
    axis = int(axis) % len(shape)
    try:
        source = as_expr(source)
    except TegradError as err:
        raise TegradError(f"scan {name!r}: {err}") from None
    if not (_dt.is_float(source.dtype) or _dt.is_int(source.dtype)):
        raise DTypeError(f"scan {name!r}: cannot scan the {source.dtype} expression {source}")
    reducer.combiner(source.dtype)  # validates the combiner for this dtype
    _check_scope("scan", name, source, [ax.name for ax in axes], "the source")
    return Tensor(ScanOp(name, axes, axis, reducer, source, bool(reverse)), shape,
                  source.dtype, name)


def scan(shape, fsource, reducer, axis=-1, reverse=False, name=None):
    """An exclusive prefix (or, with ``reverse``, suffix) scan of ``fsource`` (see ScanOp).

    >>> import tegrad as tg
    >>> x = placeholder((2, 4), dtype="float64", name="x")
    >>> P = scan((2, 4), lambda i, a: x[i, a], tg.sum, name="P")
    >>> import numpy as np
    >>> tg.evaluate(P, {x: np.ones((2, 4))}).tolist()
    [[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]
    """
    name = _check_name(name, "scan")
    shape = _check_shape(shape, name)
    axes = _data_axes(shape, _axis_names(fsource, len(shape), name))
    return scan_stage(name, axes, axis, reducer, fsource(*axes), reverse)


def placeholder(shape, dtype="float32", name=None):
    """An input tensor of the program.

    >>> A = placeholder((2, 3), dtype="float64", name="A")
    >>> A.dtype
    'float64'
    """
    name = _check_name(name, "placeholder")
    shape = _check_shape(shape, name)
    dtype = _dt.canonical_dtype(dtype)
    op = PlaceholderOp(name, shape, dtype)
    return Tensor(op, shape, dtype, name)


def _axis_names(fcompute, ndim, name):
    if not callable(fcompute):
        raise TegradError(f"{name!r}: expected a function of the {ndim} index variable(s), "
                          f"got {fcompute!r}")
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is not None:
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
        if not varargs:
            required = [p for p in positional if p.default is p.empty]
            if not (len(required) <= ndim <= len(positional)):
                raise ShapeError(f"compute {name!r}: the function takes {len(positional)} "
                                 f"index argument(s) but the shape has {ndim} dimension(s)")
            names = [p.name for p in positional[:ndim]]
            if len(set(names)) == len(names):
                return names
    return [f"ax{d}" for d in range(ndim)]


def _explicit_axis_names(names, ndim, name):
    names = list(names)
    if len(names) != ndim or len(set(names)) != ndim or not all(
            isinstance(n, str) and n.isidentifier() for n in names):
        raise ShapeError(f"compute {name!r}: axis_names must be {ndim} distinct identifiers, "
                         f"got {names!r}")
    return names


def _data_axes(shape, names):
    return tuple(IterVar(Var(n), Const(0, _dt.INDEX_DTYPE), Const(d, _dt.INDEX_DTYPE), "data")
                 for n, d in zip(names, shape))


def _check_scope(stage_kind, name, expr, axis_names, what, tuple_root=False):
    """Free variables of ``expr`` must be the stage's axes; reduce axes must not clash; a
    reduction of a tuple is only the whole expression (with ``tuple_root``)."""
    axes = set(axis_names)
    stray = free_var_names(expr) - axes
    if stray:
        v = sorted(stray)[0]
        raise ScopeError(f"{stage_kind} {name!r}: {what} uses the variable {v!r}, which is "
                         f"not an axis of {name!r} (a reduce axis used outside its "
                         f"reduction, or a variable of another stage)")
    # one walk for the other three checks (this runs on every stage a pass rebuilds)
    for node in walk(expr):
        t = type(node)
        if t is Var:
            if node.name in axes and not _dt.is_int(node.dtype):
                raise DTypeError(f"{stage_kind} {name!r}: axis variable {node.name!r} is not "
                                 f"an integer")
        elif t is Reduce or t is TupleReduce:
            clash = {ax.name for ax in node.axes} & axes
            if clash:
                raise ScopeError(f"{stage_kind} {name!r}: the reduce axis {sorted(clash)[0]!r} "
                                 f"has the same name as an axis of {name!r}; rename one of "
                                 f"them")
            if t is TupleReduce and not (tuple_root and node is expr):
                raise TegradError(f"{stage_kind} {name!r}: {what} uses a component of the "
                                  f"reduction of a tuple ({node.reducer.name!r}) inside an "
                                  f"expression; it must be the whole body of a compute "
                                  f"(compute the components as stages, then combine them)")


def compute(shape, fcompute, name=None, dtype=None, axis_names=None):
    """A tensor whose element ``[i, j, ...]`` is ``fcompute(i, j, ...)``.

    The axis variables are named after ``fcompute``'s parameters, or ``axis_names``
    when given. ``dtype`` gives a constant body (e.g. ``lambda: 0``) its dtype and is
    checked against the body otherwise.

    A function returning a tuple gives a tuple of tensors, one per element, named
    ``name_0, name_1, ...`` (or by ``name``, a tuple of names; ``dtype`` is then a tuple
    too). The components of one reduction of a tuple (``argmax((k, x[i, k]), axis=k)``,
    see :func:`tegrad.comm_reducer`) are computed together, in one loop nest.

    >>> A = placeholder((4, 4), name="A")
    >>> T = compute((4, 4), lambda i, j: A[j, i], name="T")
    >>> compute((2, 3), lambda *ax: ax[0] + ax[1], axis_names=("r", "c")).op.axes[1].name
    'c'
    >>> lo, hi = compute((4,), lambda i: (A[i, 0] - 1.0, A[i, 0] + 1.0), name=("lo", "hi"))
    >>> hi.name
    'hi'
    """
    if isinstance(name, (tuple, list)):
        out_names, name = tuple(name), _check_name(None, "compute")
    else:
        name = out_names = _check_name(name, "compute")
    shape = _check_shape(shape, name)
    names = _explicit_axis_names(axis_names, len(shape), name) if axis_names is not None \
        else _axis_names(fcompute, len(shape), name)
    axes = _data_axes(shape, names)
    body = fcompute(*axes)
    if isinstance(body, (list, tuple)):
        return _tuple_compute(out_names, axes, tuple(body), dtype)
    if out_names is not name:
        raise TegradError(f"compute: the names {out_names!r} are for a function returning "
                          f"a tuple; this one returned one expression")
    return compute_stage(name, axes, _typed_body(name, body, dtype))


def _typed_body(name, body, dtype):
    """The body as an expression, of ``dtype`` when given (a constant takes it)."""
    if isinstance(body, (numbers.Number, np.generic)) and dtype is not None:
        body = Const(body, _dt.canonical_dtype(dtype))
    try:
        body = as_expr(body)
    except TegradError as err:
        raise TegradError(f"compute {name!r}: {err}") from None
    if dtype is not None:
        dtype = _dt.canonical_dtype(dtype)
        body = retype(body, dtype)
        if body.dtype != dtype:
            raise DTypeError(f"compute {name!r}: the body has dtype {body.dtype} but dtype="
                             f"{dtype} was asked for; use tg.cast")
    return body


def _tuple_compute(name, axes, bodies, dtype):
    """One stage per element of the tuple ``bodies``, named ``name_0, name_1, ...``
    (``name`` may be a tuple of names instead); ``dtype`` None or one per element."""
    n = len(bodies)
    if not n:
        raise TegradError(f"compute {name!r}: the function returned an empty tuple")
    if isinstance(name, (tuple, list)):
        if len(name) != n:
            raise TegradError(f"compute: {len(name)} names {tuple(name)!r} for the {n} "
                              f"outputs of the function")
        names = [_check_name(each, "compute") for each in name]
    else:
        base = _check_name(name, "compute")
        names = [f"{base}_{j}" for j in range(n)]
    if dtype is None:
        dtypes = (None,) * n
    elif isinstance(dtype, (tuple, list)) and len(dtype) == n:
        dtypes = tuple(dtype)
    else:
        raise DTypeError(f"compute {names[0]!r}: dtype= must be a tuple of {n} dtypes, one "
                         f"per output, got {dtype!r}")
    return tuple(compute_stage(each, axes, _typed_body(each, body, d))
                 for each, body, d in zip(names, bodies, dtypes))


def scatter_add(shape, domain, index, value, where=None, init=None, name=None, dtype=None):
    """``out = init (or zeros); for every point p of domain: out[index(p)] += value(p)``.

    ``domain`` is the shape of the iteration space; ``index(*p)`` returns one index
    expression per output dimension (it may read tensors: data-dependent scatter),
    ``value(*p)`` the amount added, and ``where(*p)`` an optional bool condition.

    >>> I = placeholder((5,), dtype="int32", name="I")
    >>> g = placeholder((5,), name="g")
    >>> H = scatter_add((3,), (5,), lambda i: (I[i],), lambda i: g[i], name="H")
    """
    name = _check_name(name, "scatter")
    shape = _check_shape(shape, name)
    domain = _check_shape(domain, name)
    names = _axis_names(index, len(domain), name)
    axes = _data_axes(domain, names)
    idx = index(*axes)
    if not isinstance(idx, (tuple, list)):
        idx = (idx,)
    if len(idx) != len(shape):
        raise IndexingError(f"scatter_add {name!r}: index gives {len(idx)} index(es) for an "
                            f"output of shape {shape}")
    idx = tuple(as_expr(i) for i in idx)
    val = as_expr(value(*axes))
    if dtype is not None and val.dtype != _dt.canonical_dtype(dtype):
        raise DTypeError(f"scatter_add {name!r}: value has dtype {val.dtype}, not {dtype}")
    cond = None if where is None else as_expr(where(*axes))
    return scatter_stage(name, shape, axes, [ScatterTarget(idx, val, cond)], init)
