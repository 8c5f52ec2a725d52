"""Each statement kind of the loop IR compiled through LLVM, on hand-built kernels: loop
kinds and steps, guarded blocks, lets, local buffers on the stack and in storage the
runtime owns, accumulates with every reducer, and checks."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.expr import Const, Var
from tegrad.codegen.loops import nodes as n
from tegrad.codegen.llvm import emit
from tegrad.codegen.runtime.executable import Executable


def c(v, dtype="int64"):
    return Const(v, dtype)


i, j = Var("i", "int64"), Var("j", "int64")
A = n.Buffer("A", (12,), "float64", "input")
OUT = n.Buffer("out", (12,), "float64", "output")


def run(body, args=(A, OUT), temps=(), inputs=None):
    exe = Executable(n.Kernel("k", tuple(args), tuple(temps), body))
    inputs = [np.arange(12.0)] if inputs is None else inputs
    outs = [np.full(b.shape, -1.0, dtype=b.dtype) for b in args[len(inputs):]]
    exe.run(list(inputs) + outs)
    return outs[0] if len(outs) == 1 else outs


@pytest.mark.parametrize("kind", n.LOOP_KINDS)
@pytest.mark.parametrize("step", [1, 3])
def test_loop_kinds_and_steps(kind, step):
    body = n.For(i, c(1), c(11), n.Store(OUT, (i,), n.Load(A, (i,)) * 2.0), kind=kind, step=step)
    got = run(body)
    want = np.full(12, -1.0)
    want[1:11:step] = np.arange(12.0)[1:11:step] * 2
    np.testing.assert_array_equal(got, want)


def test_loop_bounds_depending_on_an_outer_loop():
    # out[i] = sum of A[j] for j < i (a triangular domain), accumulated into out
    body = n.For(i, c(0), c(12), n.Block((
        n.Store(OUT, (i,), Const(0.0, "float64")),
        n.For(j, c(0), i, n.Accumulate(OUT, (i,), n.Load(A, (j,)), tg.sum)))))
    np.testing.assert_array_equal(run(body), np.concatenate([[0], np.cumsum(np.arange(11.0))]))


def test_if_else_let_and_select():
    t = Var("t", "float64")
    body = n.For(i, c(0), c(12), n.Let(t, n.Load(A, (i,)) * 3.0, n.If(
        i % 2 == 0, n.Store(OUT, (i,), t), n.Store(OUT, (i,), -t))))
    want = np.where(np.arange(12) % 2 == 0, 3.0, -3.0) * np.arange(12.0)
    np.testing.assert_array_equal(run(body), want)
    body = n.For(i, c(0), c(12), n.If(i < 5, n.Store(OUT, (i,), Const(7.0, "float64"))))
    np.testing.assert_array_equal(run(body), np.where(np.arange(12) < 5, 7.0, -1.0))


@pytest.mark.parametrize("size", [4, emit.STACK_LIMIT_BYTES // 8 + 1])
def test_local_buffers_on_the_stack_and_in_owned_storage(size):
    L = n.Buffer("L", (size,), "float64", "local")
    body = n.For(i, c(0), c(12), n.Allocate(L, n.Block((
        n.For(j, c(0), c(size), n.Store(L, (j,), n.Load(A, (i,)) + 1.0)),
        n.Store(OUT, (i,), n.Load(L, (c(size - 1),)) * 2.0)))))
    exe = Executable(n.Kernel("k", (A, OUT), (), body))
    assert len(exe.storage_arrays) == (size > 4)
    out = np.empty(12)
    exe.run([np.arange(12.0), out])
    np.testing.assert_array_equal(out, (np.arange(12.0) + 1) * 2)


def test_temps_persist_across_calls_and_scalar_buffers():
    T = n.Buffer("T", (), "float64", "temp")
    S = n.Buffer("S", (), "float64", "output")
    body = n.Block((n.Store(T, (), Const(0.0, "float64")),
                    n.For(i, c(0), c(12), n.Accumulate(T, (), n.Load(A, (i,)), tg.max)),
                    n.Store(S, (), n.Load(T, ()) + 1.0)))
    exe = Executable(n.Kernel("k", (A, S), (T,), body))
    for scale in (1.0, -1.0, 2.0):
        s = np.empty(())
        exe.run([np.arange(12.0) * scale, s])
        assert s == max(0.0, 11 * scale) + 1


@pytest.mark.parametrize("reducer", ["sum", "prod", "max", "min", "user"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_accumulate_with_every_reducer(reducer, dtype):
    red = {"sum": tg.sum, "prod": tg.prod, "max": tg.max, "min": tg.min,
           "user": tg.comm_reducer(lambda a, b: tg.max(tg.abs(a), tg.abs(b)), lambda d: 0,
                                   name="absmax")}[reducer]
    X = n.Buffer("X", (6,), dtype, "input")
    R = n.Buffer("R", (), dtype, "output")
    body = n.Block((n.Store(R, (), red.identity(dtype)),
                    n.For(i, c(0), c(6), n.Accumulate(R, (), n.Load(X, (i,)), red))))
    x = np.array([3, 1, 4, 1, 5, 2] if dtype == "uint8" else [3, -1, 4, -7, 5, 2], dtype=dtype)
    got = run(body, (X, R), inputs=[x])
    P = tg.placeholder((6,), dtype=dtype, name="P")
    k = tg.reduce_axis((0, 6), name="k")
    want = tg.evaluate(tg.compute((), lambda: red(P[k], axis=k), name="W"), {P: x})
    assert got == want and got.dtype == want.dtype


def test_failed_check_stops_the_kernel_with_its_error():
    I = n.Buffer("I", (3,), "int64", "input")
    body = n.For(i, c(0), c(3), n.Block((
        n.Check(n.Load(I, (i,)) < 12, "index_out_of_range", "gather"),
        n.Store(OUT, (i,), n.Load(A, (n.Load(I, (i,)),))))))
    exe = Executable(n.Kernel("k", (A, I, OUT), (), body))
    out = np.full(12, -1.0)
    with pytest.raises(tg.OutOfBoundsError, match="gather"):
        exe.run([np.arange(12.0), np.array([2, 20, 1]), out])
    assert out[0] == 2.0 and out[1] == -1.0  # stopped at the failed check
    D = n.Buffer("D", (3,), "int64", "input")
    div = n.For(i, c(0), c(3), n.Check(n.Load(D, (i,)) != 0, "division_by_zero", "ratio"))
    with pytest.raises(tg.TegradError, match="ratio.*zero"):
        Executable(n.Kernel("k", (D,), (), div)).run([np.array([1, 0, 2])])


def test_data_dependent_index_is_checked_even_without_a_check_node():
    I = n.Buffer("I", (3,), "int64", "input")
    body = n.For(i, c(0), c(3), n.Store(OUT, (n.Load(I, (i,)),), Const(1.0, "float64")))
    exe = Executable(n.Kernel("k", (I, OUT), (), body))
    with pytest.raises(tg.OutOfBoundsError, match="out"):
        exe.run([np.array([0, -1, 2]), np.zeros(12)])


@pytest.mark.parametrize("part_size", [1, 8, 10**6])
def test_a_kernel_emitted_in_parts_runs_its_statements_in_order(monkeypatch, part_size):
    """Large kernels are emitted as several functions called in turn: temps written in one
    part are read in the next, and a check failing in a later part stops the kernel
    there with its error."""
    monkeypatch.setattr(emit, "PART_SIZE", part_size)
    I = n.Buffer("I", (3,), "int64", "input")
    T = n.Buffer("T", (12,), "float64", "temp")
    body = n.Block((
        n.For(i, c(0), c(12), n.Store(T, (i,), n.Load(A, (i,)) * 3.0)),
        n.For(i, c(0), c(12), n.Store(OUT, (i,), n.Load(T, (11 - i,)) + 1.0)),
        n.For(i, c(0), c(3), n.Block((
            n.Check(n.Load(I, (i,)) < 12, "index_out_of_range", "gather"),
            n.Store(OUT, (i,), n.Load(T, (n.Load(I, (i,)),))))))))
    kernel = n.Kernel("k", (A, I, OUT), (T,), body)
    parts = len(emit.kernel_parts(body))
    assert (parts == 3) if part_size == 1 else (parts == 1) if part_size == 10**6 else parts >= 2
    exe = Executable(kernel)
    assert (".part1" in exe.emitted_ir) == (parts > 1)
    out = np.full(12, -1.0)
    exe.run([np.arange(12.0), np.array([2, 0, 5]), out])
    want = np.arange(12.0)[::-1] * 3.0 + 1.0
    want[:3] = np.arange(12.0)[[2, 0, 5]] * 3.0
    np.testing.assert_array_equal(out, want)
    out = np.full(12, -1.0)
    with pytest.raises(tg.OutOfBoundsError, match="gather"):
        exe.run([np.arange(12.0), np.array([2, 20, 1]), out])
    assert out[0] == 6.0 and out[1] == 31.0  # the first parts ran; stopped at the check
