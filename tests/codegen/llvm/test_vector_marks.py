"""A loop printed ``vectorized`` is vectorised: the emitter forces every marked loop
through LLVM's loop vectoriser under a loop id naming it, the schedule marks only loops
LLVM can vectorise without reassociating anything, a ``vectorize`` request LLVM could
not honour raises, and an automatic mark LLVM declined is not printed."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.llvm.emit import emit_kernel
from tegrad.codegen.llvm.vector_marks import unvectorised_loops, vector_marked
from tegrad.codegen.pipeline import compile_kernel
from tegrad.codegen.schedule.common import ScheduleError
from tegrad.codegen.schedule.steps import Schedule, Step
from tegrad.codegen.schedule import vector_loops
from tegrad.codegen.schedule.vector_loops import SCALAR_CALLS
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import For
from tegrad.codegen.tuning import MIN_VECTOR_TRIP, VECTOR_BODY_NODES
from tegrad.ir.builders import all as all_of

from tests.conftest import OPERATOR_CASES
from tests.codegen.schedule.test_schedule_replay import TOLERANCE, program

#: the operator table, of which a fifth is sampled (every fifth entry, the offset drawn
#: per run): its forward and gradient programs on shapes scaled by 2
SAMPLE = sorted(OPERATOR_CASES)


def _vector_loops_shown(f):
    return f.loops.count("vectorized for")


@settings(max_examples=1, deadline=None)
@given(offset=st.integers(0, 4), dtype=st.sampled_from(["float32", "float64"]))
def test_every_marked_loop_of_a_sample_of_the_library_is_vectorised(offset, dtype):
    marked = 0
    for name in SAMPLE[offset::5]:
        inputs, outputs, _ = program(name, dtype, 2)
        f = tg.build(inputs, outputs, threads=1)
        loops = vector_marked(f.kernel.body)
        marked += len(loops)
        declined = unvectorised_loops(f.kernel, f.llvm_ir)
        assert declined == [], (name, [(u.stage, u.loop.var.name, u.reason) for u in declined])
        assert _vector_loops_shown(f) == len(loops), name
    assert marked >= 5  # the sample has vectorised loops to check


def _fused_pads():
    """Two padded copies of one row range, both reading x (so that they fuse): LLVM
    cannot vectorise their fused loop (two guarded reads, one gathering across the
    row)."""
    x = tg.placeholder((8, 20), name="x")
    h = tg.placeholder((8, 24), name="h")
    p = tg.compute((8, 24), lambda i, j: tg.if_then_else(all_of(i >= 2, j >= 1),
                                                          x[i - 2, j % 20], 0.0), name="P")
    # (h's row i + 2 is in bounds only under the guard: the read stays a branch)
    q = tg.compute((8, 24), lambda i, j: tg.if_then_else(all_of(i < 6, j < 20),
                                                          h[i + 2, j] + x[i, j], 0.0), name="Q")
    return [x, h], [p, q]


def test_a_vectorize_request_llvm_declines_raises_naming_the_stage_and_loop():
    inputs, outputs = _fused_pads()
    asked = Schedule([Step("fuse", "P", ("Q",)), Step("vectorize", "P", ("j",))])
    with pytest.raises(ScheduleError, match=r"stage 'P'.*LLVM could not vectorise loop 'j'"):
        tg.build(inputs, outputs, threads=1, schedule=asked)
    # with its accesses checked, a function vectorises no loop and refuses no request
    f = tg.build(inputs, outputs, threads=1, schedule=asked, check_bounds=True)
    assert [u.loop.var.name for u in unvectorised_loops(f.kernel, f.llvm_ir)] == ["j"]


def test_an_automatic_mark_llvm_declined_is_not_printed(monkeypatch):
    # the automatic schedule does not mark the fused loop (a guard varying along it):
    # marked anyway, LLVM declines it, and it is printed as a serial loop
    monkeypatch.setattr(vector_loops, "vector_problem", lambda loop, automatic=True: None)
    inputs, outputs = _fused_pads()
    f = tg.build(inputs, outputs, threads=1)
    declined = unvectorised_loops(f.kernel, f.llvm_ir)
    assert [u.loop.var.name for u in declined] == ["j"] and declined[0].stage == "P"
    assert "vectorized" not in f.loops
    assert "j: left scalar" in str(f.schedule) and "vectorized" not in str(f.schedule)
    # the schedule is the same value: replayed, it makes the same loops
    g = tg.build(inputs, outputs, threads=1, schedule=f.schedule)
    assert g.loops == f.loops


def _rows(n, dtype="float32"):
    x = tg.placeholder((4, n), dtype=dtype, name="x")
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["log1p", "asinh", "erf"])
def test_a_vectorize_request_on_a_scalar_call_is_refused_when_scheduled(name, dtype):
    x = _rows(64, dtype)
    y = tg.compute(x.shape, lambda i, j: getattr(tg, name)(x[i, j]), name="y")
    scalar = SCALAR_CALLS[name] is None or dtype in SCALAR_CALLS[name]
    if scalar:
        with pytest.raises(ScheduleError, match=rf"stage 'y'.*calls {name}"):
            tg.build([x], [y], threads=1, schedule={"y": {"vectorize": "j"}})
    else:  # (erf in float32: inline, vectorised)
        f = tg.build([x], [y], threads=1, schedule={"y": {"vectorize": "j"}})
        assert _vector_loops_shown(f) == 1
    # the automatic schedule leaves such loops unmarked, and what it marks is vectorised
    f = tg.build([x], [y], threads=1)
    assert _vector_loops_shown(f) == (0 if scalar else 1)
    assert unvectorised_loops(f.kernel, f.llvm_ir) == []


INTRINSICS = ["exp", "log", "sqrt", "tanh", "sin", "cos", "floor", "ceil", "round", "trunc",
              "sigmoid", "erf", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
              "acosh", "atanh", "log1p", "expm1"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", INTRINSICS)
def test_scalar_calls_lists_exactly_the_intrinsics_llvm_does_not_vectorise(name, dtype):
    x = _rows(64, dtype)
    y = tg.compute(x.shape, lambda i, j: getattr(tg, name)(x[i, j]), name="y")
    if name in SCALAR_CALLS and (SCALAR_CALLS[name] is None or dtype in SCALAR_CALLS[name]):
        assert not vector_marked(compile_kernel([x], [y], threads=1).kernel.body)
    else:  # asked for, the loop is vectorised (the build raises if LLVM declines it)
        f = tg.build([x], [y], threads=1, schedule={"y": {"vectorize": "j"}})
        assert _vector_loops_shown(f) == 1


def test_a_vectorize_request_carrying_a_reduction_or_too_short_is_refused():
    x = _rows(64)
    k = tg.reduce_axis((0, 64), name="k")
    s = tg.compute((4,), lambda i: tg.sum(x[i, k], axis=k), name="s")
    with pytest.raises(ScheduleError, match=r"stage 's'.*carries a reduction into 's'"):
        tg.build([x], [s], threads=1, schedule={"s": {"vectorize": "k"}})
    short = _rows(MIN_VECTOR_TRIP - 1)
    y = tg.compute(short.shape, lambda i, j: short[i, j] * 2.0, name="y")
    with pytest.raises(ScheduleError, match=rf"stage 'y'.*fewer than {MIN_VECTOR_TRIP}"):
        tg.build([short], [y], threads=1, schedule={"y": {"vectorize": "j"}})


def _loop_ids(text):
    """The properties (each its operands' text) of every loop id a back edge of the IR
    ``text`` carries."""
    nodes = {k: v.strip() for k, v in
             re.findall(r"^(!\d+) = (?:distinct )?!\{(.*)\}$", text, re.M)}
    return [[nodes.get(o.strip(), o.strip()) for o in nodes[k].split(",")[1:]]
            for k in sorted(set(re.findall(r"!llvm\.loop (!\d+)", text)))]


def test_a_marked_loop_carries_the_forced_metadata_and_a_large_unmarked_one_stays_off():
    x = _rows(256)
    y = tg.compute(x.shape, lambda i, j: x[i, j] * 2.0 + 1.0, name="y")

    def big(i, j):  # more than VECTORIZE_LIMIT LLVM instructions (inline tanh)
        out = x[i, j]
        for k in range(24):
            out = out + tg.tanh(x[i, j] * (0.5 + 0.01 * k)) * (0.3 + 0.001 * k)
        return out
    z = tg.compute(x.shape, big, name="z")
    kernel = compile_kernel([x], [y, z], threads=1, schedule={"z": "none"}).kernel
    assert [s.var.name for s in vector_marked(kernel.body)] == ["j"]
    ids = _loop_ids(str(emit_kernel(kernel, threads=1).module))
    forced = [ops for ops in ids if '!"tegrad.vector.0"' in ops]
    assert forced == [['!"tegrad.vector.0"', '!"llvm.loop.vectorize.enable", i1 1']]
    off = [ops for ops in ids if '!"llvm.loop.vectorize.enable", i1 0' in ops]
    # z's loops (the outer one holds the inner's instructions too); y's outer loop none
    assert len(off) == 2 and len(ids) == 3


def _program(dtype, n, m):
    x = tg.placeholder((n, m), dtype=dtype, name="x")
    w = tg.placeholder((m,), dtype=dtype, name="w")
    k = tg.reduce_axis((0, m), name="k")
    e = tg.compute((n, m), lambda i, j: tg.exp(x[i, j] - w[j]) * 0.5 + x[i, j] / (
        1.0 + tg.abs(x[i, j])), name="e")
    s = tg.compute((n,), lambda i: tg.sum(e[i, k], axis=k), name="s")
    b = tg.compute((n, m), lambda i, j: e[i, j] / s[i] + tg.tanh(w[j]), name="b")
    t = tg.compute((m, n), lambda j, i: x[i, j] * w[j], name="t")
    return [x, w], [b, t]


@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 9), m=st.integers(1, 70), dtype=st.sampled_from(["float32", "float64"]),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_forced_loops_compute_what_the_evaluator_does(n, m, dtype, threads, seed):
    inputs, outputs = _program(dtype, n, m)
    rng = np.random.default_rng(seed)
    feed = {t: rng.standard_normal(t.shape).astype(dtype) for t in inputs}
    f = tg.build(inputs, outputs, threads=threads)
    assert unvectorised_loops(f.kernel, f.llvm_ir) == []
    for t, got, want in zip(outputs, f(*[feed[t] for t in inputs]), tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(got, want, err_msg=t.name, **TOLERANCE[dtype])


def _gathered(x):
    ids = tg.placeholder((4,), dtype="int32", name="ids")
    return [x, ids], tg.compute(x.shape, lambda i, j: x[ids[i], j] * 2.0, name="y")


def _large(x):
    def body(i, j):
        out = x[i, j]
        for k in range(VECTOR_BODY_NODES // 4):
            out = out * (1.0 + 0.001 * k) + x[i, (j + k) % x.shape[1]]
        return out
    return [x], tg.compute(x.shape, body, name="y")


def _guarded(x):
    return [x], tg.compute(x.shape, lambda i, j: tg.if_then_else(
        j >= 1, x[i, j - 1], 0.0), name="y")


@pytest.mark.parametrize("make, reason", [(_gathered, "may stop the kernel"),
                                          (_large, "expression nodes"),
                                          (_guarded, "a guard")])
def test_the_automatic_schedule_leaves_loops_llvm_would_decline_unmarked(make, reason):
    inputs, y = make(_rows(64))
    kernel = compile_kernel(inputs, [y], threads=1).kernel
    assert not vector_marked(kernel.body)
    loop = next(s for s in walk_stmts(kernel.body) if type(s) is For and s.var.name == "j")
    assert reason in vector_loops.vector_problem(loop)
