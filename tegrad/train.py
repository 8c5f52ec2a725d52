"""The whole training step as one call: forward, backward and the optimizer's update.

:func:`train_step` differentiates a loss with respect to the parameters, applies an
optimizer of :mod:`tegrad.optim` to the gradients, and compiles the loss, the gradients
and the update as one program (one ``tg.build``: the update fuses with the gradients).
The :class:`TrainStep` it returns owns the parameters and the optimizer state as numpy
arrays; each call runs the compiled program on a batch and leaves the next parameters and
state in those same arrays (the compiled code writes them to buffers of the step's own,
copied into place after the call), so references to ``step.params[name]`` stay valid
across steps.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((4, 2), dtype="float64", name="x")
>>> w = tg.placeholder((2,), dtype="float64", name="w")
>>> k = tg.reduce_axis((0, 2), name="k")
>>> pred = tg.compute((4,), lambda i: tg.sum(x[i, k] * w[k], axis=k), name="pred")
>>> r = tg.reduce_axis((0, 4), name="r")
>>> loss = tg.compute((), lambda: tg.sum(pred[r] * pred[r], axis=r), name="loss")
>>> step = tg.train_step(loss, [w], optimizer=tg.optim.sgd(0.01), inputs=[x],
...                      init={"w": np.array([1.0, 0.5])})
>>> before = step.params["w"]
>>> step(np.ones((4, 2))), step.params["w"] is before, step.params["w"].round(3).tolist()
(9.0, True, [0.88, 0.38])
"""
from __future__ import annotations

import numpy as np

from tegrad.codegen.runtime.builder import build
from tegrad.ir.errors import FeedError, TegradError
from tegrad.ir.tensor import Tensor
from tegrad.optim import Optimizer
from tegrad.pipeline import differentiate


class TrainStep:
    """A compiled training step (see :func:`train_step`): ``step(*batch)`` returns the
    loss (a float) and updates ``params`` and ``state`` (name -> array) in place;
    ``step.function`` is the compiled function, whose inputs are ``[*inputs, *params,
    *state]`` and outputs ``[loss, *new params, *new state]``; ``step.export(path, ...)``
    writes it as a C library (see ``CompiledFunction.export``): a C caller passes the
    next parameters and state back in on the next call."""

    def __init__(self, function, loss, inputs, params, state, init):
        self.function = function
        self.loss = loss
        self.inputs = tuple(inputs)
        self._params = tuple(params)
        self._state = tuple(state)
        self.params = {p.name: np.zeros(p.shape, p.dtype) for p in params}
        self.state = {t.name: v for t, v in zip(state, state.initial_values())}
        for name, value in (init or {}).items():
            if name not in self.params:
                raise TegradError(f"train_step: init names {name!r}, which is not a "
                                  f"parameter (parameters: {sorted(self.params)})")
            value = np.asarray(value)
            target = self.params[name]
            if value.shape != target.shape:
                raise TegradError(f"train_step: init value of {name!r} has shape "
                                  f"{value.shape}, the parameter {target.shape}")
            np.copyto(target, value, casting="same_kind")
        self._loss_out = np.empty(loss.shape, loss.dtype)
        # the compiled code writes the next values here; they are copied into place after
        # the call (an output may not overlap an input)
        self._next = [np.empty(t.shape, t.dtype) for t in (*params, *state)]

    @property
    def _current(self):
        return ([self.params[p.name] for p in self._params]
                + [self.state[t.name] for t in self._state])

    def __call__(self, *batch):
        """Run one step on ``batch`` (one array per input placeholder, in order); return
        the loss before the update."""
        if len(batch) != len(self.inputs):
            raise FeedError(f"train step: expected {len(self.inputs)} batch arrays "
                            f"({', '.join(t.name for t in self.inputs)}), got {len(batch)}")
        current = self._current
        self.function(*batch, *current, out=[self._loss_out, *self._next])
        for target, value in zip(current, self._next):
            np.copyto(target, value)
        return float(self._loss_out) if self._loss_out.shape == () else self._loss_out.copy()

    def export(self, path, **options):
        """Write the step as a C library (``CompiledFunction.export``'s options)."""
        return self.function.export(path, **options)

    def __repr__(self):
        return (f"<TrainStep of {self.loss.name}: params "
                f"{', '.join(p.name for p in self._params)}>")


def train_step(loss, params, *, optimizer, inputs, threads=None, init=None):
    """Compile one training step of ``loss`` (a scalar tensor): the gradients of the
    placeholders ``params`` and ``optimizer``'s update of them (``tg.optim.sgd``,
    ``adam``, ``adamw``), in one compiled call. ``inputs`` are the other placeholders the
    step reads (the batch; a learning-rate placeholder too); every other placeholder the
    loss reads is an error naming it. ``init``: initial parameter values by name (else
    zeros; set ``step.params[name][...]`` in place later as well). Returns a
    :class:`TrainStep`.
    """
    if not isinstance(loss, Tensor) or loss.shape != ():
        raise TegradError(f"train_step: the loss must be a scalar tensor (shape ()), got "
                          f"{getattr(loss, 'shape', loss)!r}")
    if not isinstance(optimizer, Optimizer):
        raise TegradError(f"train_step: optimizer must be one of tg.optim's (sgd, adam, "
                          f"adamw), got {optimizer!r}")
    params = list(params) if not isinstance(params, Tensor) else [params]
    inputs = list(inputs) if not isinstance(inputs, Tensor) else [inputs]
    overlap = {id(t) for t in params} & {id(t) for t in inputs}
    if overlap:
        names = [t.name for t in params if id(t) in overlap]
        raise TegradError(f"train_step: {names} listed both as parameters and as inputs")
    state = optimizer.state_placeholders(params)
    update = optimizer.update(params, differentiate(loss, params), state)
    function = build([*inputs, *params, *state], [loss, *update], threads=threads,
                     name=f"{loss.name}_step")
    return TrainStep(function, loss, inputs, params, state, init)


__all__ = ["TrainStep", "train_step"]
