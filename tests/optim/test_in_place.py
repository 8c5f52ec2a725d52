"""Updates written in place (``tegrad.codegen.lower.in_place``): a training step's next
parameters and state go into the arrays of the values they replace wherever every read
of the old value comes first, and nowhere else.

Random programs of updates that read the old values through shifted, reversed and
reduced indices and each other's old values are compiled with the updates in place; the
arrays after a call must equal ``tg.evaluate`` on copies of the old values, on 1 and 2
threads, whatever the analysis decided."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.lower.in_place import write_in_place
from tegrad.codegen.runtime.builder import build_updating

FORMS = ["same", "shift", "reverse", "reduce", "cross", "scaled"]


def _update(form, old, other, n, k):
    j = tg.reduce_axis((0, n), name=f"j{k}")
    if form == "same":
        return tg.compute((n,), lambda i: old[i] * 0.5 + other[i], name=f"new{k}")
    if form == "shift":
        return tg.compute((n,), lambda i: old[tg.min(i + 1, n - 1)] + other[i], name=f"new{k}")
    if form == "reverse":
        return tg.compute((n,), lambda i: old[n - 1 - i] - other[i], name=f"new{k}")
    if form == "reduce":
        return tg.compute((n,), lambda i: old[i] - tg.sum(old[j] * other[j], axis=j) * 0.01,
                          name=f"new{k}")
    if form == "cross":
        return tg.compute((n,), lambda i: other[i] * 2.0 - old[i], name=f"new{k}")
    return tg.compute((n,), lambda i: old[i] * other[i], name=f"new{k}")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(FORMS), min_size=1, max_size=4), st.integers(1, 700),
       st.sampled_from([1, 2]), st.integers(0, 2**31))
def test_updates_in_place_equal_the_evaluator(forms, n, threads, seed):
    batch = tg.placeholder((n,), dtype="float64", name="batch")
    olds = [tg.placeholder((n,), dtype="float64", name=f"p{k}") for k in range(len(forms))]
    # each update reads its old value and the batch, or (cross) the next parameter's old
    # value, which that parameter's own update may already have replaced
    news = [_update(f, olds[k], olds[(k + 1) % len(olds)] if f == "cross" else batch, n, k)
            for k, f in enumerate(forms)]
    r = tg.reduce_axis((0, n), name="r")
    loss = tg.compute((), lambda: tg.sum(olds[0][r] * batch[r], axis=r), name="loss")
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(n) for _ in range(1 + len(olds))]
    want = tg.evaluate([loss, *news], dict(zip([batch, *olds], arrays)))
    f, updated = build_updating([batch, *olds], [loss, *news], 1, threads=threads, name="upd")
    current = [a.copy() for a in arrays]
    outs = [np.empty((), "float64")] + [np.empty(n) for k in range(len(olds)) if not updated[k]]
    f(*current, out=outs)
    # sums of n terms of magnitude about 1, in another order than the evaluator's
    tol = 1e-13 * n
    np.testing.assert_allclose(outs[0], want[0], rtol=1e-10, atol=tol)
    rest = iter(outs[1:])
    for k in range(len(olds)):
        got = current[1 + k] if updated[k] else next(rest)
        np.testing.assert_allclose(got, want[1 + k], rtol=1e-10, atol=tol)
    # the batch is never written
    np.testing.assert_array_equal(current[0], arrays[0])


def test_an_elementwise_update_is_written_in_place_and_a_shifted_one_is_not():
    n = 64
    x = tg.placeholder((n,), dtype="float64", name="x")
    w = tg.placeholder((n,), dtype="float64", name="w")
    v = tg.placeholder((n,), dtype="float64", name="v")
    new_w = tg.compute((n,), lambda i: w[i] - 0.1 * x[i], name="new_w")
    new_v = tg.compute((n,), lambda i: v[tg.min(i + 1, n - 1)] + x[i], name="new_v")
    r = tg.reduce_axis((0, n), name="r")
    loss = tg.compute((), lambda: tg.sum(w[r] * x[r], axis=r), name="loss")
    _, updated = build_updating([x, w, v], [loss, new_w, new_v], 1, threads=1, name="step")
    assert updated == [True, False]


def test_sgd_step_updates_every_weight_in_place_and_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = tg.placeholder((32, 20), dtype="float64", name="x")
    w1 = tg.placeholder((20, 16), dtype="float64", name="w1")
    w2 = tg.placeholder((16, 4), dtype="float64", name="w2")
    h = tg.nn.relu(tg.ops.matmul(x, w1))
    out = tg.ops.matmul(h, w2)
    i, j = tg.reduce_axis((0, 32), name="i"), tg.reduce_axis((0, 4), name="j")
    loss = tg.compute((), lambda: tg.sum(out[i, j] * out[i, j], axis=[i, j]) / 128.0,
                      name="loss")
    init = {"w1": rng.standard_normal((20, 16)) * 0.3, "w2": rng.standard_normal((16, 4)) * 0.3}
    step = tg.train_step(loss, [w1, w2], optimizer=tg.optim.sgd(0.05, momentum=0.9),
                         inputs=[x], init=init)
    assert {"w1", "w2"} <= set(step.in_place)
    before = step.params["w1"]
    tw = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    opt = torch.optim.SGD(tw.values(), lr=0.05, momentum=0.9)
    for _ in range(10):
        xb = rng.standard_normal((32, 20))
        got = step(xb)
        opt.zero_grad()
        t = (torch.relu(torch.from_numpy(xb) @ tw["w1"]) @ tw["w2"]).pow(2).sum() / 128.0
        t.backward()
        opt.step()
        assert abs(got - t.item()) <= 1e-10 * max(1.0, abs(t.item()))
    assert step.params["w1"] is before
    for k in tw:
        np.testing.assert_allclose(step.params[k], tw[k].detach().numpy(), rtol=1e-10)
    memory = step.memory
    assert memory.state == sum(a.nbytes for a in (*step.params.values(), *step.state.values()))
    assert memory.inputs == 32 * 20 * 8
