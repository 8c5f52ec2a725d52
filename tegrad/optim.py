"""Optimizers as tensor expressions: PyTorch's SGD, Adam and AdamW update rules.

An optimizer turns parameters, their gradients and its state (momentum buffers, moment
estimates, a step count) into the new parameters and the new state, all tensors, so one
``tg.build`` computes the loss, the gradients and the whole update. Each call of the
compiled step takes the current values and returns the next ones, which the caller
passes back in on the next call. The arithmetic follows ``torch.optim``'s single-tensor
code (``foreach=False``) operation by operation; the scalars PyTorch computes as Python
floats (bias corrections, step sizes) are computed in float64 and rounded to the
parameter's dtype where PyTorch hands them to a tensor operation, so training matches
PyTorch's to rounding.

>>> import numpy as np, tegrad as tg
>>> w = tg.placeholder((2,), dtype="float64", name="w")
>>> loss = tg.compute((), lambda: w[0] * w[0] + w[1] * w[1], name="loss")
>>> opt = tg.optim.adam(0.1)
>>> state = opt.state_placeholders([w])
>>> [t.name for t in state]
['w.exp_avg', 'w.exp_avg_sq', 'step']
>>> new = opt.update([w], tg.differentiate(loss, [w]), state)
>>> step = tg.build([w, *state], [loss, *new])
>>> values, moments = [np.array([1.0, -2.0])], state.initial_values()
>>> for _ in range(2):
...     loss_value, *out = step(*values, *moments)
...     values, moments = out[:1], out[1:]
>>> values[0].round(3).tolist(), int(moments[-1])
([0.8, -1.8], 2)
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from tegrad import ops
from tegrad.ir import builders as api
from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError, ShapeError, TegradError
from tegrad.ir.expr import Const, binary, compare, select
from tegrad.ir.tensor import Tensor, compute, placeholder

__all__ = ["OptimizerError", "Optimizer", "OptimizerState", "Update", "sgd", "adam", "adamw",
           "clip_grad_norm"]

#: the dtype of the step counter (PyTorch keeps a float32 tensor; a count is an integer)
STEP_DTYPE = "int32"
#: the dtype of the scalars PyTorch computes as Python floats (doubles)
SCALAR = "float64"


class OptimizerError(TegradError, ValueError):
    """An invalid hyperparameter, or parameters, gradients and state that do not match."""


# ---------------------------------------------------------------------------------------
# argument checks


def _number(value, what, *, low=None, high=None, low_open=False, high_open=True):
    """``value`` as a float, checked against the interval PyTorch accepts."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating)):
        raise OptimizerError(f"{what} must be a number, got {value!r}")
    value = float(value)
    too_low = low is not None and (value < low or (low_open and value == low))
    too_high = high is not None and (value > high or (high_open and value == high))
    if math.isnan(value) or too_low or too_high:
        lo = "" if low is None else f"{low} {'<' if low_open else '<='} "
        hi = "" if high is None else f" {'<' if high_open else '<='} {high}"
        raise OptimizerError(f"{what} must satisfy {lo}{what}{hi}, got {value!r}")
    return value


def _flag(value, what):
    if not isinstance(value, (bool, np.bool_)):
        raise OptimizerError(f"{what} must be True or False, got {value!r}")
    return bool(value)


def _learning_rate(lr):
    """A non-negative number, or a float tensor of shape () (a schedule's placeholder)."""
    if isinstance(lr, Tensor):
        if lr.shape != ():
            raise ShapeError(f"the learning rate tensor {lr.name!r} must be a scalar (shape "
                             f"()), not of shape {lr.shape}")
        if not _dt.is_float(lr.dtype):
            raise DTypeError(f"the learning rate tensor {lr.name!r} has dtype {lr.dtype}; a "
                             f"float dtype is needed (float64 holds the values PyTorch uses)")
        return lr
    return _number(lr, "lr", low=0.0, high=math.inf)


def _max_norm(value, what="clip_grad_norm"):
    if value is None:
        return None
    return _number(value, what, low=0.0, low_open=True, high=math.inf)


def _betas(betas):
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise OptimizerError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    return (_number(betas[0], "betas[0]", low=0.0, high=1.0),
            _number(betas[1], "betas[1]", low=0.0, high=1.0))


def _tensor_list(values, what):
    if isinstance(values, Tensor):
        raise OptimizerError(f"{what} must be a list of tensors, got the tensor "
                             f"{values.name!r} alone (wrap it in a list)")
    try:
        values = list(values)
    except TypeError:
        raise OptimizerError(f"{what} must be a list of tensors, got {values!r}") from None
    for v in values:
        if not isinstance(v, Tensor):
            raise OptimizerError(f"{what} must hold tegrad tensors, got {v!r}")
    return values


def _check_params(params):
    params = _tensor_list(params, "params")
    if not params:
        raise OptimizerError("params is empty: there is nothing to update")
    seen = set()
    for p in params:
        if not _dt.is_float(p.dtype):
            raise DTypeError(f"parameter {p.name!r} has dtype {p.dtype}; optimizers update "
                             f"float tensors only")
        if id(p) in seen:
            raise OptimizerError(f"parameter {p.name!r} is given twice")
        seen.add(id(p))
    return params


def _check_grads(params, grads):
    grads = _tensor_list(grads, "grads")
    if len(grads) != len(params):
        raise OptimizerError(f"{len(grads)} gradients for {len(params)} parameters "
                             f"({', '.join(p.name for p in params)})")
    for p, g in zip(params, grads):
        if g.shape != p.shape:
            raise ShapeError(f"gradient {g.name!r} of parameter {p.name!r} has shape "
                             f"{g.shape}, not the parameter's {p.shape}")
        if g.dtype != p.dtype:
            raise DTypeError(f"gradient {g.name!r} of parameter {p.name!r} has dtype "
                             f"{g.dtype}, not the parameter's {p.dtype}")
    return grads


# ---------------------------------------------------------------------------------------
# scalars: PyTorch computes these as Python floats (doubles) and rounds them to the
# parameter's dtype when a tensor operation takes them


def _scalar(value):
    """A float64 expression: a number, or the element of a scalar tensor."""
    if isinstance(value, Tensor):
        return api.cast(value[()], SCALAR)
    return Const(float(value), SCALAR)


def _in(dtype, value):
    """A float64 scalar (a Python float, a float64 expression or a float64 scalar stage)
    rounded to ``dtype``, as PyTorch passes a Python float to a tensor operation."""
    if isinstance(value, Tensor):
        value = value[()]
    if isinstance(value, float):
        return Const(value, dtype)
    return api.cast(value, dtype)


def _scalar_stage(name, body, dtype=SCALAR):
    """A stage of shape (), computed once and read by every parameter's update (a power
    per element would cost more than the update itself)."""
    return compute((), lambda: api.cast(body(), dtype), name=name)


def _lerp(start, end, weight, dtype):
    """``torch.lerp(start, end, w)`` for a constant ``w`` rounded to ``dtype``: ``start + w
    * (end - start)`` when ``|w| < 0.5``, else ``end - (end - start) * (1 - w)`` (the form
    exact at the nearer end, as PyTorch chooses)."""
    w = float(np.array(weight, dtype=dtype))
    if abs(w) < 0.5:
        return start + Const(w, dtype) * (end - start)
    return end - (end - start) * Const(float(np.array(1.0 - w, dtype=dtype)), dtype)


def _elementwise(like, name, fn):
    return compute(like.shape, lambda *i: fn(i), name=name)


# ---------------------------------------------------------------------------------------
# gradient clipping


def clip_grad_norm(grads, max_norm):
    """``torch.nn.utils.clip_grad_norm_``: every gradient times ``min(max_norm /
    (total + 1e-6), 1)``, with ``total`` the 2-norm of all of them together (the norm of
    the per-tensor norms, as PyTorch computes it). Returns ``(clipped gradients, total)``.

    >>> import numpy as np, tegrad as tg
    >>> g = tg.placeholder((2,), dtype="float64", name="g")
    >>> (clipped,), total = clip_grad_norm([g], 1.0)
    >>> [a.round(6).tolist() for a in tg.evaluate([clipped, total], {g: np.array([3.0, 4.0])})]
    [[0.6, 0.8], 5.0]
    """
    grads = _tensor_list(grads, "grads")
    max_norm = _max_norm(max_norm, "max_norm")
    if not grads:
        raise OptimizerError("grads is empty: there is no norm to clip")
    dtype = grads[0].dtype
    for g in grads:
        if not _dt.is_float(g.dtype):
            raise DTypeError(f"gradient {g.name!r} has dtype {g.dtype}; a float dtype is "
                             f"needed")
        if g.dtype != dtype:
            raise DTypeError(f"gradient {g.name!r} has dtype {g.dtype}, but {grads[0].name!r} "
                             f"has {dtype}; clipping takes gradients of one dtype")
    norms = [ops.sqrt(ops.sum(ops.multiply(g, g))) for g in grads]

    def total_body():
        acc = norms[0][()] * norms[0][()]
        for n in norms[1:]:
            acc = acc + n[()] * n[()]
        return api.sqrt(acc)

    total = _scalar_stage("grad_norm", total_body, dtype)
    # PyTorch: clamp(max_norm / (total + 1e-6), max=1.0), in the gradients' dtype, and a
    # multiplication even by 1
    coef = _scalar_stage("clip_coef", lambda: binary(
        "min", Const(max_norm, dtype) / (total[()] + Const(1e-6, dtype)), Const(1.0, dtype)),
        dtype)
    clipped = [_elementwise(g, f"{g.name}.clipped", lambda i, g=g: g[i] * coef[()])
               for g in grads]
    return clipped, total


# ---------------------------------------------------------------------------------------
# state and results


class OptimizerState:
    """The state placeholders of an optimizer for a list of parameters.

    Iterating gives the placeholders in the order the new state comes out of
    :meth:`Optimizer.update`: each parameter's buffers (in the optimizer's order, named
    ``<param>.<buffer>``), then the step count ``step`` (int32, shape ()) when the
    optimizer keeps one. :meth:`initial_values` gives PyTorch's initial state.

    >>> import tegrad as tg
    >>> w = tg.placeholder((3,), name="w")
    >>> state = tg.optim.sgd(0.1, momentum=0.9).state_placeholders([w])
    >>> [(t.name, t.shape) for t in state], [a.tolist() for a in state.initial_values()]
    ([('w.momentum_buffer', (3,)), ('step', ())], [[0.0, 0.0, 0.0], 0])
    """

    def __init__(self, kind, params, buffers, step):
        self.kind = kind  # (optimizer name, buffer names, whether it counts steps)
        self.params = tuple(params)
        self.buffers = tuple(buffers)  # one {buffer name: placeholder} per parameter
        self.step = step

    @property
    def tensors(self):
        out = [t for b in self.buffers for t in b.values()]
        return out + ([self.step] if self.step is not None else [])

    def __iter__(self):
        return iter(self.tensors)

    def __len__(self):
        return len(self.tensors)

    def of(self, param):
        """``{buffer name: placeholder}`` of ``param``."""
        for p, b in zip(self.params, self.buffers):
            if p is param:
                return dict(b)
        raise OptimizerError(f"tensor {getattr(param, 'name', param)!r} is not a parameter "
                             f"of this state")

    def initial_values(self):
        """Arrays in the placeholders' order: zeros, and step 0 (PyTorch's initial state;
        a momentum buffer of zeros at step 0 stands for PyTorch's empty buffer)."""
        return [np.zeros(t.shape, dtype=t.dtype) for t in self.tensors]

    def __repr__(self):
        return f"OptimizerState({', '.join(t.name for t in self.tensors)})"


class Update:
    """What :meth:`Optimizer.update` returns: ``params`` (the new parameters, in the
    order given), ``state`` (the new state, in the order of the state placeholders) and
    ``grad_norm`` (the total gradient norm when clipping, else None). Iterating gives
    ``params`` then ``state``, the order of ``[*params, *state]`` inputs, so a step's
    outputs feed its next call."""

    def __init__(self, params, state, grad_norm=None):
        self.params = tuple(params)
        self.state = tuple(state)
        self.grad_norm = grad_norm

    def __iter__(self):
        return iter(self.params + self.state)

    def __len__(self):
        return len(self.params) + len(self.state)

    def __repr__(self):
        return f"Update({', '.join(t.name for t in self)})"


class Optimizer:
    """An update rule with its hyperparameters; see :func:`sgd`, :func:`adam` and
    :func:`adamw`. Subclasses name their per-parameter ``buffers``, say whether they
    count steps, and build one parameter's update in ``_update_one``."""

    name = "optimizer"
    buffers = ()
    counts_steps = False

    def __init__(self, lr, clip_grad_norm=None):
        self.lr = _learning_rate(lr)
        self.clip_grad_norm = _max_norm(clip_grad_norm)

    def _kind(self):
        return (self.name, tuple(self.buffers), self.counts_steps)

    def state_placeholders(self, params):
        """The state placeholders for ``params`` (an :class:`OptimizerState`)."""
        params = _check_params(params)
        buffers = [{b: placeholder(p.shape, dtype=p.dtype, name=f"{p.name}.{b}")
                    for b in self.buffers} for p in params]
        step = placeholder((), dtype=STEP_DTYPE, name="step") if self.counts_steps else None
        return OptimizerState(self._kind(), params, buffers, step)

    def update(self, params, grads, state):
        """The new parameters and state (an :class:`Update`), from the parameters, their
        gradients (a list of tensors or a ``tg.differentiate`` result) and the state
        placeholders made by :meth:`state_placeholders` for the same parameters."""
        params = _check_params(params)
        grads = _check_grads(params, grads)
        self._check_state(params, state)
        grad_norm = None
        if self.clip_grad_norm is not None:
            grads, grad_norm = clip_grad_norm(grads, self.clip_grad_norm)
        step_next = None
        if state.step is not None:
            step_next = compute((), lambda: state.step[()] + 1, name=f"{state.step.name}.next")
        scalars = self._scalars(state.step, step_next)
        new_params, new_state = [], []
        for p, g, buffers in zip(params, grads, state.buffers):
            p_next, b_next = self._update_one(p, g, buffers, state.step, scalars)
            new_params.append(p_next)
            new_state += [b_next[b] for b in self.buffers]
        if step_next is not None:
            new_state.append(step_next)
        return Update(new_params, new_state, grad_norm)

    def _check_state(self, params, state):
        if not isinstance(state, OptimizerState):
            raise OptimizerError(f"state must be the OptimizerState of state_placeholders(), "
                                 f"got {state!r}")
        # the same buffers and step count will do (Adam's state serves AdamW)
        if state.kind[1:] != self._kind()[1:]:
            raise OptimizerError(f"state holds {state.kind[0]}'s buffers "
                                 f"{list(state.kind[1])}, not {self.name}'s "
                                 f"{list(self.buffers)}; make it with this optimizer's "
                                 f"state_placeholders()")
        if len(state.params) != len(params) or any(
                a is not b for a, b in zip(state.params, params)):
            raise OptimizerError(f"state was made for the parameters "
                                 f"{[p.name for p in state.params]}, not "
                                 f"{[p.name for p in params]} (the same tensors, in order)")

    def _scalars(self, step, step_next):
        return {}

    def _update_one(self, p, g, buffers, step, scalars):
        raise NotImplementedError

    def _neg_lr(self, dtype):
        """``-lr`` in ``dtype`` (PyTorch's ``alpha=-lr``)."""
        return _in(dtype, -self.lr if isinstance(self.lr, float) else -_scalar(self.lr))

    def __repr__(self):
        lr = self.lr.name if isinstance(self.lr, Tensor) else self.lr
        options = ", ".join(f"{k}={v!r}" for k, v in self._options().items())
        return f"{self.name}(lr={lr}{', ' if options else ''}{options})"

    def _options(self):
        internal = ("lr", "clip_grad_norm", "name", "buffers", "counts_steps", "decoupled")
        out = {k: v for k, v in self.__dict__.items() if k not in internal}
        out["clip_grad_norm"] = self.clip_grad_norm
        return out


# ---------------------------------------------------------------------------------------
# SGD


class SGD(Optimizer):
    """``torch.optim.SGD``; see :func:`sgd`."""

    name = "sgd"

    def __init__(self, lr, momentum, dampening, nesterov, weight_decay, maximize,
                 clip_grad_norm):
        super().__init__(lr, clip_grad_norm)
        self.momentum = _number(momentum, "momentum", low=0.0, high=math.inf)
        self.dampening = _number(dampening, "dampening", high=math.inf)
        self.nesterov = _flag(nesterov, "nesterov")
        self.weight_decay = _number(weight_decay, "weight_decay", low=0.0, high=math.inf)
        self.maximize = _flag(maximize, "maximize")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise OptimizerError(f"nesterov momentum needs momentum > 0 and dampening 0, got "
                                 f"momentum={self.momentum!r}, dampening={self.dampening!r}")
        # PyTorch keeps no buffer without momentum, and fills the buffer with the first
        # gradient: a step count tells the first step
        self.buffers = ("momentum_buffer",) if self.momentum != 0 else ()
        self.counts_steps = self.momentum != 0

    def _update_one(self, p, g, buffers, step, scalars):
        dtype = p.dtype

        def grad(i):
            d = -g[i] if self.maximize else g[i]
            if self.weight_decay != 0:
                d = d + Const(self.weight_decay, dtype) * p[i]
            return d

        new_buffers = {}
        if self.momentum != 0:
            buf = buffers["momentum_buffer"]
            # PyTorch's buffer is None before the first step, then a copy of the gradient
            first = compare("eq", step[()], 0)
            buf_next = _elementwise(p, f"{buf.name}.next", lambda i: select(
                first, grad(i),
                buf[i] * Const(self.momentum, dtype)
                + Const(1.0 - self.dampening, dtype) * grad(i)))
            new_buffers["momentum_buffer"] = buf_next

            def direction(i):
                if self.nesterov:
                    return grad(i) + Const(self.momentum, dtype) * buf_next[i]
                return buf_next[i]
        else:
            direction = grad
        neg_lr = self._neg_lr(dtype)
        p_next = _elementwise(p, f"{p.name}.next", lambda i: p[i] + neg_lr * direction(i))
        return p_next, new_buffers


def sgd(lr=1e-3, *, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0,
        maximize=False, clip_grad_norm=None):
    """``torch.optim.SGD`` (same defaults): with ``d = grad`` (negated when
    ``maximize``) ``+ weight_decay * param``, the momentum buffer ``b = d`` on the first
    step and ``momentum * b + (1 - dampening) * d`` after, the direction ``d + momentum *
    b`` (``nesterov``) or ``b``, and ``param - lr * direction``. Without momentum the
    state is empty; with it, a buffer per parameter and the step count.

    ``lr`` is a number or a float tensor of shape () (a placeholder fed per step, for a
    schedule; float64 holds PyTorch's Python-float values exactly). ``clip_grad_norm=
    max_norm`` clips the gradients first, as :func:`clip_grad_norm`.

    >>> import numpy as np, tegrad as tg
    >>> w = tg.placeholder((1,), dtype="float64", name="w")
    >>> g = tg.placeholder((1,), dtype="float64", name="g")
    >>> opt = sgd(0.5, momentum=0.9)
    >>> state = opt.state_placeholders([w])
    >>> new = opt.update([w], [g], state)
    >>> feed = {w: [1.0], g: [2.0], **dict(zip(state, state.initial_values()))}
    >>> [a.tolist() for a in tg.evaluate(list(new), feed)]
    [[0.0], [2.0], 1]
    """
    return SGD(lr, momentum, dampening, nesterov, weight_decay, maximize, clip_grad_norm)


# ---------------------------------------------------------------------------------------
# Adam and AdamW


class Adam(Optimizer):
    """``torch.optim.Adam`` and ``AdamW``; see :func:`adam` and :func:`adamw`."""

    counts_steps = True

    def __init__(self, name, lr, betas, eps, weight_decay, amsgrad, maximize, decoupled,
                 clip_grad_norm):
        super().__init__(lr, clip_grad_norm)
        self.name = name
        self.betas = _betas(betas)
        self.eps = _number(eps, "eps", low=0.0, high=math.inf)
        self.weight_decay = _number(weight_decay, "weight_decay", low=0.0, high=math.inf)
        self.amsgrad = _flag(amsgrad, "amsgrad")
        self.maximize = _flag(maximize, "maximize")
        self.decoupled = decoupled
        self.buffers = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if self.amsgrad else ())

    def _scalars(self, step, step_next):
        # PyTorch, in Python floats: bias_correction1 = 1 - beta1 ** step, step_size =
        # lr / bias_correction1, bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5, with
        # step already counting this one
        beta1, beta2 = self.betas
        t = api.cast(step_next[()], SCALAR)
        one = Const(1.0, SCALAR)
        step_size = _scalar_stage(f"{self.name}.step_size", lambda: _scalar(self.lr) / (
            one - api.power(Const(beta1, SCALAR), t)))
        bc2_sqrt = _scalar_stage(f"{self.name}.bias_correction2_sqrt", lambda: api.sqrt(
            one - api.power(Const(beta2, SCALAR), t)))
        scalars = {"step_size": step_size, "bias_correction2_sqrt": bc2_sqrt}
        if self.decoupled and self.weight_decay != 0:
            # param.mul_(1 - lr * weight_decay)
            if isinstance(self.lr, float):
                scalars["decay"] = 1.0 - self.lr * self.weight_decay
            else:
                scalars["decay"] = _scalar_stage(f"{self.name}.decay", lambda: one - _scalar(
                    self.lr) * Const(self.weight_decay, SCALAR))
        return scalars

    def _update_one(self, p, g, buffers, step, scalars):
        dtype = p.dtype
        beta1, beta2 = self.betas
        decay = scalars.get("decay")

        def param(i):
            return p[i] * _in(dtype, decay) if decay is not None else p[i]

        def grad(i):
            d = -g[i] if self.maximize else g[i]
            if self.weight_decay != 0 and not self.decoupled:
                d = d + Const(self.weight_decay, dtype) * p[i]
            return d

        m, v = buffers["exp_avg"], buffers["exp_avg_sq"]
        m_next = _elementwise(p, f"{m.name}.next",
                              lambda i: _lerp(m[i], grad(i), 1.0 - beta1, dtype))
        # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        v_next = _elementwise(p, f"{v.name}.next", lambda i: v[i] * Const(beta2, dtype)
                              + Const(1.0 - beta2, dtype) * grad(i) * grad(i))
        new_buffers = {"exp_avg": m_next, "exp_avg_sq": v_next}
        second = v_next
        if self.amsgrad:
            vmax = buffers["max_exp_avg_sq"]
            second = _elementwise(p, f"{vmax.name}.next",
                                  lambda i: binary("max", vmax[i], v_next[i]))
            new_buffers["max_exp_avg_sq"] = second
        bc2_sqrt = _in(dtype, scalars["bias_correction2_sqrt"])
        neg_step_size = _in(dtype, -scalars["step_size"][()])
        eps = Const(self.eps, dtype)

        def p_next(i):
            denom = api.sqrt(second[i]) / bc2_sqrt + eps
            return param(i) + neg_step_size * (m_next[i] / denom)

        return _elementwise(p, f"{p.name}.next", p_next), new_buffers


def adam(lr=1e-3, *, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
         maximize=False, clip_grad_norm=None):
    """``torch.optim.Adam`` (same defaults): with ``t`` the step count after this step,
    ``d = grad`` (negated when ``maximize``) ``+ weight_decay * param``, ``m = lerp(m, d,
    1 - beta1)``, ``v = beta2 * v + (1 - beta2) * d * d`` (with ``amsgrad``, ``vmax =
    max(vmax, v)`` used in its place) and ``param - lr / (1 - beta1**t) * m / (sqrt(v) /
    sqrt(1 - beta2**t) + eps)``. The state is ``exp_avg``, ``exp_avg_sq`` (and
    ``max_exp_avg_sq``) per parameter and the step count. ``lr`` and ``clip_grad_norm``
    as in :func:`sgd`.

    >>> import tegrad as tg
    >>> opt = adam(betas=(0.8, 0.99), amsgrad=True)
    >>> opt.lr, opt.eps, opt.buffers
    (0.001, 1e-08, ('exp_avg', 'exp_avg_sq', 'max_exp_avg_sq'))
    """
    return Adam("adam", lr, betas, eps, weight_decay, amsgrad, maximize, False, clip_grad_norm)


def adamw(lr=1e-3, *, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
          maximize=False, clip_grad_norm=None):
    """``torch.optim.AdamW`` (same defaults): :func:`adam` with the weight decay
    decoupled, ``param * (1 - lr * weight_decay)`` before the step, instead of added to
    the gradient.

    >>> import tegrad as tg
    >>> w = tg.placeholder((4, 3), name="w")
    >>> opt = adamw(3e-4)
    >>> [t.name for t in opt.update([w], [w], opt.state_placeholders([w]))]
    ['w.next', 'w.exp_avg.next', 'w.exp_avg_sq.next', 'step.next']
    """
    return Adam("adamw", lr, betas, eps, weight_decay, amsgrad, maximize, True, clip_grad_norm)
