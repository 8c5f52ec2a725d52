"""tg.train_step: the loss, the gradients and the optimizer's update in one compiled call,
parameters and state updated in place in arrays the step owns; trained against
torch.optim with the same weights and batches (test_training.py's models and data, from
tests/support/training.py), and the errors a caller can provoke."""
import numpy as np
import pytest
import torch

import tegrad as tg
from tegrad import optim
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Accumulate, Store

from support.training import CASES, CNN, MLP, close, data, run_torch, schedule

STEPS = 20


def train(model, dtype, opt, init, batches, lr=None):
    x = tg.placeholder(model.x_shape, dtype=dtype, name="x")
    labels = tg.placeholder((model.x_shape[0],), dtype="int32", name="labels")
    params = {n: tg.placeholder(s, dtype=dtype, name=n) for n, s in model.shapes.items()}
    loss = model.tegrad_loss(x, labels, params)
    step = tg.train_step(loss, list(params.values()), optimizer=opt,
                         inputs=[x, labels] + ([lr] if lr is not None else []), init=init)
    arrays = {n: step.params[n] for n in params}  # the step updates these very arrays
    losses = []
    for k, (xb, yb) in enumerate(batches):
        extra = [np.float64(schedule(k))] if lr is not None else []
        losses.append(step(xb, yb.astype("int32"), *extra))
    assert all(step.params[n] is arrays[n] for n in params)
    return losses, step


@pytest.mark.parametrize("model", [MLP, CNN], ids=["mlp", "cnn"])
@pytest.mark.parametrize("case", ["sgd_momentum_dampening_schedule", "adam", "adamw"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_train_step_matches_torch_optim(model, case, dtype):
    make, make_torch, options = CASES[case]
    model = model()
    init, batches = data(model, dtype, seed=3)
    batches = batches[:STEPS]
    losses, step = train(model, dtype, make(), init, batches, lr=options.get("lr"))
    assert_nothing_copied(step)
    want = run_torch(model, dtype, make_torch, init, batches,
                     lr_schedule="lr" in options)
    close(losses, want[0], dtype, "losses")
    for n in want[1]:
        assert step.params[n].dtype == np.dtype(dtype)
        close(step.params[n], want[1][n], dtype, f"parameter {n}")
    for name, value in want[2].items():
        if name == "step":
            assert int(step.state["step"]) == value == STEPS
        else:
            close(step.state[name], value, dtype, f"state {name}")


def assert_nothing_copied(step):
    """Every parameter (biases included) and every state array is updated in place: the
    step's kernel writes their own arrays and has no output but the loss, so a call
    copies nothing after it."""
    names = [*step.params, *step.state]
    assert sorted(step.in_place) == sorted(names)
    kernel = step._running._executable.kernel
    outputs = [b.name for b in kernel.args if b.scope == "output"]
    assert outputs == [step.loss.name], outputs
    assert step._next == []
    assert step.memory.outputs == np.dtype(step.loss.dtype).itemsize
    written = {n.buffer.name for n in walk_stmts(kernel.body)
               if isinstance(n, (Store, Accumulate))}
    assert set(names) <= written


def tiny():
    x = tg.placeholder((4, 3), dtype="float64", name="x")
    w = tg.placeholder((3,), dtype="float64", name="w")
    k = tg.reduce_axis((0, 3), name="k")
    r = tg.reduce_axis((0, 4), name="r")
    pred = tg.compute((4,), lambda i: tg.sum(x[i, k] * w[k], axis=k), name="pred")
    loss = tg.compute((), lambda: tg.sum(pred[r] * pred[r], axis=r), name="loss")
    return x, w, loss


def test_a_step_exports_and_its_errors_name_what_is_wrong(tmp_path):
    x, w, loss = tiny()
    step = tg.train_step(loss, [w], optimizer=optim.adam(0.1), inputs=[x])
    assert [t.name for t in step.function.inputs] == ["x", "w", "w.exp_avg", "w.exp_avg_sq",
                                                       "step"]
    result = step.export(tmp_path / "step")
    assert result.entries[0].name == "loss_step"  # the kernel: the loss's name, _step
    with pytest.raises(tg.TegradError, match="expected 1 batch arrays"):
        step()
    with pytest.raises(tg.TegradError, match="scalar"):
        tg.train_step(tg.compute((3,), lambda i: w[i], name="v"), [w],
                      optimizer=optim.sgd(0.1), inputs=[x])
    with pytest.raises(tg.TegradError, match="optimizer"):
        tg.train_step(loss, [w], optimizer=torch.optim.SGD, inputs=[x])
    with pytest.raises(tg.TegradError, match="both as parameters and as inputs"):
        tg.train_step(loss, [w], optimizer=optim.sgd(0.1), inputs=[x, w])
    with pytest.raises(tg.TegradError, match="'v', which is not a parameter"):
        tg.train_step(loss, [w], optimizer=optim.sgd(0.1), inputs=[x], init={"v": [1.0]})
    with pytest.raises(tg.TegradError, match=r"shape \(2,\)"):
        tg.train_step(loss, [w], optimizer=optim.sgd(0.1), inputs=[x], init={"w": [1, 2]})
    with pytest.raises(tg.TegradError, match="x"):  # a placeholder neither fed nor trained
        tg.train_step(loss, [w], optimizer=optim.sgd(0.1), inputs=[])
