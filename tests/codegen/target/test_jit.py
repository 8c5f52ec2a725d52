"""The JIT's background compiles of shared functions (``request_shared``): a module that
declares one links after it, a failure surfaces at the wait, each is compiled once
whichever threads ask, and a child forked while one compiles still links it; the
interpreter switches threads quickly while one compiles, and its own interval is back
after (or the one the program set meanwhile kept)."""
import ctypes
import sys
import itertools
import os
import threading

import llvmlite.ir as ir
import pytest

from tegrad.codegen.target import jit

I64 = ir.IntType(64)
_names = itertools.count()


def _fresh_name():
    return f"test.requested.{os.getpid()}.{next(_names)}"


def _constant_function(name, value, calls=None):
    """``build(module)`` defining ``int64 name()`` returning ``value``; counts its
    calls in ``calls`` (a list)."""
    def build(module):
        if calls is not None:
            calls.append(name)
        f = ir.Function(module, ir.FunctionType(I64, []), name=name)
        ir.IRBuilder(f.append_basic_block()).ret(ir.Constant(I64, value))
    return build


def _caller_text(callee, name="caller"):
    """IR text of ``int64 name()`` returning ``callee() + 1``."""
    m = ir.Module(name="caller")
    m.triple, m.data_layout = jit.host_triple(), jit.data_layout()
    callee_fn = ir.Function(m, ir.FunctionType(I64, []), name=callee)
    f = ir.Function(m, ir.FunctionType(I64, []), name=name)
    b = ir.IRBuilder(f.append_basic_block())
    b.ret(b.add(b.call(callee_fn, []), ir.Constant(I64, 1)))
    return str(m)


def _run(loaded, name="caller"):
    return ctypes.CFUNCTYPE(ctypes.c_int64)(loaded.address(name))()


@pytest.mark.parametrize("value", [0, 7, -3, 2 ** 40])
def test_a_module_declaring_a_requested_function_links_after_it(value):
    name = _fresh_name()
    jit.request_shared(name, _constant_function(name, value))
    # no wait here: the module's load waits for the request before linking
    assert _run(jit.LoadedModule(_caller_text(name))) == value + 1
    assert jit.shared_address(name) is not None


def test_a_failed_request_raises_at_the_wait_and_later_requests_still_compile():
    bad, good = _fresh_name(), _fresh_name()

    def broken(module):
        raise RuntimeError(f"cannot build {bad}")
    jit.request_shared(bad, broken)
    with pytest.raises(RuntimeError, match="cannot build"):
        jit.await_requested()
    assert jit.shared_address(bad) is None
    jit.request_shared(good, _constant_function(good, 5))
    jit.await_requested()
    assert _run(jit.LoadedModule(_caller_text(good))) == 6


def test_each_requested_function_is_compiled_once_whichever_threads_ask():
    names = [_fresh_name() for _ in range(3)]
    calls = []
    builds = {n: _constant_function(n, k, calls) for k, n in enumerate(names)}
    start = threading.Barrier(4)

    def ask():
        start.wait()
        for n in names:
            jit.request_shared(n, builds[n])
            jit.shared_function(n, builds[n])
    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jit.await_requested()
    assert sorted(calls) == sorted(names)
    for k, n in enumerate(names):
        assert _run(jit.LoadedModule(_caller_text(n))) == k + 1


def _held_request(value):
    """``(name, release)``: a request of ``int64 name()`` returning ``value``, whose
    compile has begun and waits until the event ``release`` is set."""
    name = _fresh_name()
    compiling, release = threading.Event(), threading.Event()
    build = _constant_function(name, value)

    def slow(module):
        compiling.set()
        release.wait(30)
        build(module)
    jit.request_shared(name, slow)
    assert compiling.wait(30)
    return name, release


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_forked_while_a_request_compiles_links_it_itself():
    name, release = _held_request(41)
    pid = os.fork()
    if pid == 0:  # the child: the parent's background thread does not run here
        code = 1
        try:
            release.set()  # (this child's copy of the event: the build runs here)
            code = 0 if _run(jit.LoadedModule(_caller_text(name))) == 42 else 2
        finally:
            os._exit(code)
    release.set()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert _run(jit.LoadedModule(_caller_text(name))) == 42


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_the_switch_interval_is_quick_while_requests_compile_and_restored_after():
    before = sys.getswitchinterval()
    _, release = _held_request(3)
    assert sys.getswitchinterval() == min(before, jit.BACKGROUND_SWITCH_INTERVAL)
    pid = os.fork()
    if pid == 0:  # a child: nothing compiles there in the background
        os._exit(0 if sys.getswitchinterval() == before else 1)
    release.set()
    jit.await_requested()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert sys.getswitchinterval() == before
    # a failed request restores it too
    bad = _fresh_name()

    def broken(module):
        raise RuntimeError("no routine")
    jit.request_shared(bad, broken)
    with pytest.raises(RuntimeError):
        jit.await_requested()
    assert sys.getswitchinterval() == before


def test_an_interval_the_program_sets_meanwhile_is_kept():
    before = sys.getswitchinterval()
    name = _fresh_name()
    release = threading.Event()
    build = _constant_function(name, 4)

    def slow(module):
        release.wait(30)
        build(module)
    try:
        jit.request_shared(name, slow)
        sys.setswitchinterval(0.002)
        release.set()
        jit.await_requested()
        assert sys.getswitchinterval() == 0.002
    finally:
        release.set()
        jit.await_requested()
        sys.setswitchinterval(before)
