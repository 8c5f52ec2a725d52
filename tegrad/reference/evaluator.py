"""The reference evaluator: computes a tensor DAG with numpy, vectorised per stage.

Each stage is evaluated over its whole index space at once: variables are broadcast
``arange`` arrays, a reduction appends its axes as trailing dimensions and reduces them.
Evaluation carries a mask of the points that are really computed: a select evaluates
each branch only where it is taken and a reduction only where its ``where`` holds, so a
read guarded by a condition (``i >= 1 ? A[i - 1] : 0``) is not out of bounds. A read
outside a tensor at an active point raises :class:`OutOfBoundsError`.

>>> import numpy as np, tegrad as tg
>>> A = tg.placeholder((2, 3), dtype="float64", name="A")
>>> B = tg.compute((3, 2), lambda i, j: A[j, i] * 2, name="B")
>>> float(tg.evaluate(B, {A: np.ones((2, 3))}).sum())
12.0
"""
from __future__ import annotations

import math
import warnings
from types import GeneratorType

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import FeedError, OutOfBoundsError, TegradError
from tegrad.ir.expr import REDUCTIONS, Const, ExprOps
from tegrad.ir.graph import topological_order
from tegrad.ir.intrinsics import INTRINSICS
from tegrad.ir.mapper import Mapper, NodeMemo, bottom_up, children
from tegrad.ir.stages import StageMapper, is_placeholder
from tegrad.ir.tensor import Tensor
from tegrad.reference import memory as _memory

#: stages whose broadcast index space exceeds this many elements are evaluated in chunks
CHUNK_ELEMENTS = 1 << 22

_BINARY_NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floordiv": np.floor_divide, "floormod": np.mod, "min": np.minimum, "max": np.maximum,
}
_COMPARE_NUMPY = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}


def _and_mask(mask, cond):
    return cond if mask is None else mask & cond


def _any_active(mask):
    return mask is None or bool(np.any(mask))


class _Scope:
    """Variable values (arrays of ``ndim`` broadcastable dims) and the active mask."""

    __slots__ = ("env", "ndim", "mask", "memo")

    def __init__(self, env, ndim, mask):
        self.env, self.ndim, self.mask, self.memo = env, ndim, mask, NodeMemo()

    def with_mask(self, mask):
        return _Scope(self.env, self.ndim, mask)


class ExprEvaluator(Mapper):
    """The numpy value of an expression over a stage's index space (``self(e, scope)``).

    ``values`` maps ``id(tensor)`` to the array of each tensor read; ``stage`` and
    ``limit`` are the stage evaluated and the memory limit its reductions are checked
    against. Its ``map_<kind>`` methods are generators (see :func:`tegrad.ir.mapper.run`),
    so an expression of any depth evaluates without recursion; a subclass adding a node
    kind (a code generator's load) lists it in ``_method_names`` and gets a child's value
    with ``(yield self.visit(child, scope))`` (or, recursing, ``self(child, scope)``).
    :meth:`at_point` evaluates at one point.

    >>> from tegrad.ir.expr import Var
    >>> int(ExprEvaluator({}).at_point(Var("i", "int64") // -2, {"i": np.int64(3)}))
    -2
    """

    def __init__(self, values, stage=None, limit=None):
        self.values = values
        #: the stage evaluated and the memory limit its reductions are checked against
        self.stage, self.limit = stage, limit

    def at_point(self, e, env):
        """The value of ``e`` (a 0-d array) where each variable named in ``env`` has the
        scalar value given there."""
        return self(e, _Scope(env, 0, None))

    def visit(self, e, scope):
        hit = scope.memo.get(e)
        if hit is not None:
            return hit
        return self._evaluated(e, scope)

    def _evaluated(self, e, scope):
        out = self.method_for(type(e), e)(e, scope)
        if type(out) is GeneratorType:
            out = yield from out
        out = np.asarray(out)
        if out.ndim != scope.ndim:
            out = out.reshape((1,) * (scope.ndim - out.ndim) + out.shape)
        scope.memo[e] = out
        return out

    def map_const(self, e, scope):
        return np.array(e.value, dtype=e.dtype).reshape((1,) * scope.ndim)

    def map_var(self, e, scope):
        try:
            return scope.env[e.name]
        except KeyError:
            raise TegradError(f"the variable {e.name!r} is not bound here") from None

    def map_binary(self, e, scope):
        a = yield self.visit(e.a, scope)
        b = yield self.visit(e.b, scope)
        if e.op in ("floordiv", "floormod") and _dt.is_int(e.dtype):
            zero = b == 0
            if np.any(zero):
                if np.any(_and_mask(scope.mask, zero)):
                    raise TegradError(f"integer division by zero in {e}")
                b = np.where(zero, 1, b)
        return _BINARY_NUMPY[e.op](a, b)

    def map_neg(self, e, scope):
        return np.negative((yield self.visit(e.a, scope)))

    def map_compare(self, e, scope):
        a = yield self.visit(e.a, scope)
        b = yield self.visit(e.b, scope)
        return _COMPARE_NUMPY[e.op](a, b)

    def map_and(self, e, scope):
        a = yield self.visit(e.a, scope)
        b = yield self.visit(e.b, scope.with_mask(_and_mask(scope.mask, a)))
        return a & b

    def map_or(self, e, scope):
        a = yield self.visit(e.a, scope)
        b = yield self.visit(e.b, scope.with_mask(_and_mask(scope.mask, ~a)))
        return a | b

    def map_not(self, e, scope):
        return ~(yield self.visit(e.a, scope))

    def map_select(self, e, scope):
        c = yield self.visit(e.cond, scope)
        if not np.any(c):
            f = yield self.visit(e.false_value, scope)
            return np.broadcast_to(f, np.broadcast_shapes(c.shape, f.shape))
        t = yield self.visit(e.true_value, scope.with_mask(_and_mask(scope.mask, c)))
        if np.all(c):
            return np.broadcast_to(t, np.broadcast_shapes(c.shape, t.shape))
        f = yield self.visit(e.false_value, scope.with_mask(_and_mask(scope.mask, ~c)))
        return np.where(c, t, f)

    def map_cast(self, e, scope):
        a = yield self.visit(e.a, scope)
        if _dt.is_int(e.dtype) and _dt.is_float(a.dtype.name):
            a = np.where(np.isfinite(a), a, 0)
        return a.astype(e.dtype)

    def map_call(self, e, scope):
        args = []
        for a in e.args:
            args.append((yield self.visit(a, scope)))
        return np.asarray(INTRINSICS[e.name].numpy(*args)).astype(e.dtype, copy=False)

    def map_read(self, e, scope):
        data = self.values[id(e.tensor)]
        if not e.indices:
            return data.reshape((1,) * scope.ndim)
        idx = []
        for i in e.indices:
            idx.append((yield self.visit(i, scope)))
        idx = np.broadcast_arrays(*idx)
        fixed = []
        for d, (ix, extent) in enumerate(zip(idx, e.tensor.shape)):
            bad = (ix < 0) | (ix >= extent)
            if np.any(bad):
                active_bad = bad if scope.mask is None else bad & scope.mask
                if np.any(active_bad):
                    pos = tuple(int(a[0]) for a in np.nonzero(active_bad))
                    at = [int(np.broadcast_to(j, active_bad.shape)[pos]) for j in idx]
                    raise OutOfBoundsError(
                        f"read of {e.tensor.name!r} (shape {e.tensor.shape}) at index "
                        f"{tuple(at)} is out of bounds in dimension {d}: {e}")
                ix = np.clip(ix, 0, extent - 1)
            fixed.append(ix)
        return data[tuple(fixed)]

    def _domain(self, e, scope):
        """``(inner scope, shape of the reduction axes)``: the points of the reduction
        ``e`` as trailing dimensions, masked where they are not in its domain (a
        generator, see :func:`tegrad.ir.mapper.run`)."""
        n_red = len(e.axes)
        expand = (Ellipsis,) + (None,) * n_red
        env = {k: v[expand] for k, v in scope.env.items()}
        ndim = scope.ndim + n_red
        inner = _Scope(env, ndim, None if scope.mask is None else scope.mask[expand])
        red_shape = [1] * ndim
        for pos, ax in enumerate(e.axes):
            lo = yield self.visit(ax.lo, inner)
            extent = yield self.visit(ax.extent, inner)
            active_extent = extent if inner.mask is None else np.where(inner.mask, extent, 0)
            n = max(int(np.max(active_extent, initial=0)), 0)  # no active point: empty
            red_shape[scope.ndim + pos] = n
            self._check_reduction_memory(scope, red_shape)
            shape = [1] * ndim
            shape[scope.ndim + pos] = n
            t = np.arange(n, dtype=np.int64).reshape(shape)
            env[ax.name] = lo + t
            ragged = not (isinstance(ax.extent, Const) and ax.extent.value == n)
            inner = _Scope(env, ndim, _and_mask(inner.mask, t < extent) if ragged else inner.mask)
        if e.where is not None:
            inner = _Scope(env, ndim, _and_mask(inner.mask, (yield self.visit(e.where, inner))))
        return inner, red_shape

    def _broadcast_sources(self, sources, inner, red_shape):
        """``(sources, where)`` broadcast over the whole reduction domain."""
        full = np.broadcast_shapes(*(s.shape for s in sources), tuple(red_shape),
                                   (1,) if inner.mask is None else inner.mask.shape)
        where = True if inner.mask is None else np.broadcast_to(inner.mask, full)
        return [np.broadcast_to(s, full) for s in sources], where

    def map_reduce(self, e, scope):
        inner, red_shape = yield from self._domain(e, scope)
        identity = e.reducer.identity(e.dtype).value
        if not _any_active(inner.mask):
            result = np.full((1,) * scope.ndim, identity, dtype=e.dtype)
        else:
            src = yield self.visit(e.source, inner)
            (src,), where = self._broadcast_sources([src], inner, red_shape)
            red_axes = tuple(range(scope.ndim, inner.ndim))
            if e.reducer.numpy_reduce is not None:
                result = e.reducer.numpy_reduce(src, axis=red_axes, where=where, initial=identity)
            else:
                result = self._fold(e, src, where, scope, identity)
        result = np.asarray(result, dtype=e.dtype)
        if e.init is not None:
            init = yield self.visit(e.init, scope)
            result = self._combine(e, init, result, scope)
        return result

    def map_tuple_reduce(self, e, scope):
        """Component ``e.index`` of the fold of the sources' tuples, in the order of the
        flattened domain (a commutative reducer gives the same result in any order)."""
        inner, red_shape = yield from self._domain(e, scope)
        dtypes = tuple(s.dtype for s in e.sources)
        xs, ys, bodies = e.reducer.tuple_combiner(dtypes)
        identity = [c.value for c in e.reducer.tuple_identity(dtypes)]
        if not _any_active(inner.mask):
            return np.full((1,) * scope.ndim, identity[e.index], dtype=e.dtype)
        sources = []
        for source in e.sources:
            sources.append((yield self.visit(source, inner)))
        sources, where = self._broadcast_sources(sources, inner, red_shape)
        outer = sources[0].shape[:scope.ndim]
        flat = [s.reshape(outer + (-1,)) for s in sources]
        flat_where = None if where is True else where.reshape(outer + (-1,))
        accs = [np.full(outer, c, dtype=d) for c, d in zip(identity, dtypes)]
        for r in range(flat[0].shape[-1]):
            env = dict(scope.env)
            env.update({x.name: a for x, a in zip(xs, accs)})
            env.update({y.name: f[..., r] for y, f in zip(ys, flat)})
            step = _Scope(env, scope.ndim, scope.mask)  # one memo: shared sub-expressions
            new = [np.broadcast_to(self(body, step), outer).astype(d)
                   for body, d in zip(bodies, dtypes)]
            accs = new if flat_where is None else [np.where(flat_where[..., r], n, a)
                                                   for n, a in zip(new, accs)]
        return accs[e.index]

    def _check_reduction_memory(self, scope, red_shape):
        """Refuse a reduction whose broadcast index space cannot fit the memory limit (or
        the physical memory, whatever the limit)."""
        if self.stage is None:
            return
        outer = np.broadcast_shapes(*(np.shape(v) for v in scope.env.values()))
        points = int(np.prod(outer, dtype=object)) * int(np.prod(red_shape, dtype=object))
        _memory.check_stage_memory(self.stage, _memory.temporary_bytes(points),
                                   f"a reduction over {points} points at once", self.limit)

    def _combine(self, e, a, b, scope):
        x, y, body = e.reducer.combiner(e.dtype)
        env = dict(scope.env)
        env[x.name], env[y.name] = a, b
        return self(body, _Scope(env, scope.ndim, scope.mask))

    def _fold(self, e, src, where, scope, identity):
        outer = src.shape[:scope.ndim]
        flat = src.reshape(outer + (-1,))
        flat_where = None if where is True else where.reshape(outer + (-1,))
        acc = np.full(outer, identity, dtype=e.dtype)
        for r in range(flat.shape[-1]):
            cand = np.broadcast_to(self._combine(e, acc, flat[..., r], scope), outer)
            acc = cand if flat_where is None else np.where(flat_where[..., r], cand, acc)
        return acc


def _reduction_work(e):
    """An upper estimate of the reduction points per output element (for chunking)."""
    return bottom_up(e, children, _work_of_node)


def _work_of_node(e, kids):
    inner = max(kids, default=1)
    if type(e) in REDUCTIONS:
        for ax in e.axes:
            if isinstance(ax.extent, Const):
                inner *= max(ax.extent.value, 1)
    return inner


def _index_arrays(axes, ndim, rows=None):
    env = {}
    for d, ax in enumerate(axes):
        shape = [1] * ndim
        if d == 0 and rows is not None:
            values = np.arange(*rows, dtype=np.int64)
        else:
            values = np.arange(ax.extent.value, dtype=np.int64)
        shape[d] = values.size
        env[ax.name] = values.reshape(shape)
    return env


def _evaluate_compute(t, values, limit=None):
    op = t.op
    ev = ExprEvaluator(values, t, limit)
    ndim = len(t.shape)
    work = _reduction_work(op.body) * max(math.prod(t.shape[1:]), 1)  # exact, never wraps
    rows_per_chunk = max(1, CHUNK_ELEMENTS // work)
    if ndim == 0 or rows_per_chunk >= t.shape[0]:
        _check_compute_memory(t, work * (t.shape[0] if ndim else 1), 1, limit)
        chunks = [None]
    else:
        _check_compute_memory(t, work * rows_per_chunk, 2, limit)
        # lazily: a stage of 2**31 rows, one per chunk, must not first build 2**31 tuples
        chunks = ((s, min(s + rows_per_chunk, t.shape[0]))
                  for s in range(0, t.shape[0], rows_per_chunk))
    parts = []
    for rows in chunks:
        scope = _Scope(_index_arrays(op.axes, ndim, rows), ndim, None)
        val = ev(op.body, scope)
        shape = t.shape if rows is None else (rows[1] - rows[0],) + t.shape[1:]
        parts.append(np.broadcast_to(val, shape).astype(t.dtype))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def _check_compute_memory(t, chunk_points, copies, limit):
    """Refuse a compute stage whose output (``copies`` of it) or one chunk cannot fit
    (the limit, and the machine's physical memory whatever the limit)."""
    output = t.size * np.dtype(t.dtype).itemsize * copies
    _memory.check_stage_memory(t, output, "its output buffer" if copies == 1 else
                               "its output buffer and its chunks", limit)
    _memory.check_stage_memory(t, output + _memory.temporary_bytes(chunk_points),
                               f"its output and {chunk_points} points evaluated at once",
                               limit)


def _evaluate_scatter(t, values, limit=None):
    op = t.op
    ev = ExprEvaluator(values, t, limit)
    ndim = len(op.axes)
    domain = tuple(ax.extent.value for ax in op.axes)
    points = int(np.prod(domain, dtype=object))
    needed = t.size * np.dtype(t.dtype).itemsize + _memory.temporary_bytes(
        points * (1 + max(len(target.indices) for target in op.targets)))
    _memory.check_stage_memory(t, needed, f"its output and a domain of {points} points",
                               limit)
    out = (np.zeros(t.shape, dtype=t.dtype) if op.init is None
           else values[id(op.init)].astype(t.dtype, copy=True))
    everywhere = _Scope(_index_arrays(op.axes, ndim), ndim, None)
    for target in op.targets:
        scope, mask = everywhere, np.ones(domain, dtype=bool)
        if target.where is not None:
            mask = np.broadcast_to(ev(target.where, everywhere), domain)
            scope = everywhere.with_mask(mask)
        if not mask.any():
            continue
        idx = [np.broadcast_to(ev(i, scope), domain)[mask] for i in target.indices]
        val = np.broadcast_to(ev(target.value, scope), domain)[mask]
        for d, (ix, extent) in enumerate(zip(idx, t.shape)):
            bad = (ix < 0) | (ix >= extent)
            if np.any(bad):
                at = tuple(int(j[np.argmax(bad)]) for j in idx)
                raise OutOfBoundsError(f"scatter_add {t.name!r} (shape {t.shape}) writes at "
                                       f"{at}, out of bounds in dimension {d}")
        np.add.at(out, tuple(idx), val)
    return out


def _evaluate_scan(t, values, limit=None):
    """A sequential loop along the scanned axis, vectorised over the other axes."""
    op = t.op
    _memory.check_stage_memory(t, t.size * np.dtype(t.dtype).itemsize
                               + _memory.temporary_bytes(t.size),
                               "its output and its source", limit)
    ev = ExprEvaluator(values, t, limit)
    ndim = len(t.shape)
    source = np.broadcast_to(ev(op.source, _Scope(_index_arrays(op.axes, ndim), ndim, None)),
                             t.shape)
    x, y, body = op.reducer.combiner(t.dtype)
    out = np.empty(t.shape, dtype=t.dtype)
    line = t.shape[:op.axis] + t.shape[op.axis + 1:]
    acc = np.full(line, op.reducer.identity(t.dtype).value, dtype=t.dtype)
    steps = range(t.shape[op.axis] - 1, -1, -1) if op.reverse else range(t.shape[op.axis])
    before = (slice(None),) * op.axis
    for a in steps:
        out[before + (a,)] = acc
        env = {x.name: acc, y.name: source[before + (a,)]}
        acc = np.broadcast_to(ev(body, _Scope(env, ndim - 1, None)), line).astype(t.dtype)
    return out


def _feed_value(t, feed, same_name=()):
    if t in feed:
        value = feed[t]
    elif t.name in feed and isinstance(t.name, str):
        if same_name:
            others = ", ".join(_describe(o) for o in same_name)
            raise FeedError(f"the feed key {t.name!r} is ambiguous: the placeholders "
                            f"{_describe(t)} and {others} share that name; key the feed by "
                            f"the placeholder tensors instead")
        value = feed[t.name]
    else:
        raise FeedError(f"no value fed for the placeholder {t.name!r} (shape {t.shape}, "
                        f"{t.dtype})")
    value = feed_array(t, value)
    if value.shape != t.shape:
        raise FeedError(f"placeholder {t.name!r} has shape {t.shape} but was fed an array of "
                        f"shape {value.shape}")
    return value


class _RunStage(StageMapper):
    def __init__(self, values, feed, limit, by_name):
        self.values, self.feed, self.limit, self.by_name = values, feed, limit, by_name

    def map_placeholder(self, t):
        same_name = [o for o in self.by_name[t.name] if o is not t]
        return _feed_value(t, self.feed, same_name)

    def map_compute(self, t):
        return _evaluate_compute(t, self.values, self.limit)

    def map_scatter(self, t):
        return _evaluate_scatter(t, self.values, self.limit)

    def map_scan(self, t):
        return _evaluate_scan(t, self.values, self.limit)


def _describe(t):
    return f"{t.name!r} (shape {t.shape}, {t.dtype})"


def feed_array(t, value):
    """``value`` as an array of the placeholder ``t``'s dtype, converted only losslessly.

    One rule for every container (array, numpy scalar, Python number, nested lists): the
    feed is converted to ``t``'s dtype when every value converts back to itself (NaN to
    NaN), and refused with a :class:`FeedError` naming the placeholder otherwise: a
    fraction fed to an integer placeholder, an integer out of its range, a float64 value
    that float32 rounds, a bool fed to a number or a number to a bool.

    >>> import tegrad as tg
    >>> n = tg.placeholder((2,), dtype="int32", name="n")
    >>> feed_array(n, [1.0, 2.0]).tolist()
    [1, 2]
    >>> feed_array(n, [1.5, 2.7])
    Traceback (most recent call last):
    ...
    tegrad.ir.errors.FeedError: placeholder 'n' is int32 but the feed holds the float64 value 1.5, which int32 cannot hold exactly (it would become 1); feed exact values or convert them explicitly
    """
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise FeedError(f"placeholder {t.name!r}: cannot read the feed as an array of "
                        f"{t.dtype}: {err}") from None
    dst = np.dtype(t.dtype)
    if arr.dtype == dst:
        return arr
    src = arr.dtype
    if src.kind not in "biuf" or (src.kind == "b") != (dst.kind == "b"):
        raise FeedError(f"placeholder {t.name!r} is {t.dtype} but the feed holds {src} "
                        f"values; feed {t.dtype} values")
    out = arr.astype(dst)
    back = out.astype(src)
    same = back == arr
    if src.kind == "f":
        same |= np.isnan(arr) & np.isnan(back)
    if not np.all(same):
        pos = tuple(int(a[0]) for a in np.nonzero(np.atleast_1d(~same)))
        bad, got = np.atleast_1d(arr)[pos].item(), np.atleast_1d(out)[pos].item()
        raise FeedError(f"placeholder {t.name!r} is {t.dtype} but the feed holds the {src} "
                        f"value {bad!r}, which {t.dtype} cannot hold exactly (it would become {got!r}); "
                        f"feed exact values or convert them explicitly")
    return out


def _output_list(outputs):
    """The tensors of a list or tuple of outputs; anything else is an error naming it."""
    items = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    for item in items:
        if isinstance(item, ExprOps):
            raise TegradError(f"evaluate: {item} is an expression, not a tensor; evaluate a "
                              f"stage computing it, e.g. tg.compute((), lambda: {item})")
        if not isinstance(item, Tensor):
            raise TegradError(f"evaluate: the outputs must be a tensor or a list of tensors, "
                              f"got {item!r} of type {type(item).__name__}")
    return items


def evaluate(outputs, feed=None, *, memory_limit=None):
    """Compute ``outputs`` (a tensor or a list of tensors) with numpy.

    ``feed`` maps each placeholder the outputs depend on (or its name, when no other
    placeholder of the program has it) to an array of its shape; values of another
    dtype are converted only when no value changes (see :func:`feed_array`). Returns an
    array, or a list of arrays for a list of outputs.

    A stage whose buffers cannot fit ``memory_limit`` bytes (default: the process-wide
    limit of :func:`tegrad.set_memory_limit`, else a fraction of the available memory;
    see :mod:`tegrad.reference.memory`) is refused before anything is computed for it.
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else _output_list(outputs)
    feed = {} if feed is None else feed
    if not isinstance(feed, dict):
        raise FeedError(f"feed must be a dict from placeholders to arrays, got "
                        f"{type(feed).__name__}")
    if memory_limit is None:
        limit = _memory.memory_limit()
    elif isinstance(memory_limit, bool) or not isinstance(memory_limit, int) \
            or memory_limit <= 0:
        raise TegradError(f"evaluate: memory_limit must be a positive number of bytes, got "
                          f"{memory_limit!r}")
    else:
        limit = memory_limit
    values = {}
    order = topological_order(outs)
    by_name = {}
    for t in order:
        if is_placeholder(t):
            by_name.setdefault(t.name, []).append(t)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run = _RunStage(values, feed, limit, by_name)
        for t in order:
            values[id(t)] = run(t)
    results = [values[id(t)] for t in outs]
    return results[0] if single else results
