"""Parallel loops on the native pool: the same bits whatever the thread count.

Kernels are compiled with every independent stage loop parallel (``min_work=0``, so the
small shapes of the tests get parallel loops too) and run on 1, 2 and 3 threads; the
results must equal the serial kernel's bit for bit (each iteration writes its own
elements, in the serial order within it). Also: a failed check inside a parallel loop
reports the serial loop's error, a forked child and two Python threads calling at once
get correct results, and ``threads=1`` calls no pool at all.
"""
import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import For, If
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.runtime.executable import Executable
from tegrad.codegen.schedule.parallel import parallelize_stages

import support
from support.compiled_programs import programs, with_gradient
from support.programs import forward_and_gradient

#: the folder holding the package ``support`` (a fresh process must import it too)
TESTS = pathlib.Path(support.__file__).resolve().parents[1]

#: thread counts of the parallel kernels compared with the serial kernel (one thread)
THREAD_COUNTS = (2, 3)


def parallel_loops(kernel):
    return [s for s in walk_stmts(kernel.body) if type(s) is For and s.kind == "parallel"]


def run(exe, inputs, feed):
    outs = [np.empty(b.shape, b.dtype) for b in exe.kernel.args[len(inputs):]]
    exe.run([np.ascontiguousarray(feed[t]) for t in inputs] + outs)
    return outs


def assert_same_bits(inputs, outputs, feed):
    """The serial kernel (one thread) and the parallel one on 2 and 3 threads give equal
    bits."""
    kernel = lower_program(inputs, outputs)
    parallel = parallelize_stages(kernel, threads=2, min_work=0)
    want = run(Executable(kernel, threads=1), inputs, feed)
    for threads in THREAD_COUNTS:
        got = run(Executable(parallel, threads=threads), inputs, feed)
        for t, g, w in zip(outputs, got, want):
            assert g.tobytes() == w.tobytes(), f"{t.name} on {threads} threads"
    return parallel


@pytest.mark.parametrize("dtype", ["float32"])
def test_operator_and_gradient_same_bits_on_any_thread_count(operator_name, dtype,
                                                             operator_case_of):
    inputs, outputs, feed = forward_and_gradient(operator_case_of, operator_name, dtype)
    parallel = assert_same_bits(inputs, outputs, feed)
    assert parallel_loops(parallel), "no loop of the operator ran in parallel"


@settings(max_examples=10, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_program_same_bits_on_any_thread_count(program, seed):
    assert_same_bits(*with_gradient(program, seed))


#: rows and columns of the big program: every loop's work above MIN_PARALLEL_WORK
BIG = (512, 1024)


def _big_program():
    x = tg.placeholder(BIG, dtype="float32", name="x")
    k = tg.reduce_axis((0, BIG[1]), name="k")
    s = tg.compute(BIG[:1], lambda i: tg.sum(tg.exp(x[i, k]), axis=k), name="s")
    y = tg.compute(BIG, lambda i, j: tg.exp(x[i, j]) / s[i], name="y")
    return [x], [y]


def test_threads_one_is_deterministic_and_calls_no_pool():
    inputs, outputs = _big_program()
    x = np.random.default_rng(1).standard_normal(BIG).astype("float32")
    f = tg.build(inputs, outputs, threads=1)
    first = f(x)[0]
    assert "tegrad_parallel_for" not in f.llvm_ir
    assert not parallel_loops(f.kernel)
    tg.codegen.runtime.builder.clear_cache()
    again = tg.build(inputs, outputs, threads=1)
    for _ in range(3):
        assert again(x)[0].tobytes() == first.tobytes()
    assert f(x)[0].tobytes() == first.tobytes()


def test_build_with_threads_runs_large_stages_in_parallel_and_equals_the_evaluator():
    inputs, outputs = _big_program()
    x = np.random.default_rng(2).standard_normal(BIG).astype("float32")
    f = tg.build(inputs, outputs, threads=2)
    # the row sums and the quotients share the loop over rows (fused or not): every loop
    # over rows runs in parallel
    loops = [s for s in walk_stmts(f.kernel.body) if type(s) is For and s.var.name == "i"]
    assert loops and all(s.kind == "parallel" for s in loops)
    assert "tegrad_parallel_for" in f.llvm_ir
    np.testing.assert_allclose(f(x)[0], tg.evaluate(outputs, {inputs[0]: x})[0],
                               rtol=2e-5, atol=1e-7)
    assert f(x)[0].tobytes() == tg.build(inputs, outputs, threads=1)(x)[0].tobytes()


def test_small_stages_stay_serial_and_a_histogram_is_partitioned_by_bin():
    idx = tg.placeholder((100_000,), dtype="int64", name="idx")
    v = tg.placeholder((100_000,), dtype="float32", name="v")
    hist = tg.scatter_add((16,), (100_000,), lambda i: (idx[i],), lambda i: v[i], name="hist")
    small = tg.compute((8,), lambda i: v[i] * 2.0, name="small")
    kernel = parallelize_stages(lower_program([idx, v], [hist, small]), threads=2)
    (loop,) = parallel_loops(kernel)
    assert any(type(s) is If for s in walk_stmts(loop.body))  # the bins of its thread
    rng = np.random.default_rng(2)
    feed = {idx: rng.integers(0, 16, 100_000), v: rng.standard_normal(100_000).astype("float32")}
    got = run(Executable(kernel, threads=2), [idx, v], feed)
    serial = run(Executable(lower_program([idx, v], [hist, small]), threads=1), [idx, v], feed)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, serial))


def test_a_disjoint_scatter_runs_in_parallel():
    v = tg.placeholder((512, 512), dtype="float32", name="v")
    moved = tg.scatter_add((512, 513), (512, 512), lambda i, j: (i, j + 1), lambda i, j: v[i, j],
                           name="moved")
    kernel = parallelize_stages(lower_program([v], [moved]), threads=2)
    assert parallel_loops(kernel)
    a = np.random.default_rng(3).standard_normal((512, 512)).astype("float32")
    got = run(Executable(kernel, threads=2), [v], {v: a})[0]
    want = tg.evaluate([moved], {v: a})[0]
    np.testing.assert_array_equal(got, want)


def _row_scatter(rows=50, count=4096, width=64):
    """An embedding gradient: ``out[idx[i], j] += g[i, j]``, rows colliding."""
    idx = tg.placeholder((count,), dtype="int64", name="idx")
    g = tg.placeholder((count, width), dtype="float32", name="g")
    out = tg.scatter_add((rows, width), (count, width), lambda i, j: (idx[i], j),
                         lambda i, j: g[i, j], name="out")
    return [idx, g], out


def test_a_scatter_with_colliding_rows_runs_partitioned_by_row():
    inputs, out = _row_scatter()
    f = tg.build(inputs, [out], threads=2)
    assert parallel_loops(f.kernel) and "% 2 ==" in f.loops
    rng = np.random.default_rng(6)
    feed = [rng.integers(0, 50, 4096), rng.standard_normal((4096, 64)).astype("float32")]
    got = f(*feed)[0]
    # the same updates in the same order per element: bit for bit
    assert got.tobytes() == tg.build(inputs, [out], threads=1)(*feed)[0].tobytes()
    np.testing.assert_array_equal(got, tg.evaluate(out, dict(zip(inputs, feed))))


def test_an_index_out_of_range_in_a_partitioned_scatter_is_reported():
    inputs, out = _row_scatter()
    f = tg.build(inputs, [out], threads=2)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, 50, 4096)
    idx[3001] = 50
    with pytest.raises(tg.OutOfBoundsError):
        f(idx, rng.standard_normal((4096, 64)).astype("float32"))
    idx[3001] = -7
    with pytest.raises(tg.OutOfBoundsError):
        f(idx, rng.standard_normal((4096, 64)).astype("float32"))


def test_a_users_parallel_loop_is_kept_and_nothing_else_is_added():
    x = tg.placeholder((512, 512), dtype="float32", name="x")
    y = tg.compute((512, 512), lambda i, j: x[i, j] * 2.0, name="y")
    kernel = lower_program([x], [y])
    inner = [s for s in walk_stmts(kernel.body) if type(s) is For][1].var.name
    from tegrad.codegen.schedule import parallelize
    chosen = parallelize(kernel, loop=inner)
    assert parallelize_stages(chosen, threads=2) is chosen


def test_a_stage_that_is_not_a_loop_nest_is_left_alone():
    from dataclasses import dataclass
    from tegrad.codegen.loops.nodes import Block, Kernel, Stmt

    @dataclass(frozen=True, eq=False, repr=False)
    class Opaque(Stmt):
        body: object

    x = tg.placeholder((512, 512), dtype="float32", name="x")
    y = tg.compute((512, 512), lambda i, j: x[i, j] * 2.0, name="y")
    kernel = lower_program([x], [y])
    wrapped = Kernel(kernel.name, kernel.args, kernel.temps, Block((Opaque(kernel.body),)))
    assert parallelize_stages(wrapped, threads=2) is wrapped


def test_few_outer_iterations_are_collapsed_with_the_next_loop():
    x = tg.placeholder((1, 8, 256, 256), dtype="float32", name="x")
    y = tg.compute((1, 8, 256, 256), lambda n, c, h, w: x[n, c, h, w] * 2.0, name="y")
    kernel = parallelize_stages(lower_program([x], [y]), threads=2)
    (loop,) = parallel_loops(kernel)
    assert loop.end.value == 8  # n fused with c: the innermost loop untouched
    a = np.random.default_rng(4).standard_normal((1, 8, 256, 256)).astype("float32")
    np.testing.assert_array_equal(run(Executable(kernel, threads=2), [x], {x: a})[0], a * 2)


def _failing_program():
    """``y[i] = table[idx[i]] + p[i] // q[i]``: index and divisor checks in one loop."""
    table = tg.placeholder((50,), dtype="int64", name="table")
    idx = tg.placeholder((1000,), dtype="int64", name="idx")
    p = tg.placeholder((1000,), dtype="int64", name="p")
    q = tg.placeholder((1000,), dtype="int64", name="q")
    y = tg.compute((1000,), lambda i: table[idx[i]] + p[i] // q[i], name="y")
    return [table, idx, p, q], [y]


def test_a_failed_check_in_a_parallel_loop_reports_the_serial_error():
    # in a fresh process: a wrong bounds check in a task would be a crash
    out = _run_python(f"""
        import runpy, sys
        sys.path.insert(0, {str(TESTS)!r})  # this file imports the package support
        runpy.run_path({str(pathlib.Path(__file__))!r})["check_failures_in_parallel_loops"]()
        print("checked")
    """)
    assert out.strip().endswith("checked")


def check_failures_in_parallel_loops():
    """Index and divisor failures at chosen iterations: the serial kernel and the parallel
    one on 2 and 3 threads report the same error (the serial loop's first)."""
    inputs, outputs = _failing_program()
    kernel = lower_program(inputs, outputs)
    parallel = parallelize_stages(kernel, threads=2, min_work=0)
    assert parallel_loops(parallel)
    exes = [Executable(kernel, threads=1)] + [Executable(parallel, threads=t) for t in (2, 3)]
    ok = {inputs[0]: np.arange(50), inputs[1]: np.arange(1000) % 50,
          inputs[2]: np.arange(1000), inputs[3]: np.ones(1000, dtype="int64")}

    def outcome(exe, **changes):
        feed = dict(ok)
        for name, (position, value) in changes.items():
            t = next(t for t in inputs if t.name == name)
            feed[t] = feed[t].copy()
            feed[t][position] = value
        try:
            return run(exe, inputs, feed)[0].tolist()
        except tg.TegradError as e:
            return type(e).__name__, str(e)

    cases = [{}, dict(idx=(10, 50)), dict(idx=(999, -1)), dict(q=(0, 0)), dict(q=(700, 0)),
             dict(idx=(900, 10**9), q=(100, 0)), dict(idx=(100, 77), q=(900, 0)),
             dict(idx=(450, 51), q=(600, 0))]
    for changes in cases:
        results = [outcome(exe, **changes) for exe in exes]
        assert results[1] == results[0] and results[2] == results[0], changes
        if changes:
            assert isinstance(results[0], tuple), changes
    assert "division" in outcome(exes[1], idx=(900, 10**9), q=(100, 0))[1]
    assert "'table'" in outcome(exes[1], idx=(100, 77), q=(900, 0))[1]


def _run_python(code):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_forked_child_still_runs_parallel_loops():
    out = _run_python("""
        import os
        import numpy as np
        import tegrad as tg
        x = tg.placeholder((256, 1024), dtype="float32", name="x")
        y = tg.compute((256, 1024), lambda i, j: x[i, j] * 3.0, name="y")
        f = tg.build([x], [y], threads=2)
        assert "tegrad_parallel_for" in f.llvm_ir
        a = np.random.default_rng(0).standard_normal((256, 1024)).astype("float32")
        assert np.array_equal(f(a)[0], a * 3)   # the pool's threads exist now
        pid = os.fork()
        if pid == 0:
            ok = all(np.array_equal(f(a)[0], a * 3) for _ in range(20))
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    assert "child 0" in out


def test_python_threads_calling_at_once_get_their_own_results():
    # f has a temporary (its calls take turns); g has none (its calls meet in the pool)
    inputs, outputs = _big_program()
    f = tg.build(inputs, outputs, threads=2)
    x = inputs[0]
    g = tg.build([x], [tg.compute(x.shape, lambda i, j: x[i, j] * 3.0, name="g")], threads=2)
    assert parallel_loops(f.kernel) and parallel_loops(g.kernel) and not g.kernel.temps
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(BIG).astype("float32") for _ in range(4)]
    want = [(tg.build(inputs, outputs, threads=1)(a)[0], a * np.float32(3.0)) for a in xs]
    errors = []

    def worker(k):
        try:
            for _ in range(25):
                assert f(xs[k])[0].tobytes() == want[k][0].tobytes()
                assert g(xs[k])[0].tobytes() == want[k][1].tobytes()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and not errors, errors


def test_a_parallel_loop_allocating_a_large_local_buffer_runs_serially():
    # a local buffer too large for a thread's stack lives in the kernel's storage,
    # shared by all iterations: such a loop runs serially
    from tegrad.ir.expr import Const, Var
    from tegrad.codegen.loops.nodes import Allocate, Block, Buffer, Kernel, Load, Store
    from tegrad.codegen.llvm.emit import STACK_LIMIT_BYTES
    n = STACK_LIMIT_BYTES // 8 + 1
    A = Buffer("A", (4, n), "float64", "input")
    B = Buffer("B", (4, n), "float64", "output")
    L = Buffer("L", (n,), "float64", "local")
    i, j = Var("i", "int64"), Var("j", "int64")
    c = lambda v: Const(v, "int64")
    body = Allocate(L, Block((For(j, c(0), c(n), Store(L, (j,), Load(A, (i, j)) * 2.0)),
                              For(j, c(0), c(n), Store(B, (i, j), Load(L, (j,)) + 1.0)))))
    kernel = Kernel("big_local", (A, B), (), For(i, c(0), c(4), body, "parallel"))
    exe = Executable(kernel, threads=2)
    assert "tegrad_parallel_for" not in exe.emitted_ir
    a = np.random.default_rng(6).standard_normal((4, n))
    b = np.empty_like(a)
    exe.run([a, b])
    np.testing.assert_array_equal(b, a * 2 + 1)


def test_threads_must_be_positive():
    x = tg.placeholder((4,), name="x")
    with pytest.raises(tg.TegradError, match="threads"):
        tg.build([x], [tg.compute((4,), lambda i: x[i], name="y")], threads=0)


def test_default_threads_is_every_usable_core():
    inputs, outputs = _big_program()
    f = tg.build(inputs, outputs)
    assert f._executable.threads == len(os.sched_getaffinity(0))


def test_a_stage_reading_another_in_the_same_outer_iteration_runs_in_parallel():
    """Fused stages whose reads of each other stay in the iteration of the outer loop
    (at other indices inside it) run that loop in parallel, with the serial bits."""
    x = tg.placeholder((8, 256, 130), dtype="float32", name="x")
    a = tg.compute((8, 256, 130), lambda p, i, j: x[p, i, j] * 2.0, name="a")
    b = tg.compute((8, 256, 128), lambda p, i, j: a[p, i, j + 2] - a[p, i, j], name="b")
    feed = np.random.default_rng(3).standard_normal(x.shape).astype("float32")
    f = tg.build([x], [b], threads=2)
    outer = [s for s in walk_stmts(f.kernel.body) if type(s) is For]
    assert outer[0].kind == "parallel" and outer[0].var.name == "p"
    assert "stages a, b (fused)" in f.schedule  # one loop over p writes and reads a
    got = f(feed)[0]
    np.testing.assert_allclose(got, tg.evaluate(b, {x: feed}), rtol=1e-6)
    assert got.tobytes() == tg.build([x], [b], threads=1)(feed)[0].tobytes()


def test_a_read_of_another_iterations_elements_keeps_the_loop_serial():
    from tegrad.ir.expr import Const, Var
    from tegrad.codegen.loops.nodes import Buffer, Load, Store, Block
    from tegrad.codegen.schedule.common import independence_problem
    p, j = Var("p", "int64"), Var("j", "int64")
    A = Buffer("A", (8, 4), "float32", "temp")
    B = Buffer("B", (8,), "float32", "output")
    for index, ok in (((p, Const(3, "int64")), True), ((p + 1, Const(0, "int64")), False),
                      ((j, p), False)):
        body = Block((Store(A, (p, j), Const(1.0, "float32")),
                      Store(B, (p,), Load(A, index, "float32"))))
        assert (independence_problem(body, ("p",), accumulate_ok=False) is None) == ok


def test_two_writes_that_each_pin_the_loop_but_meet_across_iterations_keep_it_serial():
    """``A[p] += ...; A[3*p - 2] += ...``: each write alone is one row per iteration, but
    p = 4 and p = 2 both update row 4. Writes meet when the dimensions they share do not
    pin the loop, whatever the coefficients (drawn here)."""
    from tegrad.ir.expr import Const, Var
    from tegrad.codegen.loops.nodes import Accumulate, Buffer, Block
    from tegrad.codegen.schedule.common import independence_problem
    p, j = Var("p", "int64"), Var("j", "int64")
    A = Buffer("A", (64, 4), "float64", "output")
    one = Const(1.0, "float64")
    rng = np.random.default_rng(7)
    for _ in range(20):
        c, d = (int(v) for v in rng.integers(1, 4, size=2))
        off = int(rng.integers(-2, 3))
        first = (p * c, j) if c > 1 else (p, j)
        second = (p * d + off, j) if d > 1 or off else (p, j)
        body = Block((Accumulate(A, first, one, "add"), Accumulate(A, second, one, "add")))
        same = bool(first[0] == second[0])
        assert (independence_problem(body, ("p",), accumulate_ok=False) is None) == same
        # sharing the pinned dimension makes them disjoint again, whatever the other one
        body = Block((Accumulate(A, (p, j), one, "add"), Accumulate(A, (p, j * c), one, "add")))
        assert independence_problem(body, ("p",), accumulate_ok=False) is None


def test_a_gradient_scattering_into_rows_i_and_3i_minus_2_equals_the_serial_bits():
    """The random program CI found: a product's gradient accumulates into ``dx[i, .]`` and
    ``dx[3*i - 2, .]`` in one stage; run in parallel over ``i`` the two met in row 4."""
    x = tg.placeholder((19, 91), dtype="float64", name="x")
    k = tg.reduce_axis((0, 15), name="k")

    def body(i, j):
        inside = tg.all(j + k - 2 >= 0, i * 3 - 2 >= 0, i * 3 - 2 < 19,
                        i * 3 + k * 2 - 2 >= 0, i * 3 + k * 2 - 2 < 91, i < 19)
        return tg.sum(x[i, j + k - 2] * x[i * 3 - 2, i * 3 + k * 2 - 2], axis=k,
                      where=inside)
    s = tg.compute((29, 43), body, name="s")
    inputs, outputs, feed = with_gradient((x, s, 1), 18)
    for _ in range(10):
        parallel = assert_same_bits(inputs, outputs, feed)
    # the race shows only now and then: the loop over the two writes must stay serial
    from tegrad.codegen.loops.nodes import Accumulate
    for loop in parallel_loops(parallel):
        rows = {str(a.indices[0]) for a in walk_stmts(loop.body)
                if type(a) is Accumulate and a.buffer.name == "dx"}
        assert len(rows) <= 1, f"dx rows {rows} written in one parallel loop"
