"""Compiled functions pickle by their program and options (tegrad.codegen.runtime.pickling):
to a spawned multiprocessing pool, and back in the same process through the build cache."""
import multiprocessing
import pickle

import numpy as np
import pytest

import tegrad as tg
from tegrad import nn, ops


def training_step(batch=8):
    x = tg.placeholder((batch, 6), name="x")
    labels = tg.placeholder((batch,), dtype="int32", name="labels")
    w = tg.placeholder((4, 6), name="w")
    loss = nn.softmax_cross_entropy(nn.dense(x, w), labels)
    return tg.build([x, labels, w], [loss, *tg.differentiate(loss, [w])])


def arguments(seed, batch=8):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, 6)).astype("float32"),
            rng.integers(0, 4, batch).astype("int32"),
            rng.standard_normal((4, 6)).astype("float32"))


def test_a_spawned_pool_runs_a_compiled_function():
    step = training_step()
    tasks = [arguments(seed) for seed in range(4)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.starmap(step, tasks)
    for args, got in zip(tasks, results):
        for a, b in zip(step(*args), got):
            np.testing.assert_array_equal(a, b)


def test_unpickling_in_the_same_process_reuses_the_build():
    step = training_step()
    again = pickle.loads(pickle.dumps(step))
    assert again is not step and again._executable is step._executable
    assert [t.name for t in again.inputs] == ["x", "labels", "w"]
    args = arguments(7)
    for a, b in zip(step(*args), again(*args)):
        np.testing.assert_array_equal(a, b)


def test_scatters_scans_and_options_survive():
    x = tg.placeholder((5, 3), dtype="float64", name="x")
    idx = tg.placeholder((4,), dtype="int32", name="idx")
    picked = ops.take(x, idx, axis=0)
    (dx,) = tg.differentiate(ops.sum(picked * picked), [x])
    cumulative = tg.scan((5, 3), lambda i, j: x[i, j], tg.sum, axis=0, name="cumulative")
    f = tg.build([x, idx], [dx, cumulative], threads=1, schedule="none", name="picked")
    g = pickle.loads(pickle.dumps(f))
    assert g._executable.threads == 1 and g._schedule_record is None
    assert g.kernel.name == "picked"
    xv, iv = np.arange(15.0).reshape(5, 3), np.array([0, 2, 2, 4], dtype="int32")
    for a, b in zip(f(xv, iv), g(xv, iv)):
        np.testing.assert_array_equal(a, b)


def test_a_reducer_of_lambdas_is_an_error_naming_the_function():
    x = tg.placeholder((4,), name="x")
    k = tg.reduce_axis((0, 4), name="k")
    logsumexp = tg.comm_reducer(lambda a, b: tg.max(a, b), lambda dtype: -1e30, name="mx")
    f = tg.build([x], [tg.compute((), lambda: logsumexp(x[k], axis=k), name="m")])
    with pytest.raises(tg.TegradError, match="compiled function 'm' cannot be pickled"):
        pickle.dumps(f)


@pytest.mark.parametrize("form", ["requests", "replayed"])
def test_a_function_built_with_a_schedule_pickles_with_it(form):
    """Per-stage requests (a dict) and a replayed Schedule of steps travel with the
    program: the unpickled function has the same loops and results."""
    x = tg.placeholder((8, 24), dtype="float64", name="x")
    y = tg.compute((8, 24), lambda i, j: x[i, j] * 2.0 + x[i, (j + 1) % 24], name="y")
    k = tg.reduce_axis((0, 24), name="k")
    z = tg.compute((8,), lambda i: tg.sum(y[i, k] * y[i, k], axis=k), name="z")
    requests = {"y": {"unroll": "i"}, "z": "none"}
    if form == "replayed":
        requests = tg.build([x], [y, z], schedule=requests).schedule
    f = tg.build([x], [y, z], schedule=requests)
    g = pickle.loads(pickle.dumps(f))
    assert g.loops == f.loops and str(g.schedule) == str(f.schedule)
    a = np.random.default_rng(0).standard_normal((8, 24))
    for u, v in zip(f(a), g(a)):
        np.testing.assert_array_equal(u, v)


def test_a_function_pickled_under_one_hash_seed_unpickles_equal_under_another():
    # expressions cache their structural hash, which derives from string hashes (seeded
    # per process): a pickle carrying it would make an unpickled expression hash and
    # compare apart from a fresh equal one in a process of another seed
    import os
    import subprocess
    import sys
    import tempfile
    program = (
        "import tegrad as tg\n"
        "x = tg.placeholder((4,), dtype='float64', name='x')\n"
        "y = tg.compute((4,), lambda i: tg.sin(x[i]) * 2.0 + tg.sin(x[i]), name='y')\n")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.pkl")
        write = program + (f"import pickle; hash(y.op.body)\n"
                           f"open({path!r}, 'wb').write(pickle.dumps(tg.build([x], [y])))\n")
        read = program + (
            f"import pickle\n"
            f"g = pickle.load(open({path!r}, 'rb'))\n"
            f"from tegrad.ir.expr import Var\n"
            f"from tegrad.ir.mapper import substitute\n"
            f"u = g.outputs[0].op.body\n"
            f"i = g.outputs[0].op.axes[0].var\n"
            f"fresh = substitute(u, {{'i': Var(i.name, i.dtype)}})\n"
            f"assert fresh is not u and hash(fresh) == hash(u), 'hash'\n")
        for code, seed in ((write, "1"), (read, "2")):
            env = dict(os.environ, PYTHONHASHSEED=seed)
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
