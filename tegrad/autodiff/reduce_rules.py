"""Forward-mode rules for reductions, one entry per builtin reducer plus a generic rule.

For ``Y = reduce_k(f(k) if where(k), init)`` with tangents ``df`` (source) and ``dI``:

- sum:  ``dY = sum_k(df) + dI``;
- prod: ``dY = sum_k(P_k * df) + Q * dI`` where, with ``z`` the number of zero factors
  and ``P`` the product of the nonzero ones, ``P_k = z == 0 ? Y / f(k) : (z == 1 &&
  f(k) == 0 ? init * P : 0)`` and ``Q = z == 0 ? P : 0``;
- max/min: the tangent flows to the positions equal to ``Y`` (``init`` counts as one;
  a NaN element is one where ``Y`` is NaN), split equally among ties: ``dY = (sum_k(f(k) == Y ? df : 0) + (init == Y ? dI : 0))
  / max(count, 1)``;
- any other reducer (``tg.comm_reducer``): ``dY = sum_k(dcombine/db(rest_k, f(k)) * df)
  + dcombine/da(init, R) * dI`` where ``rest_k`` reduces all ``k' != k`` (with init) and
  ``R`` is the reduction without init; the combiner is differentiated by the rules.
  When the reduction is the whole body of a stage over a rectangular domain, ``rest_k``
  is ``init (+) P[y, q(k)] (+) S[y, q(k)]``, with ``P`` and ``S`` exclusive prefix and
  suffix scans (:class:`tegrad.ir.tensor.ScanOp`) of the source along the reduction
  domain flattened to ``q``: linear in the reduction's length instead of quadratic. A
  reducer that declares its partial derivative (``comm_reducer(..., derivative=d)``,
  ``d(x, y) = dY/dx`` for an element ``x`` of a reduction of value ``y``) gets ``dY =
  sum_k(d(f(k), Y) * df) + d(init, Y) * dI``, which reads only the forward value.

``Y`` is ``fd.answer(e)``: the read ``Y[y]`` of the stage computing the reduction when
the forward program was normalised (see :mod:`tegrad.autodiff.hoist`), else the
reduction itself (with renamed axes, recomputed).

>>> import tegrad as tg
>>> reducer_rule(tg.sum).__name__
'sum_rule'
"""
from __future__ import annotations

import contextlib
import contextvars

from tegrad.ir import dtypes as _dt
from tegrad.ir import reduction as _red
from tegrad.ir.errors import DifferentiationError
from tegrad.ir.expr import (And, Binary, Const, IterVar, Or, Read, Reduce, TupleReduce, Var,
                            as_expr, cast, compare, select)
from tegrad.ir.stages import compute_body
from tegrad.ir.tensor import compute_stage, scan_stage
from tegrad.ir.mapper import substitute
from tegrad.autodiff.algebra import ZERO, add, cast_to, choose, div, mul, sum_all
from tegrad.autodiff.names import fresh_names, names_in, rename_axes, rename_reduce
from tegrad.autodiff.rules import ForwardDiff, rule

SUM, PROD = _red.BUILTIN_REDUCERS["sum"], _red.BUILTIN_REDUCERS["prod"]

REDUCER_RULES = {}


def reducer_rule(reducer):
    """The rule for ``reducer``: its own entry, or the generic combiner rule."""
    return REDUCER_RULES.get(reducer, generic_rule)


@rule(Reduce)
def _reduce(fd, e):
    """The entry of reductions in :data:`tegrad.autodiff.rules.RULES`."""
    return reducer_rule(e.reducer)(fd, e)


def _register(reducer):
    def register(fn):
        REDUCER_RULES[reducer] = fn
        return fn
    return register


def _tangents(fd, e):
    df = fd.tangent(e.source)
    di = ZERO if e.init is None else fd.tangent(e.init)
    return df, di


def _value(fd, e):
    """The reduction's value, usable inside a reduction over the same axes."""
    y = fd.answer(e)
    if y is e:
        y = rename_reduce(e, set(fd.reserved) | names_in(e))
    return y


def _others(fd, e, extra=()):
    """``(f(k'), where(k') && k' != k, k')``: the source over fresh copies k' of the axes
    (the tuple of sources, for a reduction of a tuple)."""
    taken = set(fd.reserved) | names_in(e, *extra)
    axes2, mapping = rename_axes(e.axes, taken)
    if type(e) is TupleReduce:
        source2 = tuple(substitute(c, mapping) for c in e.sources)
    else:
        source2 = substitute(e.source, mapping)
    differs = None
    for ax in e.axes:
        c = compare("ne", mapping[ax.name], ax.var)
        differs = c if differs is None else Or(differs, c)
    where2 = differs if e.where is None else And(substitute(e.where, mapping), differs)
    return source2, where2, axes2


def _sum_k(e, term):
    """``sum_k(term if where)`` over the axes of ``e`` (ZERO stays ZERO)."""
    if term is ZERO:
        return ZERO
    return Reduce(SUM, term, e.axes, e.where, None, e.dtype)


@_register(SUM)
def sum_rule(fd, e):
    df, di = _tangents(fd, e)
    return add(_sum_k(e, df), di)


def _stage_statistic(fd, e, kind, source_fn, reducer, dtype=None):
    """A per-element statistic of the reduction ``e``, e.g. its count of ties, of
    ``dtype`` (default: ``e``'s).

    When ``e`` is the whole body of a stage ``Y`` (``fd.answer(e)`` reads ``Y[y]``),
    the statistic is a stage of its own over ``Y``'s axes, built once per stage and
    read at ``y``: a gradient then does not recompute a reduction per input element.
    Otherwise it is the inline reduction ``reducer_k(source_fn(source, value))``.
    """
    y, dtype = fd.answer(e), dtype or e.dtype
    if type(y) is Read and type(compute_body(y.tensor)) is Reduce \
            and y.tensor.op.body.reducer is e.reducer:
        Y = y.tensor
        stages = _STATISTICS.get()
        cache = {} if stages is None else stages.setdefault(id(Y), (Y, {}))[1]
        if kind not in cache:
            body = Y.op.body
            own = Read(Y, tuple(ax.var for ax in Y.op.axes), Y.dtype)
            stat = Reduce(reducer, source_fn(body.source, own), body.axes, body.where, None,
                          dtype)
            name = f"{Y.name}_{kind}"
            cache[kind] = compute_stage(name, Y.op.axes, stat)
        return Read(cache[kind], y.indices, dtype)
    return Reduce(reducer, source_fn(e.source, _value(fd, e)), e.axes, e.where, None, dtype)


#: the statistics stages built during one differentiation, keyed by id of their stage
#: (which the entry keeps alive), so that every gradient of the stage shares them
_STATISTICS = contextvars.ContextVar("reduction_statistics", default=None)


@contextlib.contextmanager
def shared_statistics():
    """Within the block, statistics of a stage are built once and shared."""
    token = _STATISTICS.set({})
    try:
        yield
    finally:
        _STATISTICS.reset(token)


def _indicator(cond, dtype):
    return select(cond, Const(1, dtype), Const(0, dtype))


@_register(PROD)
def prod_rule(fd, e):
    """``d prod / d f(k)`` without dividing by zero: with ``z`` zeros in the product and
    ``P`` the product of its nonzero factors, it is ``Y / f(k)`` when ``z == 0``,
    ``init * P`` at the zero when ``z == 1``, and 0 otherwise."""
    df, di = _tangents(fd, e)
    if df is ZERO and di is ZERO:
        return ZERO
    dtype = e.dtype
    zero, one = Const(0, dtype), Const(1, dtype)
    zeros = _stage_statistic(fd, e, "zeros", lambda f, v: _indicator(compare("eq", f, zero),
                                                                       dtype), SUM)
    nonzero = _stage_statistic(fd, e, "nonzero_prod",
                               lambda f, v: select(compare("eq", f, zero), one, f), PROD)
    init = one if e.init is None else e.init
    # without zero factors the product is init * P: no need to read the forward stage
    y = nonzero if e.init is None else init * nonzero
    out = ZERO
    if df is not ZERO:
        partial = select(compare("eq", zeros, zero), y / e.source,
                         select(And(compare("eq", zeros, one), compare("eq", e.source, zero)),
                                init * nonzero, zero))
        out = _sum_k(e, mul(partial, df))
    if di is not ZERO:
        whole = select(compare("eq", zeros, zero), nonzero, zero)
        out = add(out, mul(whole, di))
    return out


#: the dtype of a count of ties: exact, and cheaper to accumulate than floats
COUNT = "int32"


def _extremum_rule(fd, e):
    df, di = _tangents(fd, e)
    if df is ZERO and di is ZERO:
        return ZERO
    y = _value(fd, e)
    one, zero = Const(1, COUNT), Const(0, COUNT)
    hit = _tie(e.source, y)
    count = _stage_statistic(fd, e, "ties", lambda f, v: _indicator(_tie(f, v), COUNT), SUM,
                             COUNT)
    total = _sum_k(e, choose(hit, df, ZERO, e.dtype))
    if e.init is not None:
        init_hit = compare("eq", e.init, y)
        count = add(count, select(init_hit, one, zero))
        total = add(total, choose(init_hit, di, ZERO, e.dtype))
    return div(total, cast(Binary("max", count, one, COUNT), e.dtype))


def _tie(f, v):
    """Whether the element ``f`` is the extremum ``v``: equal, or a NaN (the extremum of a
    window holding one is NaN, numpy's and PyTorch's max pooling: its tangent flows to the
    NaNs, so the gradient shows the NaN's position rather than zeros)."""
    equal = compare("eq", f, v)
    if not _dt.is_float(f.dtype):
        return equal
    return Or(equal, compare("ne", f, f))


REDUCER_RULES[_red.BUILTIN_REDUCERS["max"]] = _extremum_rule
REDUCER_RULES[_red.BUILTIN_REDUCERS["min"]] = _extremum_rule


def combiner_partials(reducer, dtype):
    """``(x, y, d combine/dx, d combine/dy)`` for the reducer's symbolic combiner.

    >>> import tegrad as tg
    >>> x, y, da, db = combiner_partials(tg.prod, "float64")
    >>> str(da), str(db)
    ('_ry', '_rx')
    """
    x, y, body = reducer.combiner(dtype)
    one = Const(1, dtype)

    def partial(var):
        seed = (lambda leaf: one if isinstance(leaf, Var) and leaf.name == var.name
                else ZERO)
        return ForwardDiff(seed).tangent(body)

    return x, y, partial(x), partial(y)


def declared_rule(fd, e):
    """The rule of a reducer with a declared ``derivative(x, y) = dY/dx``."""
    df, di = _tangents(fd, e)
    if df is ZERO and di is ZERO:
        return ZERO
    y = _value(fd, e)
    out = ZERO
    if df is not ZERO:
        out = _sum_k(e, mul(_declared(e, e.source, y), df))
    if di is not ZERO:
        out = add(out, mul(_declared(e, e.init, y), di))
    return out


def _declared(e, x, y):
    d = as_expr(e.reducer.derivative(x, y), e.dtype)
    if d.dtype != e.dtype:
        raise DifferentiationError(f"reducer {e.reducer.name!r}: derivative({x}, {y}) has "
                                   f"dtype {d.dtype}, not {e.dtype}")
    return d


def _flat_position(axes):
    """``(q(k), n)``: the row-major position of a point of rectangular ``axes``, and
    the number of points; None when a bound is not a constant."""
    if not all(type(ax.lo) is Const and type(ax.extent) is Const for ax in axes):
        return None
    q, n = None, 1
    for ax in reversed(axes):
        term = ax.var - ax.lo.value if ax.lo.value else ax.var
        term = term * n if n != 1 else term
        q = term if q is None else q + term
        n *= ax.extent.value
    return q, n


def _scan_rest(fd, e):
    """``P[y, q(k)] (+) S[y, q(k)]``: the reduction of all points but ``k``, from scans.

    None unless ``e`` is the whole body of a stage ``Y`` (``fd.answer(e)`` reads it)
    over a rectangular domain. The scans (one prefix, one suffix) are stages over
    ``Y``'s axes and the flattened domain, built once per stage and shared.
    """
    y = fd.answer(e)
    if not (type(y) is Read and type(compute_body(y.tensor)) is Reduce
            and y.tensor.op.body.reducer is e.reducer):
        return None
    Y = y.tensor
    body = Y.op.body
    flat, here = _flat_position(body.axes), _flat_position(e.axes)
    if flat is None or here is None or flat[1] != here[1] or flat[1] == 0:
        return None
    stages = _STATISTICS.get()
    cache = {} if stages is None else stages.setdefault(id(Y), (Y, {}))[1]
    if "scans" not in cache:
        n = flat[1]
        names = fresh_names(["q"], names_in(body) | {ax.name for ax in Y.op.axes})
        q = Var(names[0])
        # k_j = lo_j + (q // stride_j) % n_j: the point of the domain at position q
        at, stride = {}, 1
        for ax in reversed(body.axes):
            pos = q // stride if stride != 1 else q
            pos = pos % ax.extent.value if stride * ax.extent.value != n else pos
            at[ax.name] = pos + ax.lo.value if ax.lo.value else pos
            stride *= ax.extent.value
        identity = e.reducer.identity(Y.dtype)
        source = body.source if body.where is None else select(body.where, body.source,
                                                               identity)
        source = substitute(source, at)
        axes = Y.op.axes + (IterVar(q, Const(0, q.dtype), Const(n, q.dtype), "data"),)
        cache["scans"] = tuple(
            scan_stage(f"{Y.name}_{kind}", axes, len(axes) - 1, e.reducer, source,
                       kind == "suffix")
            for kind in ("prefix", "suffix"))
    prefix, suffix = cache["scans"]
    index = tuple(y.indices) + (here[0],)
    return e.reducer.combine(Read(prefix, index, e.dtype), Read(suffix, index, e.dtype))


def generic_rule(fd, e):
    if getattr(e.reducer, "derivative", None) is not None:
        return declared_rule(fd, e)
    df, di = _tangents(fd, e)
    if df is ZERO and di is ZERO:
        return ZERO
    x, y, da, db = combiner_partials(e.reducer, e.dtype)
    out = ZERO
    if df is not ZERO and db is not ZERO:
        rest = _scan_rest(fd, e)
        if rest is None:
            source2, where2, axes2 = _others(fd, e)
            rest = Reduce(e.reducer, source2, axes2, where2, e.init, e.dtype)
        elif e.init is not None:
            rest = e.reducer.combine(e.init, rest)
        partial = substitute(db, {x.name: rest, y.name: e.source})
        out = _sum_k(e, mul(partial, df))
    if di is not ZERO and da is not ZERO:
        whole = Reduce(e.reducer, e.source, e.axes, e.where, None, e.dtype)
        partial = substitute(da, {x.name: e.init, y.name: whole})
        out = add(out, mul(partial, di))
    return out


@rule(TupleReduce)
def tuple_rule(fd, e):
    """Component ``j = e.index`` of a reduction of a tuple ``Y = (+)_k f(k)``.

    With a declared ``derivative(x, y)`` (rows ``j``, columns ``c``: ``dY_j/dx_c`` for
    an element ``x = f(k)`` of a reduction of value ``y``): ``dY_j = sum_k(sum_c
    d[j][c](f(k), Y) * df_c(k))``, reading the values ``Y`` only (the stages of the
    other components, built once per stage). Without: ``dY_j = sum_k(sum_c
    dcombine_j/db_c(rest_k, f(k)) * df_c(k))``, ``rest_k`` the reduction of the other
    points (a reduction per point: quadratic in the reduction's length), read from a
    stage per component over the output and the points (:func:`_tuple_rest`)
    """
    tangents = [fd.tangent(c) for c in e.sources]
    if all(t is ZERO for t in tangents):
        return ZERO
    if e.reducer.derivative is not None:
        partials = _declared_rows(e, e.sources, _tuple_values(fd, e))[e.index]
    else:
        partials = _combine_partials(fd, e)
    terms = [cast_to(mul(p, t), e.dtype) for p, t in zip(partials, tangents)
             if p is not ZERO and t is not ZERO]
    return _sum_k(e, sum_all(terms))


def _tuple_values(fd, e):
    """The values of every component of the reduction of a tuple ``e``: reads of the
    stages computing them when ``e`` is a stage's whole body, else the components."""
    y = fd.answer(e)
    if not (type(y) is Read and type(compute_body(y.tensor)) is TupleReduce):
        taken = set(fd.reserved) | names_in(e)
        return tuple(rename_reduce(e.component(c), taken) for c in range(len(e.sources)))
    Y = y.tensor
    stages = _STATISTICS.get()
    cache = {} if stages is None else stages.setdefault(id(Y), (Y, {}))[1]
    out = []
    for c in range(len(e.sources)):
        if c == e.index:
            out.append(y)
            continue
        if ("component", c) not in cache:
            cache[("component", c)] = compute_stage(f"{Y.name}_c{c}", Y.op.axes,
                                                    Y.op.body.component(c))
        stage = cache[("component", c)]
        out.append(Read(stage, y.indices, stage.dtype))
    return tuple(out)


def _declared_rows(e, x, y):
    """``derivative(x, y)`` of the reducer of ``e``, checked: n rows of n partials (an
    expression, or 0 for none), of the component's dtype."""
    n, name = len(e.sources), e.reducer.name
    rows = e.reducer.derivative(tuple(x), tuple(y))
    if not (isinstance(rows, (tuple, list)) and len(rows) == n
            and all(isinstance(r, (tuple, list)) and len(r) == n for r in rows)):
        raise DifferentiationError(f"reducer {name!r}: derivative(x, y) of {n} components "
                                   f"must return {n} rows of {n} partial derivatives "
                                   f"(dY_j/dx_c), got {rows!r}")
    out = []
    for j, row in enumerate(rows):
        dtype = e.sources[j].dtype
        parts = []
        for c, d in enumerate(row):
            if isinstance(d, (int, float)) and not isinstance(d, bool) and d == 0:
                parts.append(ZERO)
                continue
            d = as_expr(d, dtype)
            if d.dtype != dtype:
                raise DifferentiationError(f"reducer {name!r}: derivative row {j}, column "
                                           f"{c} has dtype {d.dtype}, not {dtype}")
            parts.append(d)
        out.append(parts)
    return out


def _tuple_rest(fd, e):
    """The components of ``rest_k``, the reduction of every point but ``k`` of the
    reduction of a tuple ``e``: reads ``R_c[y, k]`` of stages over the axes of the stage
    ``Y`` that ``e`` is the whole body of and the points of its reduction (a component
    of a reduction of a tuple is only ever a stage's whole body), built once per stage.
    A reduction whose bounds are not constants has no such stages: refused by name (a
    declared ``derivative`` reads the forward values alone)."""
    y = fd.answer(e)
    if not (type(y) is Read and type(compute_body(y.tensor)) is TupleReduce):
        raise DifferentiationError(f"reducer {e.reducer.name!r}: a reduction of a tuple is "
                                   f"differentiated only as the whole body of a stage")
    Y = y.tensor
    body = Y.op.body
    if _flat_position(body.axes) is None or len(body.axes) != len(e.axes):
        raise DifferentiationError(
            f"stage {Y.name!r}: the gradient of the reduction of a tuple by "
            f"{e.reducer.name!r}, which declares no derivative, needs constant reduction "
            f"bounds (it reduces the other points for each one); declare "
            f"comm_reducer(..., derivative=...)")
    stages = _STATISTICS.get()
    cache = {} if stages is None else stages.setdefault(id(Y), (Y, {}))[1]
    if "rest" not in cache:
        sources2, where2, axes2 = _others(fd, body, [ax.var for ax in Y.op.axes])
        points = tuple(IterVar(ax.var, ax.lo, ax.extent, "data") for ax in body.axes)
        cache["rest"] = tuple(
            compute_stage(f"{Y.name}_rest{c}", Y.op.axes + points,
                          TupleReduce(e.reducer, sources2, axes2, where2, c, src.dtype))
            for c, src in enumerate(body.sources))
    index = tuple(y.indices) + tuple(ax.var for ax in e.axes)
    return [Read(stage, index, stage.dtype) for stage in cache["rest"]]


def _combine_partials(fd, e):
    """``dcombine_j/db_c(rest_k, f(k))`` for ``j = e.index`` and every ``c``."""
    dtypes = tuple(c.dtype for c in e.sources)
    xs, ys, bodies = e.reducer.tuple_combiner(dtypes)
    at = {x.name: r for x, r in zip(xs, _tuple_rest(fd, e))}
    at.update({y.name: s for y, s in zip(ys, e.sources)})
    out = []
    for y in ys:
        one = Const(1, y.dtype)
        seed = (lambda leaf, y=y, one=one: one if isinstance(leaf, Var) and leaf.name == y.name
                else ZERO)
        partial = ForwardDiff(seed).tangent(bodies[e.index])
        out.append(ZERO if partial is ZERO else substitute(partial, at))
    return out


__all__ = ["REDUCER_RULES", "reducer_rule", "sum_rule", "prod_rule", "generic_rule",
           "combiner_partials", "tuple_rule"]
