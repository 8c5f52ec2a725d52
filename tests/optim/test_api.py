"""tegrad.optim's objects and checks: the state placeholders (names, order, initial
values), the order of the new tensors, the first momentum step, clip_grad_norm against
PyTorch's, and the errors a caller can provoke, each a tg.TegradError naming the
argument or tensor at fault."""
import math

import numpy as np
import pytest
import torch

import tegrad as tg
from tegrad import optim


def params(dtype="float64"):
    return [tg.placeholder((3, 2), dtype=dtype, name="w"),
            tg.placeholder((3,), dtype=dtype, name="b")]


@pytest.mark.parametrize("opt, buffers, counts", [
    (optim.sgd(0.1), [], False),
    (optim.sgd(0.1, momentum=0.9), ["momentum_buffer"], True),
    (optim.adam(), ["exp_avg", "exp_avg_sq"], True),
    (optim.adamw(amsgrad=True), ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"], True),
])
def test_state_placeholders_and_update_order(opt, buffers, counts):
    ps = params()
    state = opt.state_placeholders(ps)
    names = [f"{p.name}.{b}" for p in ps for b in buffers] + (["step"] if counts else [])
    assert [t.name for t in state] == names
    assert len(state) == len(names)
    for p in ps:
        for b, t in state.of(p).items():
            assert (t.shape, t.dtype) == (p.shape, p.dtype) and t.name == f"{p.name}.{b}"
    if counts:
        assert (state.step.shape, state.step.dtype) == ((), "int32")
    initial = state.initial_values()
    assert [a.shape for a in initial] == [t.shape for t in state]
    assert [a.dtype for a in initial] == [np.dtype(t.dtype) for t in state]
    assert all(not a.any() for a in initial)
    grads = [tg.placeholder(p.shape, dtype=p.dtype, name=f"d{p.name}") for p in ps]
    new = opt.update(ps, grads, state)
    # the outputs mirror the inputs [*params, *state]
    assert [t.name for t in new] == [f"{t.name}.next" for t in [*ps, *state]]
    assert [(t.shape, t.dtype) for t in new] == [(t.shape, t.dtype) for t in [*ps, *state]]
    assert len(new) == len(ps) + len(state) and new.grad_norm is None


def test_first_momentum_step_is_the_gradient():
    """PyTorch's buffer starts as the first gradient, without the dampening."""
    w, g = tg.placeholder((2,), dtype="float64", name="w"), tg.placeholder(
        (2,), dtype="float64", name="g")
    opt = optim.sgd(0.5, momentum=0.9, dampening=0.5)
    state = opt.state_placeholders([w])
    new = opt.update([w], [g], state)
    w0, g0, g1 = np.array([1.0, -1.0]), np.array([0.25, 2.0]), np.array([-1.0, 0.5])
    w1, b1, s1 = tg.evaluate(list(new), {w: w0, g: g0, **dict(zip(state, state.initial_values()))})
    np.testing.assert_array_equal(b1, g0)
    np.testing.assert_array_equal(w1, w0 - 0.5 * g0)
    assert int(s1) == 1
    w2, b2, s2 = tg.evaluate(list(new), {w: w1, g: g1, state.tensors[0]: b1, state.step: s1})
    np.testing.assert_allclose(b2, 0.9 * g0 + 0.5 * g1, rtol=1e-15)
    np.testing.assert_allclose(w2, w1 - 0.5 * b2, rtol=1e-15)
    assert int(s2) == 2


@pytest.mark.parametrize("dtype, max_norm", [("float64", 1.0), ("float64", 100.0),
                                             ("float32", 0.5)])
def test_clip_grad_norm_matches_pytorch(dtype, max_norm):
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s).astype(dtype) for s in [(3, 4), (5,), (2, 1, 3)]]
    grads = [tg.placeholder(a.shape, dtype=dtype, name=f"g{k}") for k, a in enumerate(arrays)]
    clipped, total = optim.clip_grad_norm(grads, max_norm)
    feed = dict(zip(grads, arrays))
    compiled = tg.build(grads, [*clipped, total])(*arrays)
    tensors = [torch.zeros(a.shape, dtype=getattr(torch, dtype), requires_grad=True)
               for a in arrays]
    for t, a in zip(tensors, arrays):
        t.grad = torch.tensor(a)
    want_total = float(torch.nn.utils.clip_grad_norm_(tensors, max_norm))
    tol = 1e-14 if dtype == "float64" else 1e-6
    for got in (tg.evaluate([*clipped, total], feed), compiled):
        assert got[-1].dtype == np.dtype(dtype)
        assert math.isclose(float(got[-1]), want_total, rel_tol=tol)
        for g, t in zip(got, tensors):
            np.testing.assert_allclose(g, t.grad.numpy(), rtol=tol, atol=0)
    # 100 is above the norm: the gradients pass unchanged
    assert (max_norm > want_total) == all(
        np.array_equal(g, a) for g, a in zip(compiled, arrays))


def test_update_returns_the_clipped_norm():
    ps = params()
    opt = optim.adam(clip_grad_norm=1.0)
    new = opt.update(ps, ps, opt.state_placeholders(ps))
    assert new.grad_norm is not None and new.grad_norm.shape == ()


BAD_OPTIONS = [
    (lambda: optim.sgd(-0.1), optim.OptimizerError, "lr must satisfy 0.0 <= lr"),
    (lambda: optim.sgd("0.1"), optim.OptimizerError, "lr must be a number"),
    (lambda: optim.sgd(0.1, momentum=-1), optim.OptimizerError, "momentum must satisfy"),
    (lambda: optim.sgd(0.1, nesterov=True), optim.OptimizerError,
     "nesterov momentum needs momentum > 0"),
    (lambda: optim.sgd(0.1, momentum=0.9, dampening=0.1, nesterov=True),
     optim.OptimizerError, "dampening 0"),
    (lambda: optim.sgd(0.1, nesterov=1), optim.OptimizerError, "nesterov must be True or False"),
    (lambda: optim.sgd(0.1, weight_decay=-1e-4), optim.OptimizerError, "weight_decay"),
    (lambda: optim.adam(betas=(0.9, 1.0)), optim.OptimizerError, "betas[1] must satisfy"),
    (lambda: optim.adam(betas=(-0.1, 0.9)), optim.OptimizerError, "betas[0] must satisfy"),
    (lambda: optim.adam(betas=0.9), optim.OptimizerError, "betas must be a pair"),
    (lambda: optim.adam(eps=-1.0), optim.OptimizerError, "eps must satisfy"),
    (lambda: optim.adamw(amsgrad="yes"), optim.OptimizerError, "amsgrad must be True or False"),
    (lambda: optim.adam(clip_grad_norm=0.0), optim.OptimizerError, "clip_grad_norm must satisfy"),
    (lambda: optim.adam(clip_grad_norm=float("nan")), optim.OptimizerError, "clip_grad_norm"),
    (lambda: optim.adam(tg.placeholder((1,), dtype="float64", name="rate")), tg.ShapeError,
     "learning rate tensor 'rate' must be a scalar"),
    (lambda: optim.adam(tg.placeholder((), dtype="int32", name="rate")), tg.DTypeError,
     "learning rate tensor 'rate' has dtype int32"),
]


@pytest.mark.parametrize("make, error, message", BAD_OPTIONS)
def test_invalid_hyperparameters(make, error, message):
    with pytest.raises(error) as info:
        make()
    assert isinstance(info.value, tg.TegradError)
    assert message in str(info.value)


def test_invalid_updates():
    ps = params()
    opt = optim.adam()
    state = opt.state_placeholders(ps)
    grads = [tg.placeholder(p.shape, dtype=p.dtype, name=f"d{p.name}") for p in ps]

    def fails(error, message, *args):
        with pytest.raises(error) as info:
            opt.update(*args)
        assert isinstance(info.value, tg.TegradError)
        assert message in str(info.value), str(info.value)

    fails(optim.OptimizerError, "1 gradients for 2 parameters (w, b)", ps, grads[:1], state)
    wrong = tg.placeholder((2, 3), dtype="float64", name="dw")
    fails(tg.ShapeError, "gradient 'dw' of parameter 'w' has shape (2, 3)", ps,
          [wrong, grads[1]], state)
    single = tg.placeholder((3,), dtype="float32", name="db")
    fails(tg.DTypeError, "gradient 'db' of parameter 'b' has dtype float32", ps,
          [grads[0], single], state)
    fails(optim.OptimizerError, "state holds sgd's buffers ['momentum_buffer'], not adam's",
          ps, grads, optim.sgd(0.1, momentum=0.9).state_placeholders(ps))
    # Adam's and AdamW's states hold the same buffers: either serves the other
    assert len(optim.adamw().update(ps, grads, state)) == len(ps) + len(state)
    others = params()
    fails(optim.OptimizerError, "state was made for the parameters", others, grads, state)
    fails(optim.OptimizerError, "state must be the OptimizerState", ps, grads, list(state))
    fails(optim.OptimizerError, "grads must be a list of tensors, got the tensor 'dw'", ps,
          grads[0], state)
    fails(optim.OptimizerError, "grads must hold tegrad tensors", ps, [grads[0], 1.0], state)
    with pytest.raises(optim.OptimizerError, match="parameter 'w' is given twice"):
        opt.state_placeholders([ps[0], ps[0]])
    with pytest.raises(optim.OptimizerError, match="params is empty"):
        opt.state_placeholders([])
    with pytest.raises(tg.DTypeError, match="parameter 'n' has dtype int32"):
        opt.state_placeholders([tg.placeholder((2,), dtype="int32", name="n")])
    with pytest.raises(optim.OptimizerError, match="tensor 'x' is not a parameter"):
        state.of(tg.placeholder((2,), name="x"))
    with pytest.raises(tg.DTypeError, match="'g1' has dtype float32, but 'g0' has float64"):
        optim.clip_grad_norm([tg.placeholder((2,), dtype="float64", name="g0"),
                              tg.placeholder((2,), dtype="float32", name="g1")], 1.0)
