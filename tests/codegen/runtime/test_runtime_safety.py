"""Run-time safety of compiled functions: buffers larger than the machine refused by
name (at build for temporaries, at call for outputs, in tg.evaluate for a stage), a
placeholder named ``out`` given by keyword, calls in the child of a fork() made while
another thread was inside a compiled call, and a build cache bounded in bytes that
keeps no outputs alive and leaks nothing once cleared."""
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tegrad as tg
from tegrad.reference import memory
from tegrad.reference.memory import BufferTooLargeError

BIG = 2**31 - 1


def _side_over_memory(itemsize):
    """An extent whose square of ``itemsize``-byte elements exceeds physical memory."""
    physical = memory.physical_memory()
    assert physical is not None, "the machine's memory should be known on Linux"
    side = math.isqrt(physical // itemsize) + 1
    assert side <= BIG and side * side * itemsize > physical
    return side


# -- buffers larger than the machine -----------------------------------------------------


@pytest.mark.parametrize("side", ["over memory", BIG])
def test_temporary_larger_than_memory_is_refused_at_build_naming_it(side):
    side = _side_over_memory(4) if side == "over memory" else side
    a = tg.placeholder((2,), dtype="float32", name="a")
    tmp = tg.compute((side, side), lambda i, j: tg.cast(i + j, "float32") + a[0],
                     name="huge_tmp")
    y = tg.compute((2,), lambda i: tmp[i, i] + tmp[side - 1, side - 1], name="y")
    with pytest.raises(BufferTooLargeError) as info:
        tg.build([a], [y])
    message = str(info.value)
    assert "'huge_tmp'" in message and f"({side}, {side})" in message
    assert f"{side * side * 4} bytes" in message and "physical memory" in message
    assert isinstance(info.value, (tg.TegradError, MemoryError))


@pytest.mark.parametrize("side", ["over memory", BIG])
def test_output_larger_than_memory_is_refused_at_call_naming_it(side):
    side = _side_over_memory(8) if side == "over memory" else side
    a = tg.placeholder((2,), dtype="float64", name="a")
    y = tg.compute((side, side), lambda i, j: tg.cast(i, "float64") + a[0], name="huge_out")
    f = tg.build([a], [y])  # built: a call given out= arrays would need no allocation
    with pytest.raises(BufferTooLargeError, match=rf"output 'huge_out' \(shape \({side}, "
                                                  rf"{side}\), float64\) needs .*"
                                                  rf"\({side * side * 8} bytes\)"):
        f(np.zeros(2))


def test_outputs_fitting_alone_but_not_together_are_refused(monkeypatch):
    monkeypatch.setattr(memory, "physical_memory", lambda: 3 * 8 * 1000)
    a = tg.placeholder((1000,), dtype="float64", name="a")
    ys = [tg.compute((1000,), lambda i, k=k: a[i] * float(k), name=f"y{k}") for k in range(4)]
    f = tg.build([a], ys)
    with pytest.raises(BufferTooLargeError, match="together.*'y0'.*'y3'"):
        f(np.ones(1000))
    outs = [np.empty(1000) for _ in ys]  # arrays that exist need no memory
    assert np.array_equal(f(np.ones(1000), out=outs)[3], np.full(1000, 3.0))


def test_evaluate_refuses_an_intermediate_larger_than_memory_whatever_the_limit():
    a = tg.placeholder((2,), dtype="float32", name="a")
    big = tg.compute((BIG, BIG), lambda i, j: tg.cast(i + j, "float32"), name="big")
    s = tg.compute((1,), lambda i: big[0, 0] + a[0], name="s")
    with pytest.raises(BufferTooLargeError, match=r"stage 'big' \(shape \(2147483647, "
                                                  r"2147483647\).*physical memory"):
        tg.evaluate(s, {a: np.ones(2, np.float32)}, memory_limit=10**30)
    # a reduction over 2**31 - 1 points per output: one row per chunk, 2**31 - 1 chunks
    k = tg.reduce_axis((0, BIG), name="k")
    r = tg.compute((BIG,), lambda i: tg.sum(tg.cast(i + k, "float32"), axis=k), name="r")
    with pytest.raises(BufferTooLargeError, match="stage 'r'"):
        tg.evaluate(r, {}, memory_limit=10**30)


# -- a placeholder named out -------------------------------------------------------------


@pytest.fixture(scope="module")
def named_out():
    x = tg.placeholder((3,), dtype="float64", name="x")
    out = tg.placeholder((3,), dtype="float64", name="out")
    y = tg.compute((3,), lambda i: x[i] * out[i], name="y")
    return tg.build([x, out], [y])


@pytest.mark.parametrize("call", ["only out", "x by position", "x by name", "out list"])
def test_a_placeholder_named_out_given_by_keyword_is_explained(named_out, call):
    x, o = np.full(3, 2.0), np.arange(3.0)
    with pytest.raises(tg.FeedError, match=r"input 'out'.*keyword.*by position, f\(x, out\)"):
        if call == "only out":
            named_out(out=o)
        elif call == "x by position":
            named_out(x, out=o)
        elif call == "x by name":
            named_out(x=x, out=o)
        else:
            named_out(x, out=[o])


def test_a_placeholder_named_out_passed_by_position_works(named_out):
    x, o = np.full(3, 2.0), np.arange(3.0)
    np.testing.assert_array_equal(named_out(x, o)[0], x * o)
    result = np.empty(3)
    assert named_out(x, o, out=[result])[0] is result
    np.testing.assert_array_equal(result, x * o)


# -- fork() while another thread is inside a compiled call ------------------------------

FORK_SCRIPT = textwrap.dedent('''
    import os, sys, threading, time
    import numpy as np
    import tegrad as tg

    x = tg.placeholder((192, 192), dtype="float32", name="x")
    k = tg.reduce_axis((0, 192), name="k")
    t = tg.compute((192, 192), lambda i, j: x[i, j] * 2.0 + 1.0, name="t")
    y = tg.compute((192, 192), lambda i, j: tg.sum(t[i, k] * t[k, j], axis=k), name="y")
    z = tg.compute((192, 192), lambda i, j: tg.exp(y[i, j] * 1e-4) + t[i, j], name="z")
    f = tg.build([x], [z], threads=2)
    assert f._executable.storage_arrays, "the function should own temporaries (a lock)"
    a = np.random.default_rng(0).standard_normal((192, 192)).astype(np.float32)
    want = f(a)[0].copy()
    stop = threading.Event()

    def calls():
        while not stop.is_set():
            f(a)

    caller = threading.Thread(target=calls)
    caller.start()
    children = []
    for n in range(6):
        time.sleep(0.003)
        pid = os.fork()
        if pid == 0:  # the caller thread is gone here, mid-call or not
            ok = all(np.allclose(f(a)[0], want, rtol=1e-5) for _ in range(3))
            os._exit(0 if ok else 3)
        children.append(pid)
    stop.set()
    caller.join()
    deadline = time.monotonic() + 20
    codes = {}
    while len(codes) < len(children) and time.monotonic() < deadline:
        for pid in children:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    hung = [pid for pid in children if pid not in codes]
    for pid in hung:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    print(len(hung), sorted(codes.values()))
''')


def test_children_forked_during_a_compiled_call_can_call_it():
    run = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    hung, codes = run.stdout.split(" ", 1)
    assert hung == "0", f"{hung} of 6 children hung"
    assert codes.strip() == str([0] * 6), f"children's exit codes: {codes}"


# -- the build cache ---------------------------------------------------------------------


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_distinct_builds_leave_little_memory_behind_once_the_cache_is_cleared():
    from tegrad.codegen.runtime import builder
    x = tg.placeholder((16,), dtype="float32", name="x")

    def build_and_call(k):
        f = tg.build([x], [tg.compute((16,), lambda i: x[i] * float(k) + 1.0, name="y")])
        f(np.ones(16, np.float32))

    for k in range(10):  # the first builds of a process set up LLVM for good
        build_and_call(k)
    builder.clear_cache()
    before, n = _rss(), 60
    for k in range(10, 10 + n):
        build_and_call(k)
    builder.clear_cache()
    per_build = (_rss() - before) / n
    # before: ~800 kB per build; what remains is llvmlite's pass builder, which never
    # frees its instrumentation callbacks (~80-160 kB per optimised module)
    assert per_build < 300 * 1024, f"{per_build / 1024:.0f} kB kept per build"
    assert builder.cache_bytes() == 0


def test_the_cache_stays_within_its_bytes_and_keeps_no_outputs(monkeypatch):
    import weakref
    from tegrad.codegen.runtime import builder
    builder.clear_cache()
    monkeypatch.setattr(builder, "CACHE_BYTES", 40 * 2**20)
    a = tg.placeholder((2,), dtype="float32", name="a")
    dropped = []
    for k in range(5):
        tmp = tg.compute((2048, 2048), lambda i, j: tg.cast(i + j, "float32") * a[0] + k,
                         name="tmp")  # 16 MB, owned by the executable
        y = tg.compute((2048, 2048), lambda i, j: tmp[i, j] + tmp[j, i], name="y")
        f = tg.build([a], [y])
        out = f(np.ones(2, np.float32))[0]
        assert out[3, 5] == 2 * (8 + k)
        assert builder.cache_bytes() <= builder.CACHE_BYTES
        assert builder.cache_bytes() >= f._executable.nbytes >= 16 * 2**20
        dropped.append((weakref.ref(f._executable), weakref.ref(out)))
        del f, out
    # the last program is cached; its output, returned before and dropped, is not kept
    assert all(o() is None for _, o in dropped), "a cached function kept its outputs"
    alive = sum(e() is not None for e, _ in dropped)
    assert 1 <= alive <= 2, f"{alive} programs of 16 MB alive under a bound of 40 MB"
    builder.clear_cache()
    assert all(e() is None for e, _ in dropped)
