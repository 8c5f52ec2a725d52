"""tegrad.optim against torch.optim: an MLP and a small CNN trained for 50 steps, each
step one compiled function computing the loss, the new parameters and the new optimizer
state from the current ones (the loop feeds its outputs back in), with the same initial
weights and batches as PyTorch. Every step's loss and the final parameters and state
match PyTorch's: float64 to 1e-10, float32 to 1e-5, relative to each array's largest
element (an element near zero is held to the same absolute error as the others)."""
import numpy as np
import pytest

import tegrad as tg

from support.training import CASES, CNN, MLP, STEPS, close, data, run_torch, schedule


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
