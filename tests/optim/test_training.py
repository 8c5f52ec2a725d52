"""tegrad.optim against torch.optim: an MLP and a small CNN trained for 50 steps, each
step one compiled function computing the loss, the new parameters and the new optimizer
state from the current ones (the loop feeds its outputs back in), with the same initial
weights and batches as PyTorch. Every step's loss and the final parameters and state
match PyTorch's: float64 to 1e-10, float32 to 1e-5, relative to each array's largest
element (an element near zero is held to the same absolute error as the others)."""
import math

import numpy as np
import pytest
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


def run_tegrad(model, dtype, opt, init, batches, *, lr=None, evaluate=False):
    x = tg.placeholder(model.x_shape, dtype=dtype, name="x")
    labels = tg.placeholder((model.x_shape[0],), dtype="int32", name="labels")
    params = {n: tg.placeholder(s, dtype=dtype, name=n) for n, s in model.shapes.items()}
    ps = list(params.values())
    loss = model.tegrad_loss(x, labels, params)
    state = opt.state_placeholders(ps)
    new = opt.update(ps, tg.differentiate(loss, ps), state)
    extra = [new.grad_norm] if new.grad_norm is not None else []
    inputs = [x, labels, *ps, *state] + ([lr] if lr is not None else [])
    outputs = [loss, *new, *extra]
    if evaluate:
        step = lambda *args: tg.evaluate(outputs, dict(zip(inputs, args)))  # noqa: E731
    else:
        step = tg.build(inputs, outputs)
    values, moments = [init[n] for n in params], state.initial_values()
    losses, norms = [], []
    for k, (xb, yb) in enumerate(batches):
        args = [xb, yb, *values, *moments] + ([schedule(k)] if lr is not None else [])
        loss_value, *out = step(*args)
        assert loss_value.dtype == np.dtype(dtype)
        losses.append(float(loss_value))
        values, moments = out[:len(ps)], out[len(ps):len(ps) + len(state)]
        norms += [float(v) for v in out[len(ps) + len(state):]]
    return losses, dict(zip(params, values)), dict(zip((t.name for t in state), moments)), norms


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


def compare(model, dtype, opt, make_torch_opt, *, seed=0, clip=None, lr=None, evaluate=False,
            steps=STEPS):
    init, batches = data(model, dtype, seed)
    batches = batches[:steps]
    got = run_tegrad(model, dtype, opt, init, batches, lr=lr, evaluate=evaluate)
    want = run_torch(model, dtype, make_torch_opt, init, batches, clip=clip,
                     lr_schedule=lr is not None)
    close(got[0], want[0], dtype, "losses")
    for n in want[1]:
        assert got[1][n].dtype == np.dtype(dtype)
        close(got[1][n], want[1][n], dtype, f"parameter {n}")
    # the same state: every buffer PyTorch keeps, and the step count (tegrad's SGD counts
    # steps too, to tell its first one)
    assert set(got[2]) - {"step"} == set(want[2]) - {"step"}
    if "step" in got[2]:
        assert int(got[2]["step"]) == want[2].get("step", steps) == steps
    for name, value in want[2].items():
        if name != "step":
            close(got[2][name], value, dtype, f"state {name}")
    assert len(got[3]) == len(want[3])
    if want[3]:
        close(got[3], want[3], dtype, "gradient norms")
    # the parameters moved: a step that did nothing would match a do-nothing reference
    assert max(float(np.max(np.abs(got[1][n] - init[n]))) for n in init) > 1e-3
    return got, want


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


@pytest.mark.parametrize("case", ["sgd", "sgd_momentum_dampening_schedule", "sgd_maximize_clip",
                                  "adam", "adam_clip_schedule", "adamw"])
def test_mlp_float64(case):
    make, make_torch, options = CASES[case]
    got, want = compare(MLP(), "float64", make(), make_torch, **options)
    if "clip" in options:
        # the clip must have acted on some steps, and not on all, for the case to test it
        clipped = [n > options["clip"] for n in want[3]]
        assert any(clipped) and not all(clipped), want[3]


@pytest.mark.parametrize("case", ["sgd_nesterov_decay", "adam_amsgrad_decay"])
def test_cnn_float64(case):
    make, make_torch, options = CASES[case]
    compare(CNN(), "float64", make(), make_torch, seed=1, **options)


@pytest.mark.parametrize("model, case", [(MLP, "sgd_momentum_dampening_schedule"),
                                         (MLP, "adam_clip_schedule"),
                                         (CNN, "adamw_amsgrad_schedule")])
def test_float32(model, case):
    make, make_torch, options = CASES[case]
    compare(model(), "float32", make(), make_torch, seed=2, **options)


@pytest.mark.parametrize("case", ["sgd_nesterov_decay", "adam_amsgrad_decay",
                                  "adam_maximize_decay", "adamw_amsgrad_schedule"])
def test_evaluate_two_steps(case):
    """The reference evaluator runs the same update: two steps of tg.evaluate."""
    make, make_torch, options = CASES[case]
    compare(MLP(), "float64", make(), make_torch, seed=3, evaluate=True, steps=2, **options)


def test_every_case_runs():
    """Each case of the table is trained by some test above."""
    used = {"sgd", "sgd_momentum_dampening_schedule", "sgd_maximize_clip", "adam",
            "adam_clip_schedule", "adamw", "sgd_nesterov_decay", "adam_amsgrad_decay",
            "adamw_amsgrad_schedule", "adam_maximize_decay"}
    assert used == set(CASES)
