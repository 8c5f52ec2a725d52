"""The whole training step as one call: forward, backward and the optimizer's update.

:func:`train_step` differentiates a loss with respect to the parameters, applies an
optimizer of :mod:`tegrad.optim` to the gradients, and compiles the loss, the gradients
and the update as one program (one ``tg.build``: the update fuses with the gradients).
The :class:`TrainStep` it returns owns the parameters and the optimizer state as numpy
arrays; each call runs the compiled program on a batch and leaves the next parameters and
state in those same arrays, so references to ``step.params[name]`` stay valid across
steps. The compiled code writes each update in place, into the array of the value it
replaces, when its last read of the old value comes before the write (see
:mod:`tegrad.codegen.lower.in_place`; ``step.in_place`` names them); any other update
goes to a buffer of the step's own, copied into place after the call. The step is built
by :func:`tegrad.codegen.runtime.builder.build_updating`, with ``tg.build``'s caches (in
memory and on disk) and its ``profile=`` option.

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

from tegrad.codegen.runtime.builder import build, build_updating
from tegrad.codegen.runtime.compiled import MemoryReport
from tegrad.ir.errors import FeedError, TegradError
from tegrad.ir.tensor import Tensor
from tegrad.optim import Optimizer
from tegrad.pipeline import differentiate


class TrainStep:
    """A compiled training step (see :func:`train_step`): ``step(*batch)`` returns the
    loss (a float) and updates ``params`` and ``state`` (name -> array) in place;
    ``step.in_place`` lists the names the compiled code updates in their own arrays (the
    others are copied in after the call); ``step.memory`` is the
    :class:`~tegrad.codegen.runtime.compiled.MemoryReport` of a call (the batch as
    inputs, the parameters and optimizer state as state). ``step.function`` is the same
    program as a plain compiled function, whose inputs are ``[*inputs, *params, *state]``
    and outputs ``[loss, *new params, *new state]`` (built when first used);
    ``step.export(path, ...)`` writes it as a C library (see
    ``CompiledFunction.export``): a C caller passes the next parameters and state back in
    on the next call."""

    def __init__(self, running, updated, loss, inputs, params, state, init, program):
        self._running = running
        self._updated = tuple(updated)
        self._program = program
        self._function = None
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
        # the compiled code writes the next values it cannot write in place here; they are
        # copied into place after the call
        self._copied = [k for k, done in enumerate(self._updated) if not done]
        self._next = [np.empty(t.shape, t.dtype)
                      for k, t in enumerate((*params, *state)) if not self._updated[k]]

    @property
    def _current(self):
        return ([self.params[p.name] for p in self._params]
                + [self.state[t.name] for t in self._state])

    @property
    def in_place(self):
        """The names of the parameters and state the compiled code updates in place."""
        names = [t.name for t in (*self._params, *self._state)]
        return [n for n, done in zip(names, self._updated) if done]

    @property
    def function(self):
        """The step as a plain :class:`CompiledFunction` (``[loss, *new params, *new
        state]`` from ``[*inputs, *params, *state]``), built when first used."""
        if self._function is None:
            placeholders, outputs, threads, name = self._program
            self._function = build(placeholders, outputs, threads=threads, name=name)
        return self._function

    @property
    def memory(self):
        """The bytes one call holds (a ``MemoryReport``): the batch as inputs, the
        parameters and optimizer state as state, the loss and the updates not written in
        place as outputs."""
        nbytes = lambda arrays: sum(a.nbytes for a in arrays)  # noqa: E731
        inner = self._running.memory
        state = nbytes(self._current)
        return MemoryReport(inner.inputs - state, nbytes([self._loss_out, *self._next]),
                            state, inner.workspace, inner.workspace_unshared)

    def __call__(self, *batch):
        """Run one step on ``batch`` (one array per input placeholder, in order); return
        the loss before the update."""
        if len(batch) != len(self.inputs):
            raise FeedError(f"train step: expected {len(self.inputs)} batch arrays "
                            f"({', '.join(t.name for t in self.inputs)}), got {len(batch)}")
        current = self._current
        self._running(*batch, *current, out=[self._loss_out, *self._next])
        for k, value in zip(self._copied, self._next):
            np.copyto(current[k], value)
        return float(self._loss_out) if self._loss_out.shape == () else self._loss_out.copy()

    def profile(self):
        """Where the calls so far spent their time, per statement (a
        :class:`~tegrad.codegen.runtime.profile.Profile`); needs
        ``train_step(..., profile=True)``."""
        return self._running.profile()

    def export(self, path, **options):
        """Write the step as a C library (``CompiledFunction.export``'s options)."""
        return self.function.export(path, **options)

    def __repr__(self):
        return (f"<TrainStep of {self.loss.name}: params "
                f"{', '.join(p.name for p in self._params)}>")


def train_step(loss, params, *, optimizer, inputs, threads=None, init=None, profile=False):
    """Compile one training step of ``loss`` (a scalar tensor): the gradients of the
    placeholders ``params`` and ``optimizer``'s update of them (``tg.optim.sgd``,
    ``adam``, ``adamw``), in one compiled call. ``inputs`` are the other placeholders the
    step reads (the batch; a learning-rate placeholder too); every other placeholder the
    loss reads is an error naming it. ``init``: initial parameter values by name (else
    zeros; set ``step.params[name][...]`` in place later as well). ``profile=True``
    times each statement of the step on every call (``step.profile()``, as
    ``tg.build``'s option). Compiled as ``tg.build`` compiles, with its caches: a step
    built before, in this process or (from the on-disk program cache) an earlier one,
    is not compiled again. Returns a :class:`TrainStep`.
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
    placeholders, outputs = [*inputs, *params, *state], [loss, *update]
    name = f"{loss.name}_step"
    running, updated = build_updating(placeholders, outputs, len(inputs), threads=threads,
                                      name=name, profile=profile)
    return TrainStep(running, updated, loss, inputs, params, state, init,
                     (placeholders, outputs, threads, name))


__all__ = ["TrainStep", "train_step"]
