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
