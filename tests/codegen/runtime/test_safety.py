"""The promises a compiled function makes to its caller (issue #10, item 5): argument and
``out`` checks naming the tensor, copies of non-contiguous inputs, bounds checks of
data-dependent indices, integer division by zero as an error, NaN and inf propagation,
and correct results for two threads calling at once. Checks where a bug would crash the
process run in a subprocess."""
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tegrad as tg


def matmul_program(dtype="float32"):
    A = tg.placeholder((4, 3), dtype=dtype, name="A")
    B = tg.placeholder((3, 5), dtype=dtype, name="B")
    k = tg.reduce_axis((0, 3), name="k")
    C = tg.compute((4, 5), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.fixture(scope="module")
def matmul():
    A, B, C = matmul_program()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)).astype("float32")
    b = rng.standard_normal((3, 5)).astype("float32")
    return tg.build([A, B], [C]), a, b, a @ b


def test_wrong_number_of_arguments_names_the_inputs(matmul):
    f, a, b, _ = matmul
    with pytest.raises(tg.FeedError, match="'A'.*'B'|A, B"):
        f(a)
    with pytest.raises(tg.FeedError):
        f(a, b, b)


def test_wrong_shape_names_the_tensor(matmul):
    f, a, b, _ = matmul
    with pytest.raises(tg.ShapeError, match="'B'"):
        f(a, b.T.copy())
    with pytest.raises(tg.ShapeError, match="'A'"):
        f(a[:2], b)


def test_wrong_dtype_names_the_tensor(matmul):
    f, a, b, _ = matmul
    with pytest.raises(tg.FeedError, match="'A'.*float64"):
        f(a.astype("float64") + 1e-12, b)


def test_lists_convert_only_losslessly(matmul):
    f, a, b, want = matmul
    (c,) = f(a.tolist(), b)  # float64 values that are float32 values
    np.testing.assert_allclose(c, want, rtol=1e-5)
    with pytest.raises(tg.FeedError, match="'A'"):
        f((a.astype("float64") + 1e-12).tolist(), b)
    x = tg.placeholder((3,), dtype="int8", name="x")
    g = tg.build([x], [tg.compute((3,), lambda i: x[i] * 2, name="y")])
    assert g([1, 2, 3])[0].tolist() == [2, 4, 6]
    with pytest.raises(tg.FeedError, match="'x'"):
        g([1, 2, 300])
    with pytest.raises(tg.FeedError, match="'x'"):
        g([1.5, 2, 3])
    with pytest.raises(tg.FeedError, match="'x'"):
        g(["a", "b", "c"])


def test_non_contiguous_and_unaligned_inputs_are_copied(matmul):
    f, a, b, want = matmul
    a_strided = np.asfortranarray(a)
    b_view = np.zeros((3, 10), dtype="float32")[:, ::2]
    b_view[...] = b
    (c,) = f(a_strided, b_view)
    np.testing.assert_allclose(c, want, rtol=1e-5)
    raw = np.zeros(a.nbytes + 1, dtype=np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(a.shape)
    unaligned[...] = a
    assert not unaligned.flags.aligned
    np.testing.assert_allclose(f(unaligned, b)[0], want, rtol=1e-5)


def test_out_arrays_are_checked(matmul):
    f, a, b, want = matmul
    c = np.empty((4, 5), dtype="float32")
    assert f(a, b, out=[c])[0] is c
    np.testing.assert_allclose(c, want, rtol=1e-5)
    with pytest.raises(tg.DTypeError, match="'C'"):
        f(a, b, out=[np.empty((4, 5))])
    with pytest.raises(tg.ShapeError, match="'C'"):
        f(a, b, out=[np.empty((5, 4), dtype="float32")])
    with pytest.raises(tg.TegradError, match="'C'.*contiguous"):
        f(a, b, out=[np.empty((5, 4), dtype="float32").T])
    ro = np.empty((4, 5), dtype="float32")
    ro.flags.writeable = False
    with pytest.raises(tg.TegradError, match="'C'.*writeable"):
        f(a, b, out=[ro])
    with pytest.raises(tg.FeedError):
        f(a, b, out=[c, c])


def test_out_may_not_overlap_an_input_or_another_out():
    X = tg.placeholder((6,), dtype="float64", name="X")
    Y = tg.compute((6,), lambda i: X[i] + 1.0, name="Y")
    Z = tg.compute((6,), lambda i: X[i] * 2.0, name="Z")
    f = tg.build([X], [Y, Z])
    x = np.arange(6.0)
    with pytest.raises(tg.TegradError, match="'Y'.*overlaps.*'X'"):
        f(x, out=[x, np.empty(6)])
    both = np.empty(12)
    with pytest.raises(tg.TegradError, match="overlap"):
        f(x, out=[both[:6], both[3:9]])
    y, z = f(x, out=[both[:6], both[6:]])
    np.testing.assert_array_equal(both, np.concatenate([x + 1, x * 2]))


def test_nan_and_inf_propagate():
    X = tg.placeholder((5,), dtype="float32", name="X")
    k = tg.reduce_axis((0, 5), name="k")
    S = tg.compute((), lambda: tg.sum(X[k], axis=k), name="S")
    M = tg.compute((), lambda: tg.max(X[k], axis=k), name="M")
    E = tg.compute((5,), lambda i: tg.exp(X[i]) / X[i], name="E")
    f = tg.build([X], [S, M, E])
    for x in ([1, np.nan, 2, 3, 4], [1, np.inf, -np.inf, 0, 2], [0, 1e30, 1e30, -1, 89]):
        x = np.array(x, dtype="float32")
        got = f(x)
        want = tg.evaluate([S, M, E], {X: x})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, equal_nan=True)


def test_two_threads_calling_at_once_both_get_correct_results():
    # a reduction into a temporary the compiled function owns, shared by the two calls
    X = tg.placeholder((64, 256), dtype="float64", name="X")
    k = tg.reduce_axis((0, 256), name="k")
    M = tg.compute((64,), lambda i: tg.max(X[i, k], axis=k), name="M")
    k2 = tg.reduce_axis((0, 256), name="k2")
    S = tg.compute((64, 256), lambda i, j: tg.exp(X[i, j] - M[i]), name="S")
    T = tg.compute((64,), lambda i: tg.sum(S[i, k2], axis=k2), name="T")
    f = tg.build([X], [T])
    assert f._executable.storage_arrays, "the program should own a temporary"
    rng = np.random.default_rng(1)
    data = [rng.standard_normal((64, 256)) * (s + 1) for s in range(2)]
    want = [tg.evaluate(T, {X: d}) for d in data]
    errors = []

    def worker(d, w):
        for _ in range(200):
            (got,) = f(d)
            if not np.allclose(got, w, rtol=1e-12):
                errors.append("mismatch")
                return

    threads = [threading.Thread(target=worker, args=(d, w)) for d, w in zip(data, want)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def run_isolated(code):
    """Run ``code`` in a fresh interpreter; return its output (fails on a crash)."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_crash_prone_calls_raise_in_a_subprocess():
    out = run_isolated("""
        import numpy as np, tegrad as tg

        def expect(error, fn, name):
            try:
                fn()
            except error as err:
                assert name in str(err), (name, str(err))
                print("raised", type(err).__name__, name)
            else:
                raise AssertionError(f"no error for {name}")

        # a gather with data-dependent indices, far outside the tensor
        A = tg.placeholder((1000,), dtype="float32", name="table")
        I = tg.placeholder((4,), dtype="int64", name="I")
        G = tg.compute((4,), lambda i: A[I[i]], name="gathered")
        f = tg.build([A, I], [G])
        a = np.arange(1000, dtype="float32")
        assert f(a, np.array([0, 5, 999, 3]))[0].tolist() == [0, 5, 999, 3]
        for bad in (1000, -1, 2**40, -2**62, 2**63 - 1):
            expect(tg.OutOfBoundsError, lambda: f(a, np.array([0, bad, 1, 2])), "table")

        # a scatter with data-dependent targets
        V = tg.placeholder((4,), dtype="float32", name="V")
        S = tg.scatter_add((8,), (4,), lambda i: (I[i],), lambda i: V[i], name="hist")
        g = tg.build([I, V], [S])
        v = np.ones(4, dtype="float32")
        assert g(np.array([1, 1, 7, 0]), v)[0].tolist() == [1, 2, 0, 0, 0, 0, 0, 1]
        for bad in (8, -1, 10**12):
            expect(tg.OutOfBoundsError, lambda: g(np.array([1, bad, 7, 0]), v), "hist")

        # integer division and modulo by a run-time zero, and the one overflowing quotient
        for dtype in ("int8", "int32", "int64", "uint8", "uint64"):
            P = tg.placeholder((3,), dtype=dtype, name="P")
            Q = tg.placeholder((3,), dtype=dtype, name="Q")
            D = tg.compute((3,), lambda i: P[i] // Q[i], name="quotient")
            R = tg.compute((3,), lambda i: P[i] % Q[i], name="remainder")
            h = tg.build([P, Q], [D, R])
            p = np.array([7, 5, 3], dtype=dtype)
            expect(tg.TegradError, lambda: h(p, np.array([1, 0, 2], dtype=dtype)), "quotient")
            if dtype.startswith("int"):
                low = np.iinfo(dtype).min
                d, r = h(np.array([low, -7, 7], dtype=dtype), np.array([-1, 2, -2], dtype=dtype))
                with np.errstate(all="ignore"):
                    assert d.tolist() == [low, -4, -4] and r.tolist() == [0, 1, -1], (d, r)
        print("done")
    """)
    assert out.strip().endswith("done")
    assert out.count("raised OutOfBoundsError") == 8
    assert out.count("raised TegradError") == 5


def _raises_out_of_bounds_like_the_evaluator(inputs, output, arrays, name):
    with pytest.raises(tg.OutOfBoundsError):
        tg.evaluate(output, dict(zip(inputs, arrays)))
    f = tg.build(inputs, [output])
    with pytest.raises(tg.OutOfBoundsError, match=name):
        f(*arrays)


def test_a_read_outside_its_tensor_at_fixed_indices_raises_like_the_evaluator():
    x = tg.placeholder((10, 8), dtype="float64", name="x")
    arrays = [np.ones((10, 8))]
    shifted = tg.compute((10, 8), lambda i, j: x[i + 1, j] * 2.0, name="shifted")
    _raises_out_of_bounds_like_the_evaluator([x], shifted, arrays, "'x'.*'shifted'")
    # inside a reduction, and in a matrix product's operand
    r = tg.reduce_axis((0, 9), name="r")
    wide = tg.compute((10,), lambda i: tg.sum(x[i, r], axis=r), name="wide")
    _raises_out_of_bounds_like_the_evaluator([x], wide, arrays, "'x'.*'wide'")
    w = tg.placeholder((8, 20), dtype="float64", name="w")
    product = tg.ops.matmul(shifted, w)
    _raises_out_of_bounds_like_the_evaluator([x, w], product, arrays + [np.ones((8, 20))],
                                             "'x'")


def test_a_guarded_read_is_checked_only_where_its_guard_holds():
    x = tg.placeholder((10,), dtype="float64", name="x")
    xv = np.arange(10.0)
    # proved inside under its affine guard: no check, and the evaluator's values
    padded = tg.compute((12,), lambda i: tg.if_then_else(tg.all(i >= 1, i <= 10), x[i - 1], 0.0),
                        name="padded")
    f = tg.build([x], [padded])
    assert "check(" not in f.loops
    np.testing.assert_array_equal(f(xv)[0], tg.evaluate(padded, {x: xv}))
    # a guard that depends on data: checked where it holds, and only there
    flag = tg.placeholder((12,), dtype="float64", name="flag")
    maybe = tg.compute((12,), lambda i: tg.if_then_else(flag[i] > 0, x[i - 1], 0.0), name="maybe")
    g = tg.build([x, flag], [maybe])
    safe = np.where(np.arange(12) % 11 == 0, -1.0, 1.0)  # off at 0 and 11
    np.testing.assert_array_equal(g(xv, safe)[0], tg.evaluate(maybe, {x: xv, flag: safe}))
    _raises_out_of_bounds_like_the_evaluator([x, flag], maybe, [xv, np.ones(12)],
                                             "'x'.*'maybe'")


def test_a_scatter_writing_outside_its_output_at_fixed_indices_raises():
    v = tg.placeholder((4,), dtype="float32", name="v")
    spread = tg.scatter_add((8,), (4,), lambda i: (i * 3,), lambda i: v[i], name="spread")
    _raises_out_of_bounds_like_the_evaluator([v], spread, [np.ones(4, "float32")],
                                             "'spread'")
    inside = tg.scatter_add((10,), (4,), lambda i: (i * 3,), lambda i: v[i], name="inside")
    f = tg.build([v], [inside])
    assert "check(" not in f.loops
    np.testing.assert_array_equal(f(np.ones(4, "float32"))[0],
                                  tg.evaluate(inside, {v: np.ones(4, "float32")}))


def _doubling():
    x = tg.placeholder((1000,), dtype="float64", name="x")
    y = tg.compute((1000,), lambda i: x[i] * 2.0, name="y")
    return x, tg.build([x], [y])


def test_an_output_nothing_references_is_reused_with_new_values():
    x, f = _doubling()
    first = f(np.ones(1000))[0]
    address = first.ctypes.data
    del first
    blocker = np.empty(1000)  # takes the memory, were the array freed
    again = f(np.full(1000, 3.0))[0]
    assert again.ctypes.data == address != blocker.ctypes.data  # written over
    np.testing.assert_array_equal(again, np.full(1000, 6.0))


def test_an_output_still_referenced_is_never_written_over():
    x, f = _doubling()
    held = []
    kept = f(np.full(1000, 1.0))[0]                    # the array itself
    view = f(np.full(1000, 2.0))[0][10:20]             # a view of it
    result = f(np.full(1000, 3.0))                     # the list holding it
    exported = memoryview(f(np.full(1000, 4.0))[0])    # a buffer export
    fed = f(np.full(1000, 5.0))[0]
    held.append(f(fed)[0])                             # an input of the next call
    for k in range(6, 20):
        f(np.full(1000, float(k)))                     # results dropped: reused
    np.testing.assert_array_equal(kept, 2.0)
    np.testing.assert_array_equal(view, 4.0)
    np.testing.assert_array_equal(result[0], 6.0)
    np.testing.assert_array_equal(np.asarray(exported), 8.0)
    np.testing.assert_array_equal(fed, 10.0)
    np.testing.assert_array_equal(held[0], 20.0)


def test_threads_dropping_and_keeping_outputs_get_their_own_arrays():
    x, f = _doubling()
    errors, kept = [], [[] for _ in range(4)]

    def worker(t):
        for k in range(300):
            value = float(t * 1000 + k)
            got = f(np.full(1000, value))[0]
            if not (got == 2 * value).all():
                errors.append((t, k))
            if k % 3 == 0:
                kept[t].append((value, got))  # held: must keep its values

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for results in kept:
        for value, got in results:
            assert (got == 2 * value).all()


@pytest.mark.parametrize("mode", ["clip", "wrap"])
def test_indices_clamped_or_wrapped_into_range_need_no_check(mode):
    table = tg.placeholder((50, 8), dtype="float32", name="table")
    idx = tg.placeholder((30,), dtype="int64", name="idx")
    out = tg.ops.take(table, idx, axis=0, mode=mode)
    f = tg.build([table, idx], [out])
    assert "check(" not in f.loops
    t = np.random.default_rng(3).standard_normal((50, 8)).astype("float32")
    i = np.array([0, 49, 50, -1, -51, 10**12, -(10**12), 7] * 3 + [3] * 6, dtype="int64")
    np.testing.assert_array_equal(f(t, i)[0], tg.evaluate(out, {table: t, idx: i}))


def test_an_index_loaded_and_only_partly_clamped_is_still_checked():
    table = tg.placeholder((50,), dtype="float32", name="table")
    idx = tg.placeholder((4,), dtype="int64", name="idx")
    low = tg.compute((4,), lambda k: table[tg.max(idx[k], 0)], name="low")
    f = tg.build([table, idx], [low])
    assert "check(" in f.loops
    with pytest.raises(tg.OutOfBoundsError, match="idx"):
        f(np.zeros(50, "float32"), np.array([0, 1, 50, 2]))
