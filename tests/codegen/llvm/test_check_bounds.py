"""Bounds-checked builds: every Load, Store and Accumulate of the loop IR checked against
its buffer at run time (``tg.build(..., check_bounds=True)``, ``TEGRAD_CHECK_BOUNDS``)."""
import ctypes

import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.expr import Const, Var
from tegrad.ir.reduction import sum as SUM
from tegrad.codegen.export.program import export_kernel
from tegrad.codegen.llvm.emit import emit_kernel
from tegrad.codegen.loops.nodes import Accumulate, Block, Buffer, For, Kernel, Load, Store
from tegrad.codegen.runtime.executable import Executable

I64 = "int64"
i, j = Var("i", I64), Var("j", I64)


def loop(var, end, body, kind="serial"):
    return For(var, Const(0, I64), Const(end, I64), body, kind=kind)


def run(kernel, arrays, *, check_bounds=True, threads=1):
    Executable(kernel, threads=threads, check_bounds=check_bounds).run(arrays)
    return arrays


def test_store_past_the_end_names_buffer_and_stage():
    A, B = Buffer("A", (4,), "float64", "input"), Buffer("B", (4,), "float64", "output")
    k = Kernel("past_end", (A, B), (), loop(i, 5, Store(B, (i,), Const(1.0, "float64"))))
    with pytest.raises(tg.OutOfBoundsError, match=r"'B': index out of range.*stage 'B'"):
        run(k, [np.zeros(4), np.zeros(4)])


def test_load_past_the_end_names_buffer_and_stage():
    A, B = Buffer("A", (4,), "float64", "input"), Buffer("B", (4,), "float64", "output")
    k = Kernel("shifted", (A, B), (), loop(i, 4, Store(B, (i,), Load(A, (i + 1,)))))
    with pytest.raises(tg.OutOfBoundsError, match=r"'A': index out of range.*stage 'B'"):
        run(k, [np.zeros(4), np.zeros(4)])


def test_negative_index_and_accumulate_are_checked():
    A, B = Buffer("A", (4,), "float64", "input"), Buffer("B", (4,), "float64", "output")
    k = Kernel("before", (A, B), (), loop(i, 4, Store(B, (i,), Load(A, (i - 1,)))))
    with pytest.raises(tg.OutOfBoundsError, match="'A'"):
        run(k, [np.zeros(4), np.zeros(4)])
    acc = Kernel("acc", (A, B), (), loop(i, 4, Accumulate(B, (i * 2,), Load(A, (i,)), SUM)))
    with pytest.raises(tg.OutOfBoundsError, match=r"'B'.*stage 'B'"):
        run(acc, [np.zeros(4), np.zeros(4)])


def test_wrong_index_inside_the_buffer_is_caught():
    # B[i, j] with j up to 3 in a (4, 3) buffer: for i < 3 the flat offset 3 * i + j stays
    # below 12, so only the check of the axis finds it
    A, B = Buffer("A", (4, 3), "float64", "input"), Buffer("B", (4, 3), "float64", "output")
    body = loop(i, 3, loop(j, 4, Store(B, (i, j), Const(1.0, "float64"))))
    k = Kernel("rows", (A, B), (), body)
    unchecked = run(k, [np.zeros((4, 3)), np.zeros((4, 3))], check_bounds=False)[1]
    assert unchecked[3, 0] == 1.0  # wrote into the next row: no crash, a wrong answer
    with pytest.raises(tg.OutOfBoundsError, match=r"'B'.*outside its shape"):
        run(k, [np.zeros((4, 3)), np.zeros((4, 3))])


def test_parallel_loop_reports_its_failure():
    A, B = Buffer("A", (64,), "float32", "input"), Buffer("B", (64,), "float32", "output")
    k = Kernel("par", (A, B), (), loop(i, 64, Store(B, (i,), Load(A, (i * 2,))), "parallel"))
    with pytest.raises(tg.OutOfBoundsError, match=r"'A'.*stage 'B'"):
        run(k, [np.zeros(64, np.float32), np.zeros(64, np.float32)], threads=2)


def test_unchecked_build_emits_no_checks():
    A, B = Buffer("A", (4, 3), "float64", "input"), Buffer("B", (4, 3), "float64", "output")
    k = Kernel("copy", (A, B), (), loop(i, 4, loop(j, 3, Store(B, (i, j), Load(A, (i, j))))))
    plain, checked = emit_kernel(k), emit_kernel(k, check_bounds=True)
    assert plain.errors == () and "fail." not in str(plain.module)
    assert [e[:2] for e in checked.errors] == [("index_out_of_range", "A"),
                                               ("index_out_of_range", "B")]
    # constant indices inside the buffer need no check
    const = Kernel("one", (A, B), (), Store(B, (Const(1, I64), Const(2, I64)),
                                            Load(A, (Const(3, I64), Const(0, I64)))))
    assert emit_kernel(const, check_bounds=True).errors == ()


def _program():
    x = tg.placeholder((6, 10), name="x")
    w = tg.placeholder((5, 10), name="w")
    labels = tg.placeholder((6,), dtype="int32", name="labels")
    k = tg.reduce_axis((0, 10), name="k")
    y = tg.compute((6, 5), lambda n, o: tg.sum(x[n, k] * w[o, k], axis=k), name="y")
    loss = tg.nn.softmax_cross_entropy(tg.nn.relu(y), labels)
    return [x, w, labels], [loss, tg.differentiate(loss, [x, w])]


def test_checked_build_gives_the_same_results():
    inputs, outputs = _program()
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal((6, 10)).astype(np.float32),
             rng.standard_normal((5, 10)).astype(np.float32),
             rng.integers(0, 5, 6).astype(np.int32)]
    plain = tg.build(inputs, outputs, check_bounds=False)
    checked = tg.build(inputs, outputs, check_bounds=True)
    assert checked is not plain and "fail." in checked._executable.emitted_ir
    for a, b in zip(plain(*feeds), checked(*feeds)):
        np.testing.assert_array_equal(a, b)
    feeds[2][0] = 7  # a label outside the classes: the data-dependent check still reports
    with pytest.raises(tg.OutOfBoundsError, match="'labels'"):
        checked(*feeds)


def test_environment_sets_the_default(monkeypatch):
    x = tg.placeholder((3,), name="x")
    y = tg.compute((3,), lambda n: x[n] * 2, name="y")
    monkeypatch.setenv("TEGRAD_CHECK_BOUNDS", "1")
    assert tg.build([x], [y])._executable.check_bounds
    assert not tg.build([x], [y], check_bounds=False)._executable.check_bounds
    monkeypatch.setenv("TEGRAD_CHECK_BOUNDS", "0")
    assert not tg.build([x], [y])._executable.check_bounds
    with pytest.raises(tg.TegradError, match="check_bounds"):
        tg.build([x], [y], check_bounds="yes")


def test_export_with_check_bounds_returns_the_code(tmp_path):
    A, B = Buffer("A", (4,), "float64", "input"), Buffer("B", (4,), "float64", "output")
    k = Kernel("shifted", (A, B), (), loop(i, 4, Store(B, (i,), Load(A, (i + 1,)))))
    result = export_kernel(k, tmp_path / "shifted", check_bounds=True)
    if result.library_path is None:
        pytest.fail(f"no shared library: {result.message}")
    lib = ctypes.CDLL(str(result.library_path))
    lib.shifted_error_string.restype = ctypes.c_char_p
    a, b = np.arange(4.0), np.zeros(4)
    code = lib.shifted(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(b.ctypes.data), None)
    assert code > 0
    assert b"'A': index out of range" in lib.shifted_error_string(code)


def test_compiled_function_exports_with_its_checks(tmp_path):
    x = tg.placeholder((300,), name="x")  # not unrolled: constant indices need no check
    y = tg.compute((300,), lambda n: x[n] * 2, name="y")
    checked = tg.build([x], [y], check_bounds=True).export(tmp_path / "checked")
    plain = tg.build([x], [y], check_bounds=False).export(tmp_path / "plain")
    assert checked.entries[0].checks and not plain.entries[0].checks
