"""The models, data and optimizer cases the ``tegrad.optim`` tests train against
``torch.optim`` (``tests/optim/test_training.py``, ``tests/optim/test_train_step.py``).

``MLP`` and ``CNN`` give the same loss in tegrad and PyTorch; ``data`` their initial
weights and ``STEPS`` batches; ``CASES`` pairs a tegrad optimizer with PyTorch's;
``run_torch`` trains with PyTorch; ``close`` compares relative to the largest element.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

import tegrad as tg
from tegrad import nn, optim

STEPS = 50
torch.set_num_threads(1)  # tiny tensors: threads would only wait for each other
TOL = {"float64": 1e-10, "float32": 1e-5}


def close(got, want, dtype, what):
    want = np.asarray(want, dtype="float64")
    scale = max(float(np.max(np.abs(want))), 1e-30)
    err = float(np.max(np.abs(np.asarray(got, dtype="float64") - want))) / scale
    assert err <= TOL[dtype], f"{what}: relative error {err:.3g} > {TOL[dtype]}"


class MLP:
    """dense - relu - dense: 6 features, 10 hidden units, 3 classes, batches of 8."""
    classes = 3
    shapes = {"w1": (10, 6), "b1": (10,), "w2": (3, 10), "b2": (3,)}
    x_shape = (8, 6)

    def tegrad_loss(self, x, labels, p):
        h = nn.relu(nn.dense(x, p["w1"], p["b1"]))
        return nn.softmax_cross_entropy(nn.dense(h, p["w2"], p["b2"]), labels)

    def torch_loss(self, x, labels, p):
        h = F.relu(F.linear(x, p["w1"], p["b1"]))
        return F.cross_entropy(F.linear(h, p["w2"], p["b2"]), labels)


class CNN:
    """conv 3x3 - bias - relu - 2x2 max pool - dense: 6x6 images, 3 classes."""
    classes = 3
    shapes = {"k": (3, 2, 3, 3), "c": (3,), "w": (3, 12), "b": (3,)}
    x_shape = (4, 2, 6, 6)

    def tegrad_loss(self, x, labels, p):
        y = nn.relu(nn.bias_add(nn.conv2d(x, p["k"]), p["c"]))
        y = nn.max_pool2d(y, 2).reshape(4, 12)
        return nn.softmax_cross_entropy(nn.dense(y, p["w"], p["b"]), labels)

    def torch_loss(self, x, labels, p):
        y = F.relu(F.conv2d(x, p["k"], p["c"]))
        y = F.max_pool2d(y, 2).reshape(4, 12)
        return F.cross_entropy(F.linear(y, p["w"], p["b"]), labels)


def data(model, dtype, seed):
    rng = np.random.default_rng(seed)
    init = {n: (rng.standard_normal(s) / math.sqrt(s[-1] if len(s) == 2 else 9)).astype(dtype)
            for n, s in model.shapes.items()}
    batches = [(rng.standard_normal(model.x_shape).astype(dtype),
                rng.integers(0, model.classes, model.x_shape[0]).astype("int64"))
               for _ in range(STEPS)]
    return init, batches


def schedule(k):
    """A cosine learning-rate schedule (float64 values, as PyTorch's Python floats)."""
    return 0.05 * 0.5 * (1 + math.cos(math.pi * k / STEPS))


def run_torch(model, dtype, make_opt, init, batches, *, clip=None, lr_schedule=False):
    params = {n: torch.tensor(a, requires_grad=True) for n, a in init.items()}
    opt = make_opt(list(params.values()))
    losses, norms = [], []
    for k, (xb, yb) in enumerate(batches):
        opt.zero_grad()
        loss = model.torch_loss(torch.tensor(xb), torch.tensor(yb), params)
        loss.backward()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params.values(), clip)))
        if lr_schedule:
            for group in opt.param_groups:
                group["lr"] = schedule(k)
        opt.step()
        losses.append(float(loss.detach()))
    state = {}
    for n, p in params.items():
        for key, value in opt.state[p].items():
            if key == "step":
                state["step"] = int(value)
            elif value is not None:
                state[f"{n}.{key}"] = value.detach().numpy()
    return losses, {n: p.detach().numpy() for n, p in params.items()}, state, norms


lr_placeholder = tg.placeholder((), dtype="float64", name="lr")

CASES = {
    # name: (tegrad optimizer, PyTorch optimizer, options)
    "sgd": (lambda: optim.sgd(0.1),
            lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=False), {}),
    # PyTorch's first buffer is the gradient itself, not (1 - dampening) times it
    "sgd_momentum_dampening_schedule": (
        lambda: optim.sgd(lr_placeholder, momentum=0.9, dampening=0.3),
        lambda ps: torch.optim.SGD(ps, lr=1.0, momentum=0.9, dampening=0.3, foreach=False),
        {"lr": lr_placeholder}),
    "sgd_nesterov_decay": (
        lambda: optim.sgd(0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True,
                                   weight_decay=0.01, foreach=False), {}),
    "sgd_maximize_clip": (
        lambda: optim.sgd(0.05, momentum=0.5, maximize=True, clip_grad_norm=1.2),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.5, maximize=True, foreach=False),
        {"clip": 1.2}),
    "adam": (lambda: optim.adam(0.01),
             lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=False), {}),
    "adam_amsgrad_decay": (
        lambda: optim.adam(0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, amsgrad=True),
        lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                                    weight_decay=0.05, amsgrad=True, foreach=False), {}),
    # beta1 = 0.3: lerp's other form (weight 0.7 >= 0.5)
    "adam_clip_schedule": (
        lambda: optim.adam(lr_placeholder, betas=(0.3, 0.9), clip_grad_norm=0.5),
        lambda ps: torch.optim.Adam(ps, lr=1.0, betas=(0.3, 0.9), foreach=False),
        {"clip": 0.5, "lr": lr_placeholder}),
    "adam_maximize_decay": (
        lambda: optim.adam(0.01, weight_decay=0.1, maximize=True),
        lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1, maximize=True,
                                    foreach=False), {}),
    "adamw": (lambda: optim.adamw(0.01),
              lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=False), {}),
    "adamw_amsgrad_schedule": (
        lambda: optim.adamw(lr_placeholder, weight_decay=0.1, amsgrad=True),
        lambda ps: torch.optim.AdamW(ps, lr=1.0, weight_decay=0.1, amsgrad=True,
                                     foreach=False), {"lr": lr_placeholder}),
}
