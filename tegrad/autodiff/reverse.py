"""Reverse-mode differentiation of a tensor program: adjoint accumulation over the DAG.

The forward program is first normalised (:mod:`tegrad.autodiff.normalize`). Then, in
reverse topological order, every tensor ``T`` on a path from the inputs to the output
(a path a gradient flows along: not through ``stop_gradient`` or another intrinsic of
zero derivative) gets one adjoint stage ``dT`` whose body is the sum of the
contributions of its consumers (:func:`tegrad.autodiff.contribution.stage_contribution`)::

    dA[i0, i1] = sum(dB[i, j] * D_B, i, j) + sum(dC[i] * D_C, i)

Inputs the output does not depend on get zeros. The adjoint of the output is the head
(the constant 1 inline when no head is given). Full Jacobians use the same machinery
with adjoints batched over leading "prefix" axes (the output's index) and the head
``(p == y) ? 1 : 0``.

>>> import numpy as np, tegrad as tg
>>> w = tg.placeholder((3,), dtype="float64", name="w")
>>> y = tg.compute((3,), lambda i: w[i] * w[i], name="y")
>>> (dw,) = tg.differentiate(y, [w])
>>> tg.evaluate(dw, {w: np.array([1.0, 2.0, 3.0])}).tolist()
[2.0, 4.0, 6.0]
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DifferentiationError, DTypeError, ShapeError, TegradError
from tegrad.ir.expr import Const, Read
from tegrad.ir.graph import placeholders, topological_order
from tegrad.ir.mapper import children, walk
from tegrad.ir.stages import compute_body, output_axis_names, stage_exprs
from tegrad.ir.tensor import Tensor
from tegrad.analysis.kronecker import kronecker
from tegrad.analysis.read_bounds import check_reads_inside
from tegrad.autodiff.algebra import ZERO, add
from tegrad.autodiff.normalize import normalize
from tegrad.autodiff.contribution import stage_contribution
from tegrad.autodiff.intrinsic_rules import has_zero_derivative
from tegrad.autodiff.reduce_rules import shared_statistics
from tegrad.autodiff.names import fresh_names, make_compute, names_in
from tegrad.autodiff.result import Gradients


def _check_output(output):
    if not isinstance(output, Tensor):
        raise TegradError(f"differentiate: the output must be a tensor, got {output!r}")
    if not _dt.is_float(output.dtype):
        raise DTypeError(f"differentiate: the output {output.name!r} has the non-float dtype "
                         f"{output.dtype}; only floating-point outputs have gradients")
    # a read outside a tensor raises when the program runs, but its adjoint drops the
    # points outside: refused here, not turned into a plausible gradient
    check_reads_inside([output])


def _check_inputs(output, inputs):
    if inputs is None:
        # integer placeholders (labels, indices) are data, not parameters
        return [t for t in placeholders([output]) if _dt.is_float(t.dtype)]
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise TegradError(f"differentiate: inputs must be a tensor or a list of tensors, "
                          f"got {inputs!r}")
    for t in inputs:
        if not isinstance(t, Tensor):
            raise TegradError(f"differentiate: the input {t!r} is not a tensor")
        _check_differentiable_input("differentiate", t)
    return list(inputs)


def _check_differentiable_input(caller, t):
    # a gradient of zeros would hide the mistake: an integer tensor has no tangent space
    if not _dt.is_float(t.dtype):
        raise DifferentiationError(f"{caller}: the input {t.name!r} has the non-float dtype "
                                   f"{t.dtype}; only floating-point inputs have gradients")


def _check_head(output, head):
    if head is None:
        return
    if not isinstance(head, Tensor):
        raise TegradError(f"differentiate: head must be a tensor of shape {output.shape} "
                          f"and dtype {output.dtype}, got {head!r}")
    if head.shape != output.shape:
        raise ShapeError(f"differentiate: head {head.name!r} has shape {head.shape} but the "
                         f"output {output.name!r} has shape {output.shape}")
    if head.dtype != output.dtype:
        raise DTypeError(f"differentiate: head {head.name!r} has dtype {head.dtype} but the "
                         f"output {output.name!r} has dtype {output.dtype}")


def _check_manual(manual):
    manual = dict(manual or {})
    for key, fn in manual.items():
        if not (isinstance(key, tuple) and len(key) == 2
                and all(isinstance(t, Tensor) for t in key)):
            raise TegradError(f"differentiate: manual keys are (output tensor, input tensor) "
                              f"pairs, got {key!r}")
        if not callable(fn):
            raise TegradError(f"differentiate: manual[{key[0].name}, {key[1].name}] is not "
                              f"callable")
    return manual


def _through_derivatives(e):
    """The children of ``e`` a derivative flows into (none for ``stop_gradient(x)``)."""
    return () if has_zero_derivative(e) else children(e)


def _axis_bases(t):
    return output_axis_names(t) or [f"i{d}" for d in range(len(t.shape))]


def _zeros(t, prefix_shape, name):
    shape = tuple(prefix_shape) + t.shape
    names = [f"p{d}" for d in range(len(prefix_shape))] + [f"i{d}" for d in range(t.ndim)]
    return make_compute(name, shape, names, lambda *v: Const(0, t.dtype))


class _Reverse:
    """One reverse pass: adjoints of the tensors between ``inputs`` and ``output``."""

    def __init__(self, output, inputs, root_head, prefix_shape, manual, originals,
                 output_adjoint, owners=None, normalised=None):
        self.output, self.inputs = output, inputs
        self.root_head, self.prefix_shape = root_head, tuple(prefix_shape)
        self.manual, self.originals = manual, originals
        #: id of a stage hoisted out of an original stage -> that original stage
        self.owners = owners or {}
        #: id of an original stage -> its normalised stage
        self.normalised = normalised or {}
        self.output_adjoint = output_adjoint
        self.manual_used = set()
        self.adjoints = {}

    def run(self):
        order = topological_order([self.output])
        input_ids = {id(t) for t in self.inputs}
        live = set()
        for t in order:
            if id(t) in input_ids or any(id(i) in live for i in self._differentiable_inputs(t)):
                live.add(id(t))
        consumers = {}
        for c in order:
            if id(c) in live and _dt.is_float(c.dtype):
                for i in c.op.input_tensors():
                    consumers.setdefault(id(i), []).append(c)
        for t in reversed(order):
            if id(t) not in live or t is self.output:
                continue
            self.adjoints[id(t)] = self._adjoint(t, consumers.get(id(t), []))
        return self.adjoints

    def _differentiable_inputs(self, t):
        """The tensors ``t`` reads where a gradient can flow: all its inputs but those it
        reads only under an intrinsic of zero derivative (without a manual override).
        ``m[i] = stop_gradient(max_k x[i, k])`` is then on no path from ``x``: it gets no
        adjoint, which would be zero for every input and, being an output of the
        gradient program, keep the adjoints it reads from being computed inline."""
        cut = set()
        for e in stage_exprs(t):
            under = [n.args for n in walk(e) if has_zero_derivative(n)]
            if under:
                flowing = {id(n.tensor) for n in walk(e, _through_derivatives)
                           if type(n) is Read}
                cut |= {id(n.tensor) for args in under for a in args for n in walk(a)
                        if type(n) is Read and id(n.tensor) not in flowing}
        return [i for i in t.op.input_tensors()
                if id(i) not in cut or self._manual_key(t, i) is not None]

    def head_of(self, y):
        """``head(prefix, idx)`` building the adjoint of ``y`` at ``y[idx]``."""
        if y is self.output:
            return self.root_head
        adj = self.adjoints[id(y)]
        return lambda prefix, idx: Read(adj, tuple(prefix) + tuple(idx), adj.dtype)

    def _adjoint(self, t, consumers):
        if not _dt.is_float(t.dtype):
            return _zeros(t, self.prefix_shape, f"d{t.name}")
        taken = set()
        for c in consumers:
            taken |= _stage_names(c)
        n_pre = len(self.prefix_shape)
        names = fresh_names([f"p{d}" for d in range(n_pre)] + _axis_bases(t), taken)
        shape = self.prefix_shape + t.shape

        def body(*vs):
            prefix, xs = vs[:n_pre], vs[n_pre:]
            total, overridden = ZERO, set()
            for c in consumers:
                key = self._manual_key(c, t)
                if key is not None:
                    # the override replaces every path through the stage's normalised
                    # pieces (the stage and the reductions hoisted out of it): add it once
                    if key not in overridden:
                        overridden.add(key)
                        total = add(total, self._manual_contribution(key, t, xs))
                    continue
                if self._adjoint_is_zero(c):
                    continue
                total = add(total, self._contribution(c, t, prefix, xs, taken | set(names)))
            return Const(0, t.dtype) if total is ZERO else total
        return make_compute(f"d{t.name}", shape, names, body)

    def _adjoint_is_zero(self, c):
        """The adjoint of consumer ``c`` is identically zero (e.g. behind stop_gradient)."""
        if c is self.output or id(c) not in self.adjoints:
            return False
        body = compute_body(self.adjoints[id(c)])
        return type(body) is Const and body.value == 0

    def _manual_key(self, c, t):
        """The ``manual`` key overriding consumer ``c``'s contribution to ``t``, or None.

        ``c`` may be a stage hoisted out of an original stage by normalisation: the
        override of the original stage covers it.
        """
        if not self.manual:
            return None
        owner = self.owners.get(id(c))
        if owner is None:
            owner = self.originals.get(id(c), c)
        key = (owner, self.originals.get(id(t), t))
        return key if key in self.manual else None

    def _contribution(self, c, t, prefix, xs, reserved):
        return stage_contribution(c, t, self.head_of(c), xs, prefix, reserved)

    def _manual_contribution(self, key, t, xs):
        fn = self.manual[key]
        self.manual_used.add(key)
        head = self.head_tensor(self.normalised.get(id(key[0]), key[0]))
        out = fn(key[0], key[1], head)
        if not isinstance(out, Tensor) or out.shape != t.shape or out.dtype != t.dtype:
            raise TegradError(f"manual gradient for ({key[0].name}, {key[1].name}) must "
                              f"return a {t.dtype} tensor of shape {t.shape}, got {out!r}")
        return Read(out, tuple(xs), out.dtype)

    def head_tensor(self, c):
        if c is self.output:
            return self.output_adjoint()
        return self.adjoints[id(c)]


def _stage_names(t):
    """Names inside a consumer that an adjoint's axes must avoid (its own axes are renamed)."""
    return names_in(*stage_exprs(t)) - {ax.name for ax in t.op.axes}


def _hoisted_owners(out2, originals, mapping):
    """``{id(stage): original}`` for the stages normalisation hoisted out of an original.

    A hoisted stage is one of the normalised program that stands for no original tensor;
    it belongs to the original stage whose normalised version reads it (directly or
    through other hoisted stages).
    """
    owners = {}
    for old in originals.values():
        new = mapping.get(id(old), old)
        if new is old:
            continue
        stack = list(new.op.input_tensors())
        while stack:
            s = stack.pop()
            if id(s) in originals or id(s) in owners:
                continue
            owners[id(s)] = old
            stack.extend(s.op.input_tensors())
    return owners


def reverse_pass(output, inputs, root_head, prefix_shape=(), manual=None,
                 output_adjoint=None):
    """Adjoints (``{id(tensor): adjoint}``) of the normalised program of ``output``.

    Returns ``(adjoints, mapping, normalised output, manual keys used)``; ``mapping``
    takes ``id`` of an original tensor to its normalised version.
    """
    (out2,), mapping = normalize([output])
    originals = {id(new): old for old in topological_order([output])
                 for new in [mapping.get(id(old), old)]}
    inputs2 = [mapping.get(id(t), t) for t in inputs]
    rev = _Reverse(out2, inputs2, root_head, prefix_shape, manual or {}, originals,
                   output_adjoint, _hoisted_owners(out2, originals, mapping),
                   {id(old): new for old in originals.values()
                    for new in [mapping.get(id(old), old)]})
    with shared_statistics():
        adjoints = rev.run()
    return adjoints, mapping, out2, rev.manual_used


def differentiate(output, inputs=None, *, head=None, manual=None):
    """Reverse-mode gradients of ``output`` with respect to ``inputs``, as built (naive).

    ``head`` (a tensor of the output's shape and dtype, default all ones) gives the
    vector-Jacobian product ``head . d output / d input``: with the default the result is
    the gradient of ``sum(output)``, never a full Jacobian (see :func:`jacobian`).
    ``inputs`` is a tensor or a list (default: every placeholder ``output`` depends on);
    ``manual={(out, inp): fn}`` overrides the contribution of ``out`` to ``inp`` by
    ``fn(out, inp, head_of_out)``, a tensor of ``inp``'s shape. An integer input raises
    :class:`~tegrad.ir.errors.DifferentiationError`; the default inputs are the
    floating-point ones.
    :func:`tegrad.differentiate` (:mod:`tegrad.pipeline`) zero-eliminates the result.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((2,), dtype="float64", name="x")
    >>> k = tg.reduce_axis((0, 2), name="k")
    >>> L = tg.compute((), lambda: tg.sum(x[k] * x[k], axis=k), name="L")
    >>> res = differentiate(L, [x])
    >>> tg.evaluate(res[0], {x: np.array([1.0, -2.0])}).tolist()
    [2.0, -4.0]
    """
    _check_output(output)
    inputs = _check_inputs(output, inputs)
    _check_head(output, head)
    manual = _check_manual(manual)
    ones = []

    def ones_tensor():
        if not ones:
            ones.append(make_compute(f"d{output.name}", output.shape,
                                     [f"i{d}" for d in range(output.ndim)],
                                     lambda *v: Const(1, output.dtype)))
        return ones[0]

    if head is None:
        root_head = (lambda prefix, idx: Const(1, output.dtype))
        output_adjoint = ones_tensor
    else:
        root_head = (lambda prefix, idx: Read(head, tuple(idx), head.dtype))
        output_adjoint = (lambda: head)
    adjoints, mapping, out2, used = reverse_pass(output, inputs, root_head, (), manual,
                                                 output_adjoint)
    for key in manual:
        if key not in used:
            raise TegradError(f"manual gradient for ({key[0].name}, {key[1].name}): "
                              f"{key[0].name!r} does not read {key[1].name!r} on a path "
                              f"from the inputs to the output")
    by_tensor = {}
    for t in topological_order([output]):
        t2 = mapping.get(id(t), t)
        if t is output:
            by_tensor[t] = output_adjoint()
        elif id(t2) in adjoints:
            by_tensor[t] = adjoints[id(t2)]
    result = []
    for t in inputs:
        grad = by_tensor.get(t)
        if grad is None:
            grad = _zeros(t, (), f"d{t.name}")
        result.append(grad)
    forward = topological_order([out2] + ([head] if head is not None else []))
    return Gradients(output, inputs, head, result, by_tensor, forward=forward)


def jacobian(output, input):
    """The full Jacobian ``J[y..., x...] = d output[y] / d input[x]``, as built (naive).

    Its shape is ``output.shape + input.shape``; it is built explicitly only here
    (``differentiate`` computes vector-Jacobian products). :func:`tegrad.jacobian`
    zero-eliminates it like a gradient.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((2,), dtype="float64", name="x")
    >>> y = tg.compute((3,), lambda i: x[0] * tg.cast(i, "float64"), name="y")
    >>> J = jacobian(y, x)
    >>> J.shape, tg.evaluate(J, {x: np.zeros(2)}).tolist()
    ((3, 2), [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    """
    return jacobian_program(output, input)[0]


def jacobian_program(output, input):
    """``(J, forward)``: the naive Jacobian and the forward stages it reads as they are."""
    _check_output(output)
    if not isinstance(input, Tensor):
        raise TegradError(f"jacobian: the input must be a tensor, got {input!r}")
    _check_differentiable_input("jacobian", input)

    def delta(prefix, idx):
        return kronecker(prefix, idx, output.dtype)

    if input is output:
        names = [f"p{d}" for d in range(output.ndim)] + [f"i{d}" for d in range(output.ndim)]
        return make_compute(f"J{output.name}", output.shape * 2, names,
                            lambda *v: delta(v[:output.ndim], v[output.ndim:])), []
    adjoints, mapping, out2, _ = reverse_pass(output, [input], delta, output.shape)
    grad = adjoints.get(id(mapping.get(id(input), input)))
    if grad is None:
        grad = _zeros(input, output.shape, f"J{input.name}")
    return grad, topological_order([out2])


__all__ = ["differentiate", "jacobian", "jacobian_program", "reverse_pass"]
