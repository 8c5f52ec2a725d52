"""A training step (``tg.train_step``) goes through ``tg.build``'s caches and options: a
second process builds the same step from the on-disk program cache without lowering it
(the updates still written in place, the same losses and parameters), and
``profile=True`` gives ``step.profile()`` counting every call, as for a built function.
The step: random MLP sizes, Adam or SGD with momentum, 1 or 2 threads."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tegrad as tg

#: builds the step of the sizes it is given and trains it 3 steps; prints what the test
#: compares
PROGRAM = r"""
import json, sys
import numpy as np, tegrad as tg
from tegrad.codegen.runtime import builder
lowered = []
compile_kernel = builder.compile_kernel
builder.compile_kernel = lambda *a, **k: lowered.append(1) or compile_kernel(*a, **k)
batch, features, hidden, optimizer, threads = map(int, sys.argv[1:6])
x = tg.placeholder((batch, features), dtype="float64", name="x")
labels = tg.placeholder((batch,), dtype="int32", name="labels")
w1 = tg.placeholder((hidden, features), dtype="float64", name="w1")
b1 = tg.placeholder((hidden,), dtype="float64", name="b1")
w2 = tg.placeholder((3, hidden), dtype="float64", name="w2")
h = tg.nn.relu(tg.nn.dense(x, w1, b1))
loss = tg.nn.softmax_cross_entropy(tg.nn.dense(h, w2), labels)
opt = tg.optim.adam(0.01) if optimizer == 0 else tg.optim.sgd(0.05, momentum=0.9)
rng = np.random.default_rng(batch * 100 + hidden)
init = {"w1": rng.standard_normal((hidden, features)) * 0.3,
        "b1": rng.standard_normal(hidden) * 0.1, "w2": rng.standard_normal((3, hidden)) * 0.3}
step = tg.train_step(loss, [w1, b1, w2], optimizer=opt, inputs=[x, labels], init=init,
                     threads=threads)
losses = [step(rng.standard_normal((batch, features)), rng.integers(0, 3, batch).astype("int32"))
          for _ in range(3)]
print(json.dumps({"lowered": len(lowered), "losses": losses, "in_place": step.in_place,
                  "params": {n: a.tobytes().hex() for n, a in step.params.items()},
                  "memory": str(step.memory)}))
"""


def _run(directory, args):
    environment = dict(os.environ, TEGRAD_CACHE_DIR=str(directory))
    for name in ("TEGRAD_CHECK_BOUNDS", "TEGRAD_CACHE", "TEGRAD_PROGRAM_CACHE"):
        environment.pop(name, None)
    run = subprocess.run([sys.executable, "-c", PROGRAM, *map(str, args)], env=environment,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@settings(max_examples=1, deadline=None)
@given(batch=st.integers(2, 9), features=st.integers(2, 7), hidden=st.integers(2, 12),
       optimizer=st.sampled_from([0, 1]), threads=st.sampled_from([1, 2]))
def test_a_second_process_builds_the_step_from_the_cache(tmp_path_factory, batch, features,
                                                          hidden, optimizer, threads):
    directory = tmp_path_factory.mktemp("cache")
    args = (batch, features, hidden, optimizer, threads)
    first = _run(directory, args)
    assert first["lowered"] == 1
    names = ["w1", "b1", "w2"]
    assert set(names) <= set(first["in_place"])
    second = _run(directory, args)
    assert second["lowered"] == 0
    assert second == dict(first, lowered=0)


def _mlp_step(profile, threads):
    x = tg.placeholder((6, 4), dtype="float64", name="x")
    w = tg.placeholder((5, 4), dtype="float64", name="w")
    b = tg.placeholder((5,), dtype="float64", name="b")
    y = tg.nn.dense(x, w, b)
    i, j = tg.reduce_axis((0, 6), name="i"), tg.reduce_axis((0, 5), name="j")
    loss = tg.compute((), lambda: tg.sum(y[i, j] * y[i, j], axis=[i, j]), name="loss")
    return tg.train_step(loss, [w, b], optimizer=tg.optim.adam(0.01), inputs=[x],
                         init={"w": np.full((5, 4), 0.1), "b": np.zeros(5)},
                         threads=threads, profile=profile)


@pytest.mark.parametrize("threads", [1, 2])
@given(calls=st.integers(1, 5))
@settings(max_examples=3, deadline=None)
def test_a_profiled_step_counts_every_call_and_trains_as_the_unprofiled_one(threads, calls):
    profiled, plain = _mlp_step(True, threads), _mlp_step(False, threads)
    profiled.profile().reset()
    rng = np.random.default_rng(calls)
    for _ in range(calls):
        batch = rng.standard_normal((6, 4))
        assert profiled(batch) == plain(batch)
    for n in plain.params:
        np.testing.assert_array_equal(profiled.params[n], plain.params[n])
    assert sorted(profiled.in_place) == sorted(plain.in_place)
    rows = profiled.profile().rows
    assert rows and all(r.calls == calls for r in rows)
    stages = {s for r in rows for s in r.stages}
    assert "loss" in stages and {"w", "b"} <= stages  # the updates, written in place
    with pytest.raises(tg.TegradError, match="profile"):
        plain.profile()
