"""``tg.build(..., profile=True)`` and ``f.profile()``: a row per top-level statement
naming its stages as ``f.schedule`` does, exact call counts (a failed call counts
nothing, concurrent calls all count), statement times that add up to the kernel's and a
kernel time within the caller's, the same results as the unprofiled build and the
evaluator, and nothing emitted without the option."""
import pickle
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.loops.printer import format_kernel
from tegrad.codegen.llvm.emit import emit_kernel, top_statements
from tegrad.codegen.runtime.profile import statement_flops

from support.compiled_programs import programs, with_gradient


def schedule_statements(f):
    """The stage names of each statement ``f.schedule`` lists, in its order."""
    out = []
    for line in str(f.schedule).splitlines():
        if line.startswith(("stage ", "stages ")) and "(not a statement" not in line:
            out.append(tuple(line.split(" ", 1)[1].split(" (")[0].split(", ")))
    return out


def assert_close(got, want, what):
    for g, w in zip(got, want):
        scale = 1.0 + float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9 * scale, err_msg=what)


@settings(max_examples=8, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(large=False), st.integers(0, 2**31 - 1), st.integers(1, 3), st.booleans())
def test_random_programs_profile_every_stage_and_count_every_call(program, seed, calls,
                                                                  check_bounds):
    inputs, outputs, feed = with_gradient(program, seed)
    f = tg.build(inputs, outputs, threads=program[2], profile=True, check_bounds=check_bounds)
    plain = tg.build(inputs, outputs, threads=program[2], check_bounds=check_bounds)
    # the same loops, marks included (what LLVM then vectorises of the marked loops can
    # differ: the timers change the code around them, so f.loops may show one left scalar)
    assert f is not plain and format_kernel(f.kernel) == format_kernel(plain.kernel)
    assert list(f.schedule) == list(plain.schedule)
    args = [feed[t] for t in inputs]
    want = tg.evaluate(outputs, feed)
    for _ in range(calls):
        got = f(*args)
    assert_close(got, want, tg.format(outputs))
    assert_close(got, plain(*args), "profiled vs unprofiled")
    p = f.profile()
    assert [r.stages for r in p.rows] == schedule_statements(f)
    named = {name for r in p.rows for name in r.stages}
    assert {t.name for t in outputs} <= named  # every output is a stage of some row
    assert [r.calls for r in p.rows] == [calls] * len(p.rows)
    assert p.total.calls == calls
    assert sum(r.seconds for r in p.rows) <= p.total.seconds
    p.reset()
    assert f.profile().total.calls == 0 and all(r.calls == 0 for r in f.profile().rows)


def _heavy_program(n):
    """Three n x n matrix products (float64) and the elementwise stages between them."""
    a = tg.placeholder((n, n), dtype="float64", name="a")
    b = tg.placeholder((n, n), dtype="float64", name="b")
    c = tg.ops.matmul(a, b)
    d = tg.compute((n, n), lambda i, j: tg.tanh(c[i, j]) * 0.5, name="d")
    e = tg.ops.matmul(d, b)
    g = tg.ops.matmul(tg.compute((n, n), lambda i, j: e[i, j] + a[j, i], name="s"), a)
    return [a, b], [g]


@pytest.mark.parametrize("threads", [1, 2])
def test_statement_times_add_up_to_the_kernel_time_within_the_call_time(threads):
    n = 224  # 3 x 2 n^3 = 67 MFLOP a call: several ms on one core
    inputs, outputs = _heavy_program(n)
    rng = np.random.default_rng(threads)
    args = [rng.standard_normal((n, n)) / n ** 0.5 for _ in inputs]
    f = tg.build(inputs, outputs, threads=threads, profile=True)
    f(*args)  # first call: page faults, packing space
    f.profile().reset()
    calls = 6
    start = time.perf_counter()
    for _ in range(calls):
        got = f(*args)
    elapsed = time.perf_counter() - start
    p = f.profile()
    assert p.total.calls == calls
    covered = sum(r.seconds for r in p.rows)
    assert 0.8 * p.total.seconds <= covered <= p.total.seconds
    assert p.total.seconds <= elapsed
    products = [r for r in p.rows if r.flops == 2 * n ** 3]
    assert len(products) == 3 and all(r.gflops > 0 for r in products)
    assert all(r.bytes >= 3 * n * n * 8 for r in products)
    assert_close(got, tg.evaluate(outputs, dict(zip(inputs, args))), "heavy program")
    assert_close(got, tg.build(inputs, outputs, threads=threads)(*args), "unprofiled")
    text = str(p)
    assert text.splitlines()[0].split()[0] == "stage(s)"
    top = max(p.rows, key=lambda r: r.seconds)
    assert text.splitlines()[1].startswith(top.label)


def test_concurrent_calls_are_all_counted():
    x = tg.placeholder((4096,), dtype="float64", name="x")
    y = tg.compute((4096,), lambda i: tg.exp(x[i]) * 2.0, name="y")
    f = tg.build([x], [y], threads=1, profile=True)
    a = np.linspace(-1, 1, 4096)

    def work():
        for _ in range(200):
            f(a)
    workers = [threading.Thread(target=work) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert f.profile().total.calls == 600 and f.profile().rows[0].calls == 600


def test_a_call_that_runs_again_or_fails_counts_once_or_not_at_all():
    """A product meets a non-finite operand: the call stops at the deferred rare branch
    and runs again in a second module; it counts once. A failed check counts nothing."""
    a = tg.placeholder((32, 32), dtype="float64", name="a")
    c = tg.ops.matmul(a, a)
    f = tg.build([a], [c], threads=1, profile=True)
    x = np.ones((32, 32))
    x[3, 4] = np.nan
    f(x)
    f(np.ones((32, 32)))
    assert f.profile().total.calls == 2
    assert all(r.calls == 2 for r in f.profile().rows)

    idx = tg.placeholder((4,), dtype="int64", name="idx")
    v = tg.placeholder((8,), dtype="float64", name="v")
    g = tg.build([idx, v], [tg.compute((4,), lambda i: v[idx[i]], name="gathered")],
                 profile=True)
    g(np.array([0, 1, 2, 3]), np.ones(8))
    with pytest.raises(tg.TegradError):
        g(np.array([0, 1, 2, 9]), np.ones(8))
    assert g.profile().total.calls == 1 and g.profile().rows[-1].calls == 1


def test_unprofiled_emission_is_unchanged_and_profiled_emission_times():
    inputs, outputs = _heavy_program(16)
    f = tg.build(inputs, outputs, threads=1)
    k = f.kernel
    plain = str(emit_kernel(k, threads=1).module)
    assert str(emit_kernel(k, threads=1, profile=False).module) == plain
    assert "clock_gettime" not in plain and ".profile" not in plain
    profiled = emit_kernel(k, threads=1, profile=True)
    assert "clock_gettime" in str(profiled.module) and "atomicrmw add" in str(profiled.module)
    assert profiled.profile.statements == len(top_statements(k.body))
    assert tg.build(inputs, outputs, threads=1, profile=False) is f


def test_profile_needs_the_option():
    x = tg.placeholder((3,), name="x")
    f = tg.build([x], [x * 2.0])
    with pytest.raises(tg.TegradError, match="profile=True"):
        f.profile()
    with pytest.raises(tg.TegradError, match="profile must be True or False"):
        tg.build([x], [x * 2.0], profile="yes")


def test_flops_of_a_loop_nest_count_every_float_operation_and_accumulation():
    n, m, k = 5, 7, 3
    a = tg.placeholder((n, k), dtype="float32", name="a")
    r = tg.reduce_axis((0, k), name="r")
    s = tg.compute((n, m), lambda i, j: tg.sum(a[i, r] * a[i, r] + 1.0, axis=r), name="s")
    f = tg.build([a], [s], schedule="none")
    # per point of the reduction: a multiply, an add, the accumulation
    assert sum(statement_flops(st) for st in top_statements(f.kernel.body)) == 3 * n * m * k


def test_a_pickled_profiled_function_is_profiled():
    x = tg.placeholder((3,), name="x")
    f = tg.build([x], [tg.compute((3,), lambda i: x[i] + 1.0, name="y")], profile=True)
    g = pickle.loads(pickle.dumps(f))
    g(np.ones(3, np.float32))
    assert g.profile().total.calls >= 1
