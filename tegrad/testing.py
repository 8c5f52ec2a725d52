"""Checking gradients against finite differences.

:func:`check_grad` compares every element of the gradients built by
:func:`tegrad.differentiate` with central finite differences; :func:`check_vjp` checks
the adjoint identity ``<v, J u> == <J^T v, u>`` for random directions. Both evaluate
with the reference evaluator, in float64: a program with other float dtypes is first
rebuilt with every float dtype turned into float64 (:func:`as_float64`).

>>> import tegrad as tg
>>> x = tg.placeholder((3,), dtype="float64", name="x")
>>> y = tg.compute((3,), lambda i: tg.sin(x[i]) * x[i], name="y")
>>> check_grad(y, [x]) < 1e-6
True
"""
from __future__ import annotations

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import FeedError, TegradError
from tegrad.reference.evaluator import evaluate
from tegrad.ir.expr import Cast, Const, Read, Var
from tegrad.ir.graph import placeholders, topological_order
from tegrad.ir.mapper import IdentityMapper
from tegrad.ir.rewrite import map_stage
from tegrad.ir.stages import is_placeholder
from tegrad.ir.tensor import Tensor, placeholder
from tegrad.pipeline import differentiate

F64 = "float64"


def _f64(dtype):
    return F64 if _dt.is_float(dtype) else dtype


class _ToFloat64(IdentityMapper):
    """Rebuilds an expression with float64 in place of every float dtype."""

    def __init__(self, tensors):
        self.tensors = tensors

    def _retype(self, e, new):
        if new.dtype == _f64(e.dtype):
            return new
        fields = {f: getattr(new, f) for f in new._field_names()}
        return type(new)(**{**fields, "dtype": _f64(e.dtype)})

    def map_const(self, e, *args):
        return e if e.dtype == _f64(e.dtype) else Const(e.value, F64)

    def map_var(self, e, *args):
        return e if e.dtype == _f64(e.dtype) else Var(e.name, F64)

    def map_cast(self, e, *args):
        a = self(e.a)
        return a if a.dtype == _f64(e.dtype) else Cast(a, _f64(e.dtype))

    def map_read(self, e, *args):
        new = super().map_read(e)
        t = self.tensors.get(id(e.tensor), e.tensor)
        return e if (new is e and t is e.tensor) else Read(t, new.indices, t.dtype)

    def _generic(name):
        def method(self, e, *args):
            return self._retype(e, getattr(IdentityMapper, name)(self, e))
        return method

    map_binary = _generic("map_binary")
    map_neg = _generic("map_neg")
    map_select = _generic("map_select")
    map_call = _generic("map_call")
    map_reduce = _generic("map_reduce")
    map_tuple_reduce = _generic("map_tuple_reduce")
    del _generic


def as_float64(outputs):
    """The program of ``outputs`` with float64 for every float dtype.

    Returns ``(new outputs, {original tensor: new tensor})``; stages already in float64
    come back unchanged.

    >>> import tegrad as tg
    >>> x = tg.placeholder((2,), name="x")
    >>> (y,), m = as_float64([tg.compute((2,), lambda i: x[i] * 2.0, name="y")])
    >>> y.dtype, m[x].dtype
    ('float64', 'float64')
    """
    mapping, by_id = {}, {}
    mapper = _ToFloat64(by_id)
    for t in topological_order(outputs):
        if is_placeholder(t):
            new = t if t.dtype == _f64(t.dtype) else placeholder(t.shape, F64, t.name)
        else:
            new = map_stage(t, mapper, lambda init: by_id.get(id(init), init))
        by_id[id(t)] = new
        mapping[t] = new
    return [mapping[t] for t in outputs], mapping


def _promoted(output, inputs, feed):
    """The float64 version of the program, its inputs and the feed."""
    _, mapping = as_float64([output] + list(inputs))
    if all(new is old for old, new in mapping.items()):
        return output, inputs, feed
    new_feed = {}
    for key, value in (feed or {}).items():
        t = mapping.get(key, key) if isinstance(key, Tensor) else key
        value = np.asarray(value)
        new_feed[t] = value.astype(_f64(value.dtype.name))
    return mapping[output], [mapping[t] for t in inputs], new_feed


def _as_list(inputs):
    if isinstance(inputs, Tensor):
        return [inputs]
    return list(inputs)


def _full_feed(output, inputs, feed, rng):
    """The feed with random values (uniform in [-1, 1]) for missing float placeholders."""
    feed = {} if feed is None else dict(feed)
    out = {}
    for t in placeholders([output] + list(inputs)):
        if t in feed:
            value = feed[t]
        elif t.name in feed:
            value = feed[t.name]
        elif _dt.is_float(t.dtype):
            value = rng.uniform(-1.0, 1.0, size=t.shape)
        else:
            raise FeedError(f"check_grad: give a feed for the {t.dtype} placeholder "
                            f"{t.name!r}; only float placeholders get random values")
        out[t] = np.array(value, dtype=t.dtype)
    return out


def _head_value(output, head, rng):
    if head is None:
        return np.ones(output.shape, dtype=output.dtype)
    if isinstance(head, str) and head == "random":
        return rng.uniform(-1.0, 1.0, size=output.shape).astype(output.dtype)
    head = np.asarray(head, dtype=output.dtype)
    if head.shape != output.shape:
        raise TegradError(f"check_grad: head has shape {head.shape}, the output "
                          f"{output.name!r} has shape {output.shape}")
    return head


def _gradients(output, inputs, feed, head_value):
    h = placeholder(output.shape, output.dtype, name=f"head_{output.name}")
    grads = differentiate(output, inputs, head=h).result
    values = evaluate(grads, {**feed, h: head_value})
    return [np.asarray(v, dtype=np.float64) for v in values]


def _objective(output, feed, head_value):
    return float(np.sum(np.asarray(evaluate(output, feed), np.float64) * head_value))


def check_grad(output, inputs, feed=None, head=None, eps=1e-6, rtol=1e-6, atol=1e-8,
               rng=None):
    """Compare ``differentiate(output, inputs, head)`` with central finite differences.

    ``inputs`` are placeholders (a tensor or a list); ``feed`` gives values for some
    placeholders, the other float ones get random values from ``rng`` (a
    ``numpy.random.Generator`` or a seed). ``head`` is an array of the output's shape,
    ``"random"``, or None for all ones. An element passes when ``|analytic - numeric|
    <= atol + rtol * |numeric|``; the worst failure raises AssertionError. Returns the
    largest relative error ``|analytic - numeric| / (|numeric| + atol / rtol)``.

    >>> import tegrad as tg
    >>> w = tg.placeholder((2, 2), dtype="float64", name="w")
    >>> y = tg.compute((2, 2), lambda i, j: w[i, j] * w[j, i], name="y")
    >>> check_grad(y, w, head="random", rng=0) < 1e-6
    True
    """
    rng = np.random.default_rng(rng)
    inputs = _as_list(inputs)
    for t in inputs:
        if not isinstance(t, Tensor) or not is_placeholder(t):
            raise TegradError(f"check_grad: inputs must be placeholders, got {t!r}")
    output, inputs, feed = _promoted(output, inputs, feed)
    feed = _full_feed(output, inputs, feed, rng)
    head_value = _head_value(output, head, rng)
    analytic = _gradients(output, inputs, feed, head_value)
    worst = (0.0, None)
    for t, grad in zip(inputs, analytic):
        base = feed[t]
        numeric = np.zeros(t.shape, dtype=np.float64)
        for index in np.ndindex(*t.shape):
            values = []
            for step in (eps, -eps):
                moved = base.copy()
                moved[index] += step
                values.append(_objective(output, {**feed, t: moved}, head_value))
            numeric[index] = (values[0] - values[1]) / (2 * eps)
        err = np.abs(grad - numeric) / (np.abs(numeric) + atol / rtol) * 1.0
        if err.size and float(err.max()) > worst[0]:
            at = np.unravel_index(int(np.argmax(err)), err.shape)
            worst = (float(err.max()), (t, at, grad[at], numeric[at]))
    if worst[0] > rtol:
        t, at, a, n = worst[1]
        raise AssertionError(f"gradient of {output.name!r} w.r.t. {t.name!r} at {at}: "
                             f"differentiate gives {a!r}, finite differences {n!r} "
                             f"(relative error {worst[0]:.3g} > rtol {rtol:g})")
    return worst[0]


def check_vjp(output, inputs, feed=None, eps=1e-6, rtol=1e-6, atol=1e-8, rng=None):
    """Check ``<v, J u> == <J^T v, u>`` for random ``u`` (inputs) and ``v`` (output).

    ``J^T v`` comes from :func:`tegrad.differentiate` with head ``v``; ``J u`` from
    central finite differences along ``u``. Raises AssertionError when the two differ by
    more than ``atol + rtol * size``; returns the relative difference.

    >>> import tegrad as tg
    >>> x = tg.placeholder((4,), dtype="float64", name="x")
    >>> y = tg.compute((4,), lambda i: tg.exp(x[i]) * x[3 - i], name="y")
    >>> check_vjp(y, [x], rng=1) < 1e-6
    True
    """
    rng = np.random.default_rng(rng)
    inputs = _as_list(inputs)
    output, inputs, feed = _promoted(output, inputs, feed)
    feed = _full_feed(output, inputs, feed, rng)
    v = rng.uniform(-1.0, 1.0, size=output.shape).astype(output.dtype)
    us = [rng.uniform(-1.0, 1.0, size=t.shape) for t in inputs]
    vjp = sum(float(np.sum(g * u)) for g, u in zip(_gradients(output, inputs, feed, v), us))
    sides = []
    for step in (eps, -eps):
        moved = {**feed}
        for t, u in zip(inputs, us):
            moved[t] = (feed[t] + step * u).astype(t.dtype)
        sides.append(_objective(output, moved, v))
    jvp = (sides[0] - sides[1]) / (2 * eps)
    err = abs(vjp - jvp) / (max(abs(vjp), abs(jvp)) + atol / rtol)
    if err > rtol:
        raise AssertionError(f"<v, J u> = {jvp!r} (finite differences) but <J^T v, u> = "
                             f"{vjp!r} for {output.name!r} (relative error {err:.3g})")
    return err


__all__ = ["check_grad", "check_vjp", "as_float64"]
